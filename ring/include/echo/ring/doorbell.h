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
// Asymmetric mode (WaitConfig::asymmetric_barrier, where the kernel offers membarrier): to spare
// each publish its full barrier (BM_SpscRing_PublishDrain: under 1 ns single-threaded on the CI
// VM's EPYC, more when the store buffer holds misses), the ring producer instead does
// tail_ = t+1 (release), a compiler barrier, and an acquire load of waiters_; the consumer, after
// waiters_ += 1 and before its re-check, calls membarrier(PRIVATE_EXPEDITED), which puts every
// running thread of the process through a full barrier: the membarrier(2) fast-path/slow-path
// pairing, the same two cases. The price is an IPI to every CPU running a thread of the process at
// each park, hence off by default (WaitConfig::asymmetric_barrier says what it measured).
//
// Fallback: the barrier can fail after construction found it available (a seccomp filter
// installed later on the consumer thread, or on all threads with TSYNC; ENOMEM). A failed
// barrier protects nothing, so the consumer falls back for good to the symmetric handshake and
// counts it (barrier_fallbacks):
//   consumer, on a failed registration or barrier: waiters_ |= kFallenBack (seq_cst).
//   light ring producer: tail_ = t+1 (release) ; w = waiters_ (acquire) → if w has kFallenBack:
//                   light_rings_ -= 1 (seq_cst; it "leaves"), load waiters_ (seq_cst), and
//                   publishes symmetric from then on.
//   consumer parking while fallen back: waiters_ += 1 ; key = epoch_ ; n = light_rings_
//                   (seq_cst) ; re-check ; futex-wait, bounded by the settle timeout while
//                   n != 0 (kSettleTimeout, doubling at each such park up to kSettleTimeoutMax).
// A publish after its ring left is symmetric: the protocol's first case. A light publish (its
// producer had not yet seen the flag) stored its tail before its ring's leave, if any. If the
// consumer's n reads 0, every ring's leave (all RMWs: one release sequence) happens-before that
// load, so the re-check sees each light tail: nothing to wake. If n != 0 the park is bounded: a
// lost wake costs at most the settle timeout, and the consumer re-checks. The timeout doubles
// from kSettleTimeout at each bounded park, up to kSettleTimeoutMax: the only publish that can
// need it is one that raced the switch (every later light publish sees the flag and leaves), and
// a ring that stays silent after the switch would otherwise cost its consumer a wake every
// kSettleTimeout for as long as it stays silent. So a producer preempted
// mid-publish across the switch is harmless, and once every ring has left (each does on its first
// publish after the switch; a destroyed ring leaves too) the parks are untimed again. A ring that
// attaches while the consumer falls back does light_rings_ += 1, then loads waiters_ (seq_cst),
// against the consumer's waiters_ |= kFallenBack, then n load: either it sees the flag (undoes
// its count and starts symmetric) or the consumer's n counts it.
// Why the flag lives in waiters_: the light producer already loads that word on every publish,
// so learning of the switch costs it nothing: the fast path stays one load and one compare with
// zero (a separate mode word would be a second load of a doorbell line on every publish).
// Registration is retried by the consumer on its first park, on its own thread: a filter that
// covers only the consumer thread is found there, not at construction.
//
// Adaptive mode (WaitConfig::adaptive_barrier, the default for a parking consumer when
// asymmetric_barrier is off and the kernel offers membarrier): rings start symmetric and each one
// goes light by itself, through the same attach and leave as above:
//   ring producer, symmetric: after kLightAfter publishes in a row whose has_waiters() load found
//                   no waiter: attach_ring() (light_rings_ += 1, then a seq_cst load of waiters_);
//                   its later publishes are light.
//   ring producer, light: at the first publish whose waiters_light() load finds a waiter, signal
//                   as a light publish does, then leave_light(); its later publishes are symmetric.
//   consumer:       waiters_ += 1 ; n = light_rings_ (seq_cst) ; if n != 0: membarrier ;
//                   key = epoch_ ; re-check ; futex-wait while epoch_ == key.
// A symmetric publish is the first protocol. For a light publish (tail_ release store Tp, acquire
// waiters_ load Bp) of a ring that attached with A (the RMW) and B0 (the seq_cst load after it),
// and a park (W its increment, L its light_rings_ load): if A precedes L in S and the ring has
// not left, n != 0 and the membarrier pairs with Tp/Bp as in asymmetric mode. If L precedes A,
// then W <S L <S A <S B0, so B0, a seq_cst load, reads W or a later value of waiters_, and so does
// Bp (read-read coherence, Bp after B0): while this park lasts Bp sees the waiter and the ring
// signals; if Bp reads this park's decrement or later, the park is over, and any later park's
// W' cannot precede B0 in S (B0 would read W' or later, which Bp, after B0, read before), so its
// L' follows A: the first case. A light publish before the ring's leave is released to a park
// whose L reads n == 0 by the leave RMW (the release sequence argument of Fallback). So no wake
// is lost, a consumer that parks per message (each publish finds it parked: the ring never goes
// light) never issues the barrier, and a consumer that keeps up with continuous traffic leaves its
// rings light, so they publish without the store-load fence. The one membarrier is paid at a park
// while a ring is still light: once per end of a burst (the ring leaves at its next publish),
// plus each re-park on a deadline or stop while a light ring stays silent. A failed barrier falls
// back exactly as above (kFallenBack; light rings leave; attach_ring refuses from then on).
#pragma once

