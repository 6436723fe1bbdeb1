// SPDX-License-Identifier: MIT
// The open-loop accounting of `echostore bench --load` (harness/open_loop.h): the nearest-rank
// percentiles, the schedule, and the proof that coordinated omission is absent: a synthetic
// sender stall of D ms is charged to every message scheduled inside it, where timing from the
// actual send would hide it.
#include <echo/harness/open_loop.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace echo::harness {
namespace {

constexpr std::int64_t kMs = 1'000'000, kUs = 1'000;

TEST(NearestRank, PicksTheCeilPTimesNthSmallest) {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);  // 1..1000
  std::shuffle(v.begin(), v.end(), std::mt19937(7));
  EXPECT_EQ(nearest_rank(v, 0.5), 500.0);
  EXPECT_EQ(nearest_rank(v, 0.99), 990.0);
  EXPECT_EQ(nearest_rank(v, 0.999), 999.0);
  EXPECT_EQ(nearest_rank(v, 1.0), 1000.0);
  std::vector<double> one{42.0};
  EXPECT_EQ(nearest_rank(one, 0.999), 42.0);
  std::vector<double> none;
  EXPECT_EQ(nearest_rank(none, 0.5), 0.0);
  // 10 samples: p99.9 is the largest (ceil(9.99) = 10th), p50 the 5th.
  std::vector<double> ten{9, 1, 8, 2, 7, 3, 6, 4, 5, 100};
  EXPECT_EQ(nearest_rank(ten, 0.999), 100.0);
  EXPECT_EQ(nearest_rank(ten, 0.5), 5.0);
}

