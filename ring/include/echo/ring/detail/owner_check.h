// SPDX-License-Identifier: MIT
// Debug-build enforcement of a structural rule (docs/architecture.md, "Rules that keep it simple"):
// one producer per ring, one consumer per ring. The first thread to use a side claims it; another
// thread aborts with a message. Release builds (NDEBUG) compile the check to nothing; the member
// stays, so the class layout is the same under NDEBUG and without it (the installed headers serve
// both).
#pragma once

#include <atomic>
#include <thread>

namespace echo::ring::detail {

// Prints "echo::ring: <what> called from a second thread ..." and aborts. Out of line: cold.
[[noreturn]] void owner_violation(const char* what) noexcept;

class OwnerCheck {
 public:
  void check([[maybe_unused]] const char* what) noexcept {
#ifndef NDEBUG
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id owner = owner_.load(std::memory_order_relaxed);
    if (owner == me) return;
    // The first caller claims the side; relaxed suffices: the id is the only data.
    if (owner == std::thread::id{} &&
        owner_.compare_exchange_strong(owner, me, std::memory_order_relaxed)) {
      return;
    }
    if (owner != me) owner_violation(what);
#endif
  }

 private:
  std::atomic<std::thread::id> owner_{};  // used by debug builds only
};

}  // namespace echo::ring::detail
