// SPDX-License-Identifier: MIT
// What l1_map_bench's files share (l1_map_bench.cc says what the bench measures): the rows'
// names, values and read order, the timed read loop and its allocation count, the fixtures'
// writer churn and its switch, the baselines' row, and the parts' benchmarks.
#pragma once

#include <benchmark/benchmark.h>
#include <echo/base/counter.h>
#include <echo/table/l1_map.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<absl/container/flat_hash_map.h>)
#include <absl/container/flat_hash_map.h>
#define ECHO_HAVE_ABSL 1
#endif

namespace l1_map_bench {

using echo::table::BrandedId;
using echo::table::CoherenceMessage;
using echo::table::Eviction;
using echo::table::InsertVerdict;
using echo::table::L1Config;
using echo::table::L1Map;
using echo::table::Verdict;

constexpr std::size_t kRows = 100'000;  // rows in the read benchmarks; half read, half churned
constexpr std::size_t kValueSize = 64;
constexpr std::int64_t kChurnPerMs = 1'500;  // target drops per ms while churning (1.5M/s)
constexpr std::size_t kOrder = 1 << 16;      // shuffled read order, indices into the read half

inline BrandedId name_id(std::uint64_t n) { return *BrandedId::encode("USR", 3'000'000 + n); }
inline BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 8'000'000'000 + n); }

inline const std::vector<std::string>& names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kRows; ++i) out.push_back(name_id(i).str());
    return out;
  }();
  return v;
}
inline const std::vector<std::uint32_t>& read_order() {
  static const std::vector<std::uint32_t> v = [] {
    std::vector<std::uint32_t> out(kOrder);
    std::mt19937 rng(1);
    for (auto& x : out) x = static_cast<std::uint32_t>(rng() % (kRows / 2));
    return out;
  }();
  return v;
}
inline const std::string& value_bytes() {
  static const std::string v(kValueSize, 'v');
  return v;
}

// Allocations made by reader threads inside a counted read loop (operator new in
// l1_map_bench.cc counts; its definitions there).
extern std::atomic<std::uint64_t> g_allocations;
extern thread_local bool t_counting;
inline void set_counting(bool on) noexcept { t_counting = on; }

// Runs `get_one(i)` per iteration and records per-get latency in runs of 16; reports p50/p99
// (averaged over threads) and items processed.
template <class F>
void read_loop(benchmark::State& state, F&& get_one, bool count_allocations = false) {
  std::vector<float> samples;
  samples.reserve(1 << 20);
  std::uint64_t i = static_cast<std::uint64_t>(state.thread_index()) * 7919;
  std::uint64_t hits = 0;
  int k = 0;
  auto t0 = std::chrono::steady_clock::now();
  set_counting(count_allocations);
  for (auto _ : state) {
    hits += get_one(read_order()[i++ & (kOrder - 1)]);
    if (++k == 16) {
      const auto t1 = std::chrono::steady_clock::now();
      if (samples.size() < samples.capacity()) {
        samples.push_back(std::chrono::duration<float, std::nano>(t1 - t0).count() / 16.0f);
      }
      t0 = t1;
      k = 0;
    }
  }
  set_counting(false);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  if (samples.empty()) return;
  std::sort(samples.begin(), samples.end());
  const auto avg = benchmark::Counter::kAvgThreads;
  state.counters["p50_ns"] = benchmark::Counter(samples[samples.size() / 2], avg);
  state.counters["p99_ns"] = benchmark::Counter(samples[samples.size() * 99 / 100], avg);
  state.counters["hit_ratio"] =
      benchmark::Counter(static_cast<double>(hits) / static_cast<double>(state.iterations()), avg);
}

// Between a fixture's writer thread and the benchmarks: ChurnScope sets `mode` (0 idle, 1 churn);
// the writer says when its fill is done and counts the rows its churn dropped.
struct WriterSwitch {
  std::atomic<int> mode{0};
  std::atomic<bool> ready{false};
  std::atomic<std::uint64_t> drops{0};

  void filled() noexcept { ready.store(true, std::memory_order_release); }
  void wait_ready() const noexcept {
    while (!ready.load(std::memory_order_acquire)) std::this_thread::yield();  // pairs: filled()
  }
  void count_drop() noexcept {  // the writer is the only one adding
    echo::base::solo_add(drops);
  }
};

// A fixture's writer loop after the fill, until `stop`: idle (calling `idle`, then sleeping
// 200 us) while the mode is 0; while it is 1, `churn_one(row, version)` kChurnPerMs times per
// millisecond over the churn half (never a key a reader reads), versions ever newer.
template <class Idle, class ChurnOne>
void churn_loop(const WriterSwitch& sw, std::stop_token stop, Idle idle, ChurnOne churn_one) {
  std::uint64_t v = 1;
  std::size_t next = kRows / 2;
  auto slot = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    if (sw.mode.load(std::memory_order_acquire) == 0) {  // pairs with ChurnScope's stores
      idle();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      slot = std::chrono::steady_clock::now();
      continue;
    }
    for (std::int64_t j = 0; j < kChurnPerMs; ++j) {
      churn_one(next, v);
      ++v;
      if (++next == kRows) next = kRows / 2;
    }
    slot += std::chrono::milliseconds(1);
    std::this_thread::sleep_until(slot);
  }
}

// Thread 0 switches the writer's mode before the loop (the loop start is a barrier for every
// benchmark thread) and reports the achieved drop rate after it.
struct ChurnScope {
  benchmark::State& state;
  std::atomic<int>& mode;
  std::atomic<std::uint64_t>& drops;
  std::uint64_t drops0 = 0;
  std::chrono::steady_clock::time_point t0;
  ChurnScope(benchmark::State& s, WriterSwitch& sw, bool churn)
      : state(s), mode(sw.mode), drops(sw.drops) {
    if (state.thread_index() != 0) return;
    mode.store(churn ? 1 : 0, std::memory_order_release);  // pairs with the writer's acquire
    drops0 = drops.load(std::memory_order_relaxed);
    t0 = std::chrono::steady_clock::now();
    if (churn) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // writer is running
  }
  void finish() {
    if (state.thread_index() != 0) return;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.counters["writer_drops_per_s"] =
        static_cast<double>(drops.load(std::memory_order_relaxed) - drops0) / secs;
    mode.store(0, std::memory_order_release);
  }
};

// The baselines' row: std::unordered_map's (l1_map_bench.cc) and absl::flat_hash_map's.
struct Row {
  std::string version;
  std::string value;
};

// The parts' benchmarks: typed rows (l1_map_bench_typed.cc); the writer's apply and fills
// (l1_map_bench_writer.cc). l1_map_bench.cc registers them all.
void BM_L1Map_TypedHit(benchmark::State& state);
#ifdef ECHO_HAVE_ABSL
void BM_FlatHashMap_TypedHit(benchmark::State& state);
void BM_FlatHashMap_ApplyDrops(benchmark::State& state);
#endif
void BM_L1Map_ApplyDrops(benchmark::State& state);
void BM_L1Map_FillEvicting(benchmark::State& state);

}  // namespace l1_map_bench
