// SPDX-License-Identifier: MIT
// Unit tests of echo::ring::SpscRing and Doorbell: configuration, FIFO order, batches, counters,
// the three full policies, item lifetimes, the edge-triggered wake, and gates G1-G4
// with the original's exact counts.
#include <echo/base/cache_line.h>
#include <echo/ring/doorbell.h>
#include <echo/ring/spsc_ring.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace {

using echo::ring::Doorbell;
using echo::ring::FullPolicy;
using echo::ring::RingConfig;
using echo::ring::RingStats;
using echo::ring::SpscRing;
using echo::ring::WaitConfig;
using echo::ring::WaitStrategy;
using echo::ring::WaitVerdict;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Move-only, owns heap memory (ASan/LSan see a leak or a double free), and counts the live
// objects so a test can assert that every constructed item was destroyed exactly once.
struct Tracked {
  static inline std::atomic<long> live{0};
  std::unique_ptr<std::uint64_t> value;

  explicit Tracked(std::uint64_t v) : value(std::make_unique<std::uint64_t>(v)) { ++live; }
  Tracked(Tracked&& other) noexcept : value(std::move(other.value)) { ++live; }
  Tracked& operator=(Tracked&&) = delete;
  ~Tracked() { --live; }
  std::uint64_t get() const { return value ? *value : ~std::uint64_t{0}; }
};

RingConfig config(std::size_t capacity, FullPolicy policy = FullPolicy::kDrop,
                  WaitConfig consumer = {}) {
  RingConfig c;
  c.capacity = capacity;
  c.full_policy = policy;
  c.consumer_wait = consumer;
  return c;
}

// Polls `done` for up to `limit`; true if it became true.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = 10s) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// A consumer thread that drains `ring` in batches of at most `max_batch` with `apply` and waits
// on the ring's doorbell in between, until stopped (then it drains what is left).
template <class T, class Apply>
std::jthread start_consumer(SpscRing<T>& ring, std::size_t max_batch, Apply apply) {
  return std::jthread([&ring, max_batch, apply](std::stop_token stop) mutable {
    for (;;) {
      if (ring.drain(max_batch, apply) != 0) continue;
      if (ring.wait_for_work(Clock::time_point::max(), stop) == WaitVerdict::kStopped) break;
    }
    while (ring.drain(max_batch, apply) != 0) {
    }
  });
}

TEST(SpscRing, CapacityMustBeAPowerOfTwoAtLeastTwo) {
  for (std::size_t bad : {0u, 1u, 3u, 6u, 100u, 4095u}) {
    try {
      SpscRing<int> ring(config(bad));
      FAIL() << "capacity " << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "ring_capacity must be a power of two >= 2, got " + std::to_string(bad));
    }
  }
  EXPECT_THROW(SpscRing<int>(config(std::size_t{1} << 31)), std::invalid_argument);
  for (std::size_t good : {2u, 4u, 64u, 4096u}) {
    SpscRing<int> ring(config(good));
    EXPECT_EQ(ring.capacity(), good);
  }
}

// G1: a new ring reports its capacity and occupancy 0.
TEST(SpscRing, G1NewRingIsEmptyAndReportsItsCapacity) {
  SpscRing<Tracked> ring(config(512));
  const auto s = ring.stats();
  EXPECT_EQ(ring.capacity(), 512u);
  EXPECT_EQ(s.capacity, 512u);
  EXPECT_EQ(ring.occupancy_approx(), 0u);
  EXPECT_EQ(s.occupancy, 0u);
  EXPECT_EQ(s.published + s.applied + s.dropped + s.wakes + s.batches + s.max_batch + s.stalls, 0u);
  EXPECT_FALSE(ring.has_work());
  EXPECT_EQ(ring.drain(16, [](Tracked&) noexcept {}), 0u);
}

TEST(SpscRing, DrainReturnsItemsInPublishOrderAcrossWraps) {
  SpscRing<Tracked> ring(config(8));
  std::uint64_t next_in = 0;
  std::uint64_t next_out = 0;
  bool in_order = true;
  for (int round = 0; round < 100; ++round) {
    const int burst = 1 + round % 8;
    for (int i = 0; i < burst; ++i) ASSERT_TRUE(ring.try_publish(Tracked(next_in++)));
    while (ring.drain(1 + round % 5, [&](Tracked& t) noexcept {
      in_order = in_order && t.get() == next_out;
      ++next_out;
    }) != 0) {
    }
  }
  EXPECT_TRUE(in_order);
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(ring.occupancy_approx(), 0u);
}

