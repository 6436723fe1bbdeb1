// SPDX-License-Identifier: MIT
// Benchmarks of the L1 map with their baselines in the same binary (docs/architecture.md,
// "Measuring"): `get` on a hit (1 and 2 reader threads, writer idle or churning >= 1M drops/s)
// against std::unordered_map under std::shared_mutex and an unsynchronised read-only
// absl::flat_hash_map; the writer's apply throughput against absl::flat_hash_map
// find+compare+erase; memory per row for 1M rows. p50/p99 are per-get latencies averaged over runs
// of 16 gets (one clock read per 16 gets).
// Its parts: l1_map_bench_typed.cc (typed rows read in place), l1_map_bench_writer.cc (the
// writer's apply and evicting fills); what they share, l1_map_bench.h. This file: the hits by
// name, the baselines' hits, memory per row, and every benchmark's registration.
#include "l1_map_bench.h"

#include <malloc.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace l1_map_bench {

// Allocations made by reader threads inside a counted read loop (operator new below counts).
std::atomic<std::uint64_t> g_allocations{0};
thread_local bool t_counting = false;

// ---- The L1 map, with a writer thread that owns it for its whole life (debug builds check).

struct L1Fixture {
  explicit L1Fixture(echo::table::MonotonicClock clock)
      : map([clock] {
          L1Config c;
          c.max_size = kRows;
          c.ttl_ms = 3'600'000;
          c.clock = clock;
          return c;
        }()) {}
  L1Map map;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    std::vector<BrandedId> ids;
    for (std::size_t i = 0; i < kRows; ++i) ids.push_back(name_id(i));
    for (std::size_t i = 0; i < kRows; ++i) map.put(ids[i], value_bytes(), ver(0));
    sw.filled();
    // Drop + re-insert, paced per millisecond.
    churn_loop(
        sw, stop, [this] { map.reclaim(); },
        [&](std::size_t row, std::uint64_t v) {
          if (map.apply_coherence(ids[row], ver(v)) == Verdict::kApplied) sw.count_drop();
          map.put(ids[row], value_bytes(), ver(v));
        });
  }
};

L1Fixture& l1_fixture() {
  static L1Fixture f(&echo::table::steady_clock_ms);
  f.sw.wait_ready();
  return f;
}
L1Fixture& l1_coarse_fixture() {
  static L1Fixture f(&echo::table::coarse_monotonic_ms);
  f.sw.wait_ready();
  return f;
}

// A hit through L1Map::get into a std::string, on `f`'s map.
void get_hit(benchmark::State& state, L1Fixture& f) {
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) { return f.map.get(n[i], value); });
  churn.finish();
}

void BM_L1Map_GetHit(benchmark::State& state) { get_hit(state, l1_fixture()); }

// The same hit on a map whose clock is CLOCK_MONOTONIC_COARSE (L1Config.clock).
void BM_L1Map_GetHitCoarse(benchmark::State& state) { get_hit(state, l1_coarse_fixture()); }

// The same hit with the caller's clock reading (one per batch, as a writer loop would) and a
// caller buffer: the map's own cost without CLOCK_MONOTONIC.
void BM_L1Map_GetHitAt(benchmark::State& state) {
  L1Fixture& f = l1_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  char buf[kValueSize];
  const std::int64_t now = f.map.now();
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    return f.map.read_at(n[i], buf, now).status == echo::table::ReadStatus::kHit;
  });
  churn.finish();
}

// ---- Baseline 1: std::unordered_map under std::shared_mutex, same churn under unique_lock.

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

struct SharedFixture {
  std::unordered_map<std::string, Row, TransparentHash, std::equal_to<>> map;
  mutable std::shared_mutex mu;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    const auto& n = names();
    {
      std::unique_lock lock(mu);
      map.reserve(kRows);
      for (const auto& s : n) map.emplace(s, Row{ver(0).str(), value_bytes()});
    }
    sw.filled();
    churn_loop(
        sw, stop, [] {},
        [&](std::size_t row, std::uint64_t v) {
          const std::string vs = ver(v).str();
          {
            std::unique_lock lock(mu);
            auto it = map.find(n[row]);
            if (it != map.end() && echo::table::newer(vs, it->second.version)) {
              map.erase(it);
              sw.count_drop();
            }
          }
          {
            std::unique_lock lock(mu);
            map.insert_or_assign(n[row], Row{vs, value_bytes()});
          }
        });
  }
};

SharedFixture& shared_fixture() {
  static SharedFixture f;
  f.sw.wait_ready();
  return f;
}

void BM_SharedMutexMap_GetHit(benchmark::State& state) {
  SharedFixture& f = shared_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    std::shared_lock lock(f.mu);
    auto it = f.map.find(std::string_view(n[i]));
    if (it == f.map.end()) return false;
    value.assign(it->second.value);
    return true;
  });
  churn.finish();
}

