// SPDX-License-Identifier: MIT
// The hot operations, each in its own extern "C" function so callgrind can collect exactly one
// of them (--toggle-collect=echo_perf_<op>): ring publish+drain of one item, an L1 hit, the apply
// of one coherence drop, the decode of one push, a typed hit in place (through the map, through
// the engine's handle, and an absl::flat_hash_map find as their baseline). callgrind_ops.sh
// divides each function's instructions by N. Each op checks its own answer (what was consumed
// equals what was produced); a wrong answer exits 1.
#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/table_writer.h>
#include <echo/engine/table.h>
#include <echo/io/resp3_decoder.h>
#include <echo/ring/spsc_ring.h>
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <span>
#include <string>
#include <vector>

#if __has_include(<absl/container/flat_hash_map.h>)
#include <absl/container/flat_hash_map.h>
#define ECHO_FLAT_MAP absl::flat_hash_map
#else
#include <unordered_map>
#define ECHO_FLAT_MAP std::unordered_map
#endif

namespace {

using echo::table::BrandedId;

int fails = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ops: %s gave a wrong answer\n", what);
    ++fails;
  }
}

std::string push_frame() {
  return ">3\r\n$7\r\nmessage\r\n$11\r\necc:{t}:coh\r\n$29\r\nUSR0KHTOWnGLuC:USR0NgWEfAEJfs\r\n";
}

// A typed row as a trading service reads it (the bench's l1_typed_hit_vs_flat_map).
struct Quote {
  double bid, ask;
  std::int64_t ts;
  std::int32_t size;
  char venue[4];
};

}  // namespace

extern "C" {

__attribute__((noinline)) std::uint64_t echo_perf_ring(echo::ring::SpscRing<std::uint64_t>& ring,
                                                       std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ring.try_publish(std::uint64_t{i});
    ring.drain(1, [&sum](std::uint64_t& v) noexcept { sum += v; });
  }
  return sum;
}

__attribute__((noinline)) std::size_t echo_perf_l1_hit(const echo::table::L1Map& map,
                                                       std::string_view name, std::size_t n) {
  char buf[64];
  std::size_t hits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    hits += map.read(name, std::span<char>(buf)).status == echo::table::ReadStatus::kHit;
  }
  return hits;
}

// A typed hit in place (text keys of 5-6 bytes, a 32-byte struct), and the same reads of an
// unsynchronised flat map holding the same rows: their ratio is l1_typed_hit_vs_flat_map's in
// instructions. typed_hit reads rows already read three times, as a hot row is: their eviction
// marks are saturated, so the hit only loads and compares its mark. typed_first_hit is each
// row's first read, which also stores its mark (not gated: a row pays it three times a trip).
static double typed_hits(const echo::table::L1Map& map, const std::vector<std::string>& keys) {
  double sum = 0;
  for (const std::string& k : keys) {
    map.visit(k, [&sum](std::string_view value, std::string_view) {
      const Quote& q = *std::launder(reinterpret_cast<const Quote*>(value.data()));
      sum += q.bid + static_cast<double>(q.size);
    });
  }
  return sum;
}
__attribute__((noinline)) double echo_perf_typed_first_hit(const echo::table::L1Map& map,
                                                           const std::vector<std::string>& keys) {
  return typed_hits(map, keys);
}
__attribute__((noinline)) double echo_perf_typed_hit(const echo::table::L1Map& map,
                                                     const std::vector<std::string>& keys) {
  return typed_hits(map, keys);
}

// The same typed hit through the engine's handle (Table<Quote>::read): against typed_hit, the
// handle's own cost.
__attribute__((noinline)) double echo_perf_handle_hit(const echo::engine::Table<Quote>& table,
                                                      const std::vector<std::string>& keys) {
  double sum = 0;
  for (const std::string& k : keys) {
    auto r = table.read(k, [&sum](const Quote& q, std::string_view) {
      sum += q.bid + static_cast<double>(q.size);
    });
    if (!r) return -1;
  }
  return sum;
}

__attribute__((noinline)) double echo_perf_flat_hit(const ECHO_FLAT_MAP<std::string, Quote>& map,
                                                    const std::vector<std::string>& keys) {
  double sum = 0;
  for (const std::string& k : keys) {
    if (auto it = map.find(k); it != map.end())
      sum += it->second.bid + static_cast<double>(it->second.size);
  }
  return sum;
}

