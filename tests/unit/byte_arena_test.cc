// SPDX-License-Identifier: MIT
// The bytes beside a ring's items (ring::ByteArena): reservations are contiguous, wrap by skipping
// the end, refuse what the consumer has not freed (half the capacity always fits once empty), give
// back the last one, and free in order; a producer and a consumer on two threads see every byte
// they exchanged.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <echo/ring/byte_arena.h>

namespace echo::ring {
namespace {

TEST(ByteArena, ReservesUntilFullAndFreesInOrder) {
  ByteArena a(64);
  char* p1 = a.reserve(24);
  char* p2 = a.reserve(24);
  ASSERT_NE(p1, nullptr);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(p2, p1 + 24);
  EXPECT_EQ(a.reserve(24), nullptr);  // 16 left at the end, nothing freed at the start
  a.release(p1, 24);
  char* p3 = a.reserve(24);  // skips the end's 16 bytes: starts again at the beginning
  EXPECT_EQ(p3, p1);
  EXPECT_EQ(a.reserve(1), nullptr);  // p2 still held; the skipped end counts as used
  a.release(p2, 24);
  a.release(p3, 24);
  // Empty again, with the head mid-buffer: any reservation of up to half the capacity fits (it
  // either fits before the end or skips at most what it needs), which is why a table's arena
  // holds at least two of its largest messages.
  EXPECT_NE(a.reserve(32), nullptr);
}

TEST(ByteArena, RefusesWhatCanNeverFitAndGivesBackTheLast) {
  ByteArena a(32);
  EXPECT_EQ(a.reserve(0), nullptr);
  EXPECT_EQ(a.reserve(33), nullptr);
  char* p = a.reserve(20);
  ASSERT_NE(p, nullptr);
  a.unreserve();
  EXPECT_EQ(a.reserve(32), p);  // the given-back bytes are reserved again
}

TEST(ByteArena, AProducerAndAConsumerExchangeEveryByte) {
  ByteArena a(4096);
  struct Slot {
    const char* at;
    std::size_t size;
  };
  // A tiny SPSC hand-off of (pointer, size) standing in for the item ring.
  constexpr std::size_t kSlots = 64;
  Slot slots[kSlots];
  std::atomic<std::uint64_t> head{0}, tail{0};
  constexpr std::uint64_t kItems = 5'000;  // ~400 wraps of the arena
  std::thread consumer([&] {
    for (std::uint64_t i = 0; i < kItems;) {
      const std::uint64_t h = head.load(std::memory_order_acquire);
      for (; i < h; ++i) {
        const Slot s = slots[i % kSlots];
        const char expect = static_cast<char>('a' + i % 26);
        ASSERT_EQ(std::string_view(s.at, s.size).find_first_not_of(expect), std::string_view::npos)
            << i;
        a.release(s.at, s.size);
        tail.store(i + 1, std::memory_order_release);
      }
    }
  });
  for (std::uint64_t i = 0; i < kItems; ++i) {
    const std::size_t size = 1 + (i * 131) % 700;
    while (i - tail.load(std::memory_order_acquire) >= kSlots) std::this_thread::yield();
    char* p;
    while ((p = a.reserve(size)) == nullptr) std::this_thread::yield();
    std::memset(p, 'a' + static_cast<int>(i % 26), size);
    slots[i % kSlots] = Slot{p, size};
    head.store(i + 1, std::memory_order_release);
  }
  consumer.join();
}

}  // namespace
}  // namespace echo::ring
