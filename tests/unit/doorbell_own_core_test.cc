// SPDX-License-Identifier: MIT
// The doorbell's own-core wakes (Doorbell::kOwnCoreYields): a consumer woken by a signal sent
// from its own CPU shares it with its producer, so its next waits skip the spin phase (whose
// pause-polls only kept the producer off the CPU) and yield the CPU before they park; a wake from
// another CPU ends it. A consumer without a spin phase (the engine's writers) is never in it.
// Threads are pinned, so which CPU signals is exact; no assertion reads a clock.
#include <echo/ring/doorbell.h>
#include <echo/ring/ring_config.h>
#include <echo/ring/spsc_ring.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using echo::ring::Doorbell;
using echo::ring::RingConfig;
using echo::ring::SpscRing;
using echo::ring::WaitConfig;
using echo::ring::WaitStrategy;
using echo::ring::WaitVerdict;
using Clock = std::chrono::steady_clock;

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

// Pins the calling thread to `cpu`; restores the thread's former mask when destroyed.
class Pin {
 public:
  explicit Pin(int cpu) {
    CPU_ZERO(&before_);
    pthread_getaffinity_np(pthread_self(), sizeof before_, &before_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    EXPECT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  }
  ~Pin() { pthread_setaffinity_np(pthread_self(), sizeof before_, &before_); }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;

 private:
  cpu_set_t before_;
};

// The consumer (this thread, on `consumer_cpu`) parks until a thread pinned to `signal_cpu`
// makes the work true and signals.
void park_until_signalled_from(Doorbell& bell, int consumer_cpu, int signal_cpu) {
  Pin pin(consumer_cpu);
  std::atomic<bool> work{false};
  const std::uint64_t parks = bell.parks_count();
  std::thread signaller([&] {
    Pin there(signal_cpu);
    // Once the consumer has counted its park it is past its last look at the work: the signal
    // then either wakes it or (not asleep yet) makes its futex wait return at once.
    while (bell.parks_count() == parks) std::this_thread::yield();
    work.store(true, std::memory_order_release);
    bell.signal();
  });
  EXPECT_EQ(bell.wait_until([&]() noexcept { return work.load(std::memory_order_acquire); }),
            WaitVerdict::kWork);
  signaller.join();
  EXPECT_GT(bell.parks_count(), parks) << "the consumer never parked";
}

// The polls a wait makes before it gives up at a deadline already passed: its spin phase plus
// the park loop's first check (spin_budget + 1), or, in own-core mode, the first look after its
// first yield (1: no spin phase).
std::uint32_t polls_of_a_wait_that_finds_nothing(Doorbell& bell) {
  std::uint32_t polls = 0;
  EXPECT_EQ(bell.wait_until([&]() noexcept { return ++polls == 0; }, Clock::now()),
            WaitVerdict::kTimeout);
  return polls;
}

TEST(DoorbellOwnCore, AWakeFromItsOwnCpuSkipsTheNextSpinsAndAWakeFromAnotherEndsIt) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  Doorbell bell(WaitConfig{WaitStrategy::kPark, 2048});
  EXPECT_EQ(polls_of_a_wait_that_finds_nothing(bell), 2048u + 1);  // pause-polls, as configured

  park_until_signalled_from(bell, cpus[0], cpus[0]);
  EXPECT_EQ(bell.own_core_wakes_count(), 1u);
  EXPECT_EQ(polls_of_a_wait_that_finds_nothing(bell), 1u);
  EXPECT_EQ(polls_of_a_wait_that_finds_nothing(bell), 1u) << "only a wake changes it";

  if (cpus.size() < 2) return;  // one CPU: every wake comes from it (CI has two)
  park_until_signalled_from(bell, cpus[0], cpus[1]);
  EXPECT_EQ(bell.own_core_wakes_count(), 1u);
  EXPECT_EQ(polls_of_a_wait_that_finds_nothing(bell), 2048u + 1) << "back to pause-polling";
}

TEST(DoorbellOwnCore, AConsumerWithoutASpinPhaseParksAtOnceWhoeverWokeIt) {
  // The engine's writers (TableSpec::writer_wait: spin 0) park at once as configured; a wake
  // from their own CPU must not make them yield before parking.
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  Doorbell bell(WaitConfig{WaitStrategy::kPark, 0});
  park_until_signalled_from(bell, cpus[0], cpus[0]);
  EXPECT_EQ(bell.own_core_wakes_count(), 0u);
  EXPECT_EQ(polls_of_a_wait_that_finds_nothing(bell), 1u);  // the park loop's one check
}

TEST(DoorbellOwnCore, ARingWhoseThreadsShareOneCpuMovesEveryItemInOrder) {
  // The collapse it fixes: producer and consumer on one CPU, the ring's default wait (2,048
  // pause polls, then park). Not timed: every item arrives, in order, and the consumer's wakes
  // were seen to come from its own CPU.
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  RingConfig c;
  c.capacity = 1024;
  SpscRing<std::uint64_t> ring(c);
  constexpr std::uint64_t kItems = 1u << 20;
  std::uint64_t expected = 0;
  std::thread consumer([&] {
    Pin pin(cpus[0]);
    while (expected < kItems) {
      const std::size_t n = ring.drain(256, [&](std::uint64_t& v) noexcept {
        if (v == expected) ++expected;
      });
      if (n == 0) ring.wait_for_work();
    }
  });
  {
    Pin pin(cpus[0]);
    std::uint64_t batch[64];
    for (std::uint64_t next = 0; next < kItems;) {
      for (std::uint64_t i = 0; i < 64; ++i) batch[i] = next + i;
      const std::size_t n = ring.try_publish_batch(std::span<std::uint64_t>(batch, 64));
      if (n == 0) std::this_thread::yield();
      next += n;
    }
  }
  consumer.join();
  EXPECT_EQ(expected, kItems) << "an item was lost or reordered";
  EXPECT_GT(ring.doorbell().own_core_wakes_count(), 0u);
}

}  // namespace