TEST(SpscRing, TryPublishFailsWhenFullAndLeavesTheItemWithTheCaller) {
  SpscRing<Tracked> ring(config(4));
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(ring.try_publish(Tracked(i)));
  Tracked extra(99);
  EXPECT_FALSE(ring.try_publish(std::move(extra)));
  EXPECT_EQ(extra.get(), 99u) << "a refused item must not be moved from";
  EXPECT_EQ(ring.occupancy_approx(), 4u);
  EXPECT_EQ(ring.stats().dropped, 1u);
  EXPECT_EQ(ring.stats().published, 4u);
  EXPECT_EQ(ring.drain(1, [](Tracked&) noexcept {}), 1u);
  EXPECT_TRUE(ring.try_publish(std::move(extra))) << "one drained slot makes room for one";
}

TEST(SpscRing, TryPublishBatchAcceptsThePrefixThatFits) {
  SpscRing<Tracked> ring(config(8));
  std::vector<Tracked> items;
  for (std::uint64_t i = 0; i < 10; ++i) items.emplace_back(i);
  EXPECT_EQ(ring.try_publish_batch(std::span<Tracked>(items)), 8u);
  EXPECT_EQ(items[8].get(), 8u);
  EXPECT_EQ(items[9].get(), 9u);
  const auto s = ring.stats();
  EXPECT_EQ(s.published, 8u);
  EXPECT_EQ(s.dropped, 2u);
  std::vector<std::uint64_t> out;
  ring.drain(100, [&](Tracked& t) noexcept { out.push_back(t.get()); });
  EXPECT_EQ(out, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// Batches that straddle the last slot, for a trivially copyable item (block copies) and a
// tracked one (moves), in every phase of an 8-slot ring.
template <class T, class Make, class Get>
void check_batches_across_the_wrap(Make make, Get get) {
  SpscRing<T> ring(config(8));
  std::uint64_t next_in = 0;
  std::uint64_t next_out = 0;
  bool in_order = true;
  for (int round = 0; round < 40; ++round) {
    std::vector<T> batch;
    const int n = 1 + (round * 3) % 8;
    for (int i = 0; i < n; ++i) batch.push_back(make(next_in++));
    ASSERT_EQ(ring.try_publish_batch(std::span<T>(batch)), static_cast<std::size_t>(n));
    ring.drain(8, [&](T& v) noexcept {
      in_order = in_order && get(v) == next_out;
      ++next_out;
    });
  }
  EXPECT_TRUE(in_order);
  EXPECT_EQ(next_out, next_in);
}

TEST(SpscRing, BatchPublishWrapsPastTheLastSlotInOrder) {
  check_batches_across_the_wrap<std::uint64_t>([](std::uint64_t v) { return v; },
                                               [](std::uint64_t v) { return v; });
  const long before = Tracked::live.load();
  check_batches_across_the_wrap<Tracked>([](std::uint64_t v) { return Tracked(v); },
                                         [](const Tracked& t) { return t.get(); });
  EXPECT_EQ(Tracked::live.load(), before);
}

TEST(SpscRing, DrainCapsEachPassAtMaxBatch) {
  SpscRing<int> ring(config(16));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
  std::vector<std::size_t> passes;
  for (std::size_t n; (n = ring.drain(3, [](int&) noexcept {})) != 0;) passes.push_back(n);
  EXPECT_EQ(passes, (std::vector<std::size_t>{3, 3, 3, 1}));
  const auto s = ring.stats();
  EXPECT_EQ(s.batches, 4u);
  EXPECT_EQ(s.max_batch, 3u);
  EXPECT_EQ(s.applied, 10u);
}

TEST(SpscRing, SpanDrainSplitsAtTheWrapButCountsOneBatch) {
  SpscRing<int> ring(config(8));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
  ASSERT_EQ(ring.drain(6, [](std::span<int>) noexcept {}), 6u);        // head = tail = 6
  for (int i = 6; i < 12; ++i) ASSERT_TRUE(ring.try_publish(int{i}));  // slots 6,7,0,1,2,3
  std::vector<std::vector<int>> chunks;
  EXPECT_EQ(
      ring.drain(8, [&](std::span<int> c) noexcept { chunks.emplace_back(c.begin(), c.end()); }),
      6u);
  EXPECT_EQ(chunks, (std::vector<std::vector<int>>{{6, 7}, {8, 9, 10, 11}}));
  EXPECT_EQ(ring.stats().batches, 2u);
}

TEST(SpscRing, HistogramCountsBatchesInPowerOfTwoBuckets) {
  SpscRing<int> ring(config(64));
  auto pass = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
    ASSERT_EQ(ring.drain(64, [](int&) noexcept {}), static_cast<std::size_t>(n));
  };
  for (int n : {1, 1, 2, 3, 4, 7, 8, 33, 64}) pass(n);
  const auto s = ring.stats();
  EXPECT_EQ(s.batch_histogram[0], 2u);  // 1, 1
  EXPECT_EQ(s.batch_histogram[1], 2u);  // 2, 3
  EXPECT_EQ(s.batch_histogram[2], 2u);  // 4, 7
  EXPECT_EQ(s.batch_histogram[3], 1u);  // 8
  EXPECT_EQ(s.batch_histogram[4], 0u);
  EXPECT_EQ(s.batch_histogram[5], 1u);  // 33
  EXPECT_EQ(s.batch_histogram[6], 1u);  // 64
  EXPECT_EQ(s.batches, 9u);
  EXPECT_EQ(s.max_batch, 64u);
  EXPECT_EQ(s.applied, 123u);
  EXPECT_EQ(s.published, 123u);
  EXPECT_EQ(echo::ring::histogram_bucket(std::size_t{1} << 40), echo::ring::kHistogramBuckets - 1);
}

TEST(SpscRing, DropPolicyCountsRefusalsAndNeverOverwrites) {
  SpscRing<int> ring(config(4, FullPolicy::kDrop));
  for (int i = 0; i < 10; ++i) (void)ring.publish(int{i});
  const auto s = ring.stats();
  EXPECT_EQ(s.published, 4u);
  EXPECT_EQ(s.dropped, 6u);
  EXPECT_FALSE(s.flush_pending);
  std::vector<int> out;
  ring.drain(8, [&](int& v) noexcept { out.push_back(v); });
  EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 3}));
}

