// SPDX-License-Identifier: MIT
// What a parking ring consumer costs the process's other threads. A busy-polling application
// thread (pinned, a fixed ~1 us of work per iteration, each iteration timed) runs while a ring
// producer/consumer pair exchanges a trickle of messages with the consumer parking after each
// one, the asymmetric barrier on or off; and with no ring traffic at all (the floor, the baseline
// in this binary). With the barrier on, each park is a membarrier(PRIVATE_EXPEDITED), which IPIs
// every CPU running a thread of the process: here, the busy thread's.
//
// Placement: the busy thread (the benchmark thread) on CPU 1, both ring threads on CPU 0 (so the
// futex wake itself never crosses to CPU 1). Needs 2 CPUs; skips otherwise.
// Reproduce (Release tree with ECHO_BUILD_BENCH=ON):
//   ninja -C build/release busy_poll_bench && build/release/bench/busy_poll_bench
//     --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
// 2026-12-01, the shared 2-core CI VM (AMD EPYC, Firecracker, load average 9-11 from other
// builds), Release, medians of 5 interleaved repetitions of 2,000,000 iterations (~7.3-7.6 k
// messages/s, one park per message):
//   traffic            p50      p99      p99.9     busy-thread CPU per iteration
//   none (floor)       891 ns   1022 ns   2.77 us   907 ns
//   symmetric          881 ns   1031 ns   3.25 us   908 ns
//   asymmetric         891 ns   1132 ns  14.30 us   980 ns
// Asymmetric vs symmetric: p99 1.10x, p99.9 4.4x, CPU +8% (~4.6 us of the busy thread per IPI);
// symmetric vs the floor: p99 1.01x, p99.9 1.17x. BM_SpscRing_PublishDrain, the saving on the
// other side: 3.20 vs 3.95 ns CPU per publish+drain (median of 5), 0.75 ns. Hence
// WaitConfig::asymmetric_barrier is off by default.
#include <benchmark/benchmark.h>
#include <echo/ring/spsc_ring.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using echo::ring::FullPolicy;
using echo::ring::RingConfig;
using echo::ring::SpscRing;
using echo::ring::WaitStrategy;
using Clock = std::chrono::steady_clock;

constexpr int kBusyCpu = 1;
constexpr int kRingCpu = 0;
// The producer's pause between messages (sleep_for, so ~50 us plus the timer slack): a trickle.
constexpr auto kGap = std::chrono::microseconds(50);
// Dependent multiply-adds per busy iteration: ~1 us on the CI VM's EPYC.
constexpr int kWorkSteps = 800;

