// SPDX-License-Identifier: MIT
// How the job lane hands jobs to a consumer: a paused member queue is left alone until resumed,
// malformed payloads are retried to dead, and credits bound what a held writer is owed.

#include "job_lane_fixture.h"

namespace echo::test {
namespace {

// Sends `commands` pipelined on `c` (one write, then every reply in order); an empty pointer for
// a command whose reply could not be read.
std::vector<RedisReply> pipelined(redisContext* c,
                                  const std::vector<std::vector<std::string>>& commands) {
  for (const auto& args : commands) {
    std::vector<const char*> p;
    std::vector<std::size_t> len;
    for (const auto& a : args) {
      p.push_back(a.data());
      len.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(args.size()), p.data(), len.data());
  }
  std::vector<RedisReply> replies;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) raw = nullptr;
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

// ---- a paused member queue ----

TEST_F(JobLane, APausedMemberQueueIsNotClaimedFromOrHandedOffToUntilItsResume) {
  const std::string t = "qpause";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  auto n = node(87, {lane_spec(t, k)});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 87);
  const std::string g = fresh_id("PRT").str();
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  // Queue pause (meta paused): the hand-off and the claim both hold off. A claim whose
  // HGET ran before the HSET may still be in flight: wait for two more (claims never overlap), so
  // every claim from then on asked after the pause. The plain HSET takes no credit down itself:
  // the consumer's member_park, sent before the claim on every beat, finds the pause and lists
  // none (member_park.lua), so once the list is gone the hand-off holds off too.
  ASSERT_TRUE(command_argv(client(), {"HSET", base + "meta", "paused", "1"}));
  const std::uint64_t tried = consumer_of(*n, t)->empty_claims;
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->empty_claims >= tried + 2; }));
  // Two empty claims do not prove a member_park ran after the HSET: a claim may follow a wake or
  // an ack rather than a beat, with no member_park before it (a soak run under load handed a job
  // off on credits listed before the pause). Wait for what the hand-off reads: the credit list,
  // gone once a member_park has seen the pause.
  ASSERT_TRUE(within(5s, [&] {
    return integer_of(client(), {"EXISTS", base + "parked"}) == 0;
  })) << "the consumer's member_park never took its hand-off credits down";
  const std::string via_lane = fresh_id("JOB").str(), via_writer = fresh_id("JOB").str();
  RedisReply a = run_script(client(), "genqueue",
                            {base + "job:" + via_lane, base + "g:" + g + ":pending", base + "ring",
                             base + "paused", base + "glimit", base + "gactive", base + "wake"},
                            {via_lane, frame_text(fresh_id("AST"), fresh_id("AST")), g});
  ASSERT_EQ(text(a.get()), "1");
  RedisReply b =
      run_script(client(), "member_enqueue", {base + "live"},
                 {base, via_writer, frame_text(fresh_id("AST"), fresh_id("AST")), g, "30000"});
  ASSERT_EQ(text(b.get()), "1");  // into the lane, not handed off
  const auto before = consumer_of(*n, t).value();
  std::this_thread::sleep_for(500ms);  // five beats, each of which would claim
  const auto paused = consumer_of(*n, t).value();
  EXPECT_EQ(paused.claimed + paused.handed_off, before.claimed + before.handed_off);
  EXPECT_GT(paused.empty_claims, before.empty_claims) << "no claim was even tried";
  EXPECT_EQ(hget(client(), base + "job:" + via_lane, "state"), "pending");
  EXPECT_EQ(hget(client(), base + "job:" + via_writer, "state"), "pending");
  // Resume: no wake is pushed, the next beat claims both.
  ASSERT_TRUE(command_argv(client(), {"HDEL", base + "meta", "paused"}));
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->completed == before.completed + 2; }));
  EXPECT_EQ(consumer_of(*n, t)->claimed, before.claimed + 2);
}

// ---- malformed payloads ----

