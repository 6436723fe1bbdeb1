// SPDX-License-Identifier: MIT
// The L1 map's rows in time: expiry is now plus TTL plus bounded jitter, a full map skips inserts,
// sweeps drop expired rows, and reads follow the published read clock.

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

TEST(L1Map, ExpiryIsNowPlusTtlPlusUniformJitterWithinTruncSpan) {
  set_now(1'000'000);
  L1Map jittered(config(1000, 300, 0.2));  // s = trunc(300 * 0.2) = 60
  L1Map control(config(1000, 300, 0.0));
  ASSERT_EQ(jittered.jitter_span_ms(), 60);
  std::vector<std::int64_t> exp;
  for (int i = 0; i < 400; ++i) {
    ASSERT_EQ(jittered.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    ASSERT_EQ(control.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    exp.push_back(expiry_of(jittered, name_id(i)));
    EXPECT_EQ(expiry_of(control, name_id(i)), 1'000'300);
  }
  const auto [lo, hi] = std::minmax_element(exp.begin(), exp.end());
  EXPECT_GE(*lo, 1'000'240);
  EXPECT_LE(*hi, 1'000'360);
  // 400 uniform draws over 121 values: the spread covers nearly the whole [-60, +60] window
  // (E5: rows filled together expire apart), while the control spreads over 0 ms.
  EXPECT_GE(*hi - *lo, 100);
  const double mean = std::accumulate(exp.begin(), exp.end(), 0.0) / 400.0;
  EXPECT_NEAR(mean, 1'000'300.0, 8.0);

  // Live iff now < expires_at.
  set_now(*lo - 1);
  EXPECT_EQ(jittered.stats().size, 400u);
  set_now(1'000'300);
  EXPECT_EQ(read_value(control, name_id(0)), "<miss>");
  set_now(1'000'299);
  EXPECT_EQ(read_value(control, name_id(0)), "v");

  // E5's end: a sweep after the window removes every row and counts it.
  EXPECT_EQ(jittered.sweep(1'000'361), 400u);
  EXPECT_EQ(jittered.stats().swept, 400u);
  EXPECT_EQ(jittered.stats().sweeps, 1u);
  EXPECT_EQ(jittered.size(), 0u);
}

TEST(L1Map, JitterOfHalfTtlCoversBothEnds) {
  set_now(0);
  L1Map m(config(5000, 10, 0.5));  // s = 5: 11 possible offsets
  std::vector<int> seen(11, 0);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    const std::int64_t e = expiry_of(m, name_id(i));
    ASSERT_GE(e, 5);
    ASSERT_LE(e, 15);
    ++seen[static_cast<std::size_t>(e - 5)];
  }
  for (int c : seen) EXPECT_GT(c, 100);  // ~182 expected each
}

TEST(L1Map, FullMapSkipsInsertsAndCountsThem) {  // E6, under the original's policy
  set_now(1'000'000);
  L1Map m(config(100, 5000, 0.1, Eviction::kSkip));
  for (int i = 0; i < 51; ++i)
    ASSERT_EQ(m.put(name_id(i), "live", ver(1)), InsertVerdict::kInserted);
  int inserted = 0;
  int skipped = 0;
  for (int i = 1000; i < 1150; ++i) {
    const InsertVerdict v = m.insert_fill(name_id(i), "fill", ver(1));
    inserted += v == InsertVerdict::kInserted;
    skipped += v == InsertVerdict::kFullSkip;
  }
  EXPECT_EQ(inserted, 49);
  EXPECT_EQ(skipped, 101);
  EXPECT_EQ(m.size(), 100u);
  EXPECT_EQ(m.stats().full_skips, 101u);
  // A row that exists is replaced even when full (size does not grow).
  EXPECT_EQ(m.insert_fill(name_id(0), "newer", ver(2)), InsertVerdict::kReplaced);
  EXPECT_EQ(read_value(m, name_id(0)), "newer");
}

TEST(L1Map, FullMapReclaimsExpiredRowsWithoutCountingThemSwept) {
  set_now(1000);
  L1Map m(config(10, 100, 0.0, Eviction::kSkip));
  for (int i = 0; i < 10; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  set_now(1099);
  EXPECT_EQ(m.put(name_id(50), "v", ver(1)), InsertVerdict::kFullSkip);
  set_now(1100);  // every row's expires_at == now: no longer live, so reclaimable
  EXPECT_EQ(m.put(name_id(50), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.stats().swept, 0u);
  EXPECT_EQ(m.stats().expired, 10u);  // a removal cause all the same
  EXPECT_EQ(m.stats().full_skips, 1u);
}

TEST(L1Map, SweepDeletesRowsExpiredBeforeNowAndCounts) {
  set_now(0);
  L1Map m(config(100, 100, 0.0));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  set_now(50);
  for (int i = 5; i < 8; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.sweep(100), 0u);  // expires_at == 100 is not < 100
  EXPECT_EQ(m.sweep(101), 5u);
  EXPECT_EQ(m.sweep(149), 0u);
  EXPECT_EQ(m.sweep(151), 3u);
  const L1Stats s = m.stats();
  EXPECT_EQ(s.swept, 8u);
  EXPECT_EQ(s.sweeps, 4u);
  EXPECT_EQ(s.size, 0u);
}

TEST(L1Map, WithoutAReadClockARowServesUntilTheSweepDropsIt) {
  // read_clock = kNone (TableSpec's L1Clock::kSweep): reads read no clock; the writer's sweep
  // is what ends a row, and every read that takes the map's time (find, visit, get, read)
  // agrees. read_at judges by the time it is given, whatever the read clock.
  set_now(0);
  L1Config c = config(100, 100, 0.0);
  c.read_clock = ReadClock::kNone;
  L1Map m(c);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  set_now(500);              // well past expires_at = 100
  EXPECT_EQ(m.tick(), 500);  // ticks move nothing under kNone
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  EXPECT_TRUE(m.visit(name_id(1).view(),
                      [](std::string_view value, std::string_view) { EXPECT_EQ(value, "v"); }));
  char buf[8];
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kHit);
  EXPECT_EQ(m.read_at(name_id(1).view(), buf, 500).status, ReadStatus::kMiss);
  EXPECT_EQ(m.sweep(500), 1u);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  EXPECT_FALSE(m.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  // With kCall (the default) the same row misses as soon as the clock passes its expiry.
  set_now(0);
  L1Map exact(config(100, 100, 0.0));
  ASSERT_EQ(exact.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  set_now(100);
  EXPECT_EQ(read_value(exact, name_id(1)), "<miss>");
  EXPECT_FALSE(exact.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  const L1Stats s = m.stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 3u);
}

TEST(L1Map, APublishedReadClockMovesOnlyWhenTheWriterTicks) {
  // read_clock = kPublished (TableSpec's L1Clock::kWriter): reads judge expiry by the time the
  // writer last published: the clock at construction, then each tick(). Never ahead of the
  // clock, so a row is never dropped early; late by at most the gap between ticks.
  set_now(0);
  L1Config c = config(100, 100, 0.0);
  c.read_clock = ReadClock::kPublished;
  L1Map m(c);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);  // expires_at 100
  set_now(99);
  EXPECT_EQ(m.tick(), 99);
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  set_now(500);  // the clock is past the expiry; the readers' time is not, until a tick
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  char buf[8];
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kHit);
  EXPECT_EQ(m.tick(), 500);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  EXPECT_FALSE(m.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kMiss);
  // A clock that reads earlier (a test's; a monotonic one never does) does not move it back.
  set_now(50);
  EXPECT_EQ(m.tick(), 50);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  // Under kCall a tick changes nothing: every read calls the clock.
  set_now(0);
  L1Map call(config(100, 100, 0.0));
  ASSERT_EQ(call.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(call.tick(), 0);
  set_now(100);
  EXPECT_EQ(read_value(call, name_id(1)), "<miss>");
}

TEST(L1Map, ABadReadClockIsRefusedByName) {
  L1Config c = config();
  c.read_clock = static_cast<ReadClock>(3);
  try {
    L1Map m(c);
    FAIL() << "a read clock of 3 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("L1Config.read_clock"), std::string::npos) << e.what();
  }
}

TEST(MonotonicClock, CoarseClockIsTheSameClockAtTickResolution) {
  for (int i = 0; i < 100; ++i) {
    const std::int64_t coarse = coarse_monotonic_ms();
    const std::int64_t exact = steady_clock_ms();
    EXPECT_LE(coarse, exact);
    EXPECT_GE(coarse, exact - 50);  // one kernel tick is 1-10 ms
  }
}

// A flush of an empty map walks no bucket, however large the index; sweeps of an
// empty map (or before any row can have expired) walk none either.
TEST(L1Map, ClearAndSweepOfAnEmptyBigMapWalkNoIndex) {
  set_now(0);
  L1Map m(config(1 << 20));
  ASSERT_GE(m.bucket_count(), std::size_t{1} << 20);
  for (int i = 0; i < 1000; ++i) {
    m.clear();
    m.sweep(fake_now() + i);
  }
  EXPECT_EQ(m.index_walks(), 0u);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  m.sweep(fake_now());  // the row expires at 5000: nothing can have expired yet
  EXPECT_EQ(m.index_walks(), 0u);
  m.clear();
  EXPECT_EQ(m.index_walks(), 1u);
  m.clear();
  EXPECT_EQ(m.index_walks(), 1u);
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
}  // namespace echo::table
