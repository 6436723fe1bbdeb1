// SPDX-License-Identifier: MIT
// The consumer's doorbell: an eventcount one consumer thread waits on and any number of
// producers ring. A writer thread that drains several rings and an MPSC inbox builds one
// Doorbell, hands it to every ring it owns, and waits on it with a predicate that checks them all.
//
// Protocol (no wake is lost; every access named below is seq_cst, so all of them sit in the
// single total order S, which is what a store-then-load handshake needs; no fences, which TSan
// cannot model):
//   ring producer:  tail_ = t+1 ; load waiters_ → if non-zero and the ring was empty
//                   (head_ == t): epoch_ += 1 and futex-wake.                       [signal]
//   other producer: publish its work (release) ; epoch_ += 1 ; load waiters_ → if non-zero:
//                   futex-wake.                                                     [notify]
//   consumer:       waiters_ += 1 ; key = epoch_ ; re-check every source (a ring's tail_ load)
//                   → if still no work: futex-wait while epoch_ == key ; waiters_ -= 1.
// For a ring, either the consumer's tail_ load precedes the producer's tail_ store in S, so
// waiters_ += 1 does too and the producer sees the waiter and signals; or the re-check sees the
// item. For notify, either the consumer's key load reads the bump (and, acquiring it, sees the
// work), or it precedes the bump in S, so the producer sees the waiter and the futex, which
// compares epoch_ with key in the kernel, cannot sleep through the wake.
//
// Asymmetric mode (Linux membarrier available, the usual case): a full barrier costs ~25-40 ns
// per publish on the CI VM, so the ring producer instead does tail_ = t+1 (release), a compiler
// barrier, and an acquire load of waiters_; the consumer, after waiters_ += 1 and before its
// re-check, calls membarrier(PRIVATE_EXPEDITED), which puts every running thread of the process
// through a full barrier: the membarrier(2) fast-path/slow-path pairing, the same two cases.
#pragma once

#include <echo/ring/ring_config.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <thread>

namespace echo::ring {

// One pause: tells the core we spin (saves power, frees the sibling hyper-thread).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

namespace detail {
// Linux futex on a 32-bit atomic word. wait returns on a wake, a changed word, a signal or the
// deadline (steady_clock = CLOCK_MONOTONIC; time_point::max() means none). Not hot-path code:
// these are the one syscall the ring allows, and only when a side really sleeps.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::steady_clock::time_point deadline) noexcept;
void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept;
// membarrier(PRIVATE_EXPEDITED): registered once per process; false if the kernel refuses.
bool asymmetric_barrier_available() noexcept;
void heavy_barrier() noexcept;
}  // namespace detail

enum class WaitVerdict : std::uint8_t { kWork, kTimeout, kStopped };

class Doorbell {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Doorbell(WaitConfig config = {}) noexcept
      : config_(config),
        asymmetric_(config.strategy == WaitStrategy::kPark && config.asymmetric_barrier &&
                    detail::asymmetric_barrier_available()) {}
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  const WaitConfig& config() const noexcept { return config_; }
  // False for spin and yield consumers: they never sleep, so producers skip the seq_cst store and
  // the signal entirely.
  bool parks() const noexcept { return config_.strategy == WaitStrategy::kPark; }
  // True when the parking consumer issues the heavy barrier, so ring producers may use
  // has_waiters_light() after a release store (see the protocol above).
  bool asymmetric() const noexcept { return asymmetric_; }

  // Any producer thread that is not an SpscRing (an MPSC inbox), after the release store that
  // made its work visible. Never blocks, never allocates; one seq_cst RMW on the doorbell's
  // line, and the futex-wake syscall only when the consumer is parked or parking. Returns true
  // iff it woke the consumer. Rings use has_waiters() and signal() on their empty→non-empty edge.
  bool notify() noexcept {
    if (!parks()) return false;
    epoch_.fetch_add(1, std::memory_order_seq_cst);  // see the protocol above
    if (waiters_.load(std::memory_order_seq_cst) == 0) return false;
    signals_.fetch_add(1, std::memory_order_relaxed);
    detail::futex_wake(epoch_, 1 << 30);
    return true;
  }

