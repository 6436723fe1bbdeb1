// SPDX-License-Identifier: MIT
// `echostore bench`'s neighbour rows (neighbour_gaps_vs_alone_{idle,sparse,burst}): what two
// engines in the process cost a thread spinning pinned on a CPU of its own, as a trading
// service's pinned threads see it. A spinner on CPU 1 reads the clock in a tight loop and counts
// its loop gaps over 2 us and over 10 us; the engines' threads and the started redis-server are
// on CPU 0. Baseline: the same spinner with no engine in the process, interleaved in every round.
#include <echo/base/cache_line.h>
#include <echo/base/clock.h>
#include <echo/engine/engine.h>
#include <echo/harness/placement.h>
#include <echo/harness/stage.h>
#include <echo/table/branded_id.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/pinning.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using table::BrandedId;

constexpr int kSpinnerCpu = 1, kNeighbourCpu = 0;
constexpr unsigned kNodeA = 931, kNodeB = 932, kNeighbourMinter = 933;
constexpr std::int64_t kOver2 = 2'000, kOver10 = 10'000;  // ns
// Before every window, either contender: the engines' start-up (first beats, the lease's first
// renewal) or the last engines' teardown (their frees, the server closing their connections)
// belongs to neither figure.
constexpr auto kSettle = std::chrono::milliseconds(100);
constexpr auto kSparsePeriod = std::chrono::microseconds(2000);  // 500 msg/s
constexpr int kBurstSize = 200;
constexpr auto kBurstPeriod = std::chrono::milliseconds(100);  // 2,000 msg/s on average

// One measuring window of the spinner.
struct Window {
  std::uint64_t over2 = 0, over10 = 0, loops = 0;
  std::int64_t ns = 0, worst_ns = 0, in_over10_ns = 0;
};

// The clock is base::steady_ns (the vDSO's clock_gettime(CLOCK_MONOTONIC), ~20-50 ns a read):
// nanoseconds with no calibration, and on a VM (kvm-clock, the TSC marked unstable) the kernel's
// correction of the TSC is in it, where a raw rdtsc would need its rate measured and trusted
// across the host.

