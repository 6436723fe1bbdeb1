// SPDX-License-Identifier: MIT
// ServerMode::kSentinel against real Redis Sentinel (one master, one replica, three
// redis-sentinel processes): discovery (the master found, an unknown name and no reachable
// sentinel refused with typed errors), the watcher moving to the next sentinel when its own dies,
// and the failover drill: SENTINEL FAILOVER while a writer and two readers run; every engine
// follows +switch-master, flushes (the disconnect policy), writes resume, and after the engines
// followed every node's every read agrees with L2 on the new master (stale reads: 0).
#include <echo/engine/engine.h>
#include <echo/engine/stats_export.h>
#include <echo/io/io_error.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "integration/engine_nodes.h"
#include "integration/journal_lane.h"
#include "integration/metric_refs.h"
#include "support/redis_fixture.h"
#include "support/sentinel_fixture.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Errc;
using std::chrono::milliseconds;
using table::BrandedId;

std::unique_ptr<engine::Engine> start_on(engine::EngineOptions o,
                                         std::vector<engine::TableSpec> tables) {
  auto e = std::make_unique<engine::Engine>(std::move(o), std::move(tables));
  const std::error_code ec = e->start(std::chrono::seconds(20));  // generous: a loaded 2-core box
  EXPECT_FALSE(ec) << "sentinel-mode node did not start: " << ec.message();
  return ec ? nullptr : std::move(e);
}

std::string at(int port) { return "127.0.0.1:" + std::to_string(port); }

// The discovery tests share one group: none of them changes its master.
class SentinelDiscovery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { group_ = start_for_suite<SentinelGroup>(error_); }
  static void TearDownTestSuite() { group_.reset(); }
  void SetUp() override { ASSERT_TRUE(group_) << "SentinelGroup: " << error_; }
  static SentinelGroup& group() { return *group_; }

 private:
  static std::unique_ptr<SentinelGroup> group_;
  static std::string error_;
};
std::unique_ptr<SentinelGroup> SentinelDiscovery::group_;
std::string SentinelDiscovery::error_;

// Each failover test its own group: a failover swaps the roles for good.
class SentinelFailover : public ::testing::Test {
 protected:
  void SetUp() override {
    group_ = start_for_suite<SentinelGroup>(error_);
    ASSERT_TRUE(group_) << "SentinelGroup: " << error_;
  }
  void TearDown() override { group_.reset(); }
  SentinelGroup& group() { return *group_; }

 private:
  std::unique_ptr<SentinelGroup> group_;
  std::string error_;
};

TEST_F(SentinelDiscovery, EngineFindsTheMasterThroughTheSentinelsAndPutsAndGets) {
  LoaderProbe loader;
  auto e = start_on(sentinel_node_options(group(), 1),
                    {table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("l"))});
  ASSERT_TRUE(e);
  const BrandedId name = fresh_id("AST");
  auto v = e->put("quotes", name.view(), "px=1");
  ASSERT_TRUE(v) << v.error().code.message();
  auto got = e->get("quotes", name.view());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, "px=1");
  EXPECT_EQ(got->version, *v);
  // The row is on the master the sentinels name, and replicated.
  const int master = group().server(0).port();
  EXPECT_EQ(SentinelGroup::admin(master, {"GET", l2_key("quotes", name)}).substr(0, 14), v->view());
  const auto s = e->stats();
  ASSERT_TRUE(s.sentinel);
  EXPECT_EQ(s.sentinel->master, at(master));
  EXPECT_GE(s.sentinel->asks, 1u);
  EXPECT_EQ(s.sentinel->switches, 0u);
  const auto watcher =
      std::find_if(s.connections.begin(), s.connections.end(),
                   [](const io::ConnectionStats& c) { return c.label == "sentinel"; });
  ASSERT_NE(watcher, s.connections.end());
  EXPECT_EQ(watcher->status, io::ConnStatus::kReady);
  EXPECT_EQ(watcher->protocol, 3);  // +switch-master arrives as a push
  EXPECT_EQ(loader.runs(), 0);
}