bool pin_this_thread(int cpu, cpu_set_t* old = nullptr) {
  if (old != nullptr) pthread_getaffinity_np(pthread_self(), sizeof(*old), old);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

std::uint64_t work(std::uint64_t x) {
  for (int i = 0; i < kWorkSteps; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

// The busy thread on kBusyCpu, its old mask kept for the way back; false (the benchmark skipped)
// when it cannot run.
bool pin_busy_thread(benchmark::State& state, cpu_set_t& old_mask) {
  if (std::thread::hardware_concurrency() < 2) {
    state.SkipWithError("needs 2 CPUs");
    return false;
  }
  if (!pin_this_thread(kBusyCpu, &old_mask)) {
    state.SkipWithError("cannot pin the busy thread");
    return false;
  }
  return true;
}

RingConfig trickle_ring(std::int64_t traffic) {
  RingConfig c;
  c.capacity = 64;
  c.full_policy = FullPolicy::kDrop;
  c.consumer_wait = {WaitStrategy::kPark, 0, traffic == 2};
  return c;
}

// The ring pair on kRingCpu: a consumer that parks whenever the ring is empty, and a producer
// that publishes one item, yields until it is applied, then pauses kGap.
struct Trickle {
  explicit Trickle(SpscRing<std::uint64_t>& r) : ring(r) {}
  ~Trickle() {
    if (!threads.empty()) stop();  // joined even when stop() was never reached
  }

  void start() {
    threads.emplace_back([this] {
      pin_this_thread(kRingCpu);
      std::uint64_t expect = 0;
      bool ok = true;
      while (!stopping.load(std::memory_order_relaxed)) {
        if (ring.drain(1, [&](std::uint64_t& v) noexcept { ok &= v == expect++; }) != 0) {
          applied.store(expect, std::memory_order_release);
        } else {
          (void)ring.wait_for_work(Clock::now() + std::chrono::milliseconds(20));
        }
      }
      in_order.store(ok);
    });
    threads.emplace_back([this] {
      pin_this_thread(kRingCpu);
      for (std::uint64_t i = 0; !stopping.load(std::memory_order_relaxed); ++i) {
        (void)ring.try_publish(std::uint64_t{i});
        // Same CPU as the consumer: yield until it applied the item, then pause.
        while (applied.load(std::memory_order_acquire) <= i &&
               !stopping.load(std::memory_order_relaxed)) {
          std::this_thread::yield();
        }
        sent = i + 1;
        std::this_thread::sleep_for(kGap);
      }
    });
  }

  void stop() {
    stopping.store(true);
    ring.doorbell().signal();  // an idle consumer sees the stop without waiting out its deadline
    for (auto& t : threads) t.join();
    threads.clear();
  }

  SpscRing<std::uint64_t>& ring;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> applied{0};
  std::atomic<bool> in_order{true};
  std::uint64_t sent = 0;
  std::vector<std::thread> threads;
};

// The iteration times' mean and percentiles, and the trickle's rate and parks.
void report(benchmark::State& state, std::vector<std::uint32_t>& samples, std::uint64_t sent,
            double secs, std::uint64_t parks) {
  std::sort(samples.begin(), samples.end());
  auto pct = [&](double p) {
    return static_cast<double>(
        samples[static_cast<std::size_t>(p * static_cast<double>(samples.size() - 1))]);
  };
  double sum = 0;
  for (std::uint32_t s : samples) sum += s;
  state.counters["mean_ns"] = sum / static_cast<double>(samples.size());
  state.counters["p50_ns"] = pct(0.50);
  state.counters["p99_ns"] = pct(0.99);
  state.counters["p999_ns"] = pct(0.999);
  state.counters["msgs_per_s"] = static_cast<double>(sent) / secs;
  state.counters["parks"] = static_cast<double>(parks);
  state.SetItemsProcessed(static_cast<std::int64_t>(samples.size()));
}

// traffic: 0 = no ring traffic (the floor), 1 = trickle with the symmetric (seq_cst) handshake,
// 2 = trickle with the asymmetric barrier (one membarrier per park).
void BM_BusyPoll_IterationTime(benchmark::State& state) {
  const auto traffic = state.range(0);
  cpu_set_t old_mask;
  if (!pin_busy_thread(state, old_mask)) return;
  SpscRing<std::uint64_t> ring(trickle_ring(traffic));
  if (traffic == 2 && !ring.doorbell().asymmetric()) {
    state.SkipWithError("no membarrier on this kernel");
    pthread_setaffinity_np(pthread_self(), sizeof(old_mask), &old_mask);
    return;
  }
  Trickle trickle(ring);
  if (traffic != 0) trickle.start();
  std::vector<std::uint32_t> samples;
  samples.reserve(static_cast<std::size_t>(state.max_iterations));
  std::uint64_t x = 1;
  const auto t0 = Clock::now();
  auto prev = t0;
  for (auto _ : state) {
    x = work(x);
    const auto now = Clock::now();
    samples.push_back(static_cast<std::uint32_t>(
        std::min<std::int64_t>((now - prev).count(), std::int64_t{UINT32_MAX})));
    prev = now;
  }
  const double secs = std::chrono::duration<double>(prev - t0).count();
  trickle.stop();
  pthread_setaffinity_np(pthread_self(), sizeof(old_mask), &old_mask);
  benchmark::DoNotOptimize(x);
  if (!trickle.in_order.load()) state.SkipWithError("items arrived out of order");
  report(state, samples, trickle.sent, secs, ring.doorbell().parks_count());
}
BENCHMARK(BM_BusyPoll_IterationTime)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("traffic")
    ->Iterations(2'000'000)
    ->UseRealTime();

// The other side of the trade: what the light handshake saves each publish. One thread publishes
// one item and drains it (perf/ops.cc's ring op), toward a parking doorbell with the asymmetric
// barrier on (release store + compiler barrier) or off (seq_cst store: xchg on x86, the full
// fence). No consumer ever parks, so no membarrier is issued in either case.
void BM_SpscRing_PublishDrain(benchmark::State& state) {
  RingConfig c;
  c.capacity = 1024;
  c.consumer_wait = {WaitStrategy::kPark, 0, state.range(0) != 0};
  SpscRing<std::uint64_t> ring(c);
  if (state.range(0) != 0 && !ring.doorbell().asymmetric()) {
    state.SkipWithError("no membarrier on this kernel");
    return;
  }
  std::uint64_t i = 0;
  std::uint64_t sum = 0;
  for (auto _ : state) {
    (void)ring.try_publish(std::uint64_t{i++});
    ring.drain(1, [&sum](std::uint64_t& v) noexcept { sum += v; });
  }
  if (sum != i * (i - 1) / 2) state.SkipWithError("wrong sum");
  state.SetItemsProcessed(static_cast<std::int64_t>(i));
}
BENCHMARK(BM_SpscRing_PublishDrain)->Arg(0)->Arg(1)->ArgName("asymmetric");

}  // namespace

BENCHMARK_MAIN();
