// SPDX-License-Identifier: MIT
// l1_map_bench's typed rows (l1_map_bench.cc says what the bench measures): a struct decoded
// once by the writer and read in place by L1Map::visit, against absl::flat_hash_map's find and
// the same struct; both count the allocations a read makes.
#include "l1_map_bench.h"

#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace l1_map_bench {

// ---- Typed rows: a struct decoded once by the writer, read in place by a callback, under natural
// (text) keys, against absl::flat_hash_map<std::string, Quote>::find + reading the struct. The
// map's clock is CLOCK_MONOTONIC_COARSE, as the engine's tables use it.

struct Quote {
  double bid;
  double ask;
  std::int64_t ts;
  std::int32_t size;
  char venue[4];
};
static_assert(std::is_trivially_copyable_v<Quote>);

// Symbols of 4..8 bytes ("S0", padded): the text keys of docs/wire.md, "Text keys".
const std::vector<std::string>& symbols() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kRows; ++i) out.push_back("Q" + std::to_string(i * 7 + 1000));
    return out;
  }();
  return v;
}
std::string quote_bytes(std::uint64_t v) {
  Quote q{100.0 + static_cast<double>(v % 100),
          100.5,
          static_cast<std::int64_t>(v),
          100,
          {'X', 'N', 'Y', 'S'}};
  return std::string(reinterpret_cast<const char*>(&q), sizeof q);
}
// The struct's whole read: what a caller of either map does with the row.
double use(const Quote& q) noexcept { return q.bid + q.ask + static_cast<double>(q.ts + q.size); }

struct TypedFixture {
  TypedFixture()
      : map([] {
          L1Config c;
          c.max_size = kRows;
          c.ttl_ms = 3'600'000;
          c.clock = &echo::table::coarse_monotonic_ms;  // the engine's default, L1Clock::kWriter
          c.read_clock = echo::table::ReadClock::kPublished;
          c.layout.size = sizeof(Quote);
          c.layout.align = alignof(Quote);
          c.layout.decode = [](std::string_view bytes, void* at, std::string& why) {
            if (bytes.size() != sizeof(Quote)) {
              why = "size";
              return false;
            }
            std::memcpy(at, bytes.data(), sizeof(Quote));
            return true;
          };
          return c;
        }()) {}
  L1Map map;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    const auto& n = symbols();
    const std::string q0 = quote_bytes(0);
    for (std::size_t i = 0; i < kRows; ++i) map.put(n[i], q0, ver(0));
    sw.filled();
    const std::string q1 = quote_bytes(1);
    churn_loop(
        sw, stop,
        [this] {
          map.reclaim();
          (void)map.tick();
        },
        [&](std::size_t row, std::uint64_t v) {
          if (map.apply_coherence(n[row], ver(v)) == Verdict::kApplied) sw.count_drop();
          map.put(n[row], q1, ver(v));
          if (row % 1024 == 0) (void)map.tick();  // an engine writer ticks each pass
        });
  }
};

TypedFixture& typed_fixture() {
  static TypedFixture f;
  f.sw.wait_ready();
  return f;
}

// Runs the read loop and reports the allocations it made per read (0 is the goal).
template <class F>
void counted_read_loop(benchmark::State& state, F&& get_one) {
  const std::uint64_t a0 = g_allocations.load(std::memory_order_relaxed);
  read_loop(state, std::forward<F>(get_one), /*count_allocations=*/true);
  if (state.thread_index() == 0) {
    state.counters["allocs_per_read"] =
        static_cast<double>(g_allocations.load(std::memory_order_relaxed) - a0) /
        static_cast<double>(state.iterations());
  }
}

// The zero-copy typed hit: L1Map::visit runs the callback on the row's Quote in place.
void BM_L1Map_TypedHit(benchmark::State& state) {
  TypedFixture& f = typed_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  const auto& n = symbols();
  double sink = 0;
  counted_read_loop(state, [&](std::uint32_t i) {
    return f.map.visit(n[i], [&](std::string_view value, std::string_view) {
      sink += use(*reinterpret_cast<const Quote*>(value.data()));
    });
  });
  benchmark::DoNotOptimize(sink);
  churn.finish();
}

#ifdef ECHO_HAVE_ABSL
// Baseline: the same keys and struct in an unsynchronised absl::flat_hash_map (no writer may
// run: the churn argument only keeps the runs' names parallel; the writer churns the L1 map's
// other half, which this map does not share).
void BM_FlatHashMap_TypedHit(benchmark::State& state) {
  static const absl::flat_hash_map<std::string, Quote> map = [] {
    absl::flat_hash_map<std::string, Quote> m;
    const std::string q = quote_bytes(0);
    for (const auto& s : symbols()) {
      Quote v;
      std::memcpy(&v, q.data(), sizeof v);
      m.emplace(s, v);
    }
    return m;
  }();
  TypedFixture& f = typed_fixture();  // its writer churns when asked: the same machine load
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  const auto& n = symbols();
  double sink = 0;
  counted_read_loop(state, [&](std::uint32_t i) {
    auto it = map.find(n[i]);
    if (it == map.end()) return false;
    sink += use(it->second);
    return true;
  });
  benchmark::DoNotOptimize(sink);
  churn.finish();
}
#endif

}  // namespace l1_map_bench