TEST_F(JobLane, MalformedPayloadsAreRetriedWithTheirReasonAndGoDeadAfterMaxAttempts) {
  const std::string t = "bad";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .retry_delay_ms = 20, .max_attempts = 3};
  auto m = node(90, {lane_spec(t, k)});
  ASSERT_TRUE(m);
  const std::string base = member_base(t, 90);
  const std::string g = fresh_id("PRT").str();

  // Through the lane (a claim): garbage.
  const std::string job_a = fresh_id("JOB").str();
  RedisReply a = run_script(client(), "genqueue",
                            {base + "job:" + job_a, base + "g:" + g + ":pending", base + "ring",
                             base + "paused", base + "glimit", base + "gactive", base + "wake"},
                            {job_a, "garbage", g});
  ASSERT_EQ(text(a.get()), "1");
  // Through the writer's fanout (a hand-off when the node is parked): a well-formed message of
  // the wrong kind.
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  const std::string job_b = fresh_id("JOB").str();
  const std::string wrong_kind = frame_text(fresh_id("ORD"), fresh_id("ORD"));
  RedisReply b = run_script(client(), "member_enqueue", {base + "live"},
                            {base, job_b, wrong_kind, g, "30000"});
  ASSERT_TRUE(b && b->type == REDIS_REPLY_INTEGER && (b->integer == 1 || b->integer == 2))
      << text(b.get());

  for (const std::string& job : {job_a, job_b}) {
    ASSERT_TRUE(within(10s, [&] { return hget(client(), base + "job:" + job, "state") == "dead"; }))
        << job << " state " << hget(client(), base + "job:" + job, "state");
    EXPECT_EQ(hget(client(), base + "job:" + job, "attempts"), "3");
    EXPECT_EQ(text(command_argv(client(), {"ZSCORE", base + "dead", job}).get()), "0");
  }
  EXPECT_TRUE(hget(client(), base + "job:" + job_a, "last_error")
                  .starts_with("malformed coherence payload"))
      << hget(client(), base + "job:" + job_a, "last_error");
  EXPECT_EQ(hget(client(), base + "job:" + job_b, "last_error"), "kind: ORD is not AST");
  EXPECT_EQ(hget(client(), base + "metrics:failed", "count"), "2");
  // The row is dead when the script runs; the consumer counts it when the reply lands.
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*m, t)->dead == 2; }));
  auto s = consumer_of(*m, t).value();
  EXPECT_EQ(s.malformed, 6u);
  EXPECT_EQ(s.retried, 4u);
  EXPECT_EQ(s.dead, 2u);
  EXPECT_EQ(s.completed + s.applied + s.stale_applies, 0u);
  std::printf(
      "[ malformed ] 2 jobs x 3 attempts: malformed %llu, retried %llu, dead %llu (%llu handed "
      "off)\n",
      static_cast<unsigned long long>(s.malformed), static_cast<unsigned long long>(s.retried),
      static_cast<unsigned long long>(s.dead), static_cast<unsigned long long>(s.handed_off));

  // The lane carries on: a good message after the garbage is applied and completed.
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(m->get(t, name.view()));
  // fresh_id's node (1000) orders it after the fill's version even within the same ms.
  ASSERT_TRUE(m->enqueue(t, fresh_id("PRT"), name.view(), fresh_id("AST")));
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*m, t)->completed == 1; }));
  // The job finds the row gone when the lead (job_lead) dropped it first: applied or stale.
  EXPECT_EQ(consumer_of(*m, t)->applied + consumer_of(*m, t)->stale_applies, 1u);
  EXPECT_FALSE(l1_holds(*m, t, name));
}

// ---- credits ----

