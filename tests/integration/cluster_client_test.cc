// SPDX-License-Identifier: MIT
// The slot-aware client against a real local cluster (3 masters, 3 replicas of redis-server):
// the harness is healthy, slots agree with the server's CLUSTER KEYSLOT, every command and script
// lands on its slot's master, ASK during a migration changes nothing, MOVED after it updates the
// map, and the redirect bound is a typed error. The failover case is cluster_failover_test.cc.
#include <echo/io/cluster_client.h>
#include <echo/testing/local_cluster.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster_fixture.h"

namespace echo::io {
namespace {

using std::chrono::milliseconds;

class ClusterClientTest : public test::ClusterTest {
 protected:
  std::unique_ptr<ClusterClient> client(int max_redirects = 5) {
    ClusterOptions o;
    o.seeds = parse_seeds(cluster().seeds());
    o.max_redirects = max_redirects;
    o.connection.label = "test";
    auto c = std::make_unique<ClusterClient>(lt_.loop(), std::move(o));
    c->start();
    EXPECT_EQ(c->wait_ready(milliseconds(10000)), std::error_code{});
    return c;
  }

  OwnedResult evalsha(ClusterClient& c, const Script& s, std::vector<std::string> keys,
                      std::vector<std::string> argv) {
    auto result = std::make_shared<std::promise<OwnedResult>>();
    auto future = result->get_future();
    lt_.loop().post([&c, &s, result, keys = std::move(keys), argv = std::move(argv)] {
      const std::vector<std::string_view> k(keys.begin(), keys.end());
      const std::vector<std::string_view> a(argv.begin(), argv.end());
      c.evalsha(s, k, a, [result](std::error_code ec, const Resp3Value& v) {
        result->set_value(OwnedResult{ec, v.to_owned()});
      });
    });
    return future.get();
  }

  // Waits until the client's map has been refreshed past `after` refreshes.
  // Until no map refresh came for 500 ms (five refresh_min_intervals). A new client keeps asking
  // for the map, a tick apart, until every master it names answers; one of those refreshes
  // landing after a test's migration learns the new owner before the first call can be
  // redirected (a fresh clone under load: the GET after MOVED's migration answered "v" at once).
  static void settle(const ClusterClient& c) {
    std::uint64_t last = c.stats().refreshes;
    auto quiet_since = std::chrono::steady_clock::now();
    for (int i = 0; i < 750; ++i) {  // 15 s at most
      std::this_thread::sleep_for(milliseconds(20));
      const auto now = std::chrono::steady_clock::now();
      if (const std::uint64_t r = c.stats().refreshes; r != last) {
        last = r;
        quiet_since = now;
      } else if (now - quiet_since >= milliseconds(500)) {
        return;
      }
    }
    ADD_FAILURE() << "the client's map refreshes never stopped";
  }