// The Sentinel families the docs and alert rules name (metric_refs.h), in a live node's
// exposition.
TEST_F(SentinelDiscovery, TheSentinelSeriesTheDocsAndAlertsNameAreExported) {
  auto e = start_on(sentinel_node_options(group(), 2),
                    {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("l"))});
  ASSERT_TRUE(e);
  const auto problems = metric_refs::problems(
      engine::to_prometheus(engine::take_snapshot(*e, "2")),
      [](const metric_refs::Ref& r) { return r.name.starts_with("echostore_sentinel_"); });
  EXPECT_TRUE(problems.empty()) << metric_refs::joined(problems);
}

TEST_F(SentinelDiscovery, DeadFirstSentinelIsSkipped) {
  auto o = sentinel_node_options(group(), 2);
  o.sentinels = at(testing::free_loopback_port()) + "," + o.sentinels;  // nobody listens there
  auto e = start_on(std::move(o),
                    {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("l"))});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->stats().sentinel->master, at(group().server(0).port()));
  EXPECT_TRUE(e->put("quotes", fresh_id("AST").view(), "x"));
}

TEST_F(SentinelDiscovery, UnknownMasterNameFailsStartNamingIt) {
  auto o = sentinel_node_options(group(), 3);
  o.sentinel_master = "no-such-master";
  engine::Engine e(std::move(o), {});
  const engine::Error err = e.start(std::chrono::seconds(20));
  EXPECT_EQ(err, Errc::kSentinelUnknownMaster) << err;
  EXPECT_EQ(err.code.message(), "sentinel_unknown_master");
  EXPECT_NE(err.message().find("does not monitor master 'no-such-master'"), std::string::npos)
      << err.message();
  EXPECT_FALSE(e.running());
}

TEST_F(SentinelDiscovery, NoReachableSentinelFailsStart) {
  auto o = sentinel_node_options(group(), 4);
  o.sentinels = at(testing::free_loopback_port()) + "," + at(testing::free_loopback_port());
  engine::Engine e(std::move(o), {});
  const auto t0 = std::chrono::steady_clock::now();
  const engine::Error err = e.start(std::chrono::seconds(30));
  EXPECT_EQ(err, Errc::kNoSentinel) << err;
  // The detail names the master and the last sentinel's cause (its refused connect).
  EXPECT_NE(err.message().find("none of the 2 sentinels"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("127.0.0.1:"), std::string::npos) << err.message();
  // Both were tried, each refused at once: well before the start's own deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
}

// sentinel_password: the sentinels' requirepass, presented at the watcher's HELLO; a wrong one
// fails start with the connector's auth_refused.
TEST(SentinelAuth, SentinelPasswordIsPresentedAndAWrongOneFailsStart) {
  std::string error;
  auto group = start_for_suite<SentinelGroup>(
      error, SentinelGroupOptions{.sentinels = 1, .quorum = 1, .password = "s3cret"});
  ASSERT_TRUE(group) << "SentinelGroup: " << error;
  auto e = start_on(sentinel_node_options(*group, 1), {});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->stats().sentinel->master, at(group->server(0).port()));
  auto wrong = sentinel_node_options(*group, 2);
  wrong.sentinel_password = "wrong";
  engine::Engine refused(std::move(wrong), {});
  const engine::Error err = refused.start(std::chrono::seconds(20));
  EXPECT_EQ(err, io::IoErrc::kAuthRefused) << err;
}

