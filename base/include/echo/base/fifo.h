// SPDX-License-Identifier: MIT
// A growable first-in first-out queue that keeps its storage: a ring over a vector whose capacity
// only grows (doubling). std::deque frees a block whenever its front block empties and allocates
// one whenever its back block fills, so a queue that stays short but never stops moving (a
// connection's replies in flight) allocates every few pushes; this one allocates only when it
// holds more than it ever held. One thread; T default-constructible and movable.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace echo::base {

template <class T>
class Fifo {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }

  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(v);
    ++size_;
  }
  // Drops the front; its slot is reset to T{} at once (what it held is released now).
  void pop_front() {
    slots_[head_] = T{};
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  void swap(Fifo& other) noexcept {
    slots_.swap(other.slots_);
    std::swap(head_, other.head_);
    std::swap(size_, other.size_);
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (std::size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two, or empty
  std::size_t head_ = 0, size_ = 0;
};

}  // namespace echo::base
