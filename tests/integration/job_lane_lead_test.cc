// SPDX-License-Identifier: MIT
// The job lane's lead (TableSpec::job_lead): it drops the row ahead of its job, and leads refused
// by a full ring or garbled are counted while the jobs still drop every row.

#include <echo/engine/internal/job_consumer.h>
#include "job_lane_fixture.h"

namespace echo::test {
namespace {

// ---- the lead (TableSpec::job_lead) ----

// The lead drops a member's row before its job is even claimed: the member queue is paused, so
// the job waits pending, yet the row goes at once (the lead's PUBLISH, one server turn ahead of
// the admission). Resumed, the job is claimed, finds the row gone (stale) and completes. A table
// declared with job_lead off, on the same two nodes, holds no lead subscription, publishes no
// lead, and keeps its row until its job is applied.
TEST_F(JobLane, ALeadDropsTheRowWhileItsJobWaitsInAPausedQueueAndTheJobThenCompletesStale) {
  const std::string on = "leadon", off = "leadoff";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  auto off_spec = lane_spec(off, k);
  off_spec.job_lead = false;
  auto off_writer = writer_spec(off, k.lease_ms);
  off_writer.job_lead = false;
  auto n = node(95, {lane_spec(on, k), off_spec});
  auto w = node(96, {writer_spec(on, k.lease_ms), off_writer});
  ASSERT_TRUE(n && w);
  const auto lead_on = engine::JobLaneKeys::for_table(on).lead;
  const auto lead_off = engine::JobLaneKeys::for_table(off).lead;
  RedisReply numsub = command_argv(client(), {"PUBSUB", "NUMSUB", lead_on, lead_off});
  ASSERT_TRUE(numsub && numsub->type == REDIS_REPLY_ARRAY && numsub->elements == 4);
  EXPECT_EQ(numsub->element[1]->integer, 1) << "the member listens on its table's lead";
  EXPECT_EQ(numsub->element[3]->integer, 0) << "job_lead off: no subscription";

  // Pause both member queues (as APausedMemberQueueIsNotClaimedFromOrHandedOffToUntilItsResume):
  // after two empty claims each and the credit list gone, neither claim nor hand-off takes a job.
  for (const auto& t : {on, off}) {
    const std::string base = member_base(t, 95);
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    ASSERT_TRUE(command_argv(client(), {"HSET", base + "meta", "paused", "1"}));
    const std::uint64_t tried = consumer_of(*n, t)->empty_claims;
    ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->empty_claims >= tried + 2; }));
    ASSERT_TRUE(within(5s, [&] {
      return integer_of(client(), {"EXISTS", base + "parked"}) == 0;
    })) << "the consumer's member_park never took its hand-off credits down";
  }
  std::map<std::string, BrandedId> names;
  for (const auto& t : {on, off}) {
    const BrandedId name = fresh_id("AST");
    names.emplace(t, name);
    const BrandedId v1 = w->mint("AST").value();
    ASSERT_TRUE(w->put(t, name.view(), "px=100.00", v1));
    ASSERT_TRUE(n->get(t, name.view()));
    ASSERT_TRUE(l1_holds(*n, t, name));
    const BrandedId v2 = w->mint("AST").value();
    ASSERT_TRUE(w->put(t, name.view(), "px=101.00", v2));
    auto admitted = w->enqueue(t, fresh_id("PRT"), name.view(), v2);
    ASSERT_TRUE(admitted && admitted->size() == 1);
    EXPECT_EQ((*admitted)[0].admission, Admission::kEnqueued) << t << ": paused, not handed off";
  }
  EXPECT_EQ(w->stats().fan_out.leads, 1u) << "one lead, for the table that declares it";
  EXPECT_EQ(w->stats().fan_out.lead_receivers, 1u);
  ASSERT_TRUE(within(5s, [&] { return !l1_holds(*n, on, names.at(on)); }))
      << "the lead did not drop the row";
  std::this_thread::sleep_for(300ms);  // three beats: the paused queues still hold their jobs
  for (const auto& t : {on, off}) {
    const auto c = consumer_of(*n, t).value();
    EXPECT_EQ(c.claimed + c.handed_off, 0u) << t;
  }
  EXPECT_TRUE(l1_holds(*n, off, names.at(off))) << "job_lead off: the row waits for its job";
  EXPECT_EQ(engine::internal::writer_of(*n, on)->stats().applied, 1u);
  // The lead's ring, or the io thread itself while the writer waited (direct_apply).
  EXPECT_EQ(engine::internal::writer_of(*n, on)->ring_stats().at(1).applied +
                engine::internal::writer_of(*n, on)->stats().direct_applies,
            1u)
      << "the lead applied it";

  for (const auto& t : {on, off}) {
    ASSERT_TRUE(command_argv(client(), {"HDEL", member_base(t, 95) + "meta", "paused"}));
  }
  ASSERT_TRUE(within(5s, [&] {
    return consumer_of(*n, on)->completed == 1 && consumer_of(*n, off)->completed == 1;
  }));
  EXPECT_EQ(consumer_of(*n, on)->stale_applies, 1u) << "the job found the lead's drop";
  EXPECT_EQ(engine::internal::writer_of(*n, on)->stats().applied, 1u)
      << "exactly one effective drop";
  EXPECT_EQ(consumer_of(*n, off)->applied, 1u);
  EXPECT_FALSE(l1_holds(*n, off, names.at(off)));
  EXPECT_EQ(engine::internal::writer_of(*n, off)->ring_stats().size(), 1u)
      << "job_lead off: no lead ring";
  for (const auto& t : {on, off}) {
    auto after = n->get(t, names.at(t).view());
    ASSERT_TRUE(after);
    EXPECT_EQ(after->value, "px=101.00") << t;
  }
}