#include <echo/base/cache_line.h>
#include <echo/base/counter.h>
#include <echo/ring/ring_config.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <thread>
#include <type_traits>

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
// The CPU this thread runs on now (glibc reads it from the thread's rseq area), -1 if unknown.
inline int current_cpu() noexcept { return sched_getcpu(); }

// Linux futex on a 32-bit atomic word. wait returns on a wake, a changed word, a signal or the
// deadline (steady_clock = CLOCK_MONOTONIC; time_point::max() means none). Not hot-path code:
// these are the one syscall the ring allows, and only when a side really sleeps.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::steady_clock::time_point deadline) noexcept;
void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept;
// membarrier(PRIVATE_EXPEDITED). available: the kernel offers it and the process registered (probed
// once per process, at the first Doorbell). register: idempotent, on the calling thread (a
// seccomp filter is per thread). heavy_barrier: false if the kernel refused (the barrier then did
// not happen).
bool asymmetric_barrier_available() noexcept;
[[nodiscard]] bool register_asymmetric_barrier() noexcept;
[[nodiscard]] bool heavy_barrier() noexcept;
}  // namespace detail

enum class WaitVerdict : std::uint8_t { kWork, kTimeout, kStopped };

class Doorbell {
 public:
  using Clock = std::chrono::steady_clock;

  // What a light (asymmetric) ring producer learns from its one load of waiters_.
  enum class Light : std::uint8_t { kNoWaiter, kWaiter, kFallenBack };

  // How long a fallen-back consumer parks at most while a ring may still publish light: the
  // first such park; each next one doubles it, up to kSettleTimeoutMax (see Fallback).
  static constexpr std::chrono::milliseconds kSettleTimeout{1};
  static constexpr std::chrono::milliseconds kSettleTimeoutMax{256};

  // Symmetric publishes in a row that found the consumer awake before an adaptive ring goes
  // light (see Adaptive mode): enough that a consumer parking once per few messages keeps its
  // rings symmetric, few enough that a burst of 1-item publishes runs light after 64 items.
  static constexpr std::uint32_t kLightAfter = 64;

  // Gather (WaitConfig::gather): waits in a row that found work within their first
  // kGatherQuickPolls polls before the next wait starts with the gather's pauses.
  static constexpr std::uint32_t kGatherAfter = 4;
  static constexpr std::uint32_t kGatherQuickPolls = 8;