  static bool refreshed_past(const ClusterClient& c, std::uint64_t after) {
    for (int i = 0; i < 200; ++i) {
      if (c.stats().refreshes > after) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  LoopThread lt_;
};

TEST_F(ClusterClientTest, HarnessIsThreeMastersThreeReplicasHealthy) {
  EXPECT_EQ(cluster().size(), 6u);
  EXPECT_TRUE(cluster().healthy());
  int masters = 0, replicas = 0;
  for (const auto& n : cluster().nodes()) {
    EXPECT_GE(n.index, 0) << n.id;
    EXPECT_NE(n.port, 6379);
    (n.master ? masters : replicas)++;
  }
  EXPECT_EQ(masters, 3);
  EXPECT_EQ(replicas, 3);
}

TEST_F(ClusterClientTest, SlotsAgreeWithServerKeyslot) {
  for (std::string key : {"ecc:{quotes}:AST0KHTOWnGLuC", "emq:{ecc.coh.quotes}:pending",
                          "{emq}:version", "plain", "foo{}{bar}", "foo{{bar}}", "a{b"}) {
    EXPECT_EQ(std::to_string(hash_slot(key)), cluster().admin(0, {"CLUSTER", "KEYSLOT", key}))
        << key;
  }
}

TEST_F(ClusterClientTest, EveryCommandLandsOnItsSlotsMaster) {
  auto c = client();
  std::set<int> owners;
  for (int i = 0; i < 60; ++i) {
    const std::string key = "ecc:{t" + std::to_string(i) + "}:k";
    auto r = c->call_blocking({"SET", key, "v" + std::to_string(i)});
    ASSERT_FALSE(r.ec) << r.ec.message() << " " << r.reply.view().to_debug_string();
    // The key is on the master the cluster itself names for its slot.
    const int owner = cluster().master_of(hash_slot(key));
    owners.insert(owner);
    EXPECT_EQ(cluster().admin(owner, {"GET", key}), "v" + std::to_string(i));
  }
  EXPECT_EQ(owners.size(), 3u);  // 60 tags spread over all three masters
  const auto s = c->stats();
  EXPECT_EQ(s.moved, 0u);
  EXPECT_EQ(s.ask, 0u);
  EXPECT_EQ(s.masters, 3u);
  EXPECT_GE(s.refreshes, 1u);
  // The fence key was claimed through the router, on its own slot's master.
  EXPECT_EQ(cluster().admin(cluster().master_of(9051), {"GET", "{emq}:version"}), "echomq:2.0.0");
}

TEST_F(ClusterClientTest, ScriptsRouteByFirstKeyAndLoadOnEachMaster) {
  auto c = client();
  Script s;
  s.source = "return redis.call('SET', KEYS[1], ARGV[1])";
  s.sha = cluster().admin(0, {"SCRIPT", "LOAD", s.source});  // the server computes the SHA
  for (int i = 0; i < 12; ++i) {
    const std::string key = "emq:{q" + std::to_string(i) + "}:x";
    auto r = evalsha(*c, s, {key}, {"s" + std::to_string(i)});
    ASSERT_FALSE(r.ec) << r.ec.message();
    EXPECT_EQ(cluster().admin(cluster().master_of(hash_slot(key)), {"GET", key}),
              "s" + std::to_string(i));
  }
  EXPECT_EQ(c->stats().moved, 0u);
}

TEST_F(ClusterClientTest, AskDuringMigrationThenMovedAfterIt) {
  auto c = client();
  const std::uint16_t slot = hash_slot("mig");
  ASSERT_FALSE(c->call_blocking({"SET", "{mig}:old", "before"}).ec);
  settle(*c);
  const int source = cluster().master_of(slot);
  const int target = cluster().other_master(slot);
  cluster().begin_migration(slot, target);

  // A key the source lacks: ASK → ASKING + the command on the target; the map is unchanged.
  auto missing = c->call_blocking({"GET", "{mig}:new"});
  ASSERT_FALSE(missing.ec) << missing.ec.message();
  EXPECT_TRUE(missing.reply.view().is_null());
  auto set_new = c->call_blocking({"SET", "{mig}:new", "during"});
  ASSERT_FALSE(set_new.ec) << set_new.reply.view().to_debug_string();
  EXPECT_EQ(c->stats().ask, 2u);
  EXPECT_EQ(c->stats().moved, 0u);
  EXPECT_EQ(c->address_of(slot).port, cluster().server(source).port());
  // A key the source still holds is answered there, no redirect.
  auto old = c->call_blocking({"GET", "{mig}:old"});
  EXPECT_EQ(old.reply.view().str(), "before");
  EXPECT_EQ(c->stats().ask, 2u);

  cluster().finish_migration(slot, target);
  const auto refreshes = c->stats().refreshes;
  auto moved = c->call_blocking({"GET", "{mig}:old"});
  ASSERT_FALSE(moved.ec) << moved.ec.message();
  EXPECT_EQ(moved.reply.view().str(), "before");
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_EQ(c->address_of(slot).port, cluster().server(target).port());
  EXPECT_TRUE(refreshed_past(*c, refreshes));  // MOVED refreshes the whole map
  auto again = c->call_blocking({"GET", "{mig}:new"});
  EXPECT_EQ(again.reply.view().str(), "during");
  EXPECT_EQ(c->stats().moved, 1u);  // the map already says so: no second redirect
}

TEST_F(ClusterClientTest, RedirectBeyondTheBoundIsTypedThenTheRefreshedMapServes) {
  auto c = client(/*max_redirects=*/0);
  const std::uint16_t slot = hash_slot("bound");
  ASSERT_FALSE(c->call_blocking({"SET", "{bound}:k", "v"}).ec);
  settle(*c);
  const int target = cluster().other_master(slot);
  cluster().begin_migration(slot, target);
  cluster().finish_migration(slot, target);
  const auto refreshes = c->stats().refreshes;
  auto r = c->call_blocking({"GET", "{bound}:k"});
  EXPECT_EQ(r.ec, make_error_code(IoErrc::kTooManyRedirects));
  EXPECT_TRUE(r.reply.view().str().starts_with("MOVED ")) << r.reply.view().to_debug_string();
  EXPECT_EQ(c->stats().redirect_limit, 1u);
  ASSERT_TRUE(refreshed_past(*c, refreshes));
  auto ok = c->call_blocking({"GET", "{bound}:k"});
  ASSERT_FALSE(ok.ec) << ok.ec.message();
  EXPECT_EQ(ok.reply.view().str(), "v");
}

// An idle client's loop sleeps: with no call held, every master answering and the map settled,
// the tick looks once a second (it ticked every 50 ms: ~40 loop cycles in these 2 s).
TEST_F(ClusterClientTest, AnIdleClientWakesItsLoopAboutOnceASecond) {
  auto c = client();
  ASSERT_FALSE(c->call_blocking({"SET", "{idle}:k", "v"}).ec);
  settle(*c);
  auto cycles = [&] {
    std::promise<std::uint64_t> p;
    lt_.loop().post([&] { p.set_value(lt_.loop().stats().iterations); });
    return p.get_future().get();
  };
  const std::uint64_t before = cycles();
  std::this_thread::sleep_for(milliseconds(2000));
  const std::uint64_t woke = cycles() - before;
  EXPECT_LE(woke, 8u) << "loop cycles in 2 s of an idle cluster client";
  // A refresh asked of the sleeping client is still made, and calls are still served.
  const auto refreshes = c->stats().refreshes;
  lt_.loop().post([&] { c->refresh(); });
  EXPECT_TRUE(refreshed_past(*c, refreshes));
  auto ok = c->call_blocking({"GET", "{idle}:k"});
  ASSERT_FALSE(ok.ec) << ok.ec.message();
  EXPECT_EQ(ok.reply.view().str(), "v");
}

TEST_F(ClusterClientTest, BadOptionsAreRefusedNamingTheKnob) {
  ClusterOptions none;
  EXPECT_THROW(ClusterClient(lt_.loop(), none), std::invalid_argument);
  ClusterOptions o;
  o.seeds = parse_seeds(cluster().seeds());
  o.max_redirects = 17;
  EXPECT_THROW(ClusterClient(lt_.loop(), o), std::invalid_argument);
  o.max_redirects = 5;
  o.connection.db = 1;
  EXPECT_THROW(ClusterClient(lt_.loop(), o), std::invalid_argument);
}

}  // namespace
}  // namespace echo::io
