// SPDX-License-Identifier: MIT
// What the job lane costs against a real server: F6's medians for both lanes carrying a thousand
// messages to one row, and a parked consumer's silence and prompt wake (bus gate 3.4 G5).

#include "job_lane_fixture.h"

namespace echo::test {
namespace {

// Sum of `calls` over INFO commandstats, leaving out INFO itself (the probe's own command).

long long commands_served(redisContext* c) {
  const std::string info = text(command(c, "INFO commandstats").get());
  long long total = 0;
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("cmdstat_") || line.starts_with("cmdstat_info:")) continue;
    const auto at = line.find("calls=");
    if (at != std::string::npos) total += std::atoll(line.c_str() + at + 6);
  }
  return total;
}

double median_us(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// ---- F6: the price of the job lane ----

TEST_F(JobLane, F6BothLanesCarryAThousandMessagesToOneRowAndTheirMediansAreRecorded) {
  constexpr int kMessages = 1000;
  auto bspec = table_spec("f6b", "AST", CoherenceMode::kBroadcast, answering("px=1"));
  auto jspec = lane_spec("f6j", LaneKnobs{.lease_ms = 30000, .beat_ms = 1000});
  auto r = node(61, {bspec, jspec});
  auto s = node(60, {writer_spec("f6j", 30000)});
  ASSERT_TRUE(r && s);
  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  const engine::TableWriter& rb = writer_of(*r, "f6b");
  const engine::TableWriter& rj = writer_of(*r, "f6j");
  std::vector<double> broadcast_us, job_us;
  // Both lanes on the same name, alternating, each message timed from the writer's call to the
  // receiving writer's apply.
  // Through the ring, or (broadcast, writer parked) applied by the io thread: direct_apply.
  auto applied = [](const engine::TableWriter& w) {
    return w.ring_stats().front().applied + w.stats().direct_applies;
  };
  for (int i = 0; i < kMessages; ++i) {
    const BrandedId v = s->mint("AST").value();
    auto t0 = Clock::now();
    auto heard = s->broadcast("f6b", name.view(), v);
    ASSERT_TRUE(heard && *heard == 1);
    ASSERT_TRUE(within(5s, [&] { return applied(rb) == static_cast<std::uint64_t>(i + 1); }));
    broadcast_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    t0 = Clock::now();
    auto admitted = s->enqueue("f6j", group, name.view(), v);
    ASSERT_TRUE(admitted && admitted->size() == 1);
    // The job's own ring (a job always goes through the writer; its lead may have been applied
    // by the io thread, counted in direct_applies, and is not the message timed here).
    ASSERT_TRUE(within(
        5s, [&] { return rj.ring_stats().front().applied == static_cast<std::uint64_t>(i + 1); }));
    job_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*r, "f6j")->completed == kMessages; }));
  const auto c = consumer_of(*r, "f6j").value();
  EXPECT_EQ(c.complete_stale + c.complete_gone + c.complete_errors + c.dead, 0u);
  EXPECT_EQ(count_keys(client(), (member_base("f6j", 61) + "job:*").c_str()), 0u);
  const double b50 = median_us(broadcast_us), j50 = median_us(job_us);
  std::printf(
      "[ F6 ] %d messages each: broadcast median %.1f us (p99 %.1f), job lane median %.1f us "
      "(p99 %.1f), %.2fx; %llu of the jobs handed off to the parked consumer\n",
      kMessages, b50, percentile(broadcast_us, 0.99), j50, percentile(job_us, 0.99), j50 / b50,
      static_cast<unsigned long long>(c.handed_off));
  // Loose sanity only: the benchmark owns the figures.
  EXPECT_GT(b50, 0.0);
  EXPECT_LT(b50, 50000.0);
  EXPECT_LT(j50, 50000.0);
}

// ---- parking (bus gate 3.4 G5) ----

TEST_F(JobLane, AParkedConsumerSendsNoCommandFor400msAndAnEnqueueWakesItWellUnderItsBeat) {
  const std::string t = "park";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 5000};
  engine::EngineOptions quiet = node_options(server(), 93);
  quiet.node_lease = std::chrono::hours(1);  // its renewal (every third) stays out of the 400 ms
  auto p = start_node(quiet, {lane_spec(t, k)});
  auto w = node(94, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(p && w);
  const std::string base = member_base(t, 93);
  ASSERT_TRUE(within(5s, [&] {
    return consumer_of(*p, t)->parks >= 1 && integer_of(client(), {"EXISTS", base + "parked"}) == 1;
  }));
  std::this_thread::sleep_for(20ms);  // the SET parked and the BLPOP have landed
  const long long before = commands_served(client());
  std::this_thread::sleep_for(400ms);
  const long long during = commands_served(client()) - before;
  EXPECT_EQ(during, 0) << "commands served while the only consumer was parked";

  const BrandedId name = fresh_id("AST");
  const auto t0 = Clock::now();
  auto admitted = w->enqueue(t, fresh_id("PRT"), name.view(), w->mint("AST").value());
  ASSERT_TRUE(admitted && admitted->size() == 1);
  EXPECT_EQ((*admitted)[0].admission, Admission::kHandedOff);
  ASSERT_TRUE(within(5s, [&] { return ring_applied(*p, t) == 1; }));
  const double woke_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(woke_ms, 500.0) << "the beat is 5000 ms";
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*p, t)->completed == 1; }));
  std::printf(
      "[ G5 ] parked: %lld commands in 400 ms; woken and applied %.2f ms after the enqueue "
      "(beat %lld ms)\n",
      during, woke_ms, static_cast<long long>(k.beat_ms));
}

}  // namespace
}  // namespace echo::test