TEST(SpscRing, FlushPolicyRaisesAStickyFlagTakenOnce) {
  SpscRing<int> ring(config(2, FullPolicy::kFlush));
  EXPECT_FALSE(ring.take_flush_pending());
  ASSERT_TRUE(ring.publish(1));
  ASSERT_TRUE(ring.publish(2));
  EXPECT_FALSE(ring.publish(3));
  EXPECT_FALSE(ring.publish(4));
  EXPECT_TRUE(ring.stats().flush_pending);
  EXPECT_EQ(ring.stats().dropped, 2u);
  EXPECT_EQ(ring.drain(8, [](int&) noexcept {}), 2u);
  EXPECT_TRUE(ring.take_flush_pending()) << "the writer learns of the refusals after draining";
  EXPECT_FALSE(ring.take_flush_pending()) << "the flag is taken once";
  EXPECT_FALSE(ring.stats().flush_pending);
  ASSERT_TRUE(ring.publish(5));
  EXPECT_FALSE(ring.take_flush_pending()) << "an accepted publish raises nothing";
}

// A flush-policy refusal is work for the consumer: it rings the doorbell. The consumer may have
// drained the full ring the producer saw and parked before the flag was raised; then no item
// ever signals it, and the flush (the drop of the rows the refused message made stale) waited for
// the next message or the writer's sweep deadline. Staged deterministically here: the consumer
// parks on the ring's doorbell waiting for the flag alone (the ring is full, so it cannot wait on
// has_work), and a refusal must wake it, in each wait strategy's parked state.
TEST(SpscRing, AFlushRefusalWakesAParkedConsumer) {
  for (bool asymmetric : {true, false}) {
    SpscRing<int> ring(
        config(2, FullPolicy::kFlush, WaitConfig{WaitStrategy::kPark, 0, asymmetric}));
    ASSERT_TRUE(ring.publish(1));
    ASSERT_TRUE(ring.publish(2));
    std::atomic<int> verdict{-1};
    std::jthread consumer([&] {
      // stats(): any thread, as the predicate's thread needs (flush_pending() is the same load).
      const auto v = ring.doorbell().wait_until(
          [&]() noexcept { return ring.stats().flush_pending; }, Clock::now() + 10s);
      verdict = static_cast<int>(v);
    });
    ASSERT_TRUE(eventually([&] { return ring.doorbell().parks_count() >= 1; }));
    const auto t0 = Clock::now();
    EXPECT_FALSE(ring.publish(3));  // refused: raises the flag
    ASSERT_TRUE(eventually([&] { return verdict.load() >= 0; }, 15s));
    EXPECT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kWork)) << "asymmetric " << asymmetric;
    EXPECT_LT(Clock::now() - t0, 5s) << "the consumer slept to its deadline through the refusal";
    EXPECT_TRUE(ring.stats().flush_pending);
    consumer.join();
    EXPECT_EQ(ring.drain(8, [](int&) noexcept {}), 2u);
    EXPECT_TRUE(ring.take_flush_pending());
    EXPECT_FALSE(ring.stats().flush_pending);
  }
}

