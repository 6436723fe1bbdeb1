// SPDX-License-Identifier: MIT
// The doorbell's gather (WaitConfig::gather): once Doorbell::kGatherAfter waits in a row found
// work within their first Doorbell::kGatherQuickPolls polls (a producer publishing item after
// item while the consumer keeps catching up), each wait starts with `gather` pauses before it
// polls; the first wait that does not find work soon ends it. Off with gather 0 and without a
// spin phase (spin_budget 0, the engine writer's default). Single-threaded: the predicate plays
// the producer, so every step is exact.
#include <echo/ring/doorbell.h>
#include <echo/ring/ring_config.h>
#include <echo/ring/spsc_ring.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace {

using echo::ring::Doorbell;
using echo::ring::RingConfig;
using echo::ring::SpscRing;
using echo::ring::WaitConfig;
using echo::ring::WaitStrategy;
using echo::ring::WaitVerdict;
using Clock = std::chrono::steady_clock;

// A wait whose work appears at the consumer's `at`-th poll (0: the first); returns the polls made.
std::uint32_t wait_with_work_at(Doorbell& bell, std::uint32_t at) {
  std::uint32_t polls = 0;
  const WaitVerdict v = bell.wait_until([&]() noexcept { return polls++ >= at; });
  EXPECT_EQ(v, WaitVerdict::kWork);
  return polls;
}

TEST(DoorbellGather, DefaultIsOnAndWithinItsRange) {
  const WaitConfig w{};
  EXPECT_GT(w.gather, 0u);
  EXPECT_LE(w.gather, echo::ring::kMaxGather);
}

TEST(DoorbellGather, StartsAfterQuickWaitsInARowAndEndsAtTheFirstSlowOne) {
  for (WaitStrategy s : {WaitStrategy::kSpin, WaitStrategy::kYield, WaitStrategy::kPark}) {
    Doorbell bell(WaitConfig{s, 64});
    for (std::uint32_t i = 0; i < Doorbell::kGatherAfter; ++i) {
      wait_with_work_at(bell, Doorbell::kGatherQuickPolls - 1);  // quick: inside the window
      EXPECT_EQ(bell.gathers_count(), 0u) << "wait " << i << ", " << to_string(s);
    }
    // Continuous traffic from here: every wait gathers first, then finds the work at once.
    for (std::uint64_t i = 1; i <= 3; ++i) {
      EXPECT_EQ(wait_with_work_at(bell, 0), 1u);
      EXPECT_EQ(bell.gathers_count(), i) << to_string(s);
    }
    // The traffic thins out: this wait gathers, then finds work only after the window ...
    wait_with_work_at(bell, Doorbell::kGatherQuickPolls);
    EXPECT_EQ(bell.gathers_count(), 4u);
    // ... so the next ones poll at once again, until kGatherAfter quick waits rebuild the streak.
    for (std::uint32_t i = 0; i < Doorbell::kGatherAfter; ++i) wait_with_work_at(bell, 0);
    EXPECT_EQ(bell.gathers_count(), 4u) << to_string(s);
    wait_with_work_at(bell, 0);
    EXPECT_EQ(bell.gathers_count(), 5u) << to_string(s);
  }
}

TEST(DoorbellGather, AWaitThatRunsOutOfSpinEndsTheStreak) {
  Doorbell bell(WaitConfig{WaitStrategy::kSpin, 16});
  for (std::uint32_t i = 0; i < Doorbell::kGatherAfter; ++i) wait_with_work_at(bell, 0);
  // Past the spin budget (the strategy proper finds it): not continuous traffic.
  wait_with_work_at(bell, 100);
  EXPECT_EQ(bell.gathers_count(), 1u);  // that wait itself still gathered first
  wait_with_work_at(bell, 0);
  EXPECT_EQ(bell.gathers_count(), 1u);
}

TEST(DoorbellGather, OffWithGatherZeroAndWithoutASpinPhase) {
  WaitConfig off{WaitStrategy::kSpin, 64};
  off.gather = 0;
  Doorbell no_gather(off);
  Doorbell no_spin(WaitConfig{WaitStrategy::kPark, 0});  // TableSpec::writer_wait's default
  for (int i = 0; i < 50; ++i) {
    wait_with_work_at(no_gather, 0);
    wait_with_work_at(no_spin, 0);
  }
  EXPECT_EQ(no_gather.gathers_count(), 0u);
  EXPECT_EQ(no_spin.gathers_count(), 0u);
}

TEST(DoorbellGather, ARingUnderContinuousTrafficGathersAndLosesNothing) {
  // The shape of echostore bench's ring_vs_rwq, on one thread: publish a few, drain them all,
  // wait (the next publish is already there), and so on.
  RingConfig c;
  c.capacity = 64;
  c.consumer_wait = {WaitStrategy::kPark, 2048};
  SpscRing<std::uint64_t> ring(c);
  std::uint64_t next = 0, expected = 0;
  for (int round = 0; round < 100; ++round) {
    ASSERT_TRUE(ring.try_publish(next++));
    while (ring.drain(256, [&](std::uint64_t& v) noexcept { EXPECT_EQ(v, expected++); }) != 0) {
    }
    ASSERT_TRUE(ring.try_publish(next++));
    ASSERT_EQ(ring.wait_for_work(Clock::now() + std::chrono::seconds(5)), WaitVerdict::kWork);
  }
  while (ring.drain(256, [&](std::uint64_t& v) noexcept { EXPECT_EQ(v, expected++); }) != 0) {
  }
  EXPECT_EQ(expected, next);
  EXPECT_EQ(ring.doorbell().gathers_count(), 100u - Doorbell::kGatherAfter);
}

TEST(DoorbellGather, ValidationNamesTheKnobAndItsRange) {
  RingConfig c;
  c.consumer_wait.gather = echo::ring::kMaxGather;
  EXPECT_NO_THROW(echo::ring::validate(c));
  c.consumer_wait.gather = echo::ring::kMaxGather + 1;
  try {
    echo::ring::validate(c);
    FAIL() << "gather above its range was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ring_wait_gather must be 0..65536"), std::string::npos)
        << e.what();
  }
}

}  // namespace
