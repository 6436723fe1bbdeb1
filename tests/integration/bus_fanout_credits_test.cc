// SPDX-License-Identifier: MIT
// The hand-off credits a parked member lists (member_park): a listed credit always means a hand-off
// is legal and in order, each hand-off takes one, and a hand-off is leased for the member's lease.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

TEST_F(BusFanout, MemberParkListsNoCreditWhereAClaimWouldBeIllegalOrOutOfOrder) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), other = group_id(), limited = group_id();
  // Lane g already holds an older job: a handed-off newer one would overtake it.
  const std::string older = job_id(), newer = job_id();
  ASSERT_TRUE(is_integer(q.genqueue(older, "p", g), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(mem().fanout(newer, "p", g), all({"1"}, 1));
  EXPECT_EQ(q.llen("deliver"), 0);
  EXPECT_EQ(q.zcard(q.lane(g)), 2);
  ASSERT_EQ(drain(q), 2u);
  q.park(10000);  // the lanes ran dry: credits again
  q.unpark();
  // A group paused (its lane empty or not).
  ASSERT_TRUE(is_integer(q.gpause(other), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 1));  // any group: the lane
  ASSERT_TRUE(is_integer(q.gresume(other), 1));
  ASSERT_EQ(drain(q), 1u);
  // A ceiling: never more credits than the room under the lowest one, none at a ceiling.
  ASSERT_TRUE(is_integer(q.glimit(limited, 2), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 2));
  EXPECT_EQ(q.hget("gactive", limited.c_str()), "2");  // at its ceiling, never past it
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  for (const auto& handed : q.deliver()) {
    const auto c = parse_delivered(handed);
    ASSERT_TRUE(c);
    EXPECT_TRUE(is_integer(q.complete(c->id, std::to_string(c->token)), 1));
  }
  command(s().context(), "DEL %s", q.key("deliver").c_str());
  ASSERT_EQ(drain(q), 1u);
  ASSERT_TRUE(is_integer(q.glimit(limited, 1000), 1));  // the bus lifts a ceiling by raising it
  q.park(10000);
  q.unpark();
  // The queue paused (meta paused): the host would not claim, so no hand-off either.
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  command(s().context(), "HDEL %s paused", q.key("meta").c_str());
  q.park(10000);
  q.unpark();
  // Not live.
  command(s().context(), "DEL %s", q.key("live").c_str());
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(q.llen("deliver"), 0);  // nothing was ever handed off
}

TEST_F(BusFanout, WhateverMakesAHandOffIllegalOrOutOfOrderTakesTheCreditsDown) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id();
  // A lane gains work (any ring entry: genqueue here; reap, promote and a completion that frees a
  // slot enter through the same ring insert): the next job must queue behind it.
  q.park(10000);
  const std::string older = job_id(), newer = job_id();
  ASSERT_TRUE(is_integer(q.genqueue(older, "p", g), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(mem().fanout(newer, "p", g), all({"1"}, 1));
  EXPECT_EQ(q.gclaim(30000)->id, older);
  EXPECT_EQ(q.gclaim(30000)->id, newer);
  // gpause, glimit.
  q.park(10000);
  ASSERT_TRUE(is_integer(q.gpause(group_id()), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  command(s().context(), "DEL %s", q.key("paused").c_str());
  q.park(10000);
  ASSERT_TRUE(is_integer(q.glimit(group_id(), 3), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  command(s().context(), "DEL %s", q.key("glimit").c_str());
  // gresume's own ring insert (credits listed while a group was paused can only come from
  // outside our scripts: staged here).
  const std::string paused = group_id(), waiting = job_id();
  ASSERT_TRUE(is_integer(q.gpause(paused), 1));
  ASSERT_TRUE(is_integer(q.genqueue(waiting, "p", paused), 1));
  q.list_credits(4, 10000);
  ASSERT_TRUE(is_integer(q.gresume(paused), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  ASSERT_EQ(drain(q), 1u);
  // A plain HSET meta paused has no script to take the credits down: the credits listed before
  // it still hand off (member_park.lua: until the consumer's next member_park, within a beat).
  q.park(10000, 1);
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 2));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 1));
}

// The credits' promise under random interleavings of every script that touches a member queue
// (fixed seed): whenever credits are listed, that many claims of new jobs would be legal and in
// order (live, nothing paused, every lane empty, no group pushed past its ceiling); an admission
// hands off exactly when a credit is listed, and never otherwise.
TEST_F(BusFanout, UnderRandomScriptInterleavingsAListedCreditAlwaysMeansAHandOffIsLegal) {
  mem().beat("1", 600000);
  Queue q = mem().member("1");
  std::mt19937 rng(20261130);
  const std::vector<std::string> groups = {group_id(), group_id(), group_id()};
  std::vector<Claimed> held;  // claimed from a lane or taken from deliver, not yet let go
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  // Legal for `credits` hand-offs: live, nothing paused, every lane empty, and that many more in
  // flight in any one group keeps it within its ceiling.
  auto legal = [&](long long credits) {
    long long lanes = 0, room = LLONG_MAX;
    for (const auto& g : groups) {
      lanes += q.zcard(q.lane(g));
      const std::string limit = q.hget("glimit", g.c_str()), act = q.hget("gactive", g.c_str());
      if (limit != "(nil)")
        room = std::min(room, std::stoll(limit) - (act == "(nil)" ? 0 : std::stoll(act)));
    }
    return q.exists(q.key("live")) && !q.exists(q.key("meta")) &&
           s().integer("SCARD %s", q.key("paused")) == 0 && lanes == 0 && credits <= room;
  };
  int handed = 0, laned = 0, parks_listed = 0;
  for (int step = 0; step < 3000; ++step) {
    if (step % 60 == 0) {
      // Back to a clean queue now and then (as an operator and the consumer would bring it), so
      // the walk keeps reaching the states where credits are listed.
      for (const auto& gg : groups) {
        ASSERT_TRUE(is_integer(q.gresume(gg), 1));
        if (q.hget("glimit", gg.c_str()) != "(nil)") {
          ASSERT_TRUE(is_integer(q.glimit(gg, 1000), 1));
        }
      }
      for (const Claimed& c : held) q.complete(c.id, std::to_string(c.token));
      held.clear();
      drain(q);
    }
    const std::string& g = groups[pick(groups.size())];
    // Weighted so the walk keeps coming back to a clean queue: pauses and ceilings are rarer
    // than what lifts them, and claims and completions drain the lanes.
    static constexpr int kWeights[] = {12, 2, 2, 10, 2, 10, 25, 8, 15, 2, 12};
    int roll = static_cast<int>(pick(100)), op = 0;
    while (roll >= kWeights[op]) roll -= kWeights[op++];
    switch (op) {
      case 0: {
        RedisReply r = q.member_park(std::to_string(1 + pick(4)), "600000");
        ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << text(r.get());
        parks_listed += r->integer > 0;
        break;
      }
      case 1:
        ASSERT_TRUE(is_integer(q.genqueue(job_id(), "p", g), 1));
        break;
      case 2:
        ASSERT_TRUE(is_integer(q.gpause(g), 1));
        break;
      case 3:
        ASSERT_TRUE(is_integer(q.gresume(g), 1));
        break;
      case 4:
        ASSERT_TRUE(is_integer(q.glimit(g, 1 + static_cast<long long>(pick(2))), 1));
        break;
      case 5:  // the bus has no verb that removes a ceiling: a high one lifts it (and re-enters the
               // ring)
        ASSERT_TRUE(is_integer(q.glimit(g, 1000), 1));
        break;
      case 6:
        if (auto c = q.gclaim(pick(4) == 0 ? 1 : 600000)) held.push_back(*c);
        break;
      case 7: {  // the consumer takes one hand-off from its deliver list
        RedisReply r = command(s().context(), "LPOP %s", q.key("deliver").c_str());
        if (r && r->type == REDIS_REPLY_STRING) {
          auto c = parse_delivered(std::string_view(r->str, r->len));
          ASSERT_TRUE(c);
          held.push_back(*c);
        }
        break;
      }
      case 8:  // let one go: complete, or retry at once (then promote puts it back in its lane)
        if (!held.empty()) {
          const std::size_t i = pick(held.size());
          if (pick(3) == 0) {
            q.retry(held[i].id, std::to_string(held[i].token), 0, 5);
            q.promote();
          } else {
            q.complete(held[i].id, std::to_string(held[i].token));
          }
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 9:  // leases of 1 ms run out: reap puts those jobs back in their lanes
        std::this_thread::sleep_for(milliseconds(2));
        q.reap();
        break;
      default: {
        const long long credits = q.credits();
        const bool was_legal = legal(credits);
        const std::string id = job_id();
        EXPECT_EQ(mem().fanout(id, "p", g), all({"1"}, credits > 0 ? 2 : 1)) << "step " << step;
        (credits > 0 ? handed : laned) += 1;
        EXPECT_TRUE(credits == 0 || was_legal)
            << "step " << step << ": a credit was listed while a claim was illegal";
        break;
      }
    }
    ASSERT_TRUE(legal(q.credits()) || q.credits() == 0)
        << "step " << step << ": a credit outlived what it vouches for";
  }
  // The walk exercised both outcomes, and credits were listed again after being taken down.
  EXPECT_GT(handed, 20);
  EXPECT_GT(laned, 20);
  EXPECT_GT(parks_listed, 20);
}

TEST_F(BusFanout, HandOffsAreBoundedByTheListedCreditsWhichEachOneTakes) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  q.park(10000, 2);
  const std::string g1 = group_id(), g2 = group_id(), g3 = group_id();
  EXPECT_EQ(mem().fanout(job_id(), "p", g1), all({"1"}, 2));
  EXPECT_EQ(q.credits(), 1);
  const long long pttl = s().integer("PTTL %s", q.key("parked"));
  EXPECT_GT(pttl, 0);  // LPOP keeps the list's PX
  EXPECT_LE(pttl, 10000);
  const std::string dup = job_id();
  EXPECT_EQ(mem().fanout(dup, "p", g2), all({"1"}, 2));
  EXPECT_FALSE(q.exists(q.key("parked")));  // the last LPOP took the list
  // Four free less the two handed off and still listed on deliver.
  EXPECT_TRUE(is_integer(q.member_park("4", "10000"), 2));
  // A duplicate takes no credit.
  EXPECT_EQ(mem().fanout(dup, "p", g2), all({"1"}, 0));
  EXPECT_EQ(q.credits(), 2);
  EXPECT_EQ(mem().fanout(job_id(), "p", g1), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", g2), all({"1"}, 2));
  EXPECT_FALSE(q.exists(q.key("parked")));
  // Out of credits: the lane and a wake, as for a consumer that is not parked.
  const std::string third = job_id();
  EXPECT_EQ(mem().fanout(third, "p", g3), all({"1"}, 1));
  EXPECT_EQ(q.llen("deliver"), 4);
  EXPECT_EQ(s().zscore(q.lane(g3), third), "0");
  EXPECT_EQ(q.llen("wake"), 1);
}

TEST_F(BusFanout, MemberParkListsTheFreeCreditsLessTheListedHandOffsOrDeletesTheList) {
  mem().beat("1", 60000, "900");
  Queue q = mem().member("1");
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 3));
  EXPECT_EQ(s().list("LRANGE %s 0 -1", q.key("parked")),
            (std::vector<std::string>{"900", "900", "900"}));  // each credit: the member's lease
  const long long pttl = s().integer("PTTL %s", q.key("parked"));
  EXPECT_GT(pttl, 4000);
  EXPECT_LE(pttl, 5000);
  // Two hand-offs listed and not yet taken count against the consumer's free credits.
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 2));
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 1));
  EXPECT_EQ(q.credits(), 1);
  EXPECT_TRUE(is_integer(q.member_park("2", "5000"), 0));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_TRUE(is_integer(q.member_park("0", "5000"), 0));
  EXPECT_FALSE(q.exists(q.key("parked")));
  // More credits than one RPUSH carries (512 per call).
  command(s().context(), "DEL %s", q.key("deliver").c_str());
  EXPECT_TRUE(is_integer(q.member_park("1300", "5000"), 1300));
  EXPECT_EQ(q.credits(), 1300);
  // The credits never outlive the live key: their PX is at most its PTTL.
  mem().beat("1", 2000, "900");
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 3));
  EXPECT_LE(s().integer("PTTL %s", q.key("parked")), 2000);
  for (const auto& [free, px] : std::vector<std::pair<std::string, std::string>>{
           {"-1", "5000"}, {"x", "5000"}, {"1.5", "5000"}, {"1", "0"}, {"1", "x"}}) {
    EXPECT_TRUE(is_error(q.member_park(free, px),
                         "EMQARG free must be an integer >= 0 and px_ms a positive integer"))
        << free << " " << px;
  }
  EXPECT_EQ(q.credits(), 3);  // an argument error writes nothing
}

