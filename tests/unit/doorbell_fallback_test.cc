// SPDX-License-Identifier: MIT
// The doorbell's fallback (doorbell.h, Fallback): a consumer whose membarrier the kernel refuses
// after the doorbell and its rings were built (staged with a seccomp filter the consumer thread
// installs on itself, answering EPERM, as a policy applied between build and start would) falls
// back for good to the seq_cst handshake, counts it, loses no wake across the switch, and parks
// untimed again once every light ring has left. Skips where the kernel offers no membarrier.
#include <echo/ring/doorbell.h>
#include <echo/ring/spsc_ring.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stop_token>
#include <thread>

#include "support/seccomp.h"

namespace {

using echo::ring::Doorbell;
using echo::ring::FullPolicy;
using echo::ring::RingConfig;
using echo::ring::SpscRing;
using echo::ring::WaitConfig;
using echo::ring::WaitStrategy;
using echo::ring::WaitVerdict;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// This thread (and threads it starts from now on): membarrier fails with EPERM, whatever the cmd.
bool refuse_membarrier_on_this_thread() {
  return echo::test::refuse_syscall_on_this_thread(__NR_membarrier, EPERM);
}

constexpr WaitConfig kParkLight{WaitStrategy::kPark, 0, true};

RingConfig ring_config(std::size_t capacity) {
  RingConfig c;
  c.capacity = capacity;
  c.full_policy = FullPolicy::kDrop;
  c.consumer_wait = kParkLight;
  return c;
}

// Ping-pong: the producer publishes one item, waits (bounded) until the consumer applied it,
// repeats; the consumer parks between items (spin budget 0), so every item is an edge and a
// wake. A lost wake shows as an item not applied within kHopLimit (the consumer's own wait has
// a deadline too, so nothing hangs).
TEST(DoorbellFallback, ARefusedMembarrierFallsBackCountedAndLosesNoWake) {
  SpscRing<std::uint64_t> ring(ring_config(64));
  if (!ring.doorbell().asymmetric()) {
    GTEST_SKIP() << "no membarrier here: nothing to fall back from";
  }
  constexpr std::uint64_t kItems = 100000;
  constexpr auto kHopLimit = 2s;
  std::atomic<int> filtered{-1};
  std::atomic<std::uint64_t> applied{0};
  std::atomic<std::uint64_t> consumer_timeouts_with_work{0};
  bool in_order = true;
  std::jthread consumer([&](std::stop_token stop) {
    filtered.store(refuse_membarrier_on_this_thread() ? 1 : 0, std::memory_order_release);
    std::uint64_t expect = 0;
    auto apply = [&](std::uint64_t& v) noexcept {
      in_order = in_order && v == expect;
      ++expect;
    };
    for (;;) {
      if (ring.drain(64, apply) != 0) {
        applied.store(expect, std::memory_order_release);
        continue;
      }
      const WaitVerdict v = ring.wait_for_work(Clock::now() + 10s, stop);
      if (v == WaitVerdict::kStopped) return;
      if (v == WaitVerdict::kTimeout && ring.has_work()) {
        consumer_timeouts_with_work.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  while (filtered.load(std::memory_order_acquire) < 0) std::this_thread::yield();
  ASSERT_EQ(filtered.load(), 1) << "seccomp filter refused: " << errno;

  std::uint64_t lost_at = kItems;
  for (std::uint64_t i = 0; i < kItems && lost_at == kItems; ++i) {
    ASSERT_TRUE(ring.try_publish(std::uint64_t{i}));
    const auto limit = Clock::now() + kHopLimit;
    while (applied.load(std::memory_order_acquire) <= i) {
      if (Clock::now() > limit) {
        lost_at = i;
        break;
      }
      std::this_thread::yield();
    }
  }
  consumer.request_stop();
  consumer.join();
  const auto s = ring.stats();
  std::printf("fallback: %llu items, %llu parks, %llu wakes, %llu fallbacks\n",
              static_cast<unsigned long long>(s.applied),
              static_cast<unsigned long long>(ring.doorbell().parks_count()),
              static_cast<unsigned long long>(s.wakes),
              static_cast<unsigned long long>(s.barrier_fallbacks));
  EXPECT_EQ(s.barrier_fallbacks, 1u) << "the refused membarrier was not counted";
  EXPECT_EQ(ring.doorbell().barrier_fallbacks(), 1u);
  EXPECT_FALSE(ring.doorbell().asymmetric()) << "the doorbell still claims the light handshake";
  EXPECT_EQ(ring.doorbell().light_rings_approx(), 0u) << "the producer never left the light mode";
  EXPECT_EQ(lost_at, kItems) << "item " << lost_at << " was not applied within 2 s: a lost wake";
  EXPECT_EQ(consumer_timeouts_with_work.load(), 0u) << "the consumer slept past items";
  EXPECT_EQ(s.applied, kItems);
  EXPECT_TRUE(in_order);
  EXPECT_GE(ring.doorbell().parks_count(), 1u);
}

// A light ring counts on its doorbell until it leaves: on its first publish after the switch,
// or when destroyed. A ring built on a doorbell that already fell back starts symmetric.
TEST(DoorbellFallback, ALightRingCountsUntilItLeavesAndLateRingsStartSymmetric) {
  Doorbell bell(kParkLight);
  if (!bell.asymmetric()) GTEST_SKIP() << "no membarrier here: nothing to fall back from";
  {
    SpscRing<int> a(ring_config(8), bell);
    SpscRing<int> b(ring_config(8), bell);
    EXPECT_EQ(bell.light_rings_approx(), 2u);
  }
  EXPECT_EQ(bell.light_rings_approx(), 0u) << "a destroyed ring leaves";

  SpscRing<int> ring(ring_config(8), bell);
  ASSERT_EQ(bell.light_rings_approx(), 1u);
  std::atomic<int> phase{0};
  std::uint64_t bounded_parks = 0;
  std::uint64_t settled_parks = 0;
  WaitVerdict first = WaitVerdict::kWork;
  WaitVerdict second = WaitVerdict::kWork;
  std::thread consumer([&] {
    if (!refuse_membarrier_on_this_thread()) {
      phase.store(-1, std::memory_order_release);
      return;
    }
    // Nothing comes: the first park falls back; while the ring has not left, each park lasts at
    // most the settle timeout (Doorbell::kSettleTimeout, doubling), so a 100 ms wait takes several.
    auto p0 = bell.parks_count();
    first = bell.wait_until([&]() noexcept { return ring.has_work(); }, Clock::now() + 100ms);
    bounded_parks = bell.parks_count() - p0;
    phase.store(1, std::memory_order_release);
    while (phase.load(std::memory_order_acquire) != 2) std::this_thread::yield();
    (void)ring.drain(8, [](int&) noexcept {});
    // The ring left (its publish saw the switch): one untimed park sleeps to the deadline.
    p0 = bell.parks_count();
    second = bell.wait_until([&]() noexcept { return ring.has_work(); }, Clock::now() + 100ms);
    settled_parks = bell.parks_count() - p0;
  });
  while (phase.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  ASSERT_EQ(phase.load(), 1) << "seccomp filter refused";
  EXPECT_EQ(bell.barrier_fallbacks(), 1u);
  EXPECT_FALSE(bell.asymmetric());
  EXPECT_EQ(bell.light_rings_approx(), 1u) << "an idle ring has not seen the switch yet";
  ASSERT_TRUE(ring.try_publish(1));
  EXPECT_EQ(bell.light_rings_approx(), 0u) << "the publish after the switch leaves";
  SpscRing<int> late(ring_config(8), bell);
  EXPECT_EQ(bell.light_rings_approx(), 0u) << "a ring built after the switch is symmetric";
  phase.store(2, std::memory_order_release);
  consumer.join();
  EXPECT_EQ(first, WaitVerdict::kTimeout);
  EXPECT_GE(bounded_parks, 2u) << "parks were not bounded while a light ring remained";
  EXPECT_EQ(second, WaitVerdict::kTimeout);
  EXPECT_EQ(settled_parks, 1u) << "parks stayed bounded after every light ring left";
}

// A ring left light by the switch and then silent (its traffic ended, or goes around it: the
// engine's direct apply) kept its fallen-back consumer on kSettleTimeout parks for as long as
// it stayed silent: a thousand wakes a second for the life of the process. The bound doubles
// now, so the wakes die out; a publish still wakes the consumer at once, and the ring leaves.
TEST(DoorbellFallback, ASilentLightRingCostsAFallenBackConsumerFewWakes) {
  Doorbell bell(kParkLight);
  if (!bell.asymmetric()) GTEST_SKIP() << "no membarrier here: nothing to fall back from";
  SpscRing<int> ring(ring_config(8), bell);
  ASSERT_EQ(bell.light_rings_approx(), 1u);
  std::atomic<int> phase{0};
  std::uint64_t idle_parks = 0;
  WaitVerdict idle = WaitVerdict::kWork, woken = WaitVerdict::kTimeout;
  std::thread consumer([&] {
    if (!refuse_membarrier_on_this_thread()) {
      phase.store(-1, std::memory_order_release);
      return;
    }
    const auto p0 = bell.parks_count();
    idle = bell.wait_until([&]() noexcept { return ring.has_work(); }, Clock::now() + 400ms);
    idle_parks = bell.parks_count() - p0;
    phase.store(1, std::memory_order_release);
    woken = bell.wait_until([&]() noexcept { return ring.has_work(); }, Clock::now() + 10s);
  });
  while (phase.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  ASSERT_EQ(phase.load(), 1) << "seccomp filter refused";
  EXPECT_EQ(idle, WaitVerdict::kTimeout);
  EXPECT_EQ(bell.barrier_fallbacks(), 1u);
  // 1 + 2 + 4 + ... ms: 9 parks cover 400 ms (400 at a fixed 1 ms).
  EXPECT_LE(idle_parks, 12u) << "a silent light ring kept the consumer waking";
  std::this_thread::sleep_for(20ms);  // the consumer parks again, bounded by a long settle
  const auto sent = Clock::now();
  ASSERT_TRUE(ring.try_publish(1));
  consumer.join();
  EXPECT_EQ(woken, WaitVerdict::kWork);
  EXPECT_LT(Clock::now() - sent, 2s) << "the publish after the switch did not wake the consumer";
  EXPECT_EQ(bell.light_rings_approx(), 0u) << "the publish after the switch leaves";
}

}  // namespace
