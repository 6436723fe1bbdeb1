// SPDX-License-Identifier: MIT
// The bus scripts' lanes (bus gates 3.4 G1-G8): gclaim takes strict turns over the ring, under
// each lane's limit and pause, wakes a parked consumer, and reaps a lane's lapsed lease.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

// ---- 3.4 G1-G8: lanes -----------------------------------------------------------------------

TEST_F(BusScripts, G1TwelveClaimsOverThreeLanesAreFourStrictTurns) {
  const std::vector<std::string> groups{group_id(), group_id(), group_id()};
  std::vector<std::vector<std::string>> jobs(3);
  for (std::size_t g = 0; g < 3; ++g) {  // lane by lane: the ring, not arrival, sets the turns
    for (int i = 0; i < 4; ++i) {
      jobs[g].push_back(job_id());
      ASSERT_TRUE(is_integer(bus().genqueue(jobs[g].back(), "p", groups[g]), 1));
    }
  }
  EXPECT_EQ(bus().ring(), groups);
  for (int turn = 0; turn < 4; ++turn) {
    for (std::size_t g = 0; g < 3; ++g) {
      const auto c = bus().gclaim(30000);
      ASSERT_TRUE(c) << "turn " << turn << " lane " << g;
      EXPECT_EQ(c->group, groups[g]) << "turn " << turn;
      EXPECT_EQ(c->id, jobs[g][turn]) << "turn " << turn;  // oldest first within a lane
      EXPECT_EQ(c->token, 1);
    }
  }
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());  // each drained lane left the ring
  for (const auto& g : groups) EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "4");
}

TEST_F(BusScripts, G2AQuietLanesLastJobIsClaimedAt40Of420AgainstFlat401To420) {
  const std::string busy = group_id(), quiet = group_id();
  Bus flat(client(), "orders.flat");
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "busy", busy), 1));
    ASSERT_TRUE(is_integer(flat.enqueue(job_id(), "busy"), 1));
  }
  for (int i = 0; i < 20; ++i) {  // enqueued after the whole busy backlog
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "quiet", quiet), 1));
    ASSERT_TRUE(is_integer(flat.enqueue(job_id(), "quiet"), 1));
  }
  int lanes_last = 0, flat_first = 0, flat_last = 0;
  for (int pos = 1; pos <= 420; ++pos) {
    const auto l = bus().gclaim(30000);
    const auto f = flat.claim(30000);
    ASSERT_TRUE(l && f) << "position " << pos;
    if (l->payload == "quiet") lanes_last = pos;
    if (f->payload == "quiet") {
      if (flat_first == 0) flat_first = pos;
      flat_last = pos;
    }
  }
  std::printf("G2: quiet lane's last job at %d of 420 with lanes; flat: %d..%d\n", lanes_last,
              flat_first, flat_last);
  EXPECT_EQ(lanes_last, 40);
  EXPECT_EQ(flat_first, 401);
  EXPECT_EQ(flat_last, 420);
}

TEST_F(BusScripts, G3Limit2MakesTheThirdClaimEmptyWithGactive2) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  EXPECT_TRUE(is_integer(bus().glimit(g, 2), 1));
  EXPECT_EQ(bus().hget(bus().key("glimit"), g.c_str()), "2");
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "2");
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 1);
  // A completion frees a slot: the lane re-enters the ring, with a wake.
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().complete(ids[0], "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_TRUE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, ids[2]);
}

TEST_F(BusScripts, G3LoweringTheLimitBelowInFlightTakesTheLaneOutAndRaisingItPutsItBack) {
  const std::string g = group_id();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().in_ring(g));
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().glimit(g, 2), 1));
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);
  EXPECT_TRUE(is_integer(bus().glimit(g, 3), 1));
  EXPECT_TRUE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  EXPECT_TRUE(is_integer(bus().glimit(g, 4), 1));  // already in the ring: no second wake
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
}

TEST_F(BusScripts, G4PauseKeepsDepth3AndTakesTheLaneOutOfTheRingUntilResume) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  ASSERT_TRUE(bus().gclaim(30000));  // one in flight when the pause lands
  EXPECT_TRUE(is_integer(bus().gpause(g), 1));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 3);
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_FALSE(bus().gclaim(30000));
  const long long wakes = bus().llen(bus().key("wake"));
  // In flight runs on; neither its completion nor new work puts a paused lane back.
  EXPECT_TRUE(is_integer(bus().complete(ids[0], "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "(nil)");
  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);
  EXPECT_EQ(bus().zcard(bus().lane(g)), 4);

  EXPECT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(claimed(bus().gclaim(30000)).id, ids[i]);
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_FALSE(bus().gclaim(30000));
}

// A group at its ceiling re-enters the ring only when a holder lets go (complete or retry); no
// other ring insert (genqueue, gresume, promote, reap) may put it back early, nor push a wake.
TEST_F(BusScripts, EveryRingInsertHonoursTheCeiling) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  ASSERT_TRUE(bus().gclaim(40));     // ids[0], lease runs out below
  ASSERT_TRUE(bus().gclaim(30000));  // ids[1]
  ASSERT_TRUE(is_integer(bus().glimit(g, 1), 1));
  ASSERT_FALSE(bus().in_ring(g));
  const long long wakes = bus().llen(bus().key("wake"));

  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "genqueue";
  ASSERT_TRUE(is_integer(bus().gpause(g), 1));
  ASSERT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "gresume";
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));  // ids[0]; ids[1] still holds the one slot
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_FALSE(bus().in_ring(g)) << "reap";
  // ids[0] is back in the lane unclaimed: its retry with the old token schedules it again
  // without touching gactive, and promote brings it back while ids[1] still holds the slot.
  ASSERT_TRUE(is_bulk(bus().retry(ids[0], "1", 0, 3, "e"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "promote";
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);

  EXPECT_TRUE(is_integer(bus().complete(ids[1], "1"), 1));  // the slot frees: back, one wake
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
}

TEST_F(BusScripts, G4ResumingAnEmptyLaneLeavesTheRingAlone) {
  const std::string g = group_id();
  EXPECT_TRUE(is_integer(bus().gpause(g), 1));
  EXPECT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_EQ(bus().llen(bus().key("wake")), 0);
  EXPECT_EQ(bus().integer("SCARD %s", bus().key("paused")), 0);
}

TEST_F(BusScripts, G5AWakeIsPushedOnlyWhenAGroupEntersTheRingCappedAt64) {
  const std::string a = group_id();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", a), 1));
  EXPECT_EQ(bus().llen(bus().key("wake")), 1);  // five jobs, one entry
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());
  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", a), 1));  // re-enters: a second wake
  EXPECT_EQ(bus().llen(bus().key("wake")), 2);
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", group_id()), 1));
  EXPECT_EQ(bus().llen(bus().key("ring")), 101);
  EXPECT_EQ(bus().llen(bus().key("wake")), 64);
  RedisReply tokens = command(client(), "LRANGE %s 0 -1", bus().key("wake").c_str());
  ASSERT_TRUE(tokens && tokens->type == REDIS_REPLY_ARRAY);
  for (std::size_t i = 0; i < tokens->elements; ++i) EXPECT_EQ(text(tokens->element[i]), "1");
}