  // Own-core wakes: a consumer woken by a signal sent from its own CPU shares that CPU with its
  // producer (both pinned there, or the other CPUs busy), where a pause-spin only keeps the
  // producer from running: one chunk drained per wake, then spin_budget futile polls (a ring whose
  // two threads shared a CPU moved ~5 M items/s). Until a wake comes from another CPU, the
  // consumer skips its spin phase (and the gather) and, before each park, yields the CPU up to
  // kOwnCoreYields times, looking for work after each. Every kOwnCoreProbe-th wait in that mode
  // parks without yielding, so a wake from another CPU (the threads moved apart under continuous
  // traffic, where the yields would keep finding work) ends the mode. All of it lives on the
  // park path but one branch on entry: the spin phase's code is the same as before. A
  // consumer without a spin phase (spin_budget 0: the engine's writers) parks at once as asked,
  // whoever woke it.
  static constexpr std::uint32_t kOwnCoreYields = 64;
  static constexpr std::uint32_t kOwnCoreProbe = 64;

  explicit Doorbell(WaitConfig config = {}) noexcept
      : config_(config),
        starts_light_(config.strategy == WaitStrategy::kPark && config.asymmetric_barrier &&
                      detail::asymmetric_barrier_available()),
        adaptive_(config.strategy == WaitStrategy::kPark && !config.asymmetric_barrier &&
                  config.adaptive_barrier && detail::asymmetric_barrier_available()),
        light_(starts_light_) {}
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  const WaitConfig& config() const noexcept { return config_; }
  // False for spin and yield consumers: they never sleep, so producers skip the seq_cst store and
  // the signal entirely.
  bool parks() const noexcept { return config_.strategy == WaitStrategy::kPark; }
  // True while the parking consumer issues the heavy barrier: from construction (when asked for
  // and the kernel offers it) until a failed barrier makes it fall back for good. Any thread;
  // relaxed: a report, not a handshake (rings learn of the switch through waiters_light()).
  bool asymmetric() const noexcept {
    return starts_light_ && (waiters_.load(std::memory_order_relaxed) & kFallenBack) == 0;
  }
  // True while rings may go light by themselves (Adaptive mode): from construction (when
  // WaitConfig::adaptive_barrier asks for it and the kernel offers membarrier) until a failed
  // barrier makes the consumer fall back for good. Any thread; relaxed, a report.
  bool adaptive() const noexcept {
    return adaptive_ && (waiters_.load(std::memory_order_relaxed) & kFallenBack) == 0;
  }
  // A ring's producer (read once, at construction): may this ring attach later (adaptive)?
  bool adaptive_rings() const noexcept { return adaptive_; }

  // Any producer thread that is not an SpscRing (an MPSC inbox), after the release store that
  // made its work visible. Never blocks, never allocates; one seq_cst RMW on the doorbell's
  // line, and the futex-wake syscall only when the consumer is parked or parking. Returns true
  // iff it woke the consumer. Rings use has_waiters() and signal() on their empty→non-empty edge.
  bool notify() noexcept {
    if (!parks()) return false;
    epoch_.fetch_add(1, std::memory_order_seq_cst);  // see the protocol above
    if ((waiters_.load(std::memory_order_seq_cst) & kWaiterMask) == 0) return false;
    wake();
    return true;
  }

  // A ring producer, right after its seq_cst tail_ store: is the consumer parked or parking?
  // seq_cst: the load half of the Dekker pair with wait_until's waiters_ increment.
  bool has_waiters() const noexcept {
    return (waiters_.load(std::memory_order_seq_cst) & kWaiterMask) != 0;
  }

  // A light ring producer (one that attach_ring() let publish light), right after its release
  // tail_ store. The compiler barrier keeps the load after the store in program order; the
  // consumer's membarrier does the rest. acquire: pairs with the consumer's waiters_ increment
  // (a seq_cst RMW), so the producer's later head_ load sees the head the consumer stored before
  // it. kFallenBack: the consumer lost its barrier; the ring must leave_light() (see above).
  Light waiters_light() const noexcept {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    const std::uint32_t w = waiters_.load(std::memory_order_acquire);
    if (w == 0) return Light::kNoWaiter;
    return (w & kFallenBack) != 0 ? Light::kFallenBack : Light::kWaiter;
  }

