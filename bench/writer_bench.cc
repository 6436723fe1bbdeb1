// SPDX-License-Identifier: MIT
// The table writer's apply of coherence items, per item, on each of its paths: the drain's
// batched apply (no flight, no listener: the map's prefetching apply_batch), the drain item by
// item (a table with on_message), and deliver()'s direct apply on the producer's thread while
// the writer is parked. Each iteration publishes 4,096 drops over a map of 1,024 rows, each
// newer than the last, and waits until the writer has given every verdict. Unpinned; the ring's
// producer is the benchmark's thread. The baseline, BM_L1Map_ApplyFloor: the same drops applied
// by a map of the same rows on the benchmark's own thread, no ring, no writer (what the writer's
// rows add to the map's own apply is the ratio).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include <echo/engine/errc.h>
#include <echo/engine/internal/table_writer.h>

namespace {

using echo::engine::CoherenceItem;
using echo::engine::CoherenceMode;
using echo::engine::CoherenceRing;
using echo::engine::TableSpec;
using echo::engine::TableWriter;
using echo::engine::WriterPorts;
using echo::table::BrandedId;

constexpr std::uint64_t kRows = 1024;
constexpr std::uint64_t kItems = 4096;

// Every item published in this process (calibration runs too), said at exit: a profiler's count
// of the writer's instructions divides by it (instructions per item, callgrind).
struct Published {
  std::uint64_t items = 0;
  ~Published() {
    if (std::getenv("ECHO_BENCH_SAY_ITEMS") != nullptr)
      std::fprintf(stderr, "items %llu\n", static_cast<unsigned long long>(items));
  }
} g_published;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

TableSpec spec(bool listener, bool direct) {
  TableSpec s;
  s.name = "bench";
  s.kind = "AST";
  s.coherence = CoherenceMode::kBroadcast;
  s.direct_apply = direct;
  s.loader = [](const echo::engine::Key&) -> echo::engine::LoadResult {
    return echo::engine::Loaded{"unused", {}};
  };
  if (listener) s.on_message = [](const echo::engine::Heard&) {};
  return s;
}

void run(benchmark::State& state, bool listener, bool direct) {
  TableWriter w(spec(listener, direct), WriterPorts{}, 1);
  CoherenceRing& ring = w.add_ring(echo::ring::FullPolicy::kBlock);
  w.start();
  w.subscription_confirmed();
  for (std::uint64_t i = 0; i < kRows; ++i) {
    std::promise<void> done;
    w.put(id("AST", i + 1), "value", id("TXN", 1), [&done] { done.set_value(); });
    done.get_future().wait();
  }
  std::uint64_t version = 2, verdicts = 0;
  for (auto _ : state) {
    for (std::uint64_t i = 0; i < kItems; ++i) {
      const BrandedId name = id("AST", i % kRows + 1);
      CoherenceItem item{echo::table::CoherenceMessage{name, id("TXN", version++)}, 0, 0};
      if (direct) {
        w.deliver(ring, std::move(item));
      } else {
        ring.publish(std::move(item));
      }
    }
    verdicts += kItems;
    g_published.items += kItems;
    while (w.stats().applied + w.stats().stale < verdicts) std::this_thread::yield();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kItems));
  state.counters["direct"] = static_cast<double>(w.stats().direct_applies);
  w.stop();
}

void BM_L1Map_ApplyFloor(benchmark::State& state) {
  echo::table::L1Config c;
  c.ttl_ms = 3'600'000;
  echo::table::L1Map map(c);
  for (std::uint64_t i = 0; i < kRows; ++i) map.put(id("AST", i + 1), "value", id("TXN", 1));
  std::uint64_t version = 2;
  for (auto _ : state) {
    for (std::uint64_t i = 0; i < kItems; ++i) {
      benchmark::DoNotOptimize(map.apply_coherence(id("AST", i % kRows + 1), id("TXN", version++)));
    }
    map.reclaim();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kItems));
}

// Negative caching once its memory is full (TableSpec::absent_ttl_ms, bounded by max_size): each
// miss of a new name whose loader answers Absent remembers it, and the memory must let one go.
// The ports answer at once on the writer's own thread (no L2, no loader thread), so each
// iteration is the writer's cost of one such miss: the flight, the loader's answer, the eviction
// and the remembering. Arg: max_size (the memory's bound), filled before timing. The baseline is
// the same miss while the memory has room (BM_TableWriter_AbsentMissWithRoom): what eviction
// costs is the ratio.
void absent_miss(benchmark::State& state, bool full) {
  const auto bound = static_cast<std::uint64_t>(state.range(0));
  TableSpec s = spec(false, false);
  s.coherence = CoherenceMode::kNone;
  s.max_size = bound;
  s.absent_ttl_ms = 3'600'000;
  WriterPorts ports;
  ports.fetch = [](std::string_view, std::function<void(echo::engine::L2Fetch)> done) {
    done(echo::engine::L2Fetch{});
  };
  ports.load = [](std::string_view, const BrandedId&, bool,
                  std::shared_ptr<echo::engine::LoadClaim>,
                  std::function<void(echo::engine::LoadOutcome)> done) {
    echo::engine::LoadOutcome out;
    out.ec = echo::engine::make_error_code(echo::engine::Errc::kAbsent);
    done(std::move(out));
  };
  TableWriter w(s, ports, 1);
  w.start();
  std::uint64_t next = 1;
  const auto miss = [&w, &next] {
    std::promise<void> done;
    w.miss(id("AST", next++), [&done](echo::engine::GetOutcome&&) { done.set_value(); });
    done.get_future().wait();
  };
  if (full) {
    for (std::uint64_t i = 0; i < bound; ++i) miss();
  }
  for (auto _ : state) miss();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["remembered"] = static_cast<double>(w.stats().absent_loads);
  w.stop();
}
void BM_TableWriter_AbsentMissWhenFull(benchmark::State& state) { absent_miss(state, true); }
void BM_TableWriter_AbsentMissWithRoom(benchmark::State& state) { absent_miss(state, false); }

void BM_TableWriter_ApplyBatched(benchmark::State& state) { run(state, false, false); }
void BM_TableWriter_ApplyPerItem(benchmark::State& state) { run(state, true, false); }
void BM_TableWriter_ApplyDirect(benchmark::State& state) { run(state, false, true); }

BENCHMARK(BM_L1Map_ApplyFloor)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_TableWriter_ApplyBatched)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_TableWriter_ApplyPerItem)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_TableWriter_ApplyDirect)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_TableWriter_AbsentMissWithRoom)->Arg(1'000'000)->UseRealTime()->Iterations(2000);
BENCHMARK(BM_TableWriter_AbsentMissWhenFull)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->UseRealTime()
    ->Iterations(20);

}  // namespace

BENCHMARK_MAIN();
