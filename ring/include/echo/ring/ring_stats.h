// SPDX-License-Identifier: MIT
// A ring's counters as one plain snapshot, so backpressure is visible (full refusals, parks,
// occupancy). Each field is read with a relaxed load, so a snapshot taken while the ring runs is
// a set of individually exact values, not one instant.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace echo::ring {

// Batch-size histogram: bucket k counts drain passes that applied [2^k, 2^(k+1)) items, so
// bucket 0 is batches of 1, bucket 1 of 2-3, ... The last bucket also takes anything larger.
inline constexpr std::size_t kHistogramBuckets = 32;

constexpr std::size_t histogram_bucket(std::size_t batch_size) noexcept {
  const auto b = static_cast<std::size_t>(std::bit_width(batch_size)) - 1;  // batch_size >= 1
  return b < kHistogramBuckets ? b : kHistogramBuckets - 1;
}

struct RingStats {
  std::uint64_t capacity = 0;
  std::uint64_t occupancy = 0;  // tail - head, clamped to capacity (approximate while running)
  std::uint64_t published = 0;  // items accepted
  std::uint64_t applied = 0;    // items handed to a drain function and destroyed
  std::uint64_t dropped = 0;    // items refused under drop or flush
  std::uint64_t wakes = 0;      // empty→non-empty edges that signalled a parked consumer
  std::uint64_t batches = 0;    // non-empty drain passes
  std::uint64_t max_batch = 0;  // largest drain pass
  std::uint64_t stalls = 0;     // block-policy waits for room: one per publish, or per piece of a
                                // publish_batch that the ring took in several pieces
  std::uint64_t barrier_fallbacks = 0;  // 1 once the consumer's doorbell (shared by every ring
                                        // of its writer) lost its membarrier and fell back to the
                                        // seq_cst handshake (doorbell.h, Fallback), else 0
  bool flush_pending = false;           // a flush-policy refusal the consumer has not yet taken
  std::array<std::uint64_t, kHistogramBuckets> batch_histogram{};
};

}  // namespace echo::ring
