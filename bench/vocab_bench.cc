// SPDX-License-Identifier: MIT
// The vocabulary's costs beside naive baselines in the same binary: mint (vs a mutex-guarded
// cell and the floor of one atomic add), encode, decode/validate of an id, frame build and parse,
// and the CRC16 slot (table-driven vs bitwise).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

namespace {

using namespace echo::table;

constexpr std::string_view kId = "USR0KHTOWnGLuC";
constexpr std::string_view kFrameText = "AST0KHTOWnGLuC:TXN0NgWEfAEJfs";

// ---- naive baselines: what one would write without thinking about cost ----
std::string naive_base62(std::uint64_t s) {
  std::string out;
  do {
    out.push_back(kBase62Alphabet[s % 62]);
    s /= 62;
  } while (s);
  while (out.size() < kPayloadSize) out.push_back('0');
  std::reverse(out.begin(), out.end());
  return out;
}

std::string naive_encode(const std::string& ns, std::uint64_t s) { return ns + naive_base62(s); }

bool naive_validate(const std::string& text, std::uint64_t* out) {
  if (text.size() != kIdSize) return false;
  for (int i = 0; i < 3; ++i) {
    if (!std::isupper(static_cast<unsigned char>(text[i]))) return false;
  }
  std::uint64_t s = 0;
  for (std::size_t i = 3; i < kIdSize; ++i) {
    const auto d = kBase62Alphabet.find(text[i]);
    if (d == std::string_view::npos) return false;
    if (s > (kMaxSnowflake - d) / 62) return false;
    s = s * 62 + d;
  }
  *out = s;
  return true;
}

struct NaiveMessage {
  std::string name, version;
};
bool naive_parse_frame(const std::string& text, NaiveMessage* m) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  m->name = text.substr(0, colon);
  m->version = text.substr(colon + 1);
  std::uint64_t s;
  return naive_validate(m->name, &s) && naive_validate(m->version, &s);
}

std::uint16_t bitwise_crc16(std::string_view bytes) {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
  }
  return crc;
}

struct MutexMinter {
  std::mutex mu;
  std::int64_t last = 0;
  std::uint64_t next() {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count() -
                             kEpochMs;
    std::lock_guard<std::mutex> lock(mu);
    last = std::max(now << 12, last + 1);
    return static_cast<std::uint64_t>(last >> 12) << 22 | (last & 0xFFF);
  }
};

// ---- mint ----
void BM_Minter_Next(benchmark::State& state) {
  static Minter minter(1);
  for (auto _ : state) benchmark::DoNotOptimize(minter.next());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Minter_Next)->Threads(1)->Threads(2)->UseRealTime();

void BM_Baseline_MutexMint(benchmark::State& state) {
  static MutexMinter minter;
  for (auto _ : state) benchmark::DoNotOptimize(minter.next());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_MutexMint)->Threads(1)->Threads(2)->UseRealTime();

void BM_Floor_AtomicFetchAdd(benchmark::State& state) {
  static std::atomic<std::uint64_t> cell{0};
  for (auto _ : state) benchmark::DoNotOptimize(cell.fetch_add(1, std::memory_order_relaxed));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Floor_AtomicFetchAdd)->Threads(1)->Threads(2)->UseRealTime();

void BM_Minter_MintId(benchmark::State& state) {
  Minter minter(1);
  for (auto _ : state) benchmark::DoNotOptimize(minter.mint("TXN"));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Minter_MintId);

// ---- encode ----
void BM_BrandedId_Encode(benchmark::State& state) {
  std::uint64_t s = 274557032793636864ull;
  for (auto _ : state) benchmark::DoNotOptimize(BrandedId::encode("USR", s++));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BrandedId_Encode);

void BM_Baseline_NaiveEncode(benchmark::State& state) {
  std::uint64_t s = 274557032793636864ull;
  const std::string ns = "USR";
  for (auto _ : state) benchmark::DoNotOptimize(naive_encode(ns, s++));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_NaiveEncode);

// ---- decode / validate ----
void BM_BrandedId_ParseAndDecode(benchmark::State& state) {
  std::string_view in = kId;
  for (auto _ : state) {
    benchmark::DoNotOptimize(in);
    auto id = BrandedId::parse(in);
    benchmark::DoNotOptimize(id->snowflake());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BrandedId_ParseAndDecode);

void BM_BrandedId_Validate(benchmark::State& state) {
  std::string_view in = kId;
  for (auto _ : state) {
    benchmark::DoNotOptimize(in);
    benchmark::DoNotOptimize(is_valid_id(in));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BrandedId_Validate);

void BM_Baseline_NaiveValidateDecode(benchmark::State& state) {
  const std::string in(kId);
  std::uint64_t s = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(naive_validate(in, &s));
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_NaiveValidateDecode);

// ---- frame ----
void BM_CoherenceFrame_Build(benchmark::State& state) {
  const auto name = BrandedId::parse("AST0KHTOWnGLuC").value();
  const auto version = BrandedId::parse("TXN0NgWEfAEJfs").value();
  for (auto _ : state) benchmark::DoNotOptimize(make_frame(name, version));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CoherenceFrame_Build);

void BM_Baseline_NaiveFrameBuild(benchmark::State& state) {
  const std::string name = "AST0KHTOWnGLuC", version = "TXN0NgWEfAEJfs";
  for (auto _ : state) benchmark::DoNotOptimize(name + ":" + version);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_NaiveFrameBuild);

void BM_CoherenceFrame_Parse(benchmark::State& state) {
  std::string_view in = kFrameText;
  for (auto _ : state) {
    benchmark::DoNotOptimize(in);
    benchmark::DoNotOptimize(parse_frame(in));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CoherenceFrame_Parse);

void BM_Baseline_NaiveFrameParse(benchmark::State& state) {
  const std::string in(kFrameText);
  NaiveMessage m;
  for (auto _ : state) benchmark::DoNotOptimize(naive_parse_frame(in, &m));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_NaiveFrameParse);

// ---- slot ----
void BM_HashSlot_L2Key(benchmark::State& state) {
  const std::string key = "ecc:{quotes}:AST0KHTOWnGLuC";
  for (auto _ : state) {
    benchmark::DoNotOptimize(key.data());
    benchmark::DoNotOptimize(hash_slot(key));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HashSlot_L2Key);

void BM_Baseline_BitwiseCrc16Slot(benchmark::State& state) {
  const std::string key = "ecc:{quotes}:AST0KHTOWnGLuC";
  for (auto _ : state) {
    benchmark::DoNotOptimize(key.data());
    const auto open = key.find('{'), close = key.find('}', open + 1);
    benchmark::DoNotOptimize(
        bitwise_crc16(std::string_view(key).substr(open + 1, close - open - 1)) & 16383);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_BitwiseCrc16Slot);

}  // namespace

BENCHMARK_MAIN();