__attribute__((noinline)) std::size_t echo_perf_apply_drop(echo::table::L1Map& map,
                                                           const std::vector<BrandedId>& names,
                                                           const std::vector<BrandedId>& versions) {
  std::size_t applied = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    applied += map.apply_coherence(names[i], versions[i]) == echo::table::Verdict::kApplied;
  }
  return applied;
}

__attribute__((noinline)) std::size_t echo_perf_decode_push(echo::io::Resp3Decoder& dec,
                                                            const std::string& bytes) {
  dec.feed(bytes);
  std::size_t pushes = 0;
  for (auto r = dec.next(); r.status == echo::io::Resp3Status::value; r = dec.next()) ++pushes;
  return pushes;
}

}  // extern "C"

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000;
  if (n == 0 || n > 1000000) {
    std::fprintf(stderr, "usage: ops [N in 1..1000000]\n");
    return 2;
  }
  {
    echo::ring::SpscRing<std::uint64_t> ring(echo::ring::RingConfig{.capacity = 1024});
    check(echo_perf_ring(ring, n) == n * (n - 1) / 2, "ring publish+drain");
  }
  echo::table::L1Map map(echo::table::L1Config{.ttl_ms = 3600000, .max_size = 2 * n + 16});
  auto& minter = echo::table::process_minter();
  std::vector<BrandedId> names, versions;
  for (std::size_t i = 0; i < n; ++i) {
    names.push_back(minter.mint("AST", 1).value());
    map.put(names.back(), "px=10000", minter.mint("AST", 1).value());
  }
  for (std::size_t i = 0; i < n; ++i) versions.push_back(minter.mint("AST", 1).value());
  check(echo_perf_l1_hit(map, names[0].view(), n) == n, "L1 hit");
  check(echo_perf_apply_drop(map, names, versions) == n, "apply drop");
  std::string bytes;
  for (std::size_t i = 0; i < n; ++i) bytes += push_frame();
  echo::io::Resp3Decoder dec;
  check(echo_perf_decode_push(dec, bytes) == n, "decode push");
  {
    // A typed table of an engine that is never started (no server): its map, filled here on this
    // thread (no writer thread runs before start), read through the map and through the handle.
    echo::engine::EngineOptions o;
    o.port = 1;
    echo::engine::TableSpec spec{
        .name = "quotes", .kind = "AST", .loader = [](const echo::engine::Key&) {
          return echo::engine::LoadResult{};
        }};
    spec.keys = echo::engine::KeyKind::kText;
    spec.ttl_ms = 3'600'000;
    spec.max_size = n + 16;
    echo::engine::Engine engine(o, {echo::engine::typed<Quote>(std::move(spec))});
    const auto handle = engine.table<Quote>("quotes");
    // The writer's side of the map (handle.l1() is read-only): filled here, before any writer.
    auto& typed =
        const_cast<echo::table::L1Map&>(echo::engine::internal::writer_of(engine, "quotes")->map());
    ECHO_FLAT_MAP<std::string, Quote> flat;
    std::vector<std::string> keys;
    const Quote q{100.5, 100.75, 1, 2, {'X', 'N', 'Y', 'S'}};
    const std::string row = echo::engine::encode(q);  // the schema header, then the struct
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back("Q" + std::to_string(1000 + 7 * i));
      typed.put(keys.back(), row, minter.mint("AST", 1).value());
      flat.emplace(keys.back(), q);
    }
    const double want = static_cast<double>(n) * (q.bid + q.size);
    check(echo_perf_typed_first_hit(typed, keys) == want, "typed first hit");
    for (int warm = 0; warm < 2; ++warm) check(typed_hits(typed, keys) == want, "typed warm-up");
    check(echo_perf_typed_hit(typed, keys) == want, "typed hit");
    check(echo_perf_handle_hit(handle, keys) == want, "handle hit");
    check(echo_perf_flat_hit(flat, keys) == want, "flat hit");
  }
  if (fails == 0) std::printf("ops: %zu of each op, every answer right\n", n);
  return fails == 0 ? 0 : 1;
}