// The watcher's sentinel dies: it moves to the next one in the list. A switch after that is
// followed, and the tracking lane's CLIENT TRACKING is sent again on the new master (its
// invalidations reach this node from there).
TEST_F(SentinelFailover, WatcherMovesToTheNextSentinelAndFollowsASwitchAfter) {
  auto e = start_on(sentinel_node_options(group(), 1),
                    {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("l")),
                     table_spec("tracked", "AST", CoherenceMode::kTracking, answering("l"))});
  ASSERT_TRUE(e);
  const int old_master = group().server(0).port();
  group().sentinel(0).stop();  // the watcher's: the first listed
  ASSERT_TRUE(eventually([&] { return e->stats().sentinel->reconnects >= 1; }, 20s));
  group().failover(20s, 1);  // through another sentinel: sentinel 0 is gone
  const int promoted = group().wait_switch(old_master, milliseconds(30000));
  EXPECT_EQ(promoted, group().server(1).port());
  ASSERT_TRUE(eventually([&] { return e->stats().sentinel->master == at(promoted); }, 20s));
  EXPECT_GE(e->stats().sentinel->switches, 1u);
  // Writes land on the promoted master.
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(eventually([&] { return bool(e->put("quotes", name.view(), "after")); }, 20s));
  EXPECT_EQ(SentinelGroup::admin(promoted, {"GET", l2_key("quotes", name)}).substr(14), "after");
  // Tracking on the new master: a row cached here is dropped when another client writes its key.
  const BrandedId row = fresh_id("AST");
  ASSERT_TRUE(eventually([&] { return bool(e->put("tracked", row.view(), "t1")); }, 20s));
  ASSERT_TRUE(eventually(
      [&] {
        auto got = e->get("tracked", row.view());
        return got && got->value == "t1" && l1_holds(*e, "tracked", row);
      },
      20s));
  SentinelGroup::admin(promoted, {"SET", l2_key("tracked", row),
                                  engine::frame_l2_value(fresh_id("AST"), "t2"), "PX", "60000"});
  ASSERT_TRUE(eventually(
      [&] {
        auto got = e->get("tracked", row.view());
        return got && got->value == "t2";
      },
      20s))
      << "no invalidation from the new master";
}

