// SPDX-License-Identifier: MIT
// member_reap and member_drop: an expired member is taken out with every key of its queue, live
// members are left intact, and a reap takes at most its batch.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

// ---- member_reap ----------------------------------------------------------------------------

TEST_F(BusFanout, MemberReapDeletesEveryKeyOfAnExpiredMemberAndLeavesLiveOnesIntact) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue live = mem().member("1"), dead = mem().member("2");
  const std::string g = group_id(), h = group_id();
  // Fill member 2's queue with every kind of key: lanes in two groups, a hand-off (active and
  // deliver), a scheduled and a dead job, a flat pending job, pause, limit, meta, metrics.
  dead.park(60000);
  const std::string handed = job_id();
  ASSERT_EQ(mem().fanout(handed, "p", g), (Fanned{{"1", 1}, {"2", 2}}));
  dead.unpark();
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(mem().fanout(job_id(), "p", g), (Fanned{{"1", 1}, {"2", 1}}));
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(mem().fanout(job_id(), "p", h), (Fanned{{"1", 1}, {"2", 1}}));
  const auto to_schedule = dead.gclaim(30000);
  ASSERT_TRUE(to_schedule);
  ASSERT_EQ(text(dead.retry(to_schedule->id, "1", 600000, 3).get()), "scheduled");
  const auto to_kill = dead.gclaim(30000);
  ASSERT_TRUE(to_kill);
  ASSERT_EQ(text(dead.retry(to_kill->id, "1", 0, 1).get()), "dead");
  const auto done = dead.gclaim(30000);
  ASSERT_TRUE(done);
  ASSERT_TRUE(is_integer(dead.complete(done->id, "1"), 1));
  ASSERT_TRUE(is_integer(dead.enqueue(job_id(), "flat"), 1));
  ASSERT_TRUE(is_integer(dead.gpause(h), 1));
  ASSERT_TRUE(is_integer(dead.glimit(g, 9), 1));
  command(s().context(), "HSET %s paused 1", dead.key("meta").c_str());
  dead.list_credits(8, 60000);  // as if its consumer died while blocked
  const std::vector<std::string> before = keys_of(dead);
  for (const char* k :
       {"pending", "active", "schedule", "dead", "ring", "paused", "glimit", "gactive", "wake",
        "deliver", "parked", "meta", "groups", "metrics:completed", "metrics:failed", "live"}) {
    EXPECT_TRUE(dead.exists(dead.key(k))) << k << " was not staged, so its deletion is unproved";
  }
  ASSERT_GE(before.size(), 20u);
  const auto live_before = keys_of(live);
  ASSERT_GE(live_before.size(), 8u);

  // Not expired yet: nothing reclaimed.
  EXPECT_EQ(mem().reap(10), 0);
  EXPECT_EQ(keys_of(dead).size(), before.size());

  mem().beat("2", 1);  // its last beat, with a ttl that runs out at once
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(keys_of(dead), std::vector<std::string>{});
  EXPECT_EQ(mem().live(), std::vector<std::string>{"1"});
  auto live_after = keys_of(live);
  std::sort(live_after.begin(), live_after.end());
  auto live_expected = live_before;
  std::sort(live_expected.begin(), live_expected.end());
  EXPECT_EQ(live_after, live_expected);
  EXPECT_EQ(live.zcard(live.lane(g)), 4);
  EXPECT_EQ(live.zcard(live.lane(h)), 3);
  EXPECT_EQ(mem().reap(10), 0);
  // Every key left is the live member's, the members set, the epoch, or nothing else.
  for (const std::string& k : s().scan("*")) {
    EXPECT_TRUE(k == mem().key() || k == mem().epoch_key() || k.starts_with(live.base())) << k;
  }
  // A rejoin starts from an empty queue.
  mem().beat("2", 60000);
  const std::string fresh = job_id();
  EXPECT_EQ(mem().fanout(fresh, "p", g), (Fanned{{"1", 1}, {"2", 1}}));
  EXPECT_EQ(dead.zcard(dead.lane(g)), 1);
}

TEST_F(BusFanout, MemberDropFindsALaneThatOnlyAReapedHandOffCreated) {
  // A handed-off job never enters the groups set; when its lease runs out, reap puts it in its
  // lane (and the group in the ring). If the member then lapses before it claims the job again,
  // member_drop must still find that lane (through the ring, or paused, or glimit).
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string in_ring = group_id(), paused = group_id(), limited = group_id();
  q.park(10000, 3);
  for (const std::string& g : {in_ring, paused, limited}) {
    ASSERT_EQ(mem().fanout(job_id(), "p", g, false, 1), all({"1"}, 2));
  }
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(is_integer(q.gpause(paused), 1));
  ASSERT_TRUE(is_integer(q.glimit(limited, 1), 1));
  // Its handed-off job and one more in flight: still at its ceiling once reap gives one back.
  command(s().context(), "HSET %s %s 2", q.key("gactive").c_str(), limited.c_str());
  ASSERT_TRUE(is_integer(q.reap(), 3));
  EXPECT_FALSE(q.exists(q.key("groups")));
  EXPECT_EQ(q.ring(), std::vector<std::string>{in_ring});  // the other two are held out
  for (const std::string& g : {in_ring, paused, limited}) ASSERT_EQ(q.zcard(q.lane(g)), 1) << g;
  mem().beat("1", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(keys_of(q), std::vector<std::string>{});
}

TEST_F(BusFanout, MemberReapTakesAtMostItsBatchAndOnlyExpiredMembers) {
  for (const char* m : {"1", "2", "3"}) mem().beat(m, 1);
  mem().beat("4", 60000);
  std::this_thread::sleep_for(milliseconds(10));
  const std::string g = group_id();
  ASSERT_EQ(mem().fanout(job_id(), "p", g), all({"4"}, 1));
  EXPECT_EQ(mem().reap(2), 2);
  EXPECT_EQ(mem().reap(2), 1);
  EXPECT_EQ(mem().reap(2), 0);
  EXPECT_EQ(mem().live(), std::vector<std::string>{"4"});
  // Scores set directly: one live for a minute, one a millisecond in the past.
  command(s().context(), "ZADD %s %lld 5", mem().key().c_str(), s().now_ms() + 60000);
  command(s().context(), "ZADD %s %lld 6", mem().key().c_str(), s().now_ms() - 1);
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(mem().live(), (std::vector<std::string>{"4", "5"}));
}

}  // namespace
}  // namespace echo::test