  // A ring being built on this doorbell (any thread, before its producer runs), or an adaptive
  // ring's producer going light: true if its producer may publish light, counted until it calls
  // leave_light(). seq_cst: the attach half of the switch's Dekker pair, and the waiters_ load is
  // the B0 of Adaptive mode (see above).
  bool attach_ring() noexcept {
    if (!starts_light_ && !adaptive_) return false;
    light_rings_.fetch_add(1, std::memory_order_seq_cst);
    if ((waiters_.load(std::memory_order_seq_cst) & kFallenBack) == 0) return true;
    light_rings_.fetch_sub(1, std::memory_order_seq_cst);
    return false;
  }
  // A light ring's producer on seeing kFallenBack, after its last light publish (or the ring's
  // destructor, if it never saw it). seq_cst RMW: releases that publish's tail to the consumer's
  // light_rings_ load, and orders the producer's next waiters_ load after it.
  void leave_light() noexcept { light_rings_.fetch_sub(1, std::memory_order_seq_cst); }

  // Wakes the consumer. Any thread; syscall.
  void signal() noexcept {
    // A consumer whose key load reads this bump acquires it, so it also sees the work.
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    wake();
  }

  // The consumer thread only (one per doorbell). Returns kWork as soon as has_work() is true;
  // kStopped once `stop` is requested; kTimeout at `deadline`. Spins config().spin_budget polls
  // (under continuous traffic, after config().gather pauses: WaitConfig::gather), then spins,
  // yields or parks (after a wake from the consumer's own CPU: kOwnCoreYields). has_work must be
  // a cheap, side-effect-free check: each ring's SpscRing::has_work (a seq_cst tail load) plus, for
  // sources whose producers call notify(), any load at all (e.g. an inbox's size_approx() != 0).
  template <class HasWork>
  WaitVerdict wait_until(HasWork&& has_work, Clock::time_point deadline = Clock::time_point::max(),
                         std::stop_token stop = {}) {
    // Own-core mode (kOwnCoreYields; only with a spin phase): no spin, no gather.
    if (config_.spin_budget != 0 && !own_core_) {
      // Gather: under continuous traffic, leave the producer alone for a moment first.
      if (config_.gather != 0 && quick_waits_ >= kGatherAfter) {
        for (std::uint32_t i = 0; i < config_.gather; ++i) cpu_relax();
        base::solo_add(gathers_);
      }
      for (std::uint32_t i = 0; i < config_.spin_budget; ++i) {
        if (has_work()) {
          quick_waits_ = i < kGatherQuickPolls ? quick_waits_ + (quick_waits_ < kGatherAfter) : 0;
          return WaitVerdict::kWork;
        }
        cpu_relax();
      }
      quick_waits_ = 0;
    }
    return wait_after_spin<std::decay_t<HasWork>>(has_work, deadline, stop);
  }

  // Counters, any thread, relaxed (statistics only).
  std::uint64_t parks_count() const noexcept { return parks_.load(std::memory_order_relaxed); }
  std::uint64_t signals_count() const noexcept { return signals_.load(std::memory_order_relaxed); }
  // 1 once the consumer's membarrier failed and it fell back to the seq_cst handshake, else 0.
  std::uint64_t barrier_fallbacks() const noexcept {
    return fallbacks_.load(std::memory_order_relaxed);
  }
  // Parks that issued the membarrier because an adaptive ring was light (0 outside Adaptive mode).
  std::uint64_t adaptive_barriers_count() const noexcept {
    return adaptive_barriers_.load(std::memory_order_relaxed);
  }
  // membarrier(PRIVATE_EXPEDITED) calls the consumer made at its parks (each an IPI to every
  // CPU running a thread of the process): asymmetric mode's every park, adaptive mode's while a
  // ring is light.
  std::uint64_t barriers_count() const noexcept {
    return barriers_.load(std::memory_order_relaxed);
  }
  // Waits that began with the gather's pauses (WaitConfig::gather).
  std::uint64_t gathers_count() const noexcept { return gathers_.load(std::memory_order_relaxed); }
  // Wakes signalled from the consumer's own CPU (kOwnCoreYields).
  std::uint64_t own_core_wakes_count() const noexcept {
    return own_core_wakes_.load(std::memory_order_relaxed);
  }
  // Rings that may still publish light (a racy estimate; for tests and reports).
  std::uint32_t light_rings_approx() const noexcept {
    return light_rings_.load(std::memory_order_relaxed);
  }

