// SPDX-License-Identifier: MIT
// The bus scripts' admission (bus gates 3.2 J1-J5): enqueue, genqueue and schedule admit a job
// once, refuse a non-JOB id, browse newest first, and schedule and promote on the server's clock.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

// ---- 3.2 J1-J5: admission -------------------------------------------------------------------

TEST_F(BusScripts, J1EnqueueAdmitsAPendingRowWithAttemptsZeroAtScoreZero) {
  const std::string id = job_id();
  EXPECT_TRUE(is_integer(bus().enqueue(id, "p1"), 1));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "0");
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "p1");
  EXPECT_EQ(bus().hget(bus().job(id), "group"), "(nil)");
  EXPECT_EQ(bus().zscore(bus().key("pending"), id), "0");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 1);
}

TEST_F(BusScripts, J2DuplicateLeavesTheRowUnchangedAndPendingOne) {
  const std::string id = job_id();
  EXPECT_TRUE(is_integer(bus().enqueue(id, "first"), 1));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "second"), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "first");
  EXPECT_EQ(bus().integer("HLEN %s", bus().job(id)), 3);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 1);
  // Dedup is on the row in any state: a replay after the claim cannot reset the fencing token.
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "third"), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
}

TEST_F(BusScripts, J3AnOrdIdIsRefusedWithEmqkindByEveryAdmissionAndNothingIsWritten) {
  const std::string ord = minter_.mint("ORD").value().str();
  ASSERT_TRUE(table::is_valid_id(ord));  // it passes the key builder; the script refuses it
  const char* kind = "EMQKIND job id must be JOB-namespaced";
  EXPECT_TRUE(is_error(bus().enqueue(ord, "p"), kind));
  EXPECT_TRUE(is_error(bus().genqueue(ord, "p", group_id()), kind));
  EXPECT_TRUE(is_error(bus().schedule(ord, "p", "in", 0), kind));
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(BusScripts, J4BrowseIsNewestFirstOver301Pending) {
  std::vector<std::string> ids;
  for (int i = 0; i < 301; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().enqueue(ids.back(), "p"), 1));
  }
  ASSERT_EQ(bus().zcard(bus().key("pending")), 301);
  for (const int n : {10, 301}) {
    RedisReply r =
        command(client(), "ZRANGE %s + - BYLEX REV LIMIT 0 %d", bus().key("pending").c_str(), n);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
    ASSERT_EQ(r->elements, static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(text(r->element[i]), ids[300 - i]) << "rank " << i;
  }
  // And the consumer's end is the oldest: all scores are 0, so ZPOPMIN is mint order.
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, ids.front());
}

TEST_F(BusScripts, J5AdmissionDedupHoldsAcrossLanesAndVerbs) {
  const std::string id = job_id();
  const std::string g1 = group_id(), g2 = group_id();
  EXPECT_TRUE(is_integer(bus().genqueue(id, "first", g1), 1));
  EXPECT_TRUE(is_integer(bus().genqueue(id, "second", g2), 0));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "third"), 0));
  EXPECT_TRUE(is_integer(bus().schedule(id, "fourth", "in", 0), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "group"), g1);
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "first");
  EXPECT_EQ(bus().zcard(bus().lane(g1)), 1);
  EXPECT_EQ(bus().zcard(bus().lane(g2)), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g1});
  EXPECT_EQ(bus().llen(bus().key("wake")), 1);  // the duplicate pushed no wake
}

TEST_F(BusScripts, ScheduleInIsOnTheServerClockAndAtIsAbsolute) {
  const std::string later = job_id(), due = job_id();
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_integer(bus().schedule(later, "p", "in", 60000), 1));
  const long long t1 = bus().now_ms();
  const long long score = std::stoll(bus().zscore(bus().key("schedule"), later));
  EXPECT_GE(score, t0 + 60000);
  EXPECT_LE(score, t1 + 60000);
  EXPECT_EQ(bus().hget(bus().job(later), "state"), "scheduled");
  EXPECT_EQ(bus().hget(bus().job(later), "attempts"), "0");
  EXPECT_TRUE(is_integer(bus().schedule(due, "p", "at", t0 - 1), 1));
  EXPECT_EQ(bus().zscore(bus().key("schedule"), due), std::to_string(t0 - 1));
  EXPECT_TRUE(is_integer(bus().promote(100), 1));  // only the due one
  EXPECT_EQ(bus().hget(bus().job(due), "state"), "pending");
  EXPECT_EQ(bus().zscore(bus().key("pending"), due), "0");
  EXPECT_EQ(bus().hget(bus().job(later), "state"), "scheduled");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 1);
}

TEST_F(BusScripts, PromoteMovesAtMostItsBatch) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(is_integer(bus().schedule(job_id(), "p", "in", 0), 1));
  EXPECT_TRUE(is_integer(bus().promote(2), 2));
  EXPECT_TRUE(is_integer(bus().promote(100), 3));
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_EQ(bus().zcard(bus().key("pending")), 5);
}

}  // namespace
}  // namespace echo::test
