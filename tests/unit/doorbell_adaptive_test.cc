// SPDX-License-Identifier: MIT
// The doorbell's adaptive mode (doorbell.h, Adaptive mode; WaitConfig::adaptive_barrier, the
// default): a ring goes light after Doorbell::kLightAfter publishes that found its consumer awake,
// the consumer pays the membarrier only at a park while a ring is light, the light publish that
// finds the consumer parked wakes it and returns the ring to the seq_cst handshake, and a
// consumer that parks per message never issues the barrier. Where the kernel offers no membarrier
// the mode is off, and each test checks that instead: no ring ever goes light, no barrier runs.
#include <echo/ring/doorbell.h>
#include <echo/ring/spsc_ring.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace {

using echo::ring::Doorbell;
using echo::ring::RingConfig;
using echo::ring::SpscRing;
using echo::ring::WaitConfig;
using echo::ring::WaitStrategy;
using echo::ring::WaitVerdict;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

RingConfig park_config(WaitConfig wait) {
  RingConfig c;
  c.capacity = 256;
  c.consumer_wait = wait;
  return c;
}

std::uint64_t drain_all(SpscRing<std::uint64_t>& ring) {
  std::uint64_t n = 0;
  while (ring.drain(64, [&](std::uint64_t&) noexcept { ++n; }) != 0) {
  }
  return n;
}

// Without membarrier (the mode off): however long the consumer keeps up, the ring stays on the
// seq_cst handshake and the consumer never issues a barrier.
void expect_symmetric_without_membarrier(SpscRing<std::uint64_t>& ring) {
  for (std::uint64_t i = 0; i < 4 * Doorbell::kLightAfter; ++i) {
    ASSERT_TRUE(ring.try_publish(i + 0));
    ASSERT_EQ(drain_all(ring), 1u);
  }
  EXPECT_EQ(ring.doorbell().light_rings_approx(), 0u);
  EXPECT_EQ(ring.doorbell().adaptive_barriers_count(), 0u);
}

// The consumer thread parks (spin budget 0) until `ring` has work; the calling thread waits until
// it is parked (parks_count moved), then returns. The consumer's verdict lands in `verdict`.
std::jthread park_consumer(SpscRing<std::uint64_t>& ring, std::atomic<int>& verdict) {
  const std::uint64_t parks = ring.doorbell().parks_count();
  std::jthread t([&ring, &verdict] {
    verdict.store(static_cast<int>(ring.wait_for_work(Clock::now() + 5s)));
  });
  const auto limit = Clock::now() + 5s;
  while (ring.doorbell().parks_count() == parks && Clock::now() < limit) {
    std::this_thread::yield();
  }
  return t;
}

TEST(DoorbellAdaptive, DefaultParkConfigIsAdaptiveNotAsymmetric) {
  const WaitConfig w{};
  EXPECT_EQ(w.strategy, WaitStrategy::kPark);
  EXPECT_FALSE(w.asymmetric_barrier);
  EXPECT_TRUE(w.adaptive_barrier);
  const Doorbell spin({WaitStrategy::kSpin, 0});
  EXPECT_FALSE(spin.adaptive()) << "a consumer that never parks needs no handshake at all";
  const Doorbell off({WaitStrategy::kPark, 0, false, false});
  EXPECT_FALSE(off.adaptive());
  const Doorbell asym({WaitStrategy::kPark, 0, true, true});
  EXPECT_FALSE(asym.adaptive()) << "asymmetric wins: its rings are light from construction";
}

