// SPDX-License-Identifier: MIT
// The bounded lock-free single-producer single-consumer ring (docs/wire.md, "The ring") that
// carries coherence messages from one io thread to one table writer. Free-running 64-bit sequences,
// masked on access; each side caches the other's sequence (rigtorp SPSCQueue), so the steady state
// costs no shared-line miss per item; publish and drain move whole batches; the producer rings the
// consumer's Doorbell only on the empty→non-empty edge.
//
// Thread contract: one producer thread calls try_publish / publish / try_publish_batch /
// publish_batch / free_slots / note_consumer_waiting; one consumer thread calls drain / has_work /
// take_flush_pending / wait_for_work; any thread calls capacity / occupancy_approx / flush_pending
// / stats. Debug builds abort on a second producer thread (every producer verb checks) or a second
// consumer thread in drain or take_flush_pending (has_work and wait_for_work, doorbell predicates,
// do not check). A flush-policy ring's consumer must take the flag: wait_for_work answers kWork
// while it is raised.
//
// Sequences: tail_ = items ever published, head_ = items ever drained; tail_ - head_ is the
// occupancy, slot of sequence s is s & mask_. A slot's item stays alive (and counted in the
// occupancy) until the drain function that received it returns; only then does head_ advance.
//
// Why our own ring and not boost::lockfree::spsc_queue (a dependency we would take unless our own
// measurably beats it): in bench/ring_bench.cc, BM_SpscRing_ThroughputBatched beat
// BM_BoostSpsc_ThroughputBatched by 1.49-2.2x and BM_SpscRing_Throughput beat
// BM_BoostSpsc_Throughput by 2.7x or more (fastest iteration, three runs; figures and method at the
// top of that file). Boost re-reads the other side's index on every push and pop, copies batches
// out rather than lending a span, has no per-pass cap, and its wrapped indices give no free-running
// occupancy for counters and credits.
#pragma once

#include <echo/base/cache_line.h>
#include <echo/base/counter.h>
#include <echo/ring/detail/owner_check.h>
#include <echo/ring/doorbell.h>
#include <echo/ring/ring_config.h>
#include <echo/ring/ring_stats.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>

namespace echo::ring {

template <class T>
class SpscRing {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "publish is noexcept: moving an item into its slot must not throw");
  static_assert(std::is_nothrow_destructible_v<T>,
                "drain is noexcept: destroying an applied item must not throw");

 public:
  using value_type = T;
  using Clock = std::chrono::steady_clock;

  // A ring with its own doorbell (config.consumer_wait): for a consumer that waits on this
  // ring alone. Throws std::invalid_argument on bad config; allocates the slots once.
  explicit SpscRing(const RingConfig& config) : SpscRing(config, nullptr) {}

  // A ring that rings `bell` (not owned; must outlive the ring): for a writer that owns
  // several rings and an inbox and waits on one doorbell for all of them.
  SpscRing(const RingConfig& config, Doorbell& bell) : SpscRing(config, &bell) {}

  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Destroys the items still in the ring. No other thread may use the ring any more.
  ~SpscRing() {
    if (light_) bell_->leave_light();  // no publish is in flight: the consumer may stop waiting
    const std::uint64_t t = tail_.load(std::memory_order_acquire);
    for (std::uint64_t s = head_.load(std::memory_order_acquire); s != t; ++s) {
      std::destroy_at(slot(s));
    }
    ::operator delete(slots_, kSlotAlign);
  }

  // ---- producer thread ----