TEST(SpscRing, BlockPolicyTryPublishRefusesWithoutCounting) {
  SpscRing<int> ring(config(2, FullPolicy::kBlock));
  ASSERT_TRUE(ring.try_publish(1));
  ASSERT_TRUE(ring.try_publish(2));
  EXPECT_FALSE(ring.try_publish(3));
  std::vector<int> three{3, 4};
  EXPECT_EQ(ring.try_publish_batch(std::span<int>(three)), 0u);
  const auto s = ring.stats();
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.stalls, 0u);
  EXPECT_FALSE(s.flush_pending);
}

TEST(SpscRing, BlockPolicyPublishWaitsForSpaceAndCountsTheStall) {
  for (WaitStrategy strategy : {WaitStrategy::kSpin, WaitStrategy::kYield, WaitStrategy::kPark}) {
    RingConfig c = config(4, FullPolicy::kBlock);
    c.producer_wait = {strategy, 16};
    SpscRing<int> ring(c);
    std::atomic<bool> published{false};
    std::jthread producer([&] {
      for (int i = 0; i < 4; ++i) (void)ring.publish(int{i});
      (void)ring.publish(4);  // the ring is full: waits for the drain below
      published.store(true, std::memory_order_release);
    });
    ASSERT_TRUE(eventually([&] { return ring.occupancy_approx() == 4; }));
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(published.load(std::memory_order_acquire)) << to_string(strategy);
    std::vector<int> out;
    ASSERT_EQ(ring.drain(1, [&](int& v) noexcept { out.push_back(v); }), 1u);
    ASSERT_TRUE(eventually([&] { return published.load(std::memory_order_acquire); }))
        << "a blocked " << to_string(strategy) << " producer was never released";
    producer.join();
    while (ring.drain(8, [&](int& v) noexcept { out.push_back(v); }) != 0) {
    }
    EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_EQ(ring.stats().stalls, 1u);
    EXPECT_EQ(ring.stats().dropped, 0u);
  }
}

// A block-policy producer is not stuck for good when nothing drains: a deadline returns false
// (the item stays with the caller, uncounted as dropped), and publish_batch returns the prefix it
// published. Every producer strategy, including the parked one.
TEST(SpscRing, BlockPolicyPublishGivesUpAtItsDeadline) {
  for (WaitStrategy strategy : {WaitStrategy::kSpin, WaitStrategy::kYield, WaitStrategy::kPark}) {
    RingConfig c = config(4, FullPolicy::kBlock);
    c.producer_wait = {strategy, 16};
    SpscRing<Tracked> ring(c);
    std::vector<Tracked> batch;
    for (std::uint64_t i = 0; i < 6; ++i) batch.emplace_back(i);
    const auto t0 = Clock::now();
    EXPECT_EQ(ring.publish_batch(std::span<Tracked>(batch), t0 + 30ms), 4u) << to_string(strategy);
    EXPECT_GE(Clock::now() - t0, 30ms);
    EXPECT_EQ(batch[4].get(), 4u) << "the refused suffix stays with the caller";
    Tracked extra(99);
    const auto t1 = Clock::now();
    EXPECT_FALSE(ring.publish(std::move(extra), t1 + 30ms)) << to_string(strategy);
    EXPECT_GE(Clock::now() - t1, 30ms);
    EXPECT_EQ(extra.get(), 99u) << "a refused item must not be moved from";
    const auto s = ring.stats();
    EXPECT_EQ(s.published, 4u);
    EXPECT_EQ(s.dropped, 0u);
    EXPECT_EQ(s.stalls, 2u);
    ASSERT_EQ(ring.drain(1, [](Tracked&) noexcept {}), 1u);
    EXPECT_TRUE(ring.publish(std::move(extra), Clock::now() + 30ms)) << "room: no wait";
  }
}

