// SPDX-License-Identifier: MIT
// Open-loop accounting (`echostore bench --load`): messages leave on a fixed schedule (message i
// is due at t0 + i / rate), and each one's latency runs from its DUE time to the moment its
// consumer observed it, never from the moment it was actually sent. A sender stalled for D ms
// thus charges every message scheduled inside the stall with the stall (up to D), as a user whose
// requests kept arriving would see it: no coordinated omission. Header-only and std-only, so the
// unit tests check the very code the bench runs (tests/unit/open_loop_test.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace echo::harness {

// The nearest-rank percentile: the smallest sample with at least a fraction `p` (0 < p <= 1) of
// the samples at or below it, i.e. the ceil(p * n)-th smallest. p99.9 of 1,000 samples is the
// 999th smallest. Reorders `v` (nth_element); 0 for no samples.
inline double nearest_rank(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  // Less a hair: 0.99 * 10,000 is 9,900.000000000002 in binary, whose ceil would skip a rank.
  const double rank = std::ceil(p * static_cast<double>(v.size()) - 1e-6);
  const auto i = static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// One open-loop run's figures, in microseconds from each message's due time.
struct OpenLoopFigures {
  std::uint64_t scheduled = 0;  // messages the schedule held
  std::uint64_t delivered = 0;  // observed once each, in range
  std::uint64_t strays = 0;     // observations out of range or repeated (never in the figures)
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;  // over the delivered messages
  // How late the sender sent its last message against that message's due time, and that lateness
  // as a fraction of the schedule's span (due of the last - t0).
  double end_late_us = 0, end_late_fraction = 0;
  // The rate was sustained: every message delivered, and the sender kept the schedule within the
  // tolerance (end_late_fraction <= tolerance).
  bool sustained = false;
};

// A schedule and its record. The sender thread calls sent(), one observer thread observed(); the
// owner reads figures() once both are quiet (after the observer thread's last observed() is
// ordered before it: delivered()'s acquire, or a join).
class OpenLoopRun {
 public:
  // `rate` messages per second (> 0), `count` messages; start() fixes t0.
  OpenLoopRun(double rate, std::uint64_t count)
      : period_ns_(1e9 / rate), count_(count), observed_(new std::atomic<std::int64_t>[count]) {
    for (std::uint64_t i = 0; i < count; ++i) observed_[i].store(0, std::memory_order_relaxed);
  }
  void start(std::int64_t t0_ns) noexcept { t0_ns_ = t0_ns; }
  std::int64_t t0_ns() const noexcept { return t0_ns_; }
  std::uint64_t count() const noexcept { return count_; }
  // Message i's due time (steady ns): t0 + i * 1e9 / rate, rounded to the ns.
  std::int64_t due_ns(std::uint64_t i) const noexcept {
    return t0_ns_ + std::llround(static_cast<double>(i) * period_ns_);
  }
  // How many messages are due at `now_ns` (those with due <= now), at most count().
  std::uint64_t due_by(std::int64_t now_ns) const noexcept {
    if (now_ns < t0_ns_) return 0;
    const auto n =
        static_cast<std::uint64_t>(static_cast<double>(now_ns - t0_ns_) / period_ns_) + 1;
    return std::min(n, count_);
  }
  // Sender thread: every message below `upto` has left, the last of them at `at_ns`. Only the
  // last message's lateness is kept (the sender sends in due order, so it is the worst end).
  void sent(std::uint64_t upto, std::int64_t at_ns) noexcept {
    if (upto == 0) return;
    last_sent_ = upto;
    last_sent_at_ns_ = at_ns;
  }
  // Observer thread: message i reached its consumer at `at_ns`. A repeat or an index out of range
  // is a stray (counted, kept out of the figures). Release pairs with delivered()'s acquire.
  void observed(std::uint64_t i, std::int64_t at_ns) noexcept {
    if (i >= count_ || observed_[i].load(std::memory_order_relaxed) != 0) {
      strays_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    observed_[i].store(at_ns, std::memory_order_relaxed);
    delivered_.fetch_add(1, std::memory_order_release);
  }
  // Any thread. Acquire: pairs with observed()'s release, so every observation counted is
  // visible to the caller.
  std::uint64_t delivered() const noexcept { return delivered_.load(std::memory_order_acquire); }
  std::uint64_t last_sent() const noexcept { return last_sent_; }  // owner, once the sender joined

  // Each delivered message's latency from its due time, in us, in schedule order. Owner thread,
  // as figures().
  std::vector<double> latencies_us() const {
    std::vector<double> us;
    us.reserve(delivered());
    for (std::uint64_t i = 0; i < count_; ++i) {
      const std::int64_t at = observed_[i].load(std::memory_order_relaxed);
      if (at != 0) us.push_back(static_cast<double>(at - due_ns(i)) / 1e3);
    }
    return us;
  }

  // Owner thread, once the sender joined and delivered() was read. `tolerance`: the sender may end
  // this fraction of the schedule's span late and still count as on schedule (0.05 = 5%).
  OpenLoopFigures figures(double tolerance) const {
    OpenLoopFigures f;
    f.scheduled = count_;
    f.delivered = delivered();
    f.strays = strays_.load(std::memory_order_relaxed);
    std::vector<double> us = latencies_us();
    if (!us.empty()) {
      f.max_us = *std::max_element(us.begin(), us.end());
      f.p999_us = nearest_rank(us, 0.999);
      f.p99_us = nearest_rank(us, 0.99);
      f.p50_us = nearest_rank(us, 0.5);
    }
    if (last_sent_ == count_ && count_ > 0) {
      f.end_late_us = static_cast<double>(last_sent_at_ns_ - due_ns(count_ - 1)) / 1e3;
      const double span_us = static_cast<double>(due_ns(count_ - 1) - t0_ns_) / 1e3;
      f.end_late_fraction = span_us > 0 ? std::max(0.0, f.end_late_us) / span_us : 0;
    }
    f.sustained = last_sent_ == count_ && f.delivered == count_ && f.end_late_fraction <= tolerance;
    return f;
  }

 private:
  double period_ns_;
  std::uint64_t count_;
  std::int64_t t0_ns_ = 0;
  std::unique_ptr<std::atomic<std::int64_t>[]> observed_;  // 0: not observed
  std::atomic<std::uint64_t> delivered_{0}, strays_{0};
  std::uint64_t last_sent_ = 0;  // sender thread, read by the owner after the join
  std::int64_t last_sent_at_ns_ = 0;
};

}  // namespace echo::harness