  // Never waits. Moves `item` in and returns true if there is space; otherwise leaves `item`
  // untouched and returns false: under drop and flush that refusal is final and counted in
  // `dropped` (flush also raises flush-pending); under block it is not counted (the caller
  // still owns the item; `publish` is the waiting verb). Release-publishes the slot.
  bool try_publish(T&& item) noexcept {
    producer_.check("SpscRing producer verb");
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);  // our own sequence
    if (!has_space(t, 1)) {
      refuse(1);
      return false;
    }
    push_one(t, std::move(item));
    return true;
  }

  // Like try_publish, but under the block policy waits (spin budget, then the producer's
  // strategy) until there is space, and returns true. Under drop and flush it is try_publish.
  // Blocks only under kBlock, with no way out but the consumer's drain: a producer that must be
  // stoppable passes a deadline or a stop token to the overload below. Never allocates.
  bool publish(T&& item) noexcept {
    return publish(std::move(item), Clock::time_point::max(), std::stop_token{});
  }

  // publish that gives up: under block, waits until there is space, `deadline` passes or `stop`
  // is requested (a request wakes a parked producer at once), and returns false for the last
  // two, leaving `item` with the caller, uncounted in `dropped` (the wait counts in `stalls`).
  // Under drop and flush it is try_publish (it never waits). Producer thread; never allocates.
  bool publish(T&& item, Clock::time_point deadline, const std::stop_token& stop = {}) noexcept {
    producer_.check("SpscRing producer verb");
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    if (!has_space(t, 1)) {
      if (policy_ != FullPolicy::kBlock) {
        refuse(1);
        return false;
      }
      if (!wait_for_space(t, 1, deadline, stop)) return false;
    }
    push_one(t, std::move(item));
    return true;
  }

  // Never waits. Moves in the longest prefix of `items` that fits and returns its length
  // (partial acceptance, not all-or-nothing: a writer applying newer-wins gains nothing from
  // losing the items that did fit). The refused suffix is left untouched; under drop and flush
  // it is counted in `dropped` (and raises flush-pending), under block it is not counted.
  // One release store and at most one wake for the whole batch.
  std::size_t try_publish_batch(std::span<T> items) noexcept {
    producer_.check("SpscRing producer verb");
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    const std::size_t n = std::min<std::size_t>(items.size(), free_slots_at(t, items.size()));
    push_many(t, items.first(n));
    if (n < items.size()) refuse(items.size() - n);
    return n;
  }

  // Under block: publishes all of `items`, waiting for space as needed (in as many pieces as
  // the consumer frees room for), and returns items.size(). Under drop and flush it is
  // try_publish_batch. Waits with no way out but the consumer's drain (see the overload below).
  std::size_t publish_batch(std::span<T> items) noexcept {
    return publish_batch(items, Clock::time_point::max(), std::stop_token{});
  }

  // publish_batch that gives up: under block, when `deadline` passes or `stop` is requested
  // before the whole batch fits, returns how many it published (a prefix, in order); the suffix
  // stays with the caller, uncounted in `dropped`. Under drop and flush it is try_publish_batch.
  std::size_t publish_batch(std::span<T> items, Clock::time_point deadline,
                            const std::stop_token& stop = {}) noexcept {
    if (policy_ != FullPolicy::kBlock) return try_publish_batch(items);
    producer_.check("SpscRing producer verb");
    std::size_t done = 0;
    while (done < items.size()) {
      const std::uint64_t t = tail_.load(std::memory_order_relaxed);
      std::size_t n = std::min(items.size() - done, free_slots_at(t, items.size() - done));
      if (n == 0) {
        if (!wait_for_space(t, 1, deadline, stop)) return done;
        n = std::min(items.size() - done, free_slots_at(t, items.size() - done));
      }
      push_many(t, items.subspan(done, n));
      done += n;
    }
    return done;
  }

  // Free slots as the producer sees them: a lower bound (the consumer can only add to it until
  // the producer publishes). Credits for a lane that must never drop (the job lane).
  // Producer thread; acquire-loads head_ (pairs with drain's release store).
  std::size_t free_slots() noexcept {
    producer_.check("SpscRing producer verb");
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    cached_head_ = head_.load(std::memory_order_acquire);
    return static_cast<std::size_t>(capacity_ - (t - cached_head_));
  }

  // Producer thread: this producer found the consumer waiting by a route other than a publish
  // (the engine's direct apply borrowed the waiting writer's token and applied the item itself).
  // An adaptive ring takes it as a publish that found a waiter: its count of quiet publishes
  // restarts, and a light ring leaves (its next publishes are symmetric). Without it, a ring whose
  // items mostly bypass it never saw a waiter again once it had gone light, and every park of its
  // consumer paid a membarrier (an IPI to each CPU running the process) for the life of the
  // ring. The ring need not be empty: leaving only changes how later publishes pair with a park.
  // Never waits; no allocation.
  void note_consumer_waiting() noexcept {
    producer_.check("SpscRing producer verb");
    quiet_ = 0;
    if (adaptive_ && light_) {
      light_ = false;
      bell_->leave_light();
    }
  }

  // ---- consumer thread ----

  // Applies up to `max_batch` (>= 1; 0 is taken as 1) items in publish order in one pass and
  // returns how many; 0 means empty (it never waits). `fn` is called either with std::span<T>
  // chunks (preferred when invocable so: once, or twice when the pass wraps past the last slot;
  // both chunks are one batch in the counters) or with T& per item. fn may move from the items;
  // they are destroyed after fn returns, and only then is their space released to the producer, so
  // an item being applied still counts in the occupancy. fn must be noexcept. Acquire-loads tail_
  // (pairs with the producer's release store); release-stores head_.
  template <class Fn>
  std::size_t drain(std::size_t max_batch, Fn&& fn) noexcept {
    constexpr bool kSpan = std::is_invocable_v<Fn&, std::span<T>>;
    static_assert(kSpan ? std::is_nothrow_invocable_v<Fn&, std::span<T>>
                        : std::is_nothrow_invocable_v<Fn&, T&>,
                  "drain's fn takes std::span<T> or T& and must be noexcept: a throw mid-batch "
                  "would leave slots half applied");
    consumer_.check("SpscRing consumer verb");
    const std::uint64_t h = head_.load(std::memory_order_relaxed);  // our own sequence
    if (cached_tail_ == h) {
      cached_tail_ = tail_.load(std::memory_order_acquire);  // pairs with push_*'s release
      if (cached_tail_ == h) return 0;
    }
    const std::size_t n = static_cast<std::size_t>(
        std::min<std::uint64_t>(cached_tail_ - h, max_batch == 0 ? 1 : max_batch));
    const std::size_t first = static_cast<std::size_t>(h & mask_);
    const std::size_t run = std::min(n, static_cast<std::size_t>(capacity_) - first);
    if constexpr (kSpan) {
      fn(std::span<T>(slots_ + first, run));
      if (run < n) fn(std::span<T>(slots_, n - run));
    } else {
      for (std::size_t i = 0; i < run; ++i) fn(slots_[first + i]);
      for (std::size_t i = 0; i < n - run; ++i) fn(slots_[i]);
    }
    std::destroy_n(slots_ + first, run);
    std::destroy_n(slots_, n - run);
    // release: the producer that acquire-loads this head sees the slots destroyed before it
    // constructs into them. Under block, seq_cst: the store half of the parked-producer
    // handshake (wait_for_space).
    if (policy_ == FullPolicy::kBlock) {
      head_.store(h + n, std::memory_order_seq_cst);
      wake_blocked_producer();
    } else {
      head_.store(h + n, std::memory_order_release);
    }
    count_batch(n);
    return n;
  }

  // True iff a drain would find an item. Consumer thread (or its doorbell predicate). The tail_
  // load acquires the producer's store and is seq_cst: the load half of the doorbell's Dekker
  // pair (a plain load on x86, ldar on ARM, so polling it costs nothing extra).
  bool has_work() const noexcept {
    return tail_.load(std::memory_order_seq_cst) != head_.load(std::memory_order_relaxed);
  }

  // Takes (reads and clears) the flush-pending flag: true once per run of flush-policy
  // refusals. Call after a drain; on true the writer drops every row of its table (a refused
  // message cost a refill, never a stale read). Consumer thread; the relaxed pre-check keeps
  // the common case off the producer's line; the exchange's acquire pairs with refuse()'s
  // release store.
  bool take_flush_pending() noexcept {
    consumer_.check("SpscRing consumer verb");
    if (!flush_pending_.load(std::memory_order_relaxed)) return false;
    return flush_pending_.exchange(false, std::memory_order_acquire);
  }

  // True while a flush-policy refusal's flag waits to be taken: work for the consumer's doorbell
  // predicate beside has_work() (refuse() notifies the doorbell when it raises the flag). Any
  // thread; acquire, so a consumer that sees it also sees the refusal's counters.
  bool flush_pending() const noexcept { return flush_pending_.load(std::memory_order_acquire); }

  // Waits for this ring alone until it has work or a flush to take, `deadline`, or `stop` (see
  // Doorbell). Consumer thread; blocks (spin budget, then the doorbell's strategy).
  WaitVerdict wait_for_work(Clock::time_point deadline = Clock::time_point::max(),
                            std::stop_token stop = {}) {
    return bell_->wait_until([this]() noexcept { return has_work() || flush_pending(); }, deadline,
                             std::move(stop));
  }

  // The doorbell this ring rings (its own, or the one it was built with).
  Doorbell& doorbell() const noexcept { return *bell_; }

  // ---- any thread ----

  std::size_t capacity() const noexcept { return static_cast<std::size_t>(capacity_); }
  FullPolicy full_policy() const noexcept { return policy_; }

  // tail - head, racy when read by a third thread: each load is acquire and head is read first,
  // so the answer never underflows; clamped to capacity.
  std::size_t occupancy_approx() const noexcept {
    const std::uint64_t h = head_.load(std::memory_order_acquire);
    const std::uint64_t t = tail_.load(std::memory_order_acquire);
    return static_cast<std::size_t>(std::min<std::uint64_t>(t - h, capacity_));
  }

  // Every counter, relaxed loads (each exact, the set not one instant), except the one pair a
  // difference is taken of: applied (head) and published (tail) are read once, head first, each
  // acquire, as occupancy_approx reads them, and occupancy is their difference (clamped to
  // capacity). So applied <= published and occupancy = min(published - applied, capacity) in
  // every answer; separate loads let a drain land in between and exported applied > published.
  RingStats stats() const noexcept {
    RingStats s;
    s.capacity = capacity_;
    s.applied = head_.load(std::memory_order_acquire);
    s.published = tail_.load(std::memory_order_acquire);
    s.occupancy = std::min<std::uint64_t>(s.published - s.applied, capacity_);
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.wakes = wakes_.load(std::memory_order_relaxed);
    s.stalls = stalls_.load(std::memory_order_relaxed);
    s.flush_pending = flush_pending_.load(std::memory_order_relaxed);
    s.barrier_fallbacks = bell_->barrier_fallbacks();
    s.max_batch = max_batch_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < kHistogramBuckets; ++i) {
      s.batch_histogram[i] = histogram_[i].load(std::memory_order_relaxed);
      s.batches += s.batch_histogram[i];
    }
    return s;
  }

 private:
  SpscRing(const RingConfig& config, Doorbell* bell)
      : capacity_((validate(config), config.capacity)),
        mask_(config.capacity - 1),
        policy_(config.full_policy),
        producer_wait_(config.producer_wait),
        own_bell_(bell ? nullptr : std::make_unique<Doorbell>(config.consumer_wait)),
        bell_(bell ? bell : own_bell_.get()),
        parks_(bell_->parks()),
        adaptive_(parks_ && bell_->adaptive_rings()),
        slots_(static_cast<T*>(::operator new(sizeof(T) * config.capacity, kSlotAlign))) {
    light_ = parks_ && !adaptive_ && bell_->attach_ring();
  }

  // The slot array starts on a cache line, whatever alignof(T): a line-sized item (the engine's
  // 64-byte CoherenceItem, alignof 8) then fills one line instead of straddling two, so a drain
  // or a publish of one item touches one line. glibc's malloc put such an array 16 bytes past a
  // line (spsc_ring_test's SlotsOfLineSizedItemsEachStartOnACacheLine).
  static constexpr std::align_val_t kSlotAlign{std::max(alignof(T), base::kCacheLine)};

  T* slot(std::uint64_t seq) const noexcept { return slots_ + (seq & mask_); }

  // Free slots for a producer at tail `t` wanting `want`; refreshes the cached head only when
  // the cache says there is not enough (the steady state reads no consumer line).
  std::size_t free_slots_at(std::uint64_t t, std::size_t want) noexcept {
    std::uint64_t free = capacity_ - (t - cached_head_);
    if (free < want) {
      cached_head_ = head_.load(std::memory_order_acquire);  // pairs with drain's release
      free = capacity_ - (t - cached_head_);
    }
    return static_cast<std::size_t>(free);
  }
  bool has_space(std::uint64_t t, std::size_t want) noexcept {
    return free_slots_at(t, want) >= want;
  }

  void push_one(std::uint64_t t, T&& item) noexcept {
    std::construct_at(slot(t), std::move(item));
    publish_tail(t, t + 1);
  }

  void push_many(std::uint64_t t, std::span<T> items) noexcept {
    if (items.empty()) return;
    const std::size_t first = static_cast<std::size_t>(t & mask_);
    const std::size_t run = std::min(items.size(), static_cast<std::size_t>(capacity_) - first);
    if constexpr (std::is_trivially_copyable_v<T>) {
      // Two block copies (the second only when the batch wraps): what lets a batch of small
      // items cost less per item than boost's push(const T*, n) (BM_SpscRing_ThroughputBatched).
      std::memcpy(static_cast<void*>(slots_ + first), items.data(), run * sizeof(T));
      std::memcpy(static_cast<void*>(slots_), items.data() + run, (items.size() - run) * sizeof(T));
    } else {
      for (std::size_t i = 0; i < run; ++i)
        std::construct_at(slots_ + first + i, std::move(items[i]));
      for (std::size_t i = run; i < items.size(); ++i) {
        std::construct_at(slots_ + (i - run), std::move(items[i]));
      }
    }
    publish_tail(t, t + items.size());
  }

  // Makes slots [old_tail, new_tail) visible, then the edge-triggered wake. The store releases
  // the slots (pairs with drain's and has_work's loads of tail_). Toward a parking doorbell it
  // is seq_cst, the store half of the Dekker pair whose load half is has_waiters(), or, while
  // this ring publishes light, release plus a compiler barrier (see doorbell.h); only then may
  // a consumer be asleep, and only a ring that was empty when the consumer announced it would
  // park (head_ == old_tail) signals. An adaptive ring (the default park doorbell) switches
  // between the two by itself (doorbell.h, Adaptive mode): light after Doorbell::kLightAfter
  // symmetric publishes in a row found no waiter, symmetric again from the light publish that
  // finds one. Why: the seq_cst store waits for the tail line, which a polling consumer takes
  // back after every item, so under continuous 1-item traffic it cost ~120 ns a publish
  // (ring_bench's BM_SpscRing_ThroughputSeqCst against BM_SpscRing_Throughput/strategy:2).
  //
  // Only the three common outcomes are inline (no doorbell; light, no waiter; symmetric, no
  // waiter); what follows a waiter or a switch is out of line, so try_publish stays small enough
  // for a caller to inline. Called, it cost the 1-item path ~25% on one CPU (a copy of echostore
  // bench's ring_vs_rwq under taskset -c 0: 377-388 M/s called, 475-518 inlined), where no line
  // crosses between cores and the instructions are the whole cost.
  void publish_tail(std::uint64_t old_tail, std::uint64_t new_tail) noexcept {
    if (!parks_) {
      tail_.store(new_tail, std::memory_order_release);
      return;
    }
    if (light_) {
      // The consumer's membarrier stands in for the store-load fence (doorbell.h).
      tail_.store(new_tail, std::memory_order_release);
      const Doorbell::Light seen = bell_->waiters_light();
      if (seen != Doorbell::Light::kNoWaiter) [[unlikely]]
        light_saw_waiter(old_tail, seen);
      return;
    }
    tail_.store(new_tail, std::memory_order_seq_cst);
    if (!bell_->has_waiters()) [[likely]] {
      // Adaptive: kLightAfter publishes in a row found the consumer awake: go light.
      if (adaptive_ && ++quiet_ >= Doorbell::kLightAfter) [[unlikely]]
        go_light();
      return;
    }
    quiet_ = 0;
    signal_on_edge(old_tail);
  }

  // publish_tail, light, after its waiters_light() load found a waiter or kFallenBack.
  [[gnu::noinline]] void light_saw_waiter(std::uint64_t old_tail, Doorbell::Light seen) noexcept {
    if (seen == Doorbell::Light::kWaiter) {
      // Adaptive: the consumer parks, so traffic is not continuous: signal as a light publish
      // does, then leave (after the signal; the leave releases this tail to a park that reads
      // no light ring). Later publishes are symmetric until the consumer keeps up again
      // (Doorbell, Adaptive mode).
      if (adaptive_) {
        light_ = false;
        quiet_ = 0;
        const bool edge = head_.load(std::memory_order_acquire) == old_tail;
        bell_->leave_light();
        if (!edge) return;
        base::solo_add(wakes_, 1);
        bell_->signal();
        return;
      }
    } else {
      // kFallenBack: the consumer lost its barrier: this was the ring's last light publish.
      // Leaving releases its tail to the consumer's light_rings_ load (doorbell.h, Fallback);
      // the seq_cst load after the RMW then serves this publish as a symmetric one would.
      light_ = false;
      bell_->leave_light();
      if (!bell_->has_waiters()) return;
    }
    signal_on_edge(old_tail);
  }

  // publish_tail, symmetric, adaptive: attach is the A and B0 of Doorbell's Adaptive mode
  // (false once the consumer fell back).
  [[gnu::noinline]] void go_light() noexcept {
    quiet_ = 0;
    light_ = bell_->attach_ring();
  }

  // A publish whose seq_cst handshake found the consumer parked or parking: signal if the ring
  // was empty. acquire-ordered after has_waiters' load, which read the consumer's waiters_
  // increment, which follows its last head_ store: the head seen here is current.
  [[gnu::noinline]] void signal_on_edge(std::uint64_t old_tail) noexcept {
    if (head_.load(std::memory_order_acquire) != old_tail) return;
    base::solo_add(wakes_, 1);
    bell_->signal();
  }

  void refuse(std::size_t n) noexcept {
    switch (policy_) {
      case FullPolicy::kDrop:
        base::solo_add(dropped_, n);
        break;
      case FullPolicy::kFlush:
        base::solo_add(dropped_, n);
        // An exchange, not a check-then-store, which could lose a raise against the consumer's
        // take. release: pairs with take_flush_pending's acquire exchange. The raise rings the
        // doorbell (notify's protocol: the flag is the work): the ring was full when this
        // producer looked, but the consumer may have drained it, taken no flag and parked
        // before the store, and an empty ring signals nobody, so the flush (and the stale rows
        // it exists to drop) waited for the next message or the writer's sweep. A flag still
        // raised was rung for by the raise that set it.
        if (!flush_pending_.exchange(true, std::memory_order_release)) bell_->notify();
        break;
      case FullPolicy::kBlock:
        break;
    }
  }

  // Block policy: wait until `want` slots are free at tail `t` (true), or until `deadline`
  // passes or `stop` is requested (false). Producer thread.
  bool wait_for_space(std::uint64_t t, std::size_t want, Clock::time_point deadline,
                      const std::stop_token& stop) noexcept {
    base::solo_add(stalls_, 1);
    for (std::uint32_t i = 0; i < producer_wait_.spin_budget; ++i) {
      cpu_relax();
      if (has_space(t, want)) return true;
    }
    const bool timed = deadline != Clock::time_point::max();
    if (producer_wait_.strategy != WaitStrategy::kPark) {
      for (std::uint32_t i = 0;; ++i) {
        if (has_space(t, want)) return true;
        if (stop.stop_requested()) return false;
        // Reading the clock costs ~20 ns; the spin checks it every 64 polls.
        if (timed && (producer_wait_.strategy == WaitStrategy::kYield || (i & 63) == 0) &&
            Clock::now() >= deadline) {
          return false;
        }
        if (producer_wait_.strategy == WaitStrategy::kYield) {
          std::this_thread::yield();
        } else {
          cpu_relax();
        }
      }
    }
    // A stop request bumps the wake word, so a parked producer sees it without a drain.
    std::stop_callback on_stop(stop, [this]() noexcept { ring_producer_wake(); });
    for (;;) {
      // Dekker pair with wake_blocked_producer: take the wake word's key, announce (seq_cst
      // store), re-check head_ (seq_cst load), sleep while the word still equals the key; the
      // drain stores head_ seq_cst, then loads the flag seq_cst and bumps the word. Either the
      // re-check sees the drain's head, or the drain sees the flag and its bump (after the key
      // load, which precedes the announce it read) makes the futex return. The stop callback
      // bumps the word likewise; a key load that reads its bump acquires it, so the
      // stop_requested() below sees the request.
      const std::uint32_t key = producer_wake_.load(std::memory_order_seq_cst);
      producer_parked_.store(1, std::memory_order_seq_cst);
      cached_head_ = head_.load(std::memory_order_seq_cst);
      if (capacity_ - (t - cached_head_) >= want) {
        producer_parked_.store(0, std::memory_order_relaxed);
        return true;
      }
      if (stop.stop_requested() || (timed && Clock::now() >= deadline)) {
        producer_parked_.store(0, std::memory_order_relaxed);
        return false;
      }
      detail::futex_wait(producer_wake_, key, deadline);
    }
  }

  // Consumer side of the block policy's Dekker pair, after drain's seq_cst head_ store: wake a
  // producer that announced it would park. Clearing the flag spares the next drains the syscall
  // (a producer that parks again announces again).
  void wake_blocked_producer() noexcept {
    if (producer_parked_.load(std::memory_order_seq_cst) == 0) return;
    producer_parked_.store(0, std::memory_order_relaxed);
    ring_producer_wake();
  }

  // Bumps the block-policy producer's wake word and wakes it: the consumer (a drain freed room)
  // or the thread requesting a publish's stop. seq_cst RMW: see wait_for_space.
  void ring_producer_wake() noexcept {
    producer_wake_.fetch_add(1, std::memory_order_seq_cst);
    detail::futex_wake(producer_wake_, 1);
  }

  // published and applied are tail_ and head_ themselves, and batches is the histogram's sum:
  // a pass costs one histogram bump and one compare.
  void count_batch(std::size_t n) noexcept {
    if (n > max_batch_.load(std::memory_order_relaxed)) {
      max_batch_.store(n, std::memory_order_relaxed);
    }
    base::solo_add(histogram_[histogram_bucket(n)], 1);
  }

  // Read-only after construction: shared by both sides without contention.
  const std::uint64_t capacity_;
  const std::uint64_t mask_;
  const FullPolicy policy_;
  const WaitConfig producer_wait_;
  std::unique_ptr<Doorbell> own_bell_;
  Doorbell* const bell_;
  const bool parks_;  // bell_->parks(), cached: read on every publish
  // bell_->adaptive_rings(), cached: this ring goes light and back by itself (Doorbell, Adaptive
  // mode); false for an asymmetric doorbell, whose rings attach at construction for good.
  const bool adaptive_;
  T* const slots_;

  // Producer-written, consumer-read: the tail and the producer's counters share one line
  // because the producer writes them together.
  alignas(base::kCacheLine) std::atomic<std::uint64_t> tail_{0};
  std::atomic<bool> flush_pending_{false};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> wakes_{0};
  std::atomic<std::uint64_t> stalls_{0};

  // Producer-private: its cached copy of head_, whether it publishes light (set at construction
  // by Doorbell::attach_ring, cleared for good when it sees the doorbell fell back), and its
  // owner check.
  alignas(base::kCacheLine) std::uint64_t cached_head_ = 0;
  bool light_ = false;
  std::uint32_t quiet_ = 0;  // adaptive: symmetric publishes in a row that found no waiter
  [[no_unique_address]] detail::OwnerCheck producer_;

  // Consumer-written, producer-read: the head and the consumer's counters.
  alignas(base::kCacheLine) std::atomic<std::uint64_t> head_{0};
  std::atomic<std::uint64_t> max_batch_{0};

  // Consumer-private.
  alignas(base::kCacheLine) std::uint64_t cached_tail_ = 0;
  [[no_unique_address]] detail::OwnerCheck consumer_;

  // Consumer-written, read only by stats(): kept off the head_ line the producer polls.
  alignas(base::kCacheLine) std::array<std::atomic<std::uint64_t>, kHistogramBuckets> histogram_{};

  // Block policy: 1 while the producer is parked or about to park; the word it sleeps on, bumped
  // by each wake (a drain's or a stop request's).
  alignas(base::kCacheLine) std::atomic<std::uint32_t> producer_parked_{0};
  std::atomic<std::uint32_t> producer_wake_{0};

  static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                "free-running 64-bit sequences must be lock-free atomics on this target");
};

}  // namespace echo::ring