#ifdef ECHO_HAVE_ABSL
// ---- Baseline 2: an unsynchronised absl::flat_hash_map, read-only (no writer can run).
void BM_FlatHashMap_GetHit(benchmark::State& state) {
  static const absl::flat_hash_map<std::string, Row> map = [] {
    absl::flat_hash_map<std::string, Row> m;
    for (const auto& s : names()) m.emplace(s, Row{ver(0).str(), value_bytes()});
    return m;
  }();
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    auto it = map.find(n[i]);
    if (it == map.end()) return false;
    value.assign(it->second.value);
    return true;
  });
}
#endif

// ---- Memory per row beyond the value bytes, 1M rows of 64-byte values (malloc's own count).

// Bytes malloc hands out: small-block arenas plus mmap'd blocks (large tables, 2 MiB chunks).
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void BM_L1Map_MemoryPerRow(benchmark::State& state) {
  constexpr std::size_t kN = 1'000'000;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    L1Config c;
    c.max_size = kN;
    c.ttl_ms = 3'600'000;
    auto map = std::make_unique<L1Map>(c);
    for (std::size_t i = 0; i < kN; ++i) map->put(name_id(i), value_bytes(), ver(1));
    const std::size_t after = heap_in_use();
    const double n = static_cast<double>(kN);
    const double heap = static_cast<double>(after - before) - n * kValueSize;
    state.counters["heap_bytes_per_row"] = heap / n;  // index + headers + tombstones + malloc
    state.counters["accounted_bytes_per_row"] =
        (static_cast<double>(map->memory_bytes() - map->value_bytes())) / n;
    state.counters["index_bytes_per_row"] = static_cast<double>(map->bucket_count() * 8) / n;
    state.SetItemsProcessed(static_cast<std::int64_t>(kN));
  }
}

// A baseline's heap per row: 1M string-keyed rows in a `Map` (reserved up front).
template <class Map>
void string_map_memory_per_row(benchmark::State& state) {
  constexpr std::size_t kN = 1'000'000;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    auto map = std::make_unique<Map>();
    map->reserve(kN);
    for (std::size_t i = 0; i < kN; ++i)
      map->emplace(name_id(i).str(), Row{ver(1).str(), value_bytes()});
    const std::size_t after = heap_in_use();
    const double n = static_cast<double>(kN);
    state.counters["heap_bytes_per_row"] =
        (static_cast<double>(after - before) - n * kValueSize) / n;
    state.SetItemsProcessed(static_cast<std::int64_t>(kN));
  }
}

#ifdef ECHO_HAVE_ABSL
void BM_FlatHashMap_MemoryPerRow(benchmark::State& state) {
  string_map_memory_per_row<absl::flat_hash_map<std::string, Row>>(state);
}
#endif

void BM_SharedMutexMap_MemoryPerRow(benchmark::State& state) {
  string_map_memory_per_row<std::unordered_map<std::string, Row>>(state);
}

// The read benchmarks' runs: arg 0 writer idle, 1 writer churning (drop + re-insert) at ~1.5M
// drops/s; 1 and 2 reader threads; real time.
void churn_and_readers(benchmark::internal::Benchmark* b) {
  b->ArgName("churn")->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();
}
BENCHMARK(BM_L1Map_GetHit)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_GetHitCoarse)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_GetHitAt)->Apply(churn_and_readers);
BENCHMARK(BM_SharedMutexMap_GetHit)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_TypedHit)->Apply(churn_and_readers);
#ifdef ECHO_HAVE_ABSL
BENCHMARK(BM_FlatHashMap_TypedHit)->Apply(churn_and_readers);
#endif
#ifdef ECHO_HAVE_ABSL
BENCHMARK(BM_FlatHashMap_GetHit)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_FlatHashMap_ApplyDrops)->ArgName("rows")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_FlatHashMap_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_L1Map_ApplyDrops)
    ->ArgNames({"rows", "evict", "batched"})
    ->ArgsProduct({{10'000, 1'000'000}, {0, 1, 2, 3}, {0, 1}});
BENCHMARK(BM_L1Map_FillEvicting)
    ->ArgNames({"rows", "evict", "full"})
    ->ArgsProduct({{10'000, 1'000'000}, {1, 2, 3}, {0, 1}});
BENCHMARK(BM_L1Map_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SharedMutexMap_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace l1_map_bench

using namespace l1_map_bench;  // NOLINT(google-build-using-namespace): for operator new

// Counts the reader threads' allocations inside counted loops (allocs_per_read: the timed loop
// only, the samples' buffer is reserved before it); the default behaviour otherwise.
void* operator new(std::size_t n) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC 12 takes free() in a replaced operator delete for a mismatch (-Wmismatched-new-delete):
// the replacement operator new above allocates with malloc, so free is the match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

BENCHMARK_MAIN();