// A stop request releases a producer blocked on a full ring (waking it from its futex when it
// parks), for publish and for publish_batch; a token already stopped never waits.
TEST(SpscRing, BlockPolicyPublishIsReleasedByAStopRequest) {
  for (WaitStrategy strategy : {WaitStrategy::kSpin, WaitStrategy::kYield, WaitStrategy::kPark}) {
    for (bool batch : {false, true}) {
      RingConfig c = config(4, FullPolicy::kBlock);
      c.producer_wait = {strategy, 16};
      SpscRing<int> ring(c);
      std::stop_source stop;
      std::atomic<long> result{-1};
      std::atomic<int> again{-1};  // a publish with the token already stopped, on the same thread
      std::jthread producer([&] {
        for (int i = 0; i < 4; ++i) (void)ring.publish(int{i});
        if (batch) {
          std::vector<int> more{4, 5};
          result = static_cast<long>(
              ring.publish_batch(std::span<int>(more), Clock::time_point::max(), stop.get_token()));
        } else {
          result = ring.publish(4, Clock::time_point::max(), stop.get_token()) ? 1 : 0;
        }
        // The ring has one producer thread (Debug builds abort on a second): this one.
        if (stop.stop_requested()) {
          again = ring.publish(9, Clock::time_point::max(), stop.get_token()) ? 1 : 0;
        }
      });
      ASSERT_TRUE(eventually([&] { return ring.stats().stalls == 1; }));
      std::this_thread::sleep_for(20ms);  // time to reach the futex under park
      EXPECT_EQ(result.load(), -1) << to_string(strategy) << ": returned with the ring full";
      stop.request_stop();
      const bool released = eventually([&] { return result.load() >= 0; });
      EXPECT_TRUE(released) << "a blocked " << to_string(strategy)
                            << " producer ignored the stop request";
      if (!released) (void)ring.drain(8, [](int&) noexcept {});  // free it: the test must end
      producer.join();
      if (!released) continue;
      EXPECT_EQ(result.load(), 0);
      EXPECT_EQ(ring.stats().published, 4u);
      EXPECT_EQ(ring.stats().dropped, 0u);
      EXPECT_EQ(again.load(), 0) << "a stopped token never waits";
      EXPECT_EQ(ring.stats().stalls, 2u);
    }
  }
}

TEST(SpscRing, BlockPolicyPublishBatchDeliversEveryItem) {
  RingConfig c = config(4, FullPolicy::kBlock);
  c.producer_wait = {WaitStrategy::kPark, 8};
  SpscRing<int> ring(c);
  std::vector<int> in(1000);
  for (int i = 0; i < 1000; ++i) in[static_cast<std::size_t>(i)] = i;
  std::vector<int> out;
  {
    auto consumer = start_consumer(ring, 3, [&](int& v) noexcept { out.push_back(v); });
    EXPECT_EQ(ring.publish_batch(std::span<int>(in)), 1000u);
  }
  EXPECT_EQ(out, in);
  EXPECT_EQ(ring.stats().dropped, 0u);
}

