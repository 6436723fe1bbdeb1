// SPDX-License-Identifier: MIT
// A member queue is a full queue of its own hash tag: the wire scripts run on it unchanged, a
// lapsed hand-off is reaped and reclaimed with token 2, and complete_claim completes and claims.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

// ---- a member queue is a full bus queue -------------------------------------------------------

TEST_F(BusFanout, TheWireScriptsRunUnchangedOnAMemberQueue) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id(), c = job_id();
  for (const auto& id : {a, b, c}) ASSERT_EQ(mem().fanout(id, "p-" + id, g), all({"1", "2"}, 1));
  EXPECT_EQ(q.gclaim(30000), (Claimed{a, "p-" + a, 1, g}));
  EXPECT_TRUE(is_integer(q.complete(a, "1"), 1));
  EXPECT_FALSE(q.exists(q.job(a)));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "1");
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "p-" + b, 1, g}));
  ASSERT_EQ(std::string(text(q.retry(b, "1", 0, 3).get())), "scheduled");
  EXPECT_TRUE(is_integer(q.promote(), 1));
  // Lane order is mint order: b (retried, back in the lane) before c.
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "p-" + b, 2, g}));
  EXPECT_EQ(q.gclaim(30000), (Claimed{c, "p-" + c, 1, g}));
  EXPECT_FALSE(q.gclaim(30000));
  // Member 2's queue is untouched by member 1's consumer.
  Queue other = mem().member("2");
  EXPECT_EQ(other.zcard(other.lane(g)), 3);
  EXPECT_EQ(other.zcard(other.key("active")), 0);
}

TEST_F(BusFanout, AHandOffWhoseLeaseRunsOutIsReapedToTheLaneAndReclaimedWithToken2) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  q.park(10000);
  const std::string id = job_id(), g = group_id();
  ASSERT_EQ(mem().fanout(id, "p", g, false, 30), all({"1"}, 2));
  // The consumer died after the RPUSH: nobody pops the deliver list or completes.
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_TRUE(is_integer(q.reap(), 1));
  EXPECT_EQ(q.jobf(id, "state"), "pending");
  EXPECT_EQ(q.jobf(id, "attempts"), "1");
  EXPECT_EQ(s().zscore(q.lane(g), id), "0");
  EXPECT_EQ(q.ring(), std::vector<std::string>{g});
  EXPECT_EQ(q.llen("wake"), 1);
  EXPECT_EQ(q.hget("gactive", g.c_str()), "(nil)");
  EXPECT_EQ(q.gclaim(30000), (Claimed{id, "p", 2, g}));
  // The lost holder's token is fenced off; the new holder completes.
  EXPECT_TRUE(is_error(q.complete(id, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_integer(q.complete(id, "2"), 1));
  EXPECT_FALSE(q.exists(q.job(id)));
}

// ---- complete_claim -------------------------------------------------------------------------

TEST_F(BusFanout, CompleteClaimCompletesAndClaimsTheNextInOneCall) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(30000), (Claimed{a, "pa", 1, g}));
  const long long t0 = s().now_ms();
  const CompleteClaimed r = q.complete_claim(a, "1", 4000);
  const long long t1 = s().now_ms();
  EXPECT_EQ(r.verdict, 1);
  EXPECT_EQ(r.next, (Claimed{b, "pb", 1, g}));
  EXPECT_FALSE(q.exists(q.job(a)));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "1");
  EXPECT_EQ(q.jobf(b, "state"), "active");
  const long long deadline = std::stoll(s().zscore(q.key("active"), b));
  EXPECT_GE(deadline, t0 + 4000);
  EXPECT_LE(deadline, t1 + 4000);
  EXPECT_EQ(q.zcard(q.key("active")), 1);  // a left, b entered
  EXPECT_EQ(q.hget("gactive", g.c_str()), "1");
  EXPECT_EQ(q.ring(), std::vector<std::string>{});  // lane drained
  // The last one: completed, nothing to claim.
  const CompleteClaimed last = q.complete_claim(b, "1", 4000);
  EXPECT_EQ(last.verdict, 1);
  EXPECT_FALSE(last.next);
  EXPECT_EQ(q.hget("gactive", g.c_str()), "(nil)");
  EXPECT_EQ(q.hget("metrics:completed", "count"), "2");
  // Gone: the row no longer exists; still a claim if there is work.
  const std::string c = job_id();
  ASSERT_EQ(mem().fanout(c, "pc", g), all({"1"}, 1));
  const CompleteClaimed gone = q.complete_claim(b, "1", 4000);
  EXPECT_EQ(gone.verdict, 0);
  EXPECT_EQ(gone.next, (Claimed{c, "pc", 1, g}));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "2");
}

TEST_F(BusFanout, CompleteClaimWithAStaleTokenAnswersMinus1ChangesNothingAndStillClaims) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(20), (Claimed{a, "pa", 1, g}));
  std::this_thread::sleep_for(milliseconds(40));
  ASSERT_TRUE(is_integer(q.reap(), 1));
  ASSERT_EQ(q.gclaim(30000), (Claimed{a, "pa", 2, g}));  // a second holder
  // The first holder finishes late with token 1.
  const CompleteClaimed r = q.complete_claim(a, "1", 30000);
  EXPECT_EQ(r.verdict, -1);
  EXPECT_EQ(r.next, (Claimed{b, "pb", 1, g}));
  EXPECT_EQ(q.jobf(a, "state"), "active");  // the second holder's job is untouched
  EXPECT_EQ(q.jobf(a, "attempts"), "2");
  EXPECT_NE(s().zscore(q.key("active"), a), "(nil)");
  EXPECT_EQ(q.hget("metrics:completed", "count"), "(nil)");
  EXPECT_EQ(q.hget("gactive", g.c_str()), "2");
  // Tokens compare as strings: "02" is not the row's "2".
  EXPECT_EQ(q.complete_claim(a, "02", 30000).verdict, -1);
  const CompleteClaimed ok = q.complete_claim(a, "2", 30000);
  EXPECT_EQ(ok.verdict, 1);
  EXPECT_FALSE(ok.next);
}

TEST_F(BusFanout, CompleteClaimOnAPausedQueueCompletesButDoesNotClaim) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_TRUE(q.gclaim(30000));
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  const CompleteClaimed r = q.complete_claim(a, "1", 30000);
  EXPECT_EQ(r.verdict, 1);
  EXPECT_FALSE(r.next);
  EXPECT_EQ(q.jobf(b, "state"), "pending");
  command(s().context(), "HDEL %s paused", q.key("meta").c_str());
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "pb", 1, g}));
}

TEST_F(BusFanout, CompleteClaimRoundRobinsLikeGclaim) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g1 = group_id(), g2 = group_id();
  const std::string a1 = job_id(), a2 = job_id(), b1 = job_id();
  ASSERT_EQ(mem().fanout(a1, "p", g1), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(a2, "p", g1), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b1, "p", g2), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(30000)->id, a1);
  const CompleteClaimed r = q.complete_claim(a1, "1", 30000);
  ASSERT_TRUE(r.next);
  EXPECT_EQ(r.next->id, b1);  // g2's turn, though g1 still has a2
  const CompleteClaimed r2 = q.complete_claim(b1, "1", 30000);
  ASSERT_TRUE(r2.next);
  EXPECT_EQ(r2.next->id, a2);
}

}  // namespace
}  // namespace echo::test