TEST_F(JobLane, CreditsBoundWhatAHeldWriterIsOwedAndEverythingDrainsWithoutADropAfter) {
  const std::string t = "cred";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .ring_capacity = 8, .credits = 4};
  auto n = node(91, {lane_spec(t, k)});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 91);
  const std::string g = fresh_id("PRT").str();
  constexpr int kJobs = 40;
  std::uint64_t most_held = 0;
  long long most_active = 0;
  auto sample = [&] {
    most_held = std::max(most_held, consumer_of(*n, t)->in_flight);
    most_active = std::max(most_active, integer_of(client(), {"ZCARD", base + "active"}));
  };
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    // Phase 1, the claim path: jobs straight into the node's lane (genqueue never hands off).
    for (int i = 0; i < kJobs; ++i) {
      const std::string job = fresh_id("JOB").str();
      const std::string payload = frame_text(fresh_id("AST"), fresh_id("AST"));
      RedisReply r = run_script(client(), "genqueue",
                                {base + "job:" + job, base + "g:" + g + ":pending", base + "ring",
                                 base + "paused", base + "glimit", base + "gactive", base + "wake"},
                                {job, payload, g});
      ASSERT_EQ(text(r.get()), "1");
      sample();
    }
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"ZCARD", base + "active"}) == 4; }));
    for (int i = 0; i < 30; ++i) {  // 300 ms, three beats: it claims no more
      sample();
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(integer_of(client(), {"ZCARD", base + "g:" + g + ":pending"}), kJobs - 4);
    EXPECT_EQ(consumer_of(*n, t)->in_flight, 4u);
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == kJobs; }))
      << counters_of(*n, t)["completed"] << " completed";
  EXPECT_LE(most_held, k.credits);
  EXPECT_LE(most_active, static_cast<long long>(k.credits));

  // Phase 2, the hand-off path: a burst of fanouts, pipelined, while the node is parked.
  std::uint64_t handed = 0;
  {
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    const lua::Script* fan = lua::find_script("member_enqueue");
    ASSERT_NE(fan, nullptr);
    RedisReply loaded = command_argv(client(), {"SCRIPT", "LOAD", std::string(fan->source)});
    ASSERT_EQ(text(loaded.get()), fan->sha1);
    std::vector<std::vector<std::string>> batch;
    for (int i = 0; i < kJobs; ++i) {
      batch.push_back({"EVALSHA", std::string(fan->sha1), "1", base + "live", base,
                       fresh_id("JOB").str(), frame_text(fresh_id("AST"), fresh_id("AST")), g,
                       "30000"});
    }
    for (const RedisReply& r : pipelined(client(), batch)) {
      ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1) << text(r.get());
      if (r->integer == 2) ++handed;
    }
    for (int i = 0; i < 30; ++i) {
      sample();
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_LE(consumer_of(*n, t)->in_flight, k.credits) << handed << " handed off in the burst";
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == 2 * kJobs; }))
      << counters_of(*n, t)["completed"] << " completed";
  EXPECT_LE(most_held, k.credits);
  auto c = counters_of(*n, t);
  EXPECT_EQ(c["ring_dropped"], 0u);
  EXPECT_EQ(c["complete_stale"] + c["complete_gone"] + c["complete_errors"], 0u);
  EXPECT_EQ(count_keys(client(), (base + "job:*").c_str()), 0u);
  std::printf(
      "[ credits ] ring 8, credits 4: most held %llu, most active on the server %lld; "
      "%llu of %d handed off in the burst; %llu completed, ring dropped %llu\n",
      static_cast<unsigned long long>(most_held), most_active,
      static_cast<unsigned long long>(handed), kJobs,
      static_cast<unsigned long long>(c["completed"]),
      static_cast<unsigned long long>(c["ring_dropped"]));
}