TEST(SpscRing, EveryTrackedItemIsDestroyedExactlyOnce) {
  const long before = Tracked::live.load();
  {
    SpscRing<Tracked> ring(config(8));
    for (std::uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(ring.try_publish(Tracked(i)));
    std::vector<Tracked> kept;
    ring.drain(2, [&](Tracked& t) noexcept { kept.push_back(std::move(t)); });  // moved out
    ring.drain(2, [](std::span<Tracked>) noexcept {});                          // applied in place
    EXPECT_EQ(Tracked::live.load() - before, 2 + 2) << "two kept, two still in the ring";
    std::vector<Tracked> batch;
    for (std::uint64_t i = 0; i < 12; ++i) batch.emplace_back(i);
    EXPECT_EQ(ring.try_publish_batch(std::span<Tracked>(batch)), 6u);
  }  // the ring dies holding 8 items; `batch` and `kept` die after it
  EXPECT_EQ(Tracked::live.load(), before);
}

// An item of one cache line with only 8-byte alignment, as the engine's CoherenceItem is.
struct LineItem {
  std::uint64_t words[8];
};
static_assert(sizeof(LineItem) == echo::base::kCacheLine && alignof(LineItem) == 8);

TEST(SpscRing, SlotsOfLineSizedItemsEachStartOnACacheLine) {
  // Every capacity, so the check does not pass by the allocator's luck at one size (glibc's
  // malloc hands out 16 bytes past a line for a size it maps, 128 KiB up).
  for (std::size_t capacity = 2; capacity <= (std::size_t{1} << 16); capacity *= 2) {
    SpscRing<LineItem> ring(config(capacity));
    ASSERT_TRUE(ring.try_publish(LineItem{}));
    std::uintptr_t first = 1;
    // The first item ever published is in the first slot: its address is the slot array's.
    ring.drain(1, [&first](std::span<LineItem> items) noexcept {
      first = reinterpret_cast<std::uintptr_t>(items.data());
    });
    EXPECT_EQ(first % echo::base::kCacheLine, 0u) << "capacity " << capacity;
  }
}

TEST(SpscRing, NoWakeIsSentWhileNoConsumerIsParked) {
  SpscRing<int> ring(config(64));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
  ring.drain(64, [](int&) noexcept {});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
  EXPECT_EQ(ring.stats().wakes, 0u);
  EXPECT_EQ(ring.doorbell().signals_count(), 0u);
}

TEST(SpscRing, OnlyTheEmptyToNonEmptyEdgeWakesAParkedConsumer) {
  SpscRing<int> ring(config(64, FullPolicy::kDrop, {WaitStrategy::kPark, 0}));
  std::atomic<std::size_t> applied{0};
  std::atomic<bool> entered{false};
  std::atomic<bool> held{true};
  auto consumer = start_consumer(ring, 64, [&](std::span<int> s) noexcept {
    entered.store(true, std::memory_order_release);
    while (held.load(std::memory_order_acquire)) std::this_thread::sleep_for(100us);
    applied.fetch_add(s.size(), std::memory_order_relaxed);
  });
  ASSERT_TRUE(eventually([&] { return ring.doorbell().parks_count() >= 1; }));
  std::vector<int> burst(20, 7);
  ASSERT_EQ(ring.try_publish_batch(std::span<int>(burst)), 20u);  // the edge: one wake
  ASSERT_TRUE(eventually([&] { return entered.load(std::memory_order_acquire); }));
  EXPECT_EQ(ring.stats().wakes, 1u);
  // The batch being applied still occupies the ring, so these are not edges.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(ring.try_publish(int{i}));
  EXPECT_EQ(ring.stats().wakes, 1u);
  held.store(false, std::memory_order_release);
  ASSERT_TRUE(eventually([&] { return applied.load() == 40; }));
  const auto s = ring.stats();
  EXPECT_EQ(s.wakes, 1u);
  EXPECT_LE(s.wakes, s.batches);
  EXPECT_EQ(ring.doorbell().signals_count(), 1u);
}

TEST(SpscRing, WaitForWorkTimesOutOnAnEmptyRing) {
  for (WaitStrategy strategy : {WaitStrategy::kSpin, WaitStrategy::kYield, WaitStrategy::kPark}) {
    SpscRing<int> ring(config(4, FullPolicy::kDrop, {strategy, 10}));
    const auto t0 = Clock::now();
    EXPECT_EQ(ring.wait_for_work(t0 + 20ms), WaitVerdict::kTimeout) << to_string(strategy);
    EXPECT_GE(Clock::now() - t0, 20ms);
    ASSERT_TRUE(ring.try_publish(1));
    EXPECT_EQ(ring.wait_for_work(t0 + 20ms), WaitVerdict::kWork);
  }
}

TEST(SpscRing, StopRequestReleasesAParkedConsumer) {
  SpscRing<int> ring(config(4, FullPolicy::kDrop, {WaitStrategy::kPark, 0}));
  std::stop_source stop;
  std::atomic<int> verdict{-1};
  std::jthread consumer([&] {
    verdict = static_cast<int>(ring.wait_for_work(Clock::time_point::max(), stop.get_token()));
  });
  ASSERT_TRUE(eventually([&] { return ring.doorbell().parks_count() >= 1; }));
  stop.request_stop();
  ASSERT_TRUE(eventually([&] { return verdict.load() >= 0; }));
  EXPECT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kStopped));
}

TEST(SpscRing, OneDoorbellWakesAWriterForAnyOfItsRingsAndItsInbox) {
  Doorbell bell({WaitStrategy::kPark, 0});
  SpscRing<int> a(config(8), bell);
  SpscRing<int> b(config(8), bell);
  std::atomic<int> inbox{0};  // stands in for an MPSC inbox's size_approx()
  auto has_work = [&]() noexcept {
    return a.has_work() || b.has_work() || inbox.load(std::memory_order_acquire) != 0;
  };
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> verdict{-1};
    std::jthread writer(
        [&] { verdict = static_cast<int>(bell.wait_until(has_work, Clock::now() + 10s)); });
    ASSERT_TRUE(
        eventually([&] { return bell.parks_count() >= static_cast<std::uint64_t>(round + 1); }));
    if (round == 0) {
      ASSERT_TRUE(a.try_publish(1));
    }
    if (round == 1) {
      ASSERT_TRUE(b.try_publish(2));
    }
    if (round == 2) {
      inbox.store(1, std::memory_order_release);
      EXPECT_TRUE(bell.notify());
    }
    ASSERT_TRUE(eventually([&] { return verdict.load() >= 0; }, 5s)) << "round " << round;
    EXPECT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kWork)) << "round " << round;
    writer.join();
    a.drain(8, [](int&) noexcept {});
    b.drain(8, [](int&) noexcept {});
    inbox.store(0);
  }
  EXPECT_EQ(a.stats().wakes, 1u);
  EXPECT_EQ(b.stats().wakes, 1u);
  EXPECT_EQ(bell.signals_count(), 3u);
}

