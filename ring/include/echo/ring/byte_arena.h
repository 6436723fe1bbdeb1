// SPDX-License-Identifier: MIT
// The bytes beside a ring's items: a single-producer, single-consumer circular byte buffer in
// which the producer lays out each item's variable part (a carried value) before it publishes the
// item, and the consumer frees it, in the same order, once it has applied the item. No allocation
// after construction; each reservation is contiguous (one that would straddle the end starts again
// at the beginning, and the bytes it skipped are freed with it).
//
// Ordering: the producer writes the bytes, then publishes the item (the ring's release); the
// consumer reads them after it takes the item (the ring's acquire), then release() stores its
// position (release), which the producer's reserve() acquires before it writes over them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <echo/base/cache_line.h>

namespace echo::ring {

class ByteArena {
 public:
  explicit ByteArena(std::size_t capacity)
      : bytes_(std::make_unique<char[]>(capacity)), capacity_(capacity) {}

  std::size_t capacity() const noexcept { return capacity_; }

  // ---- Producer: one thread. ----
  // `n` contiguous bytes (1..capacity), or nullptr when the consumer has not freed enough yet.
  char* reserve(std::size_t n) noexcept {
    if (n == 0 || n > capacity_) return nullptr;
    std::uint64_t at = head_;
    const std::size_t offset = at % capacity_;
    if (offset + n > capacity_) at += capacity_ - offset;  // skip the end: start at the beginning
    if (at + n - cached_tail_ > capacity_) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (at + n - cached_tail_ > capacity_) return nullptr;
    }
    last_head_ = head_;
    head_ = at + n;
    return bytes_.get() + at % capacity_;
  }
  // Gives back the last reservation (its item was never published).
  void unreserve() noexcept { head_ = last_head_; }

  // ---- Consumer: one thread. ----
  // Frees the reservation of `n` bytes at `at`, and every one before it.
  void release(const char* at, std::size_t n) noexcept {
    const auto offset = static_cast<std::size_t>(at - bytes_.get());
    const std::size_t tail_offset = tail_mirror_ % capacity_;
    // A reservation lies less than one capacity past the tail: below the tail's offset, it
    // wrapped.
    std::uint64_t end = tail_mirror_ - tail_offset + offset + n;
    if (offset < tail_offset) end += capacity_;
    tail_mirror_ = end;
    tail_.store(end, std::memory_order_release);
  }

 private:
  std::unique_ptr<char[]> bytes_;
  std::size_t capacity_;
  // Positions count bytes from the start, never wrap (2^64 bytes), and index at position %
  // capacity.
  alignas(base::kCacheLine) std::atomic<std::uint64_t> tail_{0};  // freed up to (consumer's)
  std::uint64_t tail_mirror_ = 0;                                 // the consumer's own copy
  alignas(base::kCacheLine) std::uint64_t head_ = 0;              // reserved up to (producer's)
  std::uint64_t cached_tail_ = 0;
  std::uint64_t last_head_ = 0;
};

}  // namespace echo::ring
