// SPDX-License-Identifier: MIT
// A latency histogram for the metrics exposition: 40 power-of-two buckets of nanoseconds (bucket
// k counts [2^k, 2^(k+1)) ns; the last one everything from 2^39 ns, about 9 minutes, up) and the
// sum of every recorded value, so Prometheus gets _bucket, _sum and _count. The same bucket
// bounds as the writer's lag histogram (kLagBuckets), so one renderer serves them all.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <echo/base/counter.h>

namespace echo::io {

inline constexpr std::size_t kLatencyBuckets = 40;

// Bucket of a latency: [2^k, 2^(k+1)) ns; 0 and negative (a clock that stepped) land in bucket 0.
constexpr std::size_t latency_bucket(std::int64_t ns) noexcept {
  if (ns <= 0) return 0;
  const std::size_t k = std::bit_width(static_cast<std::uint64_t>(ns)) - 1;
  return k < kLatencyBuckets - 1 ? k : kLatencyBuckets - 1;
}

// A copy of a recorder's counts (relaxed: a bucket and the sum may be one recording apart).
struct LatencySnapshot {
  std::array<std::uint64_t, kLatencyBuckets> buckets{};
  std::uint64_t sum_ns = 0;  // every recorded value (negatives as 0), in ns
};

// Recorded by any number of threads (two relaxed fetch_adds per value: no lock, no allocation);
// snapshot() from any thread. Counters only grow; they wrap after 2^64 ns (584 years) of sum.
class LatencyRecorder {
 public:
  void record(std::int64_t ns) noexcept {
    base::shared_add(buckets_[latency_bucket(ns)]);
    base::shared_add(sum_ns_, ns > 0 ? static_cast<std::uint64_t>(ns) : 0);
  }
  LatencySnapshot snapshot() const noexcept {
    LatencySnapshot s;
    for (std::size_t k = 0; k < kLatencyBuckets; ++k) {
      s.buckets[k] = buckets_[k].load(std::memory_order_relaxed);
    }
    s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kLatencyBuckets> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace echo::io