// G2: 1000 items, capacity 2048, the applier sleeps 1 ms per batch (batches capped at 512, as
// the writer caps them): exact order, 1 < batches < 1000, wakes <= batches, wakes < 50.
TEST(SpscRing, G2ThousandItemsArriveInOrderInFewBatchesAndFewWakes) {
  SpscRing<Tracked> ring(config(2048, FullPolicy::kDrop, {WaitStrategy::kPark, 64}));
  std::vector<std::uint64_t> out;
  {
    auto consumer = start_consumer(ring, 512, [&](std::span<Tracked> batch) noexcept {
      for (Tracked& t : batch) out.push_back(t.get());
      std::this_thread::sleep_for(1ms);
    });
    // As in the original, the applier is parked when the storm starts.
    ASSERT_TRUE(eventually([&] { return ring.doorbell().parks_count() >= 1; }));
    for (std::uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE(ring.try_publish(Tracked(i)));
    ASSERT_TRUE(eventually([&] { return ring.stats().applied == 1000; }));
  }
  std::vector<std::uint64_t> expected(1000);
  for (std::uint64_t i = 0; i < 1000; ++i) expected[i] = i;
  EXPECT_EQ(out, expected);
  const auto s = ring.stats();
  EXPECT_GT(s.batches, 1u);
  EXPECT_LT(s.batches, 1000u);
  EXPECT_GE(s.wakes, 1u) << "the parked applier was woken";
  EXPECT_LE(s.wakes, s.batches);
  EXPECT_LT(s.wakes, 50u);
  EXPECT_EQ(s.dropped, 0u);
  std::printf("G2: 1000 items in %llu batches (largest %llu), %llu wakes\n",
              static_cast<unsigned long long>(s.batches),
              static_cast<unsigned long long>(s.max_batch),
              static_cast<unsigned long long>(s.wakes));
}

// G3: occupancy is visible mid-storm (600 items, capacity 4096, applier 5 ms) and drains to 0;
// 100000 items through capacity 4096 with the producer spending free-slot credits in batches:
// every batch fully accepted, 0 dropped.
TEST(SpscRing, G3OccupancyIsVisibleMidStormAndCreditsNeverDrop) {
  {
    SpscRing<Tracked> ring(config(4096));
    auto consumer = start_consumer(
        ring, 4096, [](std::span<Tracked>) noexcept { std::this_thread::sleep_for(5ms); });
    for (std::uint64_t i = 0; i < 600; ++i) ASSERT_TRUE(ring.try_publish(Tracked(i)));
    const auto a1 = ring.stats().applied;
    const auto mid = ring.occupancy_approx();
    const auto a2 = ring.stats().applied;
    std::printf("G3: occupancy %zu mid-storm (applied %llu)\n", mid,
                static_cast<unsigned long long>(a2));
    EXPECT_GT(mid, 0u);
    EXPECT_LE(mid, 600 - a1);
    EXPECT_GE(mid, 600 - a2);
    if (a2 == 0) {
      EXPECT_EQ(mid, 600u);
    }
    ASSERT_TRUE(eventually([&] { return ring.stats().applied == 600; }));
    EXPECT_EQ(ring.occupancy_approx(), 0u);
  }
  SpscRing<std::uint64_t> ring(config(4096));
  std::uint64_t next = 0;
  bool in_order = true;
  auto consumer = start_consumer(ring, 256, [&](std::span<std::uint64_t> batch) noexcept {
    for (std::uint64_t v : batch) in_order = in_order && v == next++;
  });
  constexpr std::uint64_t kItems = 100000;
  std::uint64_t chunk[64];  // what one io read decoded: published as one batch
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < kItems;) {
    const std::size_t credits = ring.free_slots();
    if (credits == 0) {
      std::this_thread::yield();
      continue;
    }
    const std::size_t n = std::min<std::uint64_t>({credits, std::size(chunk), kItems - i});
    for (std::size_t k = 0; k < n; ++k) chunk[k] = i + k;
    ASSERT_EQ(ring.try_publish_batch(std::span<std::uint64_t>(chunk, n)), n)
        << "credits are a lower bound";
    i += n;
  }
  ASSERT_TRUE(eventually([&] { return ring.stats().applied == kItems; }));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  consumer.request_stop();
  consumer.join();
  const auto s = ring.stats();
  EXPECT_TRUE(in_order);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.published, kItems);
  EXPECT_GT(kItems / secs, 80000.0) << "the original's floor";
  std::printf("G3: %llu items in %.1f ms = %.0f items/s, largest batch %llu, 0 dropped\n",
              static_cast<unsigned long long>(kItems), secs * 1e3, kItems / secs,
              static_cast<unsigned long long>(s.max_batch));
}