  // A ring producer, right after its seq_cst tail_ store: is the consumer parked or parking?
  // seq_cst: the load half of the Dekker pair with wait_until's waiters_ increment.
  bool has_waiters() const noexcept { return waiters_.load(std::memory_order_seq_cst) != 0; }

  // A ring producer in asymmetric mode, right after its release tail_ store. The compiler
  // barrier keeps the load after the store in program order; the consumer's membarrier does
  // the rest. acquire: pairs with the consumer's waiters_ increment (a seq_cst RMW), so the
  // producer's later head_ load sees the head the consumer stored before it.
  bool has_waiters_light() const noexcept {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return waiters_.load(std::memory_order_acquire) != 0;
  }

  // Wakes the consumer. Any thread; syscall.
  void signal() noexcept {
    // A consumer whose key load reads this bump acquires it, so it also sees the work.
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    signals_.fetch_add(1, std::memory_order_relaxed);
    detail::futex_wake(epoch_, 1 << 30);
  }

  // The consumer thread only (one per doorbell). Returns kWork as soon as has_work() is true;
  // kStopped once `stop` is requested; kTimeout at `deadline`. Spins config().spin_budget polls,
  // then spins, yields or parks. has_work must be a cheap, side-effect-free check: each ring's
  // SpscRing::has_work (a seq_cst tail load) plus, for sources whose producers call notify(),
  // any load at all (e.g. an inbox's size_approx() != 0).
  template <class HasWork>
  WaitVerdict wait_until(HasWork&& has_work, Clock::time_point deadline = Clock::time_point::max(),
                         std::stop_token stop = {}) {
    for (std::uint32_t i = 0; i < config_.spin_budget; ++i) {
      if (has_work()) return WaitVerdict::kWork;
      cpu_relax();
    }
    if (config_.strategy != WaitStrategy::kPark) {
      for (std::uint32_t i = 0;; ++i) {
        if (has_work()) return WaitVerdict::kWork;
        if (stop.stop_requested()) return WaitVerdict::kStopped;
        // Reading the clock costs ~20 ns; the spin checks it every 64 polls.
        if ((config_.strategy == WaitStrategy::kYield || (i & 63) == 0) &&
            Clock::now() >= deadline) {
          return WaitVerdict::kTimeout;
        }
        if (config_.strategy == WaitStrategy::kYield) {
          std::this_thread::yield();
        } else {
          cpu_relax();
        }
      }
    }
    // A stop request bumps the epoch, so a parked consumer sees it without a producer.
    std::stop_callback on_stop(stop, [this]() noexcept { signal(); });
    for (;;) {
      if (has_work()) return WaitVerdict::kWork;
      if (stop.stop_requested()) return WaitVerdict::kStopped;
      if (Clock::now() >= deadline) return WaitVerdict::kTimeout;
      waiters_.fetch_add(1, std::memory_order_seq_cst);  // the store half of the Dekker pair
      if (asymmetric_) detail::heavy_barrier();          // pairs with has_waiters_light
      const std::uint32_t key = epoch_.load(std::memory_order_seq_cst);
      if (!has_work() && !stop.stop_requested()) {
        parks_.fetch_add(1, std::memory_order_relaxed);
        detail::futex_wait(epoch_, key, deadline);
      }
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // Counters, any thread, relaxed (statistics only).
  std::uint64_t parks_count() const noexcept { return parks_.load(std::memory_order_relaxed); }
  std::uint64_t signals_count() const noexcept { return signals_.load(std::memory_order_relaxed); }

 private:
  const WaitConfig config_;
  const bool asymmetric_;
  // The producers' line: bumped on a signal or notify, read by the parking consumer.
  alignas(kCacheLine) std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint64_t> signals_{0};
  // The consumer's line: written when it parks and unparks, read by producers after Fp; it
  // stays shared (clean) in the producers' caches while the consumer is busy.
  alignas(kCacheLine) std::atomic<std::uint32_t> waiters_{0};
  std::atomic<std::uint64_t> parks_{0};

  static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                    sizeof(std::atomic<std::uint32_t>) == 4,
                "the futex operates on the atomic's own 32-bit word");
};

}  // namespace echo::ring