TEST(OpenLoopRun, ScheduleIsT0PlusIOverRate) {
  OpenLoopRun run(50'000, 100);  // 20 us apart
  run.start(1'000 * kMs);
  EXPECT_EQ(run.due_ns(0), 1'000 * kMs);
  EXPECT_EQ(run.due_ns(1), 1'000 * kMs + 20 * kUs);
  EXPECT_EQ(run.due_ns(99), 1'000 * kMs + 99 * 20 * kUs);
  EXPECT_EQ(run.due_by(1'000 * kMs - 1), 0u);
  EXPECT_EQ(run.due_by(1'000 * kMs), 1u);
  EXPECT_EQ(run.due_by(1'000 * kMs + 20 * kUs), 2u);
  EXPECT_EQ(run.due_by(1'000 * kMs + 39 * kUs), 2u);
  EXPECT_EQ(run.due_by(2'000 * kMs), 100u) << "never more than the schedule holds";
}

// Every message sent on time and observed `lat` after its send: every percentile is `lat`.
TEST(OpenLoopRun, OnScheduleRunReportsItsLatency) {
  OpenLoopRun run(10'000, 10'000);
  run.start(5 * kMs);
  for (std::uint64_t i = 0; i < run.count(); ++i) {
    run.sent(i + 1, run.due_ns(i));
    run.observed(i, run.due_ns(i) + 30 * kUs);
  }
  const OpenLoopFigures f = run.figures(0.05);
  EXPECT_EQ(f.delivered, 10'000u);
  EXPECT_DOUBLE_EQ(f.p50_us, 30.0);
  EXPECT_DOUBLE_EQ(f.p999_us, 30.0);
  EXPECT_DOUBLE_EQ(f.max_us, 30.0);
  EXPECT_TRUE(f.sustained);
}

// The sender stalls for D = 50 ms half-way through a 1 s schedule at 10k/s: the 500 messages due
// inside the stall leave together when it ends, and each is observed 10 us after that. From its
// due time, message k of the stall waited (D - k * 0.1 ms) + 10 us: the stall is charged to all
// of them, and it shows at p99 (5% of the messages waited 0..50 ms). Timed from the actual send
// (coordinated omission), every message would read 10 us.
TEST(OpenLoopRun, AStallIsChargedToEveryMessageScheduledInsideIt) {
  constexpr std::uint64_t n = 10'000;
  constexpr std::int64_t stall_from = 500 * kMs, stall = 50 * kMs, after = 10 * kUs;
  OpenLoopRun run(10'000, n);
  run.start(0);
  std::vector<double> from_send;  // the coordinated-omission figure, for contrast
  std::uint64_t in_stall = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::int64_t due = run.due_ns(i);
    const bool stalled = due >= stall_from && due < stall_from + stall;
    const std::int64_t sent_at = stalled ? stall_from + stall : due;
    in_stall += stalled ? 1 : 0;
    run.sent(i + 1, sent_at);
    run.observed(i, sent_at + after);
    from_send.push_back(static_cast<double>(after) / 1e3);
  }
  ASSERT_EQ(in_stall, 500u);
  const OpenLoopFigures f = run.figures(0.05);
  EXPECT_EQ(f.delivered, n);
  EXPECT_TRUE(f.sustained) << "the sender caught up: its last message left on time";
  EXPECT_DOUBLE_EQ(f.p50_us, 10.0) << "outside the stall, messages are on time";
  // The 500 charged waits run 50 ms - k * 0.1 ms + 10 us for k = 0..499, above the 9,500 on-time
  // ones. p99 is the 9,900th smallest: the 400th smallest charged wait, the 101st largest (k =
  // 100); p99.9 the 9,990th: the 11th largest (k = 10).
  EXPECT_DOUBLE_EQ(f.p99_us, 50'000.0 - 100 * 100.0 + 10.0);
  EXPECT_DOUBLE_EQ(f.p999_us, 50'000.0 - 10 * 100.0 + 10.0);
  EXPECT_DOUBLE_EQ(f.max_us, 50'010.0) << "the first message due in the stall waited all of it";
  EXPECT_EQ(nearest_rank(from_send, 0.999), 10.0) << "timed from the send, the stall vanishes";
}

TEST(OpenLoopRun, ALostMessageOrALateSenderIsNotSustained) {
  OpenLoopRun lost(1'000, 1'000);
  lost.start(0);
  for (std::uint64_t i = 0; i < 1'000; ++i) {
    lost.sent(i + 1, lost.due_ns(i));
    if (i != 500) lost.observed(i, lost.due_ns(i) + kUs);
  }
  const OpenLoopFigures l = lost.figures(0.05);
  EXPECT_EQ(l.delivered, 999u);
  EXPECT_FALSE(l.sustained);

  // The sender ends 100 ms behind a 999 ms schedule: 10% late, beyond a 5% tolerance.
  OpenLoopRun late(1'000, 1'000);
  late.start(0);
  for (std::uint64_t i = 0; i < 1'000; ++i) {
    const std::int64_t at = late.due_ns(i) + static_cast<std::int64_t>(i) * 100 * kUs;
    late.sent(i + 1, at);
    late.observed(i, at + kUs);
  }
  const OpenLoopFigures s = late.figures(0.05);
  EXPECT_EQ(s.delivered, 1'000u);
  EXPECT_NEAR(s.end_late_fraction, 99.9 / 999.0, 1e-9);
  EXPECT_FALSE(s.sustained);
  EXPECT_TRUE(late.figures(0.2).sustained);
}

TEST(OpenLoopRun, RepeatsAndStrangersAreStraysNotFigures) {
  OpenLoopRun run(1'000, 10);
  run.start(0);
  for (std::uint64_t i = 0; i < 10; ++i) {
    run.sent(i + 1, run.due_ns(i));
    run.observed(i, run.due_ns(i) + 5 * kUs);
  }
  run.observed(3, 999 * kMs);  // a repeat, much later
  run.observed(10, 1 * kMs);   // beyond the schedule
  const OpenLoopFigures f = run.figures(0.05);
  EXPECT_EQ(f.delivered, 10u);
  EXPECT_EQ(f.strays, 2u);
  EXPECT_DOUBLE_EQ(f.max_us, 5.0);
}

}  // namespace
}  // namespace echo::harness
