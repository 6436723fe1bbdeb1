// SPDX-License-Identifier: MIT
// member_enqueue against a real server: a fan-out admits one job into each live member's queue
// (dedup per queue), hands it claimed to a parked member, and skips a member whose live key
// expired.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

// ---- member_enqueue -------------------------------------------------------------------------

TEST_F(BusFanout, FanoutToThreeLiveMembersEnqueuesThreeAndASecondCallIsThreeDuplicates) {
  for (const char* m : {"1", "2", "3"}) mem().beat(m, 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "first", g), all({"1", "2", "3"}, 1));
  for (const char* m : {"1", "2", "3"}) {
    Queue q = mem().member(m);
    EXPECT_EQ(q.jobf(id, "state"), "pending") << m;
    EXPECT_EQ(q.jobf(id, "attempts"), "0") << m;
    EXPECT_EQ(q.jobf(id, "payload"), "first") << m;
    EXPECT_EQ(q.jobf(id, "group"), g) << m;
    EXPECT_EQ(s().zscore(q.lane(g), id), "0") << m;
    EXPECT_EQ(q.ring(), std::vector<std::string>{g}) << m;  // ring insert with wake
    EXPECT_EQ(q.llen("wake"), 1) << m;
    EXPECT_EQ(s().list("SMEMBERS %s", q.key("groups")), std::vector<std::string>{g}) << m;
    EXPECT_EQ(q.llen("deliver"), 0) << m;
  }
  EXPECT_EQ(mem().fanout(id, "second", g), all({"1", "2", "3"}, 0));
  for (const char* m : {"1", "2", "3"}) {
    Queue q = mem().member(m);
    EXPECT_EQ(q.jobf(id, "payload"), "first") << m;
    EXPECT_EQ(q.zcard(q.lane(g)), 1) << m;
    EXPECT_EQ(q.llen("wake"), 1) << m;  // a duplicate pushes no wake
  }
  // Nothing in the shared queue when shared is "0".
  EXPECT_FALSE(mem().shared().exists(mem().shared().job(id)));
}

TEST_F(BusFanout, DedupIsPerMemberQueue) {
  mem().beat("1", 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "p", g), all({"1"}, 1));
  mem().beat("2", 60000);  // joins after the first fanout
  EXPECT_EQ(mem().fanout(id, "p", g), (Fanned{{"1", 0}, {"2", 1}}));
}

TEST_F(BusFanout, AnExpiredMemberIsSkippedAndAJoinerIsFedOnlyFromItsBeat) {
  mem().beat("1", 60000);
  mem().beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  const std::string before = job_id(), after = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(before, "p", g), all({"1"}, 1));
  EXPECT_EQ(keys_of(mem().member("2")), std::vector<std::string>{});  // not one key written
  mem().beat("3", 60000);
  EXPECT_EQ(mem().fanout(after, "p", g), all({"1", "3"}, 1));
  Queue joiner = mem().member("3");
  EXPECT_FALSE(joiner.exists(joiner.job(before)));
  EXPECT_TRUE(joiner.exists(joiner.job(after)));
  EXPECT_EQ(keys_of(mem().member("2")), std::vector<std::string>{});
}

TEST_F(BusFanout, SharedOneAlsoGenqueuesIntoTheSharedQueueUnderStar) {
  mem().beat("1", 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "p", g, true), (Fanned{{"1", 1}, {"*", 1}}));
  Queue shared = mem().shared();
  EXPECT_EQ(shared.jobf(id, "state"), "pending");
  EXPECT_EQ(shared.jobf(id, "group"), g);
  EXPECT_EQ(s().zscore(shared.lane(g), id), "0");
  EXPECT_EQ(shared.ring(), std::vector<std::string>{g});
  EXPECT_EQ(shared.llen("wake"), 1);
  EXPECT_FALSE(shared.exists(shared.key("groups")));  // the original's queue gains no new key
  EXPECT_EQ(mem().fanout(id, "p", g, true), (Fanned{{"1", 0}, {"*", 0}}));
  // With no live member, only the shared queue.
  Members none(s(), "ecc.coh.other");
  EXPECT_EQ(none.fanout(job_id(), "p", g, true), (Fanned{{"*", 1}}));
  // The original's consumer claims it from the shared queue unchanged.
  const auto c = shared.gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (Claimed{id, "p", 1, g}));
  EXPECT_TRUE(is_integer(shared.complete(id, "1"), 1));
}