 private:
  // waiters_ holds the count of parking consumers (0 or 1) and, for good once set, kFallenBack.
  static constexpr std::uint32_t kFallenBack = std::uint32_t{1} << 31;
  static constexpr std::uint32_t kWaiterMask = kFallenBack - 1;

  // Consumer thread: the wait after the spin phase found nothing or was skipped (own-core mode):
  // the strategy proper. Out of line, and given its own copy of has_work (a lambda holding a
  // pointer or two), so the spin phase inlined into a caller's drain loop keeps the ring in a
  // register: with this inlined, or given a reference that makes the lambda live on the stack,
  // each poll reloaded the ring from the stack first.
  template <class HasWork>
  [[gnu::noinline]] WaitVerdict wait_after_spin(HasWork has_work, Clock::time_point deadline,
                                                const std::stop_token& stop) {
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
    if (own_core_) {
      if (const std::optional<WaitVerdict> v = give_way(has_work, deadline, stop)) return *v;
    }
    // A stop request bumps the epoch, so a parked consumer sees it without a producer.
    std::stop_callback on_stop(stop, [this]() noexcept { signal(); });
    for (;;) {
      if (has_work()) return WaitVerdict::kWork;
      if (stop.stop_requested()) return WaitVerdict::kStopped;
      if (Clock::now() >= deadline) return WaitVerdict::kTimeout;
      waiters_.fetch_add(1, std::memory_order_seq_cst);  // the store half of the Dekker pair
      // Adaptive: the barrier only while a ring may publish light (L of Adaptive mode, after W).
      const bool heavy = light_ || (adaptive_ && !fallen_back_ &&
                                    light_rings_.load(std::memory_order_seq_cst) != 0);
      if (heavy) {
        if (heavy_barrier_once()) {
          base::solo_add(barriers_);  // consumer-written only
          if (!light_) base::shared_add(adaptive_barriers_);
        } else {
          fall_back();  // pairs with waiters_light
        }
      }
      const std::uint32_t key = epoch_.load(std::memory_order_seq_cst);
      // Fallen back and a ring may still publish light: park at most kSettleTimeout (see above).
      // The load comes before the re-check, so a 0 read releases every light tail to it.
      if (fallen_back_ && !settled_) {
        settled_ = light_rings_.load(std::memory_order_seq_cst) == 0;
      }
      if (!has_work() && !stop.stop_requested()) {
        base::shared_add(parks_);
        Clock::time_point until = deadline;
        if (fallen_back_ && !settled_) {
          until = std::min(deadline, Clock::now() + settle_timeout_);
          settle_timeout_ = std::min(2 * settle_timeout_, Clock::duration(kSettleTimeoutMax));
        }
        detail::futex_wait(epoch_, key, until);
        if (epoch_.load(std::memory_order_relaxed) != key) note_waker();
      }
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // signal and notify, after the epoch bump: note the CPU (kOwnCoreYields), count, futex-wake.
  // Out of line, so that a ring's publish, which inlines signal, keeps nothing live across a
  // call: with the sched_getcpu call inlined there, try_publish saved and restored two registers
  // on every publish, and the 1-item row (ring_vs_rwq) fell from ~1.2x to ~0.9x.
  [[gnu::noinline]] void wake() noexcept {
    signal_cpu_.store(detail::current_cpu(), std::memory_order_relaxed);
    base::shared_add(signals_);
    detail::futex_wake(epoch_, 1 << 30);
  }

  // Consumer thread, in own-core mode, before it parks: yield the CPU (to the producer sharing
  // it) and look for work after each yield; nullopt (park) if none came. Every kOwnCoreProbe-th
  // call parks at once instead, to learn from the next wake whether the producer still shares
  // the CPU.
  template <class HasWork>
  std::optional<WaitVerdict> give_way(HasWork& has_work, Clock::time_point deadline,
                                      const std::stop_token& stop) {
    if (++own_core_waits_ % kOwnCoreProbe == 0) return std::nullopt;
    for (std::uint32_t i = 0, n = std::min(config_.spin_budget, kOwnCoreYields); i < n; ++i) {
      std::this_thread::yield();
      if (has_work()) return WaitVerdict::kWork;
      if (stop.stop_requested()) return WaitVerdict::kStopped;
      if (Clock::now() >= deadline) return WaitVerdict::kTimeout;
    }
    return std::nullopt;
  }
  // Consumer thread, back from a futex wait that a signal or notify ended: from which CPU?
  // A hint: the CPU wake() noted after its epoch bump (a consumer that saw the bump before it
  // slept may read the previous signaller's) against this thread's now; a wrong guess costs one
  // spin phase or a few yields, and the next wake corrects it.
  void note_waker() noexcept {
    const int by = signal_cpu_.load(std::memory_order_relaxed);
    own_core_ = config_.spin_budget != 0 && by >= 0 && by == detail::current_cpu();
    if (own_core_) {
      base::solo_add(own_core_wakes_);
    }
  }

  // Consumer thread. The first call registers on this thread (a filter may cover only it).
  bool heavy_barrier_once() noexcept {
    if (!registered_) {
      if (!detail::register_asymmetric_barrier()) return false;
      registered_ = true;
    }
    return detail::heavy_barrier();
  }
  // Consumer thread, once. seq_cst: the switch half of the attach Dekker pair; the flag reaches
  // light producers through their waiters_ load.
  void fall_back() noexcept {
    light_ = false;
    fallen_back_ = true;
    waiters_.fetch_or(kFallenBack, std::memory_order_seq_cst);
    base::shared_add(fallbacks_);
  }

  const WaitConfig config_;
  const bool starts_light_;
  const bool adaptive_;
  // Read-mostly: changed only when a light ring attaches or leaves.
  std::atomic<std::uint32_t> light_rings_{0};
  // The producers' line: bumped on a signal or notify, read by the parking consumer.
  alignas(base::kCacheLine) std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint64_t> signals_{0};
  std::atomic<int> signal_cpu_{-1};  // the CPU of the last signal or waking notify (a hint)
  // The consumer's line: written when it parks and unparks, read by producers after Fp; it
  // stays shared (clean) in the producers' caches while the consumer is busy.
  alignas(base::kCacheLine) std::atomic<std::uint32_t> waiters_{0};
  std::atomic<std::uint64_t> parks_{0};
  std::atomic<std::uint64_t> fallbacks_{0};
  std::atomic<std::uint64_t> adaptive_barriers_{0};
  std::atomic<std::uint64_t> barriers_{0};
  // Consumer-private.
  bool light_;               // issues the heavy barrier at each park
  bool registered_ = false;  // membarrier registered from the consumer thread
  bool fallen_back_ = false;
  bool settled_ = false;  // fallen back and every light ring has left: untimed parks again
  Clock::duration settle_timeout_ = kSettleTimeout;  // the next bounded park's (Fallback)
  // Written on every wait (the gather's state): a line of their own, away from waiters_, which
  // light producers load on every publish.
  alignas(base::kCacheLine) std::uint32_t quick_waits_ = 0;  // waits in a row that found work soon
  bool own_core_ = false;                  // the last wake came from this thread's CPU
  std::uint32_t own_core_waits_ = 0;       // waits in own-core mode (the probe's count)
  std::atomic<std::uint64_t> gathers_{0};  // consumer-written (load + store), read by reports
  std::atomic<std::uint64_t> own_core_wakes_{0};  // the same

  static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                    sizeof(std::atomic<std::uint32_t>) == 4,
                "the futex operates on the atomic's own 32-bit word");
};

}  // namespace echo::ring