TEST_F(JobLane, AcksBeyondOneDrainPassAllCompleteWithoutWaitingForTheirLease) {
  // 6,000 jobs claimed while the writer is held, then applied in one batch: 6,000 acks in one
  // post, more than one 4,096-ack drain pass. Every job completes now, not after its lease
  // (60 s here, so the reaper cannot be what finishes them).
  const std::string t = "acks";
  const LaneKnobs k{.lease_ms = 60000, .beat_ms = 100, .ring_capacity = 16384, .credits = 8192};
  auto spec = lane_spec(t, k);
  spec.max_batch = k.ring_capacity;  // the held-back jobs apply (and ack) in one batch
  auto n = node(92, {spec});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 92);
  const std::string g = fresh_id("PRT").str();
  constexpr int kJobs = 6000;
  const lua::Script* genqueue = lua::find_script("genqueue");
  ASSERT_NE(genqueue, nullptr);
  RedisReply loaded = command_argv(client(), {"SCRIPT", "LOAD", std::string(genqueue->source)});
  ASSERT_EQ(text(loaded.get()), genqueue->sha1);
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    std::vector<std::vector<std::string>> batch;
    for (int i = 0; i < kJobs; ++i) {
      const std::string job = fresh_id("JOB").str();
      batch.push_back({"EVALSHA", std::string(genqueue->sha1), "7", base + "job:" + job,
                       base + "g:" + g + ":pending", base + "ring", base + "paused",
                       base + "glimit", base + "gactive", base + "wake", job,
                       frame_text(fresh_id("AST"), fresh_id("AST")), g});
    }
    for (const RedisReply& r : pipelined(client(), batch)) ASSERT_EQ(text(r.get()), "1");
    ASSERT_TRUE(within(60s, [&] { return consumer_of(*n, t)->in_flight == kJobs; }))
        << consumer_of(*n, t)->in_flight << " of " << kJobs << " claimed";
  }
  ASSERT_TRUE(within(20s, [&] { return consumer_of(*n, t)->completed == kJobs; }))
      << counters_of(*n, t)["completed"] << " of " << kJobs << " completed; "
      << integer_of(client(), {"ZCARD", base + "active"}) << " still active on the server";
  auto c = counters_of(*n, t);
  EXPECT_EQ(c["reaped"], 0u);
  EXPECT_EQ(c["complete_stale"] + c["complete_gone"] + c["complete_errors"], 0u);
  EXPECT_EQ(c["ring_dropped"], 0u);
  EXPECT_EQ(integer_of(client(), {"ZCARD", base + "active"}), 0);
}

// ---- the hand-off credits ----

TEST_F(JobLane, TheListedCreditsAreTheFreeOnesFallPerHandOffAndAreListedAgainBelowHalf) {
  const std::string t = "flag";
  LaneKnobs k{.lease_ms = 30000, .beat_ms = 5000};
  k.credits = 8;
  auto p = node(97, {lane_spec(t, k)});
  auto w = node(98, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(p && w);
  const std::string parked = member_base(t, 97) + "parked";
  auto flag = [&] { return text(command_argv(client(), {"LLEN", parked}).get()); };
  ASSERT_TRUE(within(5s, [&] { return flag() == "8"; })) << flag();
  const long long pttl = integer_of(client(), {"PTTL", parked});
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 2 * k.beat_ms + 1000);  // renewed by every beat, gone two beats after a crash
  // The consumer's first pump parks, then claims once (an empty claim) before it idles: taken
  // only once that claim answered, so it cannot land between `start` and the end.
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*p, t)->empty_claims >= 1; }));
  const BrandedId group = fresh_id("PRT");
  const auto start = consumer_of(*p, t).value();
  for (int i = 1; i <= 5; ++i) {
    const auto before = consumer_of(*p, t).value();
    auto admitted = w->enqueue(t, group, fresh_id("AST").view(), w->mint("AST").value());
    ASSERT_TRUE(admitted && admitted->size() == 1);
    EXPECT_EQ((*admitted)[0].admission, Admission::kHandedOff) << "job " << i;
    // Completed, and blocked again (the re-block waits for the writer's ack).
    ASSERT_TRUE(within(5s, [&] {
      const auto c = consumer_of(*p, t).value();
      return c.completed == static_cast<std::uint64_t>(i) && c.parks > before.parks;
    }));
    if (i <= 4) {
      // Each hand-off takes one credit; with half of them still listed, no refresh is sent.
      EXPECT_EQ(flag(), std::to_string(8 - i)) << "after job " << i;
    }
  }
  // The fifth took the list below half of the free credits: the ack's drain listed them again.
  EXPECT_TRUE(within(5s, [&] { return flag() == "8"; })) << flag();
  const auto c = consumer_of(*p, t).value();
  EXPECT_EQ(c.handed_off, 5u);
  EXPECT_EQ(c.claimed, 0u);
  EXPECT_EQ(c.empty_claims, start.empty_claims);  // no claim around a hand-off
}

}  // namespace
}  // namespace echo::test