TEST(SpscRing, StatsDifferenceIsOneConsistentPairWhileTheRingRuns) {
  // A third thread's stats() while a producer and a consumer run: applied never passes published,
  // and occupancy is exactly their difference (clamped), as an exporter computing published -
  // applied expects. Separate loads let a drain or a publish land between them.
  SpscRing<std::uint64_t> ring(config(64));
  auto consumer = start_consumer(ring, 8, [](std::span<std::uint64_t>) noexcept {});
  std::atomic<bool> done{false};
  std::jthread producer([&] {
    for (std::uint64_t i = 0; !done.load(std::memory_order_relaxed); ++i) {
      if (!ring.try_publish(std::uint64_t{i})) std::this_thread::yield();
    }
  });
  std::uint64_t behind = 0, mismatched = 0, samples = 0;
  const auto end = Clock::now() + 1500ms;
  while (Clock::now() < end) {
    for (int k = 0; k < 1000; ++k, ++samples) {
      const RingStats s = ring.stats();
      if (s.applied > s.published) ++behind;
      if (s.applied <= s.published &&
          s.occupancy != std::min<std::uint64_t>(s.published - s.applied, s.capacity)) {
        ++mismatched;
      }
    }
  }
  done.store(true, std::memory_order_relaxed);
  producer.join();
  EXPECT_EQ(behind, 0u) << "of " << samples << " samples";
  EXPECT_EQ(mismatched, 0u) << "of " << samples << " samples";
}

// G4: capacity 64, applier held: 200 publishes give 64 accepted and 136 dropped; the release
// drains 64; publish 201 lands; applied 65; occupancy 0.
TEST(SpscRing, G4FullRingDropsAndCountsThenRecovers) {
  SpscRing<Tracked> ring(config(64, FullPolicy::kDrop));
  std::atomic<bool> held{true};
  auto consumer = start_consumer(ring, 64, [&](std::span<Tracked>) noexcept {
    while (held.load(std::memory_order_acquire)) std::this_thread::sleep_for(100us);
  });
  int accepted = 0;
  for (std::uint64_t i = 0; i < 200; ++i) accepted += ring.try_publish(Tracked(i)) ? 1 : 0;
  EXPECT_EQ(accepted, 64);
  EXPECT_EQ(ring.stats().dropped, 136u);
  EXPECT_EQ(ring.occupancy_approx(), 64u);
  held.store(false, std::memory_order_release);
  ASSERT_TRUE(eventually([&] { return ring.stats().applied == 64; }));
  EXPECT_EQ(ring.occupancy_approx(), 0u);
  EXPECT_TRUE(ring.try_publish(Tracked(200)));
  ASSERT_TRUE(eventually([&] { return ring.stats().applied == 65; }));
  const auto s = ring.stats();
  EXPECT_EQ(s.published, 65u);
  EXPECT_EQ(s.dropped, 136u);
  EXPECT_EQ(s.applied, 65u);
  EXPECT_EQ(ring.occupancy_approx(), 0u);
}

#ifndef NDEBUG
TEST(SpscRingDeathTest, SecondProducerThreadAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SpscRing<int> ring(config(8));
        (void)ring.try_publish(1);
        std::thread([&] { (void)ring.try_publish(2); }).join();
      },
      "called from a second thread");
}

TEST(SpscRingDeathTest, SecondConsumerThreadAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SpscRing<int> ring(config(8));
        ring.drain(1, [](int&) noexcept {});
        std::thread([&] { ring.drain(1, [](int&) noexcept {}); }).join();
      },
      "called from a second thread");
}
#else
TEST(SpscRingDeathTest, OwnerChecksAreDebugOnly) {
  GTEST_SKIP() << "NDEBUG build: the single-producer/consumer checks compile away";
}
#endif

}  // namespace
