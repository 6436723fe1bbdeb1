// SPDX-License-Identifier: MIT
// Latency samples in microseconds and the one waiter every latency figure is observed with.
// The drill's floors, `echostore bench` and the lane benches all time "send -> seen" with the
// same spin_until, so a figure and its baseline carry the same observation cost (every
// figure is a ratio to a baseline measured in the same run: docs/architecture.md, "Measuring").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

namespace echo::harness {

using Clock = std::chrono::steady_clock;

// Microsecond samples; sort() once, then read percentiles.
struct Samples {
  std::vector<double> us;
  void sort() { std::sort(us.begin(), us.end()); }
  // The nearest-rank percentile `p` (0..1) of the sorted samples; 0 when there are none.
  double pct(double p) const {
    if (us.empty()) return 0;
    const auto i = static_cast<std::size_t>(p * static_cast<double>(us.size() - 1) + 0.5);
    return us[std::min(i, us.size() - 1)];
  }
  double median() const { return pct(0.5); }
};

inline double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Waits for `done` on the caller's thread: a short spin, then yields, so on a shared core the
// threads being waited for still get the CPU. False after `limit`.
template <class Pred>
bool spin_until(Pred done, std::chrono::microseconds limit = std::chrono::seconds(2)) {
  const auto end = Clock::now() + limit;
  for (unsigned spins = 0; !done(); ++spins) {
    if (spins > 64) std::this_thread::yield();
    if ((spins & 255) == 0 && Clock::now() > end) return done();
  }
  return true;
}

// Polls (1 ms sleeps) for slower conditions: sweeps, joins, applies after a storm.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace echo::harness
