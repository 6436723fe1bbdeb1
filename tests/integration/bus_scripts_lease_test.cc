// SPDX-License-Identifier: MIT
// The bus scripts' leases and fencing (bus gates 3.3 L1-L6): a claim hands the attempts count as
// its token, and only the current token completes or retries; a lapsed lease is reaped.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

// ---- 3.3 L1-L6: leases and fencing ----------------------------------------------------------

TEST_F(BusScripts, L1ClaimHandsTokenOneAndCompleteDeletesTheRow) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p1"), 1));
  const long long t0 = bus().now_ms();
  const auto c = bus().claim(30000);
  const long long t1 = bus().now_ms();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->payload, "p1");
  EXPECT_EQ(c->token, 1);
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  const long long deadline = std::stoll(bus().zscore(bus().key("active"), id));
  EXPECT_GE(deadline, t0 + 30000);
  EXPECT_LE(deadline, t1 + 30000);

  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  EXPECT_FALSE(bus().exists(bus().job(id)));
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
  EXPECT_FALSE(bus().claim(30000));  // empty
  EXPECT_EQ(dbsize(), 1);            // only the metric is left
}

TEST_F(BusScripts, L2CompleteWithToken99IsEmqstaleAndChangesNothing) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_error(bus().complete(id, "99"), "EMQSTALE complete token mismatch"));
  // Compared as strings: "01" is not the row's "1".
  EXPECT_TRUE(is_error(bus().complete(id, "01"), "EMQSTALE complete token mismatch"));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("active")), 1);
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "(nil)");
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  // Gone is 0, not an error: the host maps it to `error gone`.
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 0));
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
}

TEST_F(BusScripts, L3RetryThenPromoteHandsTokenTwo) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 1);
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "first failure"), "scheduled"));
  const long long t1 = bus().now_ms();
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "scheduled");
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "first failure");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  const long long run_at = std::stoll(bus().zscore(bus().key("schedule"), id));
  EXPECT_GE(run_at, t0);
  EXPECT_LE(run_at, t1);
  EXPECT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->token, 2);
  EXPECT_TRUE(is_error(bus().complete(id, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_integer(bus().complete(id, "2"), 1));
}

TEST_F(BusScripts, L3RetryDelayIsOnTheServerClock) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 60000, 3, "later"), "scheduled"));
  const long long t1 = bus().now_ms();
  const long long run_at = std::stoll(bus().zscore(bus().key("schedule"), id));
  EXPECT_GE(run_at, t0 + 60000);
  EXPECT_LE(run_at, t1 + 60000);
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, L4AttemptsTwoOfMaxTwoGoesDeadWithLastError) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 1);
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 2, "boom 1"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().promote(100), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 2);
  EXPECT_TRUE(is_bulk(bus().retry(id, "2", 0, 2, "boom 2"), "dead"));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "dead");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "2");
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "boom 2");
  EXPECT_EQ(bus().zscore(bus().key("dead"), id), "0");
  EXPECT_EQ(bus().hget(bus().key("metrics:failed"), "count"), "1");
  for (const char* k : {"active", "pending", "schedule"}) EXPECT_EQ(bus().zcard(bus().key(k)), 0);
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, L5A40msLeaseIsReapedAndTheNextClaimHandsTokenTwo) {
  const std::string lost = job_id(), held = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(lost, "p"), 1));
  ASSERT_TRUE(is_integer(bus().enqueue(held, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(40)).id, lost);
  ASSERT_EQ(claimed(bus().claim(60000)).id, held);
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_TRUE(is_integer(bus().reap(), 1));  // the 40 ms lease only
  EXPECT_EQ(bus().hget(bus().job(lost), "state"), "pending");
  EXPECT_EQ(bus().hget(bus().job(lost), "attempts"), "1");  // reap leaves the token alone
  EXPECT_EQ(bus().zscore(bus().key("pending"), lost), "0");
  EXPECT_EQ(bus().hget(bus().job(held), "state"), "active");
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, lost);
  EXPECT_EQ(c->token, 2);
  // The lost holder is fenced off once the job is re-claimed.
  EXPECT_TRUE(is_error(bus().complete(lost, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_error(bus().retry(lost, "1", 0, 3, "late"), "EMQSTALE retry token mismatch"));
  EXPECT_TRUE(is_integer(bus().complete(lost, "2"), 1));
}

TEST_F(BusScripts, L6RetryOfAGoneJobOrWithAStaleTokenIsEmqstaleAndWritesNothing) {
  const std::string id = job_id();
  EXPECT_TRUE(is_error(bus().retry(id, "1", 0, 3, "e"), "EMQSTALE job gone"));
  EXPECT_EQ(dbsize(), 0);
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_error(bus().retry(id, "2", 0, 3, "e"), "EMQSTALE retry token mismatch"));
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "(nil)");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
}

}  // namespace
}  // namespace echo::test