TEST_F(BusScripts, G6AParkedConsumerIsWokenByTheEnqueueNotByIts5000msBeat) {
  RedisClient parked = connect_client(server());
  ASSERT_TRUE(parked);
  const std::string wake = bus().key("wake");
  RedisReply popped;
  const auto t0 = std::chrono::steady_clock::now();
  auto woken = t0;
  std::thread consumer([&] {
    popped = command(parked.get(), "BLPOP %s 5.000", wake.c_str());
    woken = std::chrono::steady_clock::now();
  });
  // Enqueue only once the consumer is parked, or the test would not show a wake.
  bool blocked = false;
  for (int i = 0; i < 400 && !blocked; ++i) {
    RedisReply info = command(client(), "INFO clients");
    blocked = info && text(info.get()).find("blocked_clients:1") != std::string::npos;
    if (!blocked) std::this_thread::sleep_for(milliseconds(5));
  }
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_integer(bus().genqueue(job_id(), "p", group_id()), 1));
  consumer.join();
  ASSERT_TRUE(blocked) << "the consumer never parked";
  ASSERT_TRUE(popped && popped->type == REDIS_REPLY_ARRAY && popped->elements == 2)
      << text(popped.get());
  EXPECT_EQ(text(popped->element[0]), wake);
  EXPECT_EQ(text(popped->element[1]), "1");
  const auto answered = std::chrono::duration_cast<milliseconds>(woken - sent).count();
  std::printf("G6: wake answered in %lld ms against a 5000 ms beat\n",
              static_cast<long long>(answered));
  EXPECT_LT(answered, 1000);
}

TEST_F(BusScripts, G7A60msLaneLeaseIsReapedOnTheBeatWithToken2) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(60)).token, 1);
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  std::this_thread::sleep_for(milliseconds(90));
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().reap(), 1));
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);
  EXPECT_EQ(bus().zscore(bus().lane(g), id), "0");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->token, 2);
  EXPECT_EQ(c->group, g);
}

TEST_F(BusScripts, G8AReapedButUnclaimedHolderCompletesWithItsOldTokenAndRetiresItEverywhere) {
  const std::string g = group_id(), first = job_id(), second = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(first, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(second, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(40)).id, first);
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  ASSERT_EQ(bus().zcard(bus().lane(g)), 2);
  EXPECT_TRUE(is_integer(bus().complete(first, "1"), 1));
  EXPECT_FALSE(bus().exists(bus().job(first)));
  EXPECT_EQ(bus().zscore(bus().lane(g), first), "(nil)");
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);  // not decremented twice
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});  // the lane still has work
  const auto c = bus().gclaim(40);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, second);
  EXPECT_EQ(c->token, 1);
  // The same for the lane's last job: the emptied lane leaves the ring.
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  EXPECT_TRUE(is_integer(bus().complete(second, "1"), 1));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 0);
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_FALSE(bus().gclaim(30000));
}

TEST_F(BusScripts, G8FlatAReapedButUnclaimedHolderRetiresItFromPending) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(40));
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  ASSERT_EQ(bus().zcard(bus().key("pending")), 1);
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, GactiveIsDecrementedAndItsFieldDeletedAtZero) {
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(a, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(b, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "2");
  EXPECT_TRUE(is_integer(bus().complete(a, "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_TRUE(is_bulk(bus().retry(b, "1", 60000, 3, "e"), "scheduled"));
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);
  EXPECT_FALSE(bus().exists(bus().key("gactive")));
}

TEST_F(BusScripts, ARetriedLaneJobKeepsItsGroupAndPromoteReturnsItToItsLaneWithAWake) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "e"), "scheduled"));
  EXPECT_EQ(bus().hget(bus().job(id), "group"), g);
  EXPECT_TRUE(bus().ring().empty());
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_EQ(bus().zscore(bus().lane(g), id), "0");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->token, 2);
  EXPECT_EQ(c->group, g);
}

TEST_F(BusScripts, GclaimOnARingNamingAnEmptyLaneAnswersEmptyAndHealsTheRing) {
  const std::string g = group_id();
  RedisReply pushed = command(client(), "RPUSH %s %s", bus().key("ring").c_str(), g.c_str());
  ASSERT_TRUE(is_integer(pushed, 1));
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());
}

}  // namespace
}  // namespace echo::test
