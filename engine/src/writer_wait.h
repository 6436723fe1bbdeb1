// SPDX-License-Identifier: MIT
// An application thread's wait for a command it posted to a table's writer (a put, an erase, a
// drop): kept by the thread from one call to the next, so a posted put allocates nothing here
// once warm, where a promise, its shared state and a std::function big enough to hold them made
// three allocations a call. The command's done() is a pointer-sized closure (std::function keeps
// it inline); the writer ends the wait through one futex word. A caller whose deadline passes
// hands the object to the writer instead, which deletes it once done() runs, so a late done()
// never lands in a wait the thread has moved on to (LentCall's rule, lent_call.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <echo/ring/doorbell.h>

#include "thread_owned.h"

namespace echo::engine {

class WriterWait {
 public:
  // The calling thread's wait, idle. Outlives the thread's thread_local destructors.
  static WriterWait& mine() { return ThreadOwned<WriterWait>::get(); }

  // Storage the command may borrow until done() runs (put_lent's value): its capacity is kept.
  std::string& value() noexcept { return value_; }

  // Arms the wait and returns the command's done(): call it exactly once, on any thread.
  std::function<void()> arm() {
    state_.store(kPending, std::memory_order_relaxed);  // the post publishes it to the writer
    return [this] { end(); };
  }

  // Waits for done() until `deadline`; false when it gave up (the object is the writer's then).
  bool wait(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (state_.load(std::memory_order_acquire) == kDone) return true;  // pairs with end()
      if (std::chrono::steady_clock::now() >= deadline) break;
      ring::detail::futex_wait(state_, kPending, deadline);
    }
    std::uint32_t s = kPending;
    // acq_rel: the abandonment before end()'s delete; a done() that won the race is seen.
    if (!state_.compare_exchange_strong(s, kAbandoned, std::memory_order_acq_rel)) return true;
    (void)ThreadOwned<WriterWait>::release();  // end() deletes it
    return false;
  }

 private:
  enum : std::uint32_t { kIdle, kPending, kDone, kAbandoned };

  void end() {
    std::uint32_t s = kPending;
    // acq_rel: what the command did before the caller's acquire of kDone; the caller's
    // abandonment before this thread owning the object.
    if (state_.compare_exchange_strong(s, kDone, std::memory_order_acq_rel)) {
      // The caller may have woken and moved on: a wake of a word it no longer waits on is
      // harmless.
      ring::detail::futex_wake(state_, 1);
      return;
    }
    delete this;  // the caller gave up: the object is this thread's
  }

  std::atomic<std::uint32_t> state_{kIdle};
  std::string value_;
};

}  // namespace echo::engine