// Leads are at-most-once and cost nothing when lost: a held writer lets its small lead ring fill,
// the refused leads are counted and drop nothing (no flush: the jobs follow), a garbage frame on
// the lead channel is counted, and after the release every job drops its row.
TEST_F(JobLane, LeadsRefusedByAFullRingOrGarbledAreCountedAndTheJobsStillDropEveryRow) {
  const std::string t = "leadfull";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .ring_capacity = 4, .credits = 4};
  auto n = node(97, {lane_spec(t, k)});
  auto w = node(98, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(n && w);
  const std::string base = member_base(t, 97);
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  constexpr int kNames = 12;
  std::vector<BrandedId> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(fresh_id("AST"));
    ASSERT_TRUE(w->put(t, names.back().view(), "old", w->mint("AST").value()));
    ASSERT_TRUE(n->get(t, names.back().view()));
  }
  RedisReply garbage =
      command_argv(client(), {"PUBLISH", engine::JobLaneKeys::for_table(t).lead, "garbage"});
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->integer, 1);
  ASSERT_TRUE(within(5s, [&] {
    for (const auto& ts : n->stats().tables) {
      if (ts.name == t) return ts.garbage == 1;
    }
    return false;
  }));
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    for (const auto& name : names) {
      const BrandedId v2 = w->mint("AST").value();
      ASSERT_TRUE(w->put(t, name.view(), "new", v2));
      ASSERT_TRUE(w->enqueue(t, fresh_id("PRT"), name.view(), v2));
    }
    // Every lead has reached the io thread: 4 fit the ring, the rest were refused.
    ASSERT_TRUE(within(5s, [&] {
      const auto lead = engine::internal::writer_of(*n, t)->ring_stats().at(1);
      return lead.published + lead.dropped == kNames;
    }));
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == kNames; }))
      << stats_line(*n, t);
  const auto lead = engine::internal::writer_of(*n, t)->ring_stats().at(1);
  EXPECT_EQ(lead.published, 4u);
  EXPECT_EQ(lead.dropped, kNames - 4u);
  EXPECT_EQ(engine::internal::writer_of(*n, t)->stats().ring_flushes, 0u)
      << "a refused lead flushes nothing";
  EXPECT_EQ(engine::internal::writer_of(*n, t)->stats().applied,
            static_cast<std::uint64_t>(kNames));
  for (const auto& name : names) {
    EXPECT_FALSE(l1_holds(*n, t, name)) << name.str();
    auto now = n->get(t, name.view());
    ASSERT_TRUE(now);
    EXPECT_EQ(now->value, "new");
  }
  std::printf("[ lead ] ring 4: %llu leads applied, %llu refused; %d jobs completed\n",
              static_cast<unsigned long long>(lead.published),
              static_cast<unsigned long long>(lead.dropped), kNames);
}

}  // namespace
}  // namespace echo::test
