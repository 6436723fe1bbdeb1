// SPDX-License-Identifier: MIT
// The L1 map's readers: a read into a buffer, hits summed over threads, reader slots released at
// thread exit and refused beyond their count, and the debug-only thread checks (death tests).

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

TEST(L1Map, ReadIntoABufferReportsTooSmallWithoutCopying) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "0123456789", ver(9)), InsertVerdict::kInserted);
  char small[4] = {'x', 'x', 'x', 'x'};
  ReadResult r = m.read(name_id(1).view(), small);
  EXPECT_EQ(r.status, ReadStatus::kTooSmall);
  EXPECT_EQ(r.size, 10u);
  EXPECT_EQ(small[0], 'x');
  char big[16];
  r = m.read(name_id(1).view(), big);
  ASSERT_EQ(r.status, ReadStatus::kHit);
  EXPECT_EQ(std::string_view(big, r.size), "0123456789");
  EXPECT_EQ(view(r.version), ver(9).view());
  EXPECT_EQ(m.read(name_id(2).view(), big).status, ReadStatus::kMiss);
  EXPECT_EQ(m.read("short", big).status, ReadStatus::kMiss);
  const L1Stats s = m.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
}

TEST(L1Map, HitsAndMissesFromManyThreadsAreSummed) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      std::string v;
      for (int i = 0; i < 1000; ++i) {
        EXPECT_TRUE(m.get(name_id(1).view(), v));
        EXPECT_FALSE(m.get(name_id(2).view(), v));
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(m.stats().hits, 4000u);
  EXPECT_EQ(m.stats().misses, 4000u);
}

// A thread_local of the application's that reads L1 in its destructor (built before the thread's
// first read, so destroyed after whatever that read built). The reader slot it reads under must
// still be released at the thread's exit: the slot's release once ran as a thread_local built at
// the first read, so such a read claimed a slot nobody released, and the 513th exiting thread
// aborted the process ("more than kMaxReaderThreads (512) live reader threads").
const L1Map* g_exit_map = nullptr;
std::atomic<int> g_exit_hits{0};
struct ReadsL1AtThreadExit {
  ~ReadsL1AtThreadExit() {
    std::string v;
    if (g_exit_map->get(name_id(1).view(), v)) g_exit_hits.fetch_add(1);
  }
};
thread_local ReadsL1AtThreadExit t_reads_at_exit;

TEST(L1Map, ReadsFromThreadLocalDestructorsNeverLeakAReaderSlot) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  g_exit_map = &m;
  g_exit_hits = 0;
  const std::uint32_t before = epoch::reader_high_water();
  constexpr int kThreads = 2 * static_cast<int>(kMaxReaderThreads);  // one at a time
  for (int i = 0; i < kThreads; ++i) {
    std::thread([&] {
      static_cast<void>(&t_reads_at_exit);  // built before the first read
      std::string v;
      EXPECT_TRUE(m.get(name_id(1).view(), v));
    }).join();
  }
  EXPECT_EQ(g_exit_hits.load(), kThreads);
  // One thread at a time: each reuses a released slot, so the bound hardly moves.
  EXPECT_LE(epoch::reader_high_water(), before + 2);
  g_exit_map = nullptr;
}

// A thread that finds every reader slot taken is refused, not aborted: its guard
// is not protecting(), its reads answer misses, and the map counts the refusals.
TEST(L1Map, AReaderThreadBeyondTheSlotsReadsMissesInsteadOfAborting) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  { ReadGuard g; }  // this thread holds a slot, so kMaxReaderThreads more cannot all get one
  std::promise<void> go;
  const std::shared_future<void> released = go.get_future().share();
  std::atomic<int> protecting{0}, refused{0}, refused_hits{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> holders;
  for (std::size_t i = 0; i < kMaxReaderThreads; ++i) {
    holders.emplace_back([&] {
      ReadGuard g;
      if (g.protecting()) {
        protecting.fetch_add(1);
      } else {
        refused.fetch_add(1);
        std::string v;
        char buf[8];
        refused_hits.fetch_add(m.get(name_id(1).view(), v));
        refused_hits.fetch_add(m.read(name_id(1).view(), buf).status == ReadStatus::kHit);
        refused_hits.fetch_add(m.find(g, name_id(1).view()).has_value());
      }
      ready.fetch_add(1);
      released.wait();  // hold the slot until every holder has tried
    });
  }
  while (ready.load() != static_cast<int>(kMaxReaderThreads)) std::this_thread::yield();
  go.set_value();
  for (auto& t : holders) t.join();
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(protecting.load() + refused.load(), static_cast<int>(kMaxReaderThreads));
  EXPECT_EQ(refused_hits.load(), 0);
  EXPECT_EQ(m.stats().reader_slot_refusals, 3u * static_cast<std::uint64_t>(refused.load()));
  std::string v;
  EXPECT_TRUE(m.get(name_id(1).view(), v));  // slots freed: reads work again
}

TEST(L1MapDeathTest, ASecondWriterThreadAborts) {
#ifdef NDEBUG
  GTEST_SKIP() << "the single-writer check is compiled into debug builds only";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        L1Map m(config());
        m.put(name_id(1), "v", ver(1));
        std::thread([&] { m.put(name_id(2), "v", ver(1)); }).join();
      },
      "second writer thread");
#endif
}

// A guard is its thread's section; handing it to another thread would give that
// thread an unprotected read. Debug builds abort on the use and on the destruction.
TEST(L1MapDeathTest, AGuardUsedOnAnotherThreadAborts) {
#ifdef NDEBUG
  GTEST_SKIP() << "the guard's thread check is compiled into debug builds only";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  L1Map m(config());
  EXPECT_DEATH(
      {
        ReadGuard g;
        std::thread([&] { static_cast<void>(m.find(g, name_id(1).view())); }).join();
      },
      "ReadGuard used by L1Map::find on a thread that did not build it");
  EXPECT_DEATH(
      {
        auto* g = new ReadGuard;
        std::thread([&] { delete g; }).join();
      },
      "ReadGuard destroyed on a thread that did not build it");
#endif
}

}  // namespace
}  // namespace echo::table