TEST_F(BusFanout, AParkedMemberIsHandedTheJobClaimedAndAnUnparkedOneGetsALaneEntryAndAWake) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue unparked = mem().member("1"), parked = mem().member("2");
  parked.park(10000);
  const std::string id = job_id(), g = group_id();
  const std::string payload = "AST0KHTOWnGLuC:TXN0NgWEfAEJfs\nwith a newline";
  const long long t0 = s().now_ms();
  EXPECT_EQ(mem().fanout(id, payload, g, false, 5000), (Fanned{{"1", 1}, {"2", 2}}));
  const long long t1 = s().now_ms();

  // The hand-off: one deliver element, the job claimed as gclaim would (token 1, lease, gactive).
  const auto delivered = parked.deliver();
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0], id + "\n1\n" + g + "\n" + payload);
  EXPECT_EQ(parse_delivered(delivered[0]), (Claimed{id, payload, 1, g}));
  EXPECT_EQ(parked.jobf(id, "state"), "active");
  EXPECT_EQ(parked.jobf(id, "attempts"), "1");
  EXPECT_EQ(parked.jobf(id, "payload"), payload);
  EXPECT_EQ(parked.jobf(id, "group"), g);
  const long long deadline = std::stoll(s().zscore(parked.key("active"), id));
  EXPECT_GE(deadline, t0 + 5000);
  EXPECT_LE(deadline, t1 + 5000);
  EXPECT_EQ(parked.hget("gactive", g.c_str()), "1");
  EXPECT_EQ(parked.zcard(parked.lane(g)), 0);
  EXPECT_EQ(parked.ring(), std::vector<std::string>{});
  EXPECT_EQ(parked.llen("wake"), 0);  // the deliver push is what unblocks the consumer
  // No lane entry, so no groups entry: member_drop finds a hand-off through active.
  EXPECT_FALSE(parked.exists(parked.key("groups")));

  // The unparked member: a lane entry, the group in the ring, one wake.
  EXPECT_EQ(unparked.jobf(id, "state"), "pending");
  EXPECT_EQ(s().zscore(unparked.lane(g), id), "0");
  EXPECT_EQ(unparked.ring(), std::vector<std::string>{g});
  EXPECT_EQ(unparked.llen("wake"), 1);
  EXPECT_EQ(unparked.llen("deliver"), 0);

  // The handed-off job completes with its token like any claimed job, and a replay is a
  // duplicate (the row exists in any state).
  EXPECT_EQ(mem().fanout(id, payload, g), all({"1", "2"}, 0));
  EXPECT_TRUE(is_integer(parked.complete(id, "1"), 1));
  EXPECT_EQ(parked.hget("gactive", g.c_str()), "(nil)");
  // Once its credits are gone (here DELeted, as a consumer that stops does) the next job goes to
  // the lane.
  parked.unpark();
  const std::string next = job_id();
  EXPECT_EQ(mem().fanout(next, "p", g), all({"1", "2"}, 1));
  EXPECT_EQ(parked.llen("deliver"), 1);  // still the first element only (the test never popped)
  EXPECT_EQ(s().zscore(parked.lane(g), next), "0");
}

TEST_F(BusFanout, AMemberWhoseLiveKeyExpiredAnswersMinus1AndNothingIsWrittenInItsQueue) {
  mem().beat("1", 60000);
  mem().beat("2", 30);
  std::this_thread::sleep_for(milliseconds(60));
  Queue gone = mem().member("2");
  EXPECT_EQ(keys_of(gone), std::vector<std::string>{});
  RedisReply r = mem().enqueue_reply("2", job_id(), "p", group_id());
  EXPECT_TRUE(is_integer(r, -1));
  EXPECT_EQ(keys_of(gone), std::vector<std::string>{});
  // Still listed (member_reap has not run): the writer sends, the member answers -1.
  EXPECT_EQ(mem().listed(), (std::vector<std::string>{"2", "1"}));
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 1));
}

}  // namespace
}  // namespace echo::test