TEST(DoorbellAdaptive, RingGoesLightWhileTheConsumerKeepsUpAndBackAtThePark) {
  SpscRing<std::uint64_t> ring(park_config({WaitStrategy::kPark, 0}));
  Doorbell& bell = ring.doorbell();
  if (!bell.adaptive()) return expect_symmetric_without_membarrier(ring);

  // One publish short of the switch: still symmetric.
  for (std::uint64_t i = 0; i + 1 < Doorbell::kLightAfter; ++i)
    ASSERT_TRUE(ring.try_publish(i + 0));
  EXPECT_EQ(bell.light_rings_approx(), 0u);
  ASSERT_TRUE(ring.try_publish(std::uint64_t{99}));
  EXPECT_EQ(bell.light_rings_approx(), 1u) << "kLightAfter publishes found no waiter: light";
  EXPECT_EQ(drain_all(ring), Doorbell::kLightAfter);

  // The consumer parks while the ring is light: it pays the barrier once.
  std::atomic<int> verdict{-1};
  std::jthread consumer = park_consumer(ring, verdict);
  ASSERT_EQ(bell.parks_count(), 1u);
  EXPECT_EQ(bell.adaptive_barriers_count(), 1u);
  // The light publish that finds it parked wakes it and leaves.
  ASSERT_TRUE(ring.try_publish(std::uint64_t{100}));
  consumer.join();
  EXPECT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kWork));
  EXPECT_EQ(bell.light_rings_approx(), 0u) << "the publish that met a parked consumer left";
  EXPECT_EQ(ring.stats().wakes, 1u);
  EXPECT_EQ(drain_all(ring), 1u);

  // Symmetric again: a park now issues no barrier, and the publish that meets it still wakes it.
  consumer = park_consumer(ring, verdict);
  ASSERT_EQ(bell.parks_count(), 2u);
  ASSERT_TRUE(ring.try_publish(std::uint64_t{101}));
  consumer.join();
  EXPECT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kWork));
  EXPECT_EQ(bell.adaptive_barriers_count(), 1u);
  EXPECT_EQ(ring.stats().wakes, 2u);
  EXPECT_EQ(bell.barrier_fallbacks(), 0u);
}

// Sparse traffic, a consumer that parks after every message (the writer's spin 0): each publish
// finds it parked, so the ring never goes light and no park pays the barrier (no IPI lands on the
// process's other threads: the reason asymmetric_barrier stays off by default).
TEST(DoorbellAdaptive, AConsumerParkingPerMessageNeverIssuesTheBarrier) {
  SpscRing<std::uint64_t> ring(park_config({WaitStrategy::kPark, 0}));
  Doorbell& bell = ring.doorbell();
  if (!bell.adaptive()) return expect_symmetric_without_membarrier(ring);
  constexpr std::uint64_t kMessages = 3 * Doorbell::kLightAfter;
  std::atomic<int> verdict{-1};
  for (std::uint64_t i = 0; i < kMessages; ++i) {
    std::jthread consumer = park_consumer(ring, verdict);
    ASSERT_TRUE(ring.try_publish(std::uint64_t{i}));
    consumer.join();
    ASSERT_EQ(verdict.load(), static_cast<int>(WaitVerdict::kWork)) << "message " << i;
    ASSERT_EQ(drain_all(ring), 1u);
  }
  EXPECT_EQ(bell.parks_count(), kMessages);
  EXPECT_EQ(ring.stats().wakes, kMessages);
  EXPECT_EQ(bell.adaptive_barriers_count(), 0u);
  EXPECT_EQ(bell.light_rings_approx(), 0u);
}

// A light ring destroyed while light leaves, so the doorbell's other rings' consumer parks
// without the barrier again.
TEST(DoorbellAdaptive, ALightRingLeavesWhenDestroyed) {
  Doorbell bell({WaitStrategy::kPark, 0});
  if (!bell.adaptive()) {
    SpscRing<std::uint64_t> ring(park_config({}), bell);
    return expect_symmetric_without_membarrier(ring);
  }
  {
    SpscRing<std::uint64_t> ring(park_config({}), bell);
    for (std::uint64_t i = 0; i < Doorbell::kLightAfter; ++i) ASSERT_TRUE(ring.try_publish(i + 0));
    EXPECT_EQ(bell.light_rings_approx(), 1u);
  }
  EXPECT_EQ(bell.light_rings_approx(), 0u);
  EXPECT_EQ(bell.wait_until([] { return false; }, Clock::now() + 1ms), WaitVerdict::kTimeout);
  EXPECT_EQ(bell.adaptive_barriers_count(), 0u);
}

}  // namespace
