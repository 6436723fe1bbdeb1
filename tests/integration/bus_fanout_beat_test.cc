// SPDX-License-Identifier: MIT
// member_beat against a real server: it registers a member on the server's clock, refuses a member
// or TTL that would break a key, and moves the membership epoch only when a member enters or goes.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

// ---- member_beat ----------------------------------------------------------------------------

TEST_F(BusFanout, BeatRegistersOnTheServerClockAndAShortTtlExpires) {
  const long long t0 = s().now_ms();
  const long long now = mem().beat("7", 2000);
  const long long t1 = s().now_ms();
  EXPECT_GE(now, t0);
  EXPECT_LE(now, t1);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(now + 2000));
  const std::string g = group_id();
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"7"}, 1));
  // A renewal moves the expiry, later or (a short ttl) sooner.
  const long long renewed = mem().beat("7", 60000);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(renewed + 60000));
  const long long last = mem().beat("7", 30);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(last + 30));
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), Fanned{});               // expired: nobody is fed
  EXPECT_EQ(mem().member("7").zcard(mem().member("7").lane(g)), 1);  // only the first job
  EXPECT_EQ(mem().live(), std::vector<std::string>{"7"});  // still listed until member_reap
}

TEST_F(BusFanout, BeatRefusesAMemberThatWouldBreakAKeyAndABadTtlAndWritesNothing) {
  for (const char* bad : {"", "a:b", "{x}", "a}", "a|b", "a b", "a\tb", "a\nb"}) {
    EXPECT_TRUE(is_error(mem().beat(bad, "1000"),
                         "EMQMEMBER member must be a non-empty token without braces, colons, bars "
                         "or spaces"))
        << "member \"" << bad << "\"";
  }
  for (const char* bad : {"0", "-5", "1.5", "x", ""}) {
    EXPECT_TRUE(is_error(mem().beat("1", bad), "EMQARG ttl_ms must be a positive integer"))
        << "ttl \"" << bad << "\"";
  }
  EXPECT_EQ(dbsize(), 0);
  EXPECT_GT(mem().beat("node-A.1", 1000), 0);  // any other token is a member
  EXPECT_NE(s().zscore(mem().key(), "node-A.1"), "(nil)");
  EXPECT_GT(mem().beat("1023", 1000), 0);
}

TEST_F(BusFanout, AnEpochKeyLostWithTheServersDataNeverComesBackAtAValueItHadBefore) {
  // Before the loss: two members entered, one reaped (e0, e0 + 1, e0 + 2). A writer may hold any
  // of these beside the membership it read with it.
  mem().beat("1", "60000");
  const long long e0 = mem().epoch();
  mem().beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  ASSERT_EQ(mem().epoch(), e0 + 2);
  // The data is lost; members come back and new ones join, reaped ones leave: none of the epochs
  // after the loss is one from before it (a counter restarted from 1 would come back to the
  // values a writer may still hold).
  RedisReply flushed = command(client(), "FLUSHALL");
  ASSERT_EQ(text(flushed.get()), "OK");
  std::vector<long long> after;
  mem().beat("1", "60000");  // came back: a new key, seeded by member_beat
  after.push_back(mem().epoch());
  mem().beat("3", 1);  // a new member
  after.push_back(mem().epoch());
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);  // and it leaves
  after.push_back(mem().epoch());
  mem().del_epoch();  // the epoch key alone lost (evicted): the next entry seeds it again
  mem().beat("4", 1);
  after.push_back(mem().epoch());
  std::this_thread::sleep_for(milliseconds(10));
  mem().del_epoch();  // and again: the next reap seeds it
  EXPECT_EQ(mem().reap(10), 1);
  after.push_back(mem().epoch());
  for (const long long e : after) {
    EXPECT_GT(e, e0 + 2) << "an epoch after the loss is not past every epoch before it";
  }
  EXPECT_EQ(after[1], after[0] + 1);
  EXPECT_EQ(after[2], after[0] + 2);
  EXPECT_GT(after[3], after[2]);
  EXPECT_GT(after[4], after[3]);
}

TEST_F(BusFanout, TheEpochMovesWhenAMemberEntersOrIsReapedAndNotOnARenewal) {
  EXPECT_EQ(mem().epoch(), 0);
  const long long before_ms = s().now_ms();
  RedisReply first = mem().beat("1", "60000");
  ASSERT_TRUE(first && first->type == REDIS_REPLY_ARRAY && first->elements == 2)
      << text(first.get());
  EXPECT_EQ(first->element[1]->integer, 1);  // entered
  // A new epoch key starts at the server's time in microseconds, not at 1.
  const long long e0 = mem().epoch();
  EXPECT_GE(e0, before_ms * 1000);
  EXPECT_LE(e0, (s().now_ms() + 1) * 1000);
  RedisReply renewed = mem().beat("1", "60000");
  ASSERT_TRUE(renewed && renewed->type == REDIS_REPLY_ARRAY && renewed->elements == 2);
  EXPECT_EQ(renewed->element[1]->integer, 0);  // already listed
  EXPECT_EQ(mem().epoch(), e0);
  mem().beat("2", 1);
  EXPECT_EQ(mem().epoch(), e0 + 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);  // one INCR for the whole batch
  EXPECT_EQ(mem().epoch(), e0 + 2);
  EXPECT_EQ(mem().reap(10), 0);  // nothing removed: the epoch stays
  EXPECT_EQ(mem().epoch(), e0 + 2);
  // Back after member_reap removed it: it entered anew (its node must drop its L1 rows).
  RedisReply back = mem().beat("2", "60000");
  ASSERT_TRUE(back && back->type == REDIS_REPLY_ARRAY && back->elements == 2);
  EXPECT_EQ(back->element[1]->integer, 1);
  EXPECT_EQ(mem().epoch(), e0 + 3);
  for (const char* bad : {"0", "-1", "x"}) {
    RedisReply r = s().run("member_reap", {mem().key(), mem().epoch_key()}, {bad});
    EXPECT_TRUE(is_error(r, "EMQARG batch must be a positive integer")) << bad;
  }
}

}  // namespace
}  // namespace echo::test