// The measuring thread: pinned with pthread_setaffinity_np, it spins for its whole life (as the
// service's thread would: a window never starts on a CPU waking from idle). Inside a window its
// loop touches no line another thread writes, so the gaps it counts are interruptions (the
// kernel's, the hypervisor's, IPIs such as TLB shootdowns of this process's memory), not cache
// traffic with the bench.
class Spinner {
 public:
  explicit Spinner(int cpu) : thread_([this, cpu] { run(cpu); }) {
    while (state_.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  }
  ~Spinner() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  Spinner(const Spinner&) = delete;
  Spinner& operator=(const Spinner&) = delete;

  bool pinned() const { return state_.load(std::memory_order_acquire) > 0; }
  pid_t tid() const { return tid_.load(std::memory_order_acquire); }

  // Opens a window of `span` on the spinner's own clock; its number for closed() and wait().
  std::uint64_t open(std::chrono::nanoseconds span) {
    span_ns_.store(span.count(), std::memory_order_relaxed);
    asked_.store(++opened_, std::memory_order_release);
    return opened_;
  }
  bool closed(std::uint64_t window) const {
    return done_.load(std::memory_order_acquire) >= window;
  }
  // Sleeps (on the caller's CPU) until the window closes.
  Window wait(std::uint64_t window, std::chrono::nanoseconds span) {
    const auto limit = std::chrono::steady_clock::now() + span + std::chrono::seconds(10);
    while (!closed(window)) {
      if (std::chrono::steady_clock::now() > limit) {
        throw std::runtime_error("the neighbour spinner did not close its window within 10 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return result_;
  }

 private:
  void run(int cpu) {
    tid_.store(gettid(), std::memory_order_release);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    const bool ok =
        pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 && sched_getcpu() == cpu;
    state_.store(ok ? 1 : -1, std::memory_order_release);
    if (!ok) return;
    std::uint64_t seen = 0;
    bool counting = false;
    Window w;
    std::int64_t start = 0, end = 0, last = base::steady_ns();
    for (;;) {
      const std::int64_t t = base::steady_ns();
      const std::int64_t gap = t - last;
      last = t;
      if (counting) {
        ++w.loops;
        if (gap > kOver2) {
          ++w.over2;
          if (gap > kOver10) {
            ++w.over10;
            w.in_over10_ns += gap;
          }
          w.worst_ns = std::max(w.worst_ns, gap);
        }
        if (t >= end) {
          w.ns = t - start;
          result_ = w;
          done_.store(seen, std::memory_order_release);
          counting = false;
        }
      } else if (const std::uint64_t asked = asked_.load(std::memory_order_acquire);
                 asked != seen) {
        seen = asked;
        w = Window{};
        start = t;
        end = t + span_ns_.load(std::memory_order_relaxed);
        counting = true;
      } else if (stop_.load(std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // The caller's lines and the spinner's apart: the caller's writes reach the spinner only
  // between windows.
  alignas(base::kCacheLine) std::atomic<std::uint64_t> asked_{0};
  std::atomic<std::int64_t> span_ns_{0};
  std::atomic<bool> stop_{false};
  std::uint64_t opened_ = 0;  // the caller's
  alignas(base::kCacheLine) std::atomic<std::uint64_t> done_{0};
  Window result_;
  std::atomic<int> state_{0};  // 0 starting, 1 pinned, -1 refused
  std::atomic<pid_t> tid_{0};
  std::thread thread_;  // last: starts once the members above exist
};

// This process's threads (but `except`) the kernel may run on `cpu`, by name: the engines start
// threads no knob pins (loaders, stats, lease, job-send), and those inherit the bench thread's set.
std::set<std::string> threads_allowed_on(int cpu, pid_t except) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const auto tid = static_cast<pid_t>(std::stoi(task.path().filename().string()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (tid == except || sched_getaffinity(tid, sizeof set, &set) != 0) continue;
    if (!CPU_ISSET(cpu, &set)) continue;
    std::string name;
    std::ifstream(task.path() / "comm") >> name;
    out.insert(name.empty() ? std::to_string(tid) : name);
  }
  return out;
}

enum class Phase { kIdle, kSparse, kBurst };

// The two nodes of one window: each with one table on the broadcast lane (both subscribed, as
// every node of a service would be), their io and writer threads on `cpu`. A publishes, B hears.
class Pair {
 public:
  Pair(const BenchConfig& c, const DrillTarget& target, const std::string& t, int cpu)
      : heard_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
    auto node = [&](unsigned id, bool counts) {
      engine::TableSpec s = lane_spec(t, CoherenceMode::kBroadcast, c);
      s.writer_cpu = cpu;
      if (counts) {
        s.on_message = [heard = heard_](const engine::Heard&) {
          heard->fetch_add(1, std::memory_order_relaxed);
        };
      }
      return std::make_unique<Engine>(harness::node_options(target.host, target.port, id, cpu),
                                      std::vector<engine::TableSpec>{std::move(s)});
    };
    a_ = node(kNodeA, false);
    b_ = node(kNodeB, true);
    if (auto ec = a_->start())
      throw std::runtime_error("neighbour node A did not start: " + ec.message());
    if (auto ec = b_->start())
      throw std::runtime_error("neighbour node B did not start: " + ec.message());
  }
  Engine& a() { return *a_; }
  std::uint64_t heard() const { return heard_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<std::uint64_t>> heard_;  // B's writer counts, the bench reads
  std::unique_ptr<Engine> a_, b_;
};

const char* phase_key(Phase p) {
  return p == Phase::kIdle ? "idle" : p == Phase::kSparse ? "sparse" : "burst";
}

std::string phase_staged(Phase p) {
  switch (p) {
    case Phase::kIdle:
      return "idle (2 engines started and subscribed, no traffic)";
    case Phase::kSparse:
      return "sparse (A: one Engine::broadcast every 2 ms, 500 msg/s; B hears them)";
    case Phase::kBurst:
      break;
  }
  return "burst (A: " + std::to_string(kBurstSize) +
         " Engine::broadcast back to back every 100 ms; B hears them)";
}

// A count alone misleads where other processes share the spinner's CPU: the less of it the
// spinner gets, the fewer (and longer) its gaps. The share of the window spent in gaps says which.
struct Figures {
  std::vector<double> over10, over2, worst_us, lost_pct;
  void add(const Window& w) {
    const double s = static_cast<double>(w.ns) / 1e9;
    over10.push_back(static_cast<double>(w.over10) / s);
    over2.push_back(static_cast<double>(w.over2) / s);
    worst_us.push_back(static_cast<double>(w.worst_ns) / 1e3);
    lost_pct.push_back(100.0 * static_cast<double>(w.in_over10_ns) / static_cast<double>(w.ns));
  }
};

}  // namespace

void run_neighbour(const BenchConfig& c, const DrillTarget& target, pid_t server_pid,
                   Progress& progress, std::vector<Row>& rows) {
  auto left_out = [](const std::string& why) {
    std::cerr << "echostore bench: neighbour_gaps_vs_alone_* left out: " << why << '\n';
  };
  if (const unsigned cores = std::thread::hardware_concurrency(); cores < 2) {
    left_out("the spinner needs a CPU of its own and this machine has " + std::to_string(cores));
    return;
  }
  // The bench thread builds the engines and sends their traffic: on the neighbours' CPU, and
  // every thread the engines start without a pinning knob inherits it from here.
  const ThreadMaskGuard mask;
  if (!harness::pin_thread(kNeighbourCpu)) {
    left_out("the bench thread cannot be pinned to CPU " + std::to_string(kNeighbourCpu));
    return;
  }
  Spinner spinner(kSpinnerCpu);
  if (!spinner.pinned()) {
    left_out("the spinner cannot be pinned to CPU " + std::to_string(kSpinnerCpu));
    return;
  }
  const ServerPinGuard server_back(server_pid, c.server_cpu);
  if (server_pid > 0 && !harness::pin_process(server_pid, kNeighbourCpu)) {
    left_out("redis-server cannot be pinned to CPU " + std::to_string(kNeighbourCpu));
    return;
  }

  table::Minter minter(kNeighbourMinter);
  const std::string t = "bench_nb_" + minter.mint("BEN").value().str();
  const BrandedId name = minter.mint("AST").value();
  const auto span = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(c.quick ? 0.25 : 1.0));
  std::set<std::string> intruders;  // threads but the spinner allowed on its CPU

  auto alone = [&] {
    std::this_thread::sleep_for(kSettle);
    for (auto& n : threads_allowed_on(kSpinnerCpu, spinner.tid())) intruders.insert(n);
    return spinner.wait(spinner.open(span), span);
  };
  auto beside = [&](Phase p) {
    Pair pair(c, target, t, kNeighbourCpu);
    std::this_thread::sleep_for(kSettle);
    for (auto& n : threads_allowed_on(kSpinnerCpu, spinner.tid())) intruders.insert(n);
    std::uint64_t sent = 0;
    auto send = [&] {
      auto heard = pair.a().broadcast(t, name.view(), minter.mint("TXN").value());
      if (!heard || *heard != 2) {
        throw std::runtime_error("a neighbour broadcast was not heard by both nodes");
      }
      ++sent;
    };
    const std::uint64_t window = spinner.open(span);
    const auto t0 = std::chrono::steady_clock::now();
    if (p == Phase::kSparse) {
      for (std::uint64_t i = 0;; ++i) {
        std::this_thread::sleep_until(t0 + i * kSparsePeriod);
        if (spinner.closed(window)) break;
        send();
      }
    } else if (p == Phase::kBurst) {
      for (std::uint64_t k = 0;; ++k) {
        std::this_thread::sleep_until(t0 + k * kBurstPeriod);
        if (spinner.closed(window)) break;
        for (int i = 0; i < kBurstSize; ++i) send();
      }
    }
    const Window w = spinner.wait(window, span);
    if (!floors::eventually([&] { return pair.heard() >= sent; }, std::chrono::seconds(2))) {
      throw std::runtime_error("node B heard " + std::to_string(pair.heard()) + " of " +
                               std::to_string(sent) + " neighbour broadcasts");
    }
    return w;  // the engines stop here, after the window
  };

  constexpr Phase kPhases[] = {Phase::kIdle, Phase::kSparse, Phase::kBurst};
  Figures ours[3], base[3];
  for (int round = 0; round < c.rounds; ++round) {
    for (int k = 0; k < 3; ++k) {
      progress.step(std::string("neighbour jitter, ") + phase_key(kPhases[k]) +
                        ": spinner beside the engines and alone",
                    round, c.rounds);
      if (round % 2 == 0) {  // interleaved, each first in turn
        base[k].add(alone());
        ours[k].add(beside(kPhases[k]));
      } else {
        ours[k].add(beside(kPhases[k]));
        base[k].add(alone());
      }
    }
  }

  const std::string server = server_pid > 0
                                 ? "redis-server on CPU " + std::to_string(kNeighbourCpu)
                                 : "redis-server given (--server): not pinned by the bench";
  const std::string placement =
      "the spinner (pthread_setaffinity_np) alone on CPU " + std::to_string(kSpinnerCpu) +
      "; the bench thread (builds the engines, sends), both nodes' io and writer threads "
      "(io.cpu, writer_cpu) and every other thread they start on CPU " +
      std::to_string(kNeighbourCpu) + "; " + server + " (whatever --placement says)";
  if (!intruders.empty()) {
    std::string names;
    for (const auto& n : intruders) names += (names.empty() ? "" : ", ") + n;
    std::cerr << "echostore bench: threads allowed on the spinner's CPU during the neighbour "
                 "rows: "
              << names << '\n';
  }
  for (int k = 0; k < 3; ++k) {
    Row x;
    x.id = std::string("neighbour_gaps_vs_alone_") + phase_key(kPhases[k]);
    const double o2 = median_of(ours[k].over2), b2 = median_of(base[k].over2);
    x.what = "neighbour jitter, " + phase_staged(kPhases[k]) +
             ": a pinned spinner's clock-loop gaps > 10 us per s, ratio (ours+1)/(alone+1); "
             "> 2 us " +
             floors::fmt("%.2fx", (o2 + 1) / (b2 + 1)) + "; worst gap " +
             floors::fmt("%.0f", median_of(ours[k].worst_us)) + " us beside, " +
             floors::fmt("%.0f", median_of(base[k].worst_us)) + " us alone; time in gaps > 10 us " +
             floors::fmt("%.1f", median_of(ours[k].lost_pct)) + "% beside, " +
             floors::fmt("%.1f", median_of(base[k].lost_pct)) + "% alone (medians)" +
             (intruders.empty() ? "" : "; other threads were allowed on the spinner's CPU");
    x.ours = "spinner beside 2 engines";
    x.baseline = "the same spinner, no engine in the process";
    x.unit = "gaps/s";
    x.higher_better = false;
    x.placement = placement;
    x.ours_rounds = ours[k].over10;
    x.base_rounds = base[k].over10;
    x.ratio_offset = 1;  // either count may be 0 on a quiet CPU
    x.also = {{"> 2 us beside", o2}, {"> 2 us alone", b2}};
    rows.push_back(std::move(x));
  }
}

}  // namespace echo::cli::bench
