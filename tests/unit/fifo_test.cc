// SPDX-License-Identifier: MIT
// base::Fifo: first in, first out across wrap-arounds and growth; a popped slot releases what it
// held at once; a queue that stays short keeps its storage (no allocation once warm).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <echo/base/fifo.h>

namespace echo::base {
namespace {

TEST(Fifo, FirstInFirstOutAcrossWrapAroundsAndGrowth) {
  Fifo<int> q;
  int next_in = 0, next_out = 0;
  // Interleaved: the ring wraps many times, and grows while wrapped (head not at 0).
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < round % 13 + 1; ++i) q.push_back(next_in++);
    for (int i = 0; i < round % 7 && !q.empty(); ++i) {
      ASSERT_EQ(q.front(), next_out++);
      q.pop_front();
    }
  }
  while (!q.empty()) {
    ASSERT_EQ(q.front(), next_out++);
    q.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(q.size(), 0u);
}

TEST(Fifo, APoppedSlotReleasesWhatItHeld) {
  Fifo<std::shared_ptr<int>> q;
  auto held = std::make_shared<int>(1);
  q.push_back(held);
  EXPECT_EQ(held.use_count(), 2);
  q.pop_front();
  EXPECT_EQ(held.use_count(), 1) << "the slot still held a copy";
}

TEST(Fifo, SwapHandsOverTheQueue) {
  Fifo<std::string> a, b;
  a.push_back("x");
  a.push_back("y");
  b.swap(a);
  EXPECT_TRUE(a.empty());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b.front(), "x");
  b.pop_front();
  EXPECT_EQ(b.front(), "y");
}

TEST(Fifo, AShortQueueKeepsItsStorage) {
  Fifo<int> q;
  for (int i = 0; i < 4; ++i) q.push_back(i);
  const int* slot = &q.front();
  for (int i = 0; i < 10000; ++i) {  // push one, pop one: never more than 4 held
    q.push_back(i);
    q.pop_front();
  }
  // Every slot is inside the one buffer made at the first push: none moved.
  const int* now = &q.front();
  EXPECT_GE(now, slot);
  EXPECT_LT(now, slot + 8);
}

}  // namespace
}  // namespace echo::base
