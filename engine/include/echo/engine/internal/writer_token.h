// SPDX-License-Identifier: MIT
// The writer token: the right to mutate one table's L1 map and the writer's state, held by the
// table's writer thread and lent, while it waits for work, to an io thread that has one coherence
// item to apply and nothing queued before it. At any instant at most one thread holds it, so "one
// writer per table" (docs/architecture.md) still holds in the sense that matters: one mutator at a
// time, each hand-over a release/acquire pair, so each holder sees every write of the holders
// before it. It saves the broadcast lane the writer's wake-up (a futex wake and a context switch)
// when the writer is parked.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include <echo/base/cache_line.h>
#include <echo/ring/doorbell.h>

namespace echo::engine {

// One state word on its own line. kHeld: the writer thread runs (the initial state is kClosed:
// nothing may borrow before the writer thread starts). kIdle: the writer waits and lends it.
// kBorrowed: an io thread applies. kWanted: an io thread applies and the writer waits for it.
// kClosed: the writer has stopped (nobody may borrow again).
//
//   writer:   ... last mutation ; lend(): store kIdle (release)        -> waits on its doorbell
//   borrower: try_borrow(): CAS kIdle -> kBorrowed (acquire, pairs with lend's release)
//             ... applies ... ; give_back(): CAS kBorrowed -> kIdle (release), or, when the
//             writer marked it kWanted, store kHeld (release): the token goes to the writer
//   writer:   woken ; take_back(): CAS kIdle -> kHeld (acquire, pairs with lend's or give_back's
//             release); finding kBorrowed, CAS it to kWanted and wait for kHeld (acquire)
// Every transition out of kIdle is a CAS, so of several borrowers (one per io thread) and the
// writer, exactly one wins each kIdle; the others see kBorrowed or kHeld. kWanted is fairness:
// no borrower can take the token between a give_back and the writer's take_back, so a writer
// waits for at most the one apply under way, however many io threads keep borrowing.
class WriterToken {
 public:
  // Writer thread, holding it, before it waits: its writes so far become the borrower's to see.
  void lend() noexcept { state_.store(kIdle, std::memory_order_release); }

  // Writer thread, after its wait, before it touches its state again. Waits while a borrower
  // holds the token (one item's apply), spinning kSpins pauses and then yielding (on one core
  // the borrower may be the thread this one preempted: spinning alone would burn its slice).
  void take_back() noexcept {
    std::uint8_t seen = kIdle;
    // acquire: pairs with lend()'s or give_back()'s release.
    while (!state_.compare_exchange_weak(seen, kHeld, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      if (seen == kBorrowed) {
        // relaxed: a mark, not a hand-over; the borrower's give_back sees it in the same word.
        // Failing, the borrower gave back meanwhile: the CAS above is tried again.
        if (state_.compare_exchange_strong(seen, kWanted, std::memory_order_relaxed)) {
          return wait_for_hand_over();
        }
      }
      seen = kIdle;
      ring::cpu_relax();
    }
  }

  // Writer thread, holding it, as it ends (and before start: the initial state): nobody may
  // borrow from now on. relaxed: nobody else can move the word out of kHeld.
  void close() noexcept { state_.store(kClosed, std::memory_order_relaxed); }

  // Any thread but the writer: true iff it now holds the token (then it must give_back()).
  // Never waits. The first load keeps a busy writer's line shared: a failed try costs one load.
  bool try_borrow() noexcept {
    if (state_.load(std::memory_order_relaxed) != kIdle) return false;
    std::uint8_t idle = kIdle;
    // acquire: pairs with lend()'s (or the previous borrower's give_back()'s) release.
    return state_.compare_exchange_strong(idle, kBorrowed, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  // The borrower, after its last mutation: to the idle state, or straight to a writer that
  // waits for it. release (both): pairs with take_back()'s or the next borrower's acquire.
  void give_back() noexcept {
    std::uint8_t borrowed = kBorrowed;
    if (!state_.compare_exchange_strong(borrowed, kIdle, std::memory_order_release,
                                        std::memory_order_relaxed)) {
      state_.store(kHeld, std::memory_order_release);  // it was kWanted: the writer takes over
    }
  }

  // A racy view for tests and reports: true while the writer waits for a borrower to give it.
  bool wanted_approx() const noexcept { return state_.load(std::memory_order_relaxed) == kWanted; }

  // A racy view for tests and reports: true while an io thread holds it.
  bool borrowed_approx() const noexcept {
    const std::uint8_t s = state_.load(std::memory_order_relaxed);
    return s == kBorrowed || s == kWanted;
  }

 private:
  static constexpr std::uint8_t kHeld = 0, kIdle = 1, kBorrowed = 2, kClosed = 3, kWanted = 4;
  static constexpr std::uint32_t kSpins = 64;

  // take_back, after marking kWanted: the borrower's give_back stores kHeld.
  void wait_for_hand_over() noexcept {
    // acquire: pairs with give_back()'s release store of kHeld.
    for (std::uint32_t i = 0; state_.load(std::memory_order_acquire) != kHeld; ++i) {
      if (i < kSpins) {
        ring::cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  }

  alignas(base::kCacheLine) std::atomic<std::uint8_t> state_{kClosed};
};

}  // namespace echo::engine