// A master that is demoted behind the sentinels' back (REPLICAOF another server, its clients
// killed, as sentinel itself reconfigures an old master) is refused by ROLE at every reconnect:
// counted, the subscriber's loss flushes, and nothing is served there until it is a master again.
TEST_F(SentinelFailover, DemotedMasterIsRefusedUntilItAnswersRoleMasterAgain) {
  auto e = start_on(sentinel_node_options(group(), 1),
                    {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("l"))});
  ASSERT_TRUE(e);
  const int a = group().server(0).port();
  testing::LocalServer other;  // what the demoted master follows
  const auto flushes = [&] { return writer_of(*e, "quotes").stats().disconnect_flushes; };
  const std::uint64_t flushes_before = flushes();
  const BrandedId early = fresh_id("AST");
  ASSERT_TRUE(e->publish("quotes", early.view(), "on-the-master"));  // on this thread's link
  ASSERT_EQ(e->stats().caller_link_calls, 1u);
  SentinelGroup::admin(a, {"REPLICAOF", "127.0.0.1", std::to_string(other.port())});
  // The link's publish is answered READONLY: it goes again through io thread 0 (counted), whose
  // connection is refused too until the ROLE check drops it.
  EXPECT_FALSE(e->publish("quotes", early.view(), "on-a-replica"));
  EXPECT_EQ(e->stats().caller_link_fallbacks, 1u);
  SentinelGroup::admin(a, {"CLIENT", "KILL", "TYPE", "normal"});
  SentinelGroup::admin(a, {"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return e->stats().sentinel->role_refusals >= 2; }, 20s));
  // While it is a replica the engine keeps refusing it (its connections are dropped on ROLE).
  const BrandedId name = fresh_id("AST");
  EXPECT_FALSE(e->put("quotes", name.view(), "on-a-replica"));
  SentinelGroup::admin(a, {"REPLICAOF", "NO", "ONE"});
  ASSERT_TRUE(eventually([&] { return bool(e->put("quotes", name.view(), "back")); }, 20s));
  EXPECT_EQ(SentinelGroup::admin(a, {"GET", l2_key("quotes", name)}).substr(14), "back");
  // A second after the refusal the link dials the master again.
  ASSERT_TRUE(eventually([&] { return bool(e->publish("quotes", name.view(), "linked")); }, 20s));
  ASSERT_TRUE(eventually(
      [&] {
        return e->publish("quotes", name.view(), "linked") && e->stats().caller_link_calls >= 2;
      },
      20s));
  ASSERT_TRUE(eventually(
      [&] { return flushes() > flushes_before && !writer_of(*e, "quotes").stats().suspended; },
      20s));
  EXPECT_EQ(e->stats().sentinel->switches, 0u);  // the sentinels named A throughout
}

// The job lane across a switch: the consumer's commands go through the command connection
// (redialled at the switch) and its parking connection follows at its next beat (its target asks
// the watcher), so after the failover writers hand jobs straight to it again on the new master.
TEST_F(SentinelFailover, JobLaneParkFollowsTheSwitchAndHandOffsResume) {
  const std::string t = "sfo";
  constexpr unsigned kConsumer = 7;
  constexpr int kJobs = 6;
  auto w = start_on(sentinel_node_options(group(), 70), {writer_spec(t)});
  auto c = start_on(sentinel_node_options(group(), kConsumer), {lane_spec(t)});
  ASSERT_TRUE(w && c);
  const BrandedId lane = fresh_id("PRT");
  auto consumer = [&] { return c->stats().tables.front().consumer.value(); };
  // One job at a time, each waited for; a refused enqueue (the switch under way) is sent again.
  auto run_jobs = [&](const char* phase) {
    for (int i = 0; i < kJobs; ++i) {
      const BrandedId name = fresh_id("AST"), v = w->mint("AST").value();
      const std::uint64_t before = consumer().completed;
      ASSERT_TRUE(eventually([&] { return bool(w->enqueue(t, lane, name.view(), v)); }, 20s))
          << phase << ": job " << i << " never admitted";
      ASSERT_TRUE(eventually([&] { return consumer().completed >= before + 1; }, 20s))
          << phase << ": job " << i << " never completed";
    }
  };
  const auto s0 = consumer();
  run_jobs("before the failover");
  const auto s1 = consumer();
  EXPECT_GE(s1.handed_off - s0.handed_off, 1u) << "no hand-off even before the failover";

  const int old_master = group().server(0).port();
  group().failover(20s);
  const int promoted = group().wait_switch(old_master, milliseconds(30000));
  for (auto* e : {w.get(), c.get()}) {
    ASSERT_TRUE(eventually([&] { return e->stats().sentinel->master == at(promoted); }, 20s));
  }
  // A beat later the park dials the new master and the consumer lists its credits there.
  const auto s2 = consumer();
  ASSERT_TRUE(eventually([&] { return consumer().parks > s2.parks; }, 20s))
      << "no park on the promoted master";
  run_jobs("after the failover");
  const auto s3 = consumer();
  const std::uint64_t handed = s3.handed_off - s2.handed_off, claimed = s3.claimed - s2.claimed;
  EXPECT_GE(handed + claimed, static_cast<std::uint64_t>(kJobs));
  EXPECT_GE(handed, static_cast<std::uint64_t>(kJobs / 2))
      << "hand-offs did not resume on the promoted master (claimed " << claimed << ")";
  std::printf(
      "[ sentinel park ] before: %llu of %d handed off; after the switch: %llu handed "
      "off, %llu claimed of %d\n",
      static_cast<unsigned long long>(s1.handed_off - s0.handed_off), kJobs,
      static_cast<unsigned long long>(handed), static_cast<unsigned long long>(claimed), kJobs);
}

TEST_F(SentinelFailover, DrillEveryNodeAgreesWithL2AfterSentinelFailoverUnderLoad) {
  LoaderProbe loader;
  const auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("loaded"));
  auto writer = start_on(sentinel_node_options(group(), 1), {spec});
  auto r1 = start_on(sentinel_node_options(group(), 2), {spec});
  auto r2 = start_on(sentinel_node_options(group(), 3), {spec});
  ASSERT_TRUE(writer && r1 && r2);
  std::vector<engine::Engine*> nodes = {writer.get(), r1.get(), r2.get()};

  constexpr int kNames = 40;
  std::vector<BrandedId> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(fresh_id("AST"));
    ASSERT_TRUE(writer->put("quotes", names.back().view(), "v0"));
  }
  for (auto* e : nodes) {
    for (const auto& n : names) ASSERT_TRUE(e->get("quotes", n.view()));
  }

  // Writers and readers run through the failover, the switch and the resubscription.
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0}, write_errors{0}, reads{0}, read_errors{0};
  std::thread write_loop([&] {
    for (int round = 1; !stop.load(); ++round) {
      for (const auto& n : names) {
        auto v = writer->put("quotes", n.view(), "r" + std::to_string(round));
        if (v && writer->broadcast("quotes", n.view(), *v)) {
          writes.fetch_add(1);
        } else {
          write_errors.fetch_add(1);
        }
      }
    }
  });
  std::vector<std::thread> read_loops;
  for (auto* e : {r1.get(), r2.get()}) {
    read_loops.emplace_back([&, e] {
      for (int i = 0; !stop.load(); ++i) {
        (e->get("quotes", names[i % kNames].view()) ? reads : read_errors).fetch_add(1);
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return writes.load() >= kNames; }, 20s));
  const int old_master = group().server(0).port();
  const auto t_failover = Clock::now();
  group().failover(20s);
  const int promoted = group().wait_switch(old_master, milliseconds(30000));
  const auto t_switched = Clock::now();
  // Every node followed: the new master recorded, its subscriber lost (flush) and confirmed again.
  for (auto* e : nodes) {
    ASSERT_TRUE(eventually(
        [&] {
          const auto s = e->stats();
          const auto w = writer_of(*e, "quotes").stats();
          return s.sentinel->switches >= 1 && s.sentinel->master == at(promoted) &&
                 w.disconnect_flushes >= 1 && !w.suspended;
        },
        30s));
  }
  const auto t_followed = Clock::now();
  const int writes_at_follow = writes.load();
  ASSERT_TRUE(eventually([&] { return writes.load() >= writes_at_follow + kNames; }, 20s));
  stop = true;
  write_loop.join();
  for (auto& t : read_loops) t.join();

  // Recovery: one last version per name, broadcast; then every node's read must equal L2.
  std::vector<BrandedId> last;
  for (const auto& n : names) {
    auto v = writer->put("quotes", n.view(), "final");
    ASSERT_TRUE(v);
    auto heard = writer->broadcast("quotes", n.view(), *v);
    ASSERT_TRUE(heard);
    EXPECT_EQ(*heard, 3);  // all three nodes are subscribed on the promoted master
    last.push_back(*v);
  }
  for (auto* e : {r1.get(), r2.get()}) {
    ASSERT_TRUE(eventually([&] {
      for (const auto& n : names) {
        if (l1_holds(*e, "quotes", n)) {
          auto got = e->get("quotes", n.view());
          if (!got || got->source != engine::Source::kL1) return false;
          if (got->value != "final") return false;
        }
      }
      return true;
    }));
  }
  int stale = 0;
  for (auto* e : nodes) {
    for (int i = 0; i < kNames; ++i) {
      const std::string raw = SentinelGroup::admin(promoted, {"GET", l2_key("quotes", names[i])});
      auto got = e->get("quotes", names[i].view());
      if (!got || raw.size() < 14 || got->version->view() != raw.substr(0, 14) ||
          got->version != last[i]) {
        ++stale;
      }
    }
  }
  EXPECT_EQ(stale, 0);
  EXPECT_EQ(loader.runs(), 0);
  const auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::printf(
      "[ sentinel ] SENTINEL FAILOVER -> every sentinel names the new master %lld ms -> every "
      "node followed and resubscribed %lld ms; writes ok %d, refused during the switch %d; reads "
      "ok %d, refused %d; stale reads after recovery %d of %d\n",
      static_cast<long long>(ms(t_switched - t_failover)),
      static_cast<long long>(ms(t_followed - t_failover)), writes.load(), write_errors.load(),
      reads.load(), read_errors.load(), stale, kNames * 3);
}

}  // namespace
}  // namespace echo::test