TEST_F(BusFanout, AHandOffIsLeasedForTheMembersDeclaredLeaseNotTheWritersArgument) {
  mem().beat("1", 60000, "700");
  mem().beat("2", 60000);       // declares none ("-"): the writer's argument
  mem().beat("3", 60000, "x");  // not a positive integer: the writer's argument too
  Queue declared = mem().member("1"), plain = mem().member("2"), odd = mem().member("3");
  EXPECT_EQ(s().str("GET %s", declared.key("live")), "700");
  for (Queue* q : {&declared, &plain, &odd}) q->park(10000);
  const std::string id = job_id();
  const long long t0 = s().now_ms();
  EXPECT_EQ(mem().fanout(id, "p", group_id(), false, 30000), all({"1", "2", "3"}, 2));
  const long long d1 = std::stoll(s().zscore(declared.key("active"), id)) - t0;
  const long long d2 = std::stoll(s().zscore(plain.key("active"), id)) - t0;
  const long long d3 = std::stoll(s().zscore(odd.key("active"), id)) - t0;
  EXPECT_GE(d1, 700);
  EXPECT_LT(d1, 1700);
  EXPECT_GE(d2, 30000);
  EXPECT_LT(d2, 31000);
  EXPECT_GE(d3, 30000);
  EXPECT_LT(d3, 31000);
}

}  // namespace
}  // namespace echo::test
