// SPDX-License-Identifier: MIT
// The job lane on a real local cluster (3 masters, 3 replicas). A table's membership and shared
// queue share the hash tag {ecc.coh.<t>}; each node's member queue has its own, {ecc.coh.<t>|<n>},
// so the member queues of one table spread over the shards, the writer's admissions go out as one
// pipeline per shard, and each consumer parks on its own queue's master. F5's once-effect (a job
// applied once, a replay of its version stale), the spread with a joiner, and H4 (the journal
// replays what the bus lost) run against the cluster; in H4 the bus is lost by killing the
// master of the consumer's queue and then erasing what its promoted replica kept.
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/io/cluster_map.h>
#include <echo/lua/scripts.h>
#include <echo/testing/local_cluster.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/engine_nodes.h"
#include "integration/journal_lane.h"
#include "support/cluster_fixture.h"

namespace echo::test {
namespace {

using engine::Admission;
using engine::CoherenceMode;
using engine::Engine;
using engine::Journal;
using table::BrandedId;

// Each test its own cluster: three of them kill a master.
class ClusterJobLane : public FreshClusterTest {
 protected:
  // Starts the writer node `writer` and the consumer node `consumer` of job-lane table `t`, the
  // consumer's lane consulting and filling `j`, and waits up to `timeout` for the consumer's
  // membership. Fatal on failure (call under ASSERT_NO_FATAL_FAILURE).
  void start_journalled(const std::string& t, unsigned writer, unsigned consumer, Journal& j,
                        std::chrono::milliseconds timeout, std::unique_ptr<Engine>& w,
                        std::unique_ptr<Engine>& c) {
    w = node(writer, {writer_spec(t)});
    c = node(consumer, {lane_spec(t)}, &j);
    ASSERT_TRUE(w && c);
    ASSERT_TRUE(eventually([&] { return is_member(t, consumer); }, timeout));
  }

  // A command on the master that owns the table's slot now (its membership, its shared queue).
  std::string on_queue_shard(const std::string& t, const std::vector<std::string>& args) {
    const auto keys = engine::JobLaneKeys::for_table(t);
    return cluster().admin(cluster().master_of(io::hash_slot(keys.qbase)), args);
  }
  // The slot of `node`'s member queue of `t` (its own hash tag {ecc.coh.<t>|<node>}).
  static std::uint16_t member_slot(const std::string& t, unsigned node) {
    return io::hash_slot(engine::JobLaneKeys::for_table(t).member_base(std::to_string(node)));
  }
  // A command on the master that owns `node`'s member queue now.
  std::string on_member_shard(const std::string& t, unsigned node,
                              const std::vector<std::string>& args) {
    return cluster().admin(cluster().master_of(member_slot(t, node)), args);
  }
  bool is_member(const std::string& t, unsigned node) {
    try {
      return !on_queue_shard(
                  t, {"ZSCORE", engine::JobLaneKeys::for_table(t).members, std::to_string(node)})
                  .empty();
    } catch (const std::exception&) {
      return false;  // the shard is electing
    }
  }

  // True once `node`'s live key is on its member queue's current master: writers admit jobs to it
  // from then on (member_enqueue answers -1 before).
  bool is_live(const std::string& t, unsigned node) {
    try {
      const auto keys = engine::JobLaneKeys::for_table(t);
      return on_member_shard(t, node,
                             {"EXISTS", keys.member_base(std::to_string(node)) + "live"}) == "1";
    } catch (const std::exception&) {
      return false;  // the shard is electing
    }
  }

  // The consumer's hand-off credits listed on the queue's current master (0: none, or the shard
  // is electing).
  long long parked_flag(const std::string& t, unsigned node) {
    try {
      const auto keys = engine::JobLaneKeys::for_table(t);
      return std::atoll(
          on_member_shard(t, node, {"LLEN", keys.member_base(std::to_string(node)) + "parked"})
              .c_str());
    } catch (const std::exception&) {
      return 0;
    }
  }
};

// ---- F5's once-effect, on a cluster ----
TEST_F(ClusterJobLane, F5TheQueueLivesOnItsShardAJobAppliesOnceAndItsReplayIsStale) {
  const std::string t = "f5c";
  LoaderProbe loader;
  auto w = node(40, {writer_spec(t, loader.answer("loaded"))});
  auto c = node(5, {lane_spec(t, loader.answer("loaded"))});
  ASSERT_TRUE(w && c);
  ASSERT_TRUE(eventually([&] { return is_member(t, 5); }));
  // The membership lives on the table's shard, the member queue on its own slot's shard, and no
  // other master holds a key.
  const auto keys = engine::JobLaneKeys::for_table(t);
  const int owner = cluster().master_of(io::hash_slot(keys.qbase));
  const int queue_owner = cluster().master_of(member_slot(t, 5));
  EXPECT_NE(cluster().admin(queue_owner, {"KEYS", keys.member_base("5") + "*"}), "");
  for (const auto& n : cluster().nodes()) {
    if (!n.master || n.index == owner || n.index == queue_owner) continue;
    EXPECT_EQ(cluster().admin(n.index, {"DBSIZE"}), "0") << "a key outside its shard";
  }

  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  const BrandedId v1 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "px=100.00", v1));
  auto filled = c->get(t, name.view());
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->version, v1);
  ASSERT_TRUE(l1_holds(*c, t, name));

  const BrandedId v2 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "px=107.00", v2));
  auto admitted = w->enqueue(t, group, name.view(), v2);
  ASSERT_TRUE(admitted) << admitted.error().message();
  ASSERT_EQ(admitted->size(), 1u);
  EXPECT_EQ((*admitted)[0].member, "5");
  EXPECT_NE((*admitted)[0].admission, Admission::kDuplicate);
  auto consumer = [&] { return c->stats().tables.front().consumer.value(); };
  ASSERT_TRUE(eventually([&] { return consumer().completed == 1; }, 10s));
  // The lead (job_lead, an SPUBLISH on the table's shard) or the job dropped the row: one of them
  // applied, the other found it gone.
  EXPECT_EQ(w->stats().fan_out.leads, 1u);
  EXPECT_EQ(w->stats().fan_out.lead_receivers, 1u) << "the member heard the lead";
  EXPECT_EQ(consumer().applied + consumer().stale_applies, 1u);
  EXPECT_EQ(writer_of(*c, t).stats().applied, 1u);
  EXPECT_FALSE(l1_holds(*c, t, name));
  auto after = c->get(t, name.view());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->version, v2);
  EXPECT_EQ(after->value, "px=107.00");

  auto replayed = w->enqueue(t, group, name.view(), v2);  // a new job for the same version
  ASSERT_TRUE(replayed);
  ASSERT_TRUE(eventually([&] { return consumer().completed == 2; }, 10s));
  EXPECT_EQ(consumer().applied + consumer().stale_applies, 2u);
  EXPECT_GE(consumer().stale_applies, 1u);
  EXPECT_EQ(writer_of(*c, t).stats().applied, 1u) << "exactly one effective drop";
  EXPECT_EQ(c->get(t, name.view())->source, engine::Source::kL1);
  EXPECT_EQ(loader.runs(), 0);
}

// ---- Member queues on every shard, and a joiner ----
// Three consumers whose member queues land on three different masters: one enqueue reaches all
// of them (one member_enqueue per queue, each routed to its own shard). A consumer that joins
// after the writer read the membership is admitted by the writer's next enqueue: the epoch read
// after the admissions shows the join, and the writer reads the membership again.
TEST_F(ClusterJobLane, MemberQueuesSpreadOverTheShardsAndAJoinerIsAdmittedByTheNextEnqueue) {
  const std::string t = "spread";
  LoaderProbe loader;
  // Node ids whose member queues' slots belong to three different masters.
  std::vector<unsigned> ids;
  std::vector<int> owners;
  for (unsigned id = 100; id < 400 && ids.size() < 3; ++id) {
    const int owner = cluster().master_of(member_slot(t, id));
    if (std::find(owners.begin(), owners.end(), owner) != owners.end()) continue;
    ids.push_back(id);
    owners.push_back(owner);
  }
  ASSERT_EQ(ids.size(), 3u) << "three masters own some member queue slot of the first 300 ids";
  auto w = node(60, {writer_spec(t, loader.answer("loaded"))});
  auto c1 = node(ids[0], {lane_spec(t, loader.answer("loaded"))});
  auto c2 = node(ids[1], {lane_spec(t, loader.answer("loaded"))});
  ASSERT_TRUE(w && c1 && c2);
  ASSERT_TRUE(eventually([&] { return is_member(t, ids[0]) && is_member(t, ids[1]); }));
  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  auto completed = [&](Engine& e) { return e.stats().tables.front().consumer.value().completed; };

  // Two members: the writer reads the membership on its first enqueue and admits to both.
  const BrandedId v1 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "px=100.00", v1));
  for (Engine* c : {c1.get(), c2.get()}) ASSERT_TRUE(c->get(t, name.view()));
  auto first = w->enqueue(t, group, name.view(), v1);
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_EQ(first->size(), 2u);
  ASSERT_TRUE(eventually([&] { return completed(*c1) == 1 && completed(*c2) == 1; }, 10s));

  // A third node joins on a third shard after that read.
  auto c3 = node(ids[2], {lane_spec(t, loader.answer("loaded"))});
  ASSERT_TRUE(c3);
  ASSERT_TRUE(eventually([&] { return is_member(t, ids[2]); }));
  for (Engine* c : {c1.get(), c2.get(), c3.get()}) {
    auto got = c->get(t, name.view());
    ASSERT_TRUE(got);
    EXPECT_EQ(got->version, v1);  // each node holds v1 in L1 until a job drops it
  }
  const BrandedId v2 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "px=107.00", v2));
  auto second = w->enqueue(t, group, name.view(), v2);
  ASSERT_TRUE(second) << second.error().message();
  std::vector<std::string> admitted;
  for (const auto& a : *second) {
    admitted.push_back(a.member);
    EXPECT_NE(a.admission, Admission::kDuplicate) << a.member;
  }
  std::sort(admitted.begin(), admitted.end());
  std::vector<std::string> expected;
  for (unsigned id : ids) expected.push_back(std::to_string(id));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(admitted, expected) << "the joiner was not admitted by the next enqueue";
  ASSERT_TRUE(eventually(
      [&] { return completed(*c1) == 2 && completed(*c2) == 2 && completed(*c3) == 1; }, 10s));
  for (Engine* c : {c1.get(), c2.get(), c3.get()}) {
    auto got = c->get(t, name.view());
    ASSERT_TRUE(got);
    EXPECT_EQ(got->version, v2);
    EXPECT_EQ(got->value, "px=107.00");
  }
  // Each member queue's keys on its own master and nowhere else.
  const auto keys = engine::JobLaneKeys::for_table(t);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string pattern = keys.member_base(std::to_string(ids[i])) + "*";
    for (const auto& n : cluster().nodes()) {
      if (!n.master) continue;
      const bool holds = cluster().admin(n.index, {"KEYS", pattern}) != "";
      EXPECT_EQ(holds, n.index == owners[i]) << pattern << " on master " << n.index;
    }
  }
  std::printf(
      "[ spread ] member queues of %u, %u, %u on masters %d, %d, %d; the joiner %u "
      "admitted by the first enqueue after its join\n",
      ids[0], ids[1], ids[2], owners[0], owners[1], owners[2], ids[2]);
}

// ---- The parking connection follows a failover of the queue's master ----
// The consumer parks (BLMPOP) on the master owning its queue's slot and raises its hand-off
// flag there only while that connection is up. After the master is killed and a replica
// promoted, the park must dial the promoted replica (it asks the router's map at each
// reconnect): the credits come back on the new master and writers hand jobs straight to the
// consumer again, rather than the consumer claiming once per beat through the router.
TEST_F(ClusterJobLane, TheParkingConnectionFollowsAFailoverAndHandOffsResume) {
  const std::string t = "pfo";
  constexpr unsigned kConsumer = 7;
  constexpr int kJobs = 8;
  LoaderProbe loader;
  auto w = node(70, {writer_spec(t, loader.answer("loaded"))});
  auto c = node(kConsumer, {lane_spec(t, loader.answer("loaded"))});
  ASSERT_TRUE(w && c);
  ASSERT_TRUE(eventually([&] { return is_member(t, kConsumer); }, 10s));
  ASSERT_TRUE(eventually([&] { return parked_flag(t, kConsumer) > 0; }, 10s));
  const BrandedId group = fresh_id("PRT");
  auto consumer = [&] { return c->stats().tables.front().consumer.value(); };
  // One job at a time, each waited for: every one finds credits listed unless the park is down.
  auto run_jobs = [&](const char* phase) {
    for (int i = 0; i < kJobs; ++i) {
      const BrandedId name = fresh_id("AST"), v = w->mint("AST").value();
      const std::uint64_t before = consumer().completed;
      auto admitted = w->enqueue(t, group, name.view(), v);
      ASSERT_TRUE(admitted) << phase << ": " << admitted.error().message();
      ASSERT_TRUE(eventually([&] { return consumer().completed == before + 1; }, 10s))
          << phase << ": job " << i << " never completed";
    }
  };
  const auto s0 = consumer();
  run_jobs("before the failover");
  const auto s1 = consumer();
  EXPECT_GE(s1.handed_off - s0.handed_off, 1u) << "no hand-off even before the failover";

  // The park follows its member queue's master.
  const std::uint16_t slot = member_slot(t, kConsumer);
  const int old_master = cluster().kill_master_of(slot);
  const auto killed = std::chrono::steady_clock::now();
  const int promoted = cluster().wait_failover(slot, old_master, std::chrono::seconds(30));
  ASSERT_NE(promoted, old_master);
  ASSERT_TRUE(eventually([&] { return is_member(t, kConsumer) && is_live(t, kConsumer); }, 20s))
      << "the consumer never registered on the promoted master";
  ASSERT_TRUE(eventually([&] { return parked_flag(t, kConsumer) > 0; }, 20s))
      << "the hand-off credits never came back: the park did not follow the failover";
  const double reparked_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();

  const auto s2 = consumer();
  run_jobs("after the failover");
  const auto s3 = consumer();
  const std::uint64_t handed = s3.handed_off - s2.handed_off, claimed = s3.claimed - s2.claimed;
  EXPECT_EQ(handed + claimed, static_cast<std::uint64_t>(kJobs));
  EXPECT_GE(handed, static_cast<std::uint64_t>(kJobs / 2))
      << "hand-offs did not resume on the promoted master (claimed " << claimed << ")";
  EXPECT_GT(s3.parks, s2.parks) << "no BLMPOP on the promoted master";
  EXPECT_EQ(loader.runs(), 0);
  std::printf(
      "[ park follows ] before: %llu of %d handed off; master killed, flag up on the promoted "
      "replica %.1f s after the kill; after: %llu handed off, %llu claimed of %d\n",
      static_cast<unsigned long long>(s1.handed_off - s0.handed_off), kJobs, reparked_s,
      static_cast<unsigned long long>(handed), static_cast<unsigned long long>(claimed), kJobs);
}

// ---- H4 on a cluster: the queue's master killed, the bus lost, the journal replays ----
TEST_F(ClusterJobLane, H4TheQueuesMasterKilledAndTheBusLostTheJournalReplaysEveryName) {
  const std::string t = "h4c";
  constexpr unsigned kConsumer = 222;
  TempDir dir;
  const BrandedId group = fresh_id("PRT");
  {
    Journal j(journal_options(dir.path(), group, 221));
    std::unique_ptr<Engine> w, c;
    ASSERT_NO_FATAL_FAILURE(start_journalled(t, 220, kConsumer, j, 5s, w, c));
    const auto keys = engine::JobLaneKeys::for_table(t);
    const std::string base = keys.member_base(std::to_string(kConsumer));
    // Jobs wait, unclaimed: gpause (it also takes the hand-off credits down, member_park.lua).
    const lua::Script* gpause = lua::find_script("gpause");
    ASSERT_NE(gpause, nullptr);
    on_member_shard(
        t, kConsumer,
        {"EVAL", std::string(gpause->source), "2", base + "paused", base + "ring", group.str()});

    constexpr int kNames = 50, kApplied = 20;
    Intents in;
    const engine::EnqueueFn enqueue = lane_enqueue(*w, t, group);
    ASSERT_NO_FATAL_FAILURE(record_intents(j, *w, kNames, enqueue, in));
    ASSERT_NO_FATAL_FAILURE(apply_directly(*c, t, in, kApplied));
    ASSERT_TRUE(j.flush());

    // The loss: the master of the consumer's member queue dies, a replica takes over, and
    // whatever it kept of the queue is erased too (asynchronous replication may keep any part).
    const std::uint16_t slot = member_slot(t, kConsumer);
    const int old_master = cluster().kill_master_of(slot);
    const int promoted = cluster().wait_failover(slot, old_master, std::chrono::seconds(30));
    std::istringstream listed(cluster().admin(promoted, {"KEYS", base + "*"}));
    for (std::string k; std::getline(listed, k);) cluster().admin(promoted, {"DEL", k});
    // The consumer's beats may already set its live key again; no job row may be left.
    EXPECT_EQ(cluster().admin(promoted, {"KEYS", base + "job:*"}), "");

    // The consumer's next beat registers it again on the promoted master.
    ASSERT_TRUE(eventually([&] { return is_member(t, kConsumer) && is_live(t, kConsumer); }, 20s))
        << "the consumer never re-registered after the failover";
    ASSERT_TRUE(eventually(
        [&] { return w->drop_l2(t, in.names[0].view(), in.versions[0]).has_value(); }, 20s));
    engine::ReplayResult r;
    ASSERT_NO_FATAL_FAILURE(replay_and_drain(j, enqueue, in, kApplied, r));
    const int final_versions = at_final_versions(j, in);
    EXPECT_EQ(final_versions, kNames);
    std::printf(
        "[ H4 cluster ] 50 enqueued, 20 applied directly, queue master killed and bus lost -> "
        "replay {%llu, %llu} in seq order; %d of 50 names at their final versions\n",
        static_cast<unsigned long long>(r.replayed),
        static_cast<unsigned long long>(r.deduplicated), final_versions);
  }
}

// ---- The failover drill's job lane: the queue's master killed under a journalled writer ----
// A writer keeps recording and enqueueing (Journal::intend_and_enqueue) new versions of a set of
// names while the master owning the queue's slot is SIGKILLed and a replica promoted. Enqueues
// during the outage are held or refused, and asynchronous replication may lose part of the bus;
// the journal recorded every intent first. After recovery and one replay, every name is at the
// last version the journal recorded for it, and a second replay finds nothing uncovered.
TEST_F(ClusterJobLane, FailoverUnderAJournalledWriterLosesNothingTheJournalRecorded) {
  const std::string t = "foj";
  constexpr unsigned kConsumer = 242;
  constexpr int kNames = 12;
  TempDir dir;
  const BrandedId group = fresh_id("PRT");
  {
    Journal j(journal_options(dir.path(), group, 241));
    std::unique_ptr<Engine> w, c;
    ASSERT_NO_FATAL_FAILURE(start_journalled(t, 240, kConsumer, j, 10s, w, c));
    const engine::EnqueueFn enqueue = lane_enqueue(*w, t, group);
    std::vector<BrandedId> names;
    std::vector<std::optional<BrandedId>> finals(kNames);  // the last version recorded per name
    for (int i = 0; i < kNames; ++i) names.push_back(fresh_id("AST"));
    std::atomic<bool> stop{false};
    std::atomic<int> recorded{0}, refused{0};
    std::thread write_loop([&] {
      while (!stop.load()) {
        for (int i = 0; i < kNames && !stop.load(); ++i) {
          const BrandedId v = w->mint("AST").value();
          // The intent is durable before the enqueue is tried: recorded either way (a refused
          // record, journal_io, is a failure of its own, not an outage's).
          auto job = j.intend_and_enqueue(names[i], v, enqueue);
          if (!job && job.error() == engine::Errc::kJournalIo) {
            ADD_FAILURE() << job.error().message();
          } else {
            finals[i] = v;
            recorded.fetch_add(1);
            if (!job) refused.fetch_add(1);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      }
    });
    if (!eventually([&] { return recorded.load() >= 2 * kNames; }, 10s)) {
      stop = true;
      write_loop.join();
      FAIL() << "the writer recorded " << recorded.load() << " intents before the kill";
    }
    const std::uint16_t slot = member_slot(t, kConsumer);
    const int old_master = cluster().kill_master_of(slot);
    int promoted = -1;
    try {
      promoted = cluster().wait_failover(slot, old_master, std::chrono::seconds(30));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    const bool rejoined =
        eventually([&] { return is_member(t, kConsumer) && is_live(t, kConsumer); }, 20s);
    const int at_follow = recorded.load();
    const bool resumed = eventually([&] { return recorded.load() >= at_follow + 2 * kNames; }, 20s);
    stop = true;
    write_loop.join();
    ASSERT_NE(promoted, -1);
    ASSERT_TRUE(rejoined) << "the consumer never registered on the promoted master";
    ASSERT_TRUE(resumed) << "the writer's enqueues never resumed after the failover";

    auto r = j.replay(enqueue);
    ASSERT_TRUE(r) << r.error().message();
    int at_final = 0;
    ASSERT_TRUE(eventually(
        [&] {
          at_final = 0;
          for (int i = 0; i < kNames; ++i) at_final += j.last_applied(names[i]) == finals[i];
          return at_final == kNames;
        },
        30s))
        << at_final << " of " << kNames << " names at their final versions";
    EXPECT_EQ(at_final, kNames);
    // Every recorded intent is covered now: a second replay has nothing to send.
    auto again = j.replay(enqueue);
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_EQ(again->replayed, 0u);
    const auto cs = c->stats().tables.front().consumer.value();
    std::printf(
        "[ FO job lane ] %d intents recorded (%d enqueues refused in the outage); queue master "
        "killed, replica promoted; replay {%llu, %llu}; %d of %d names at their final versions; "
        "second replay %llu; consumer handed_off %llu claimed %llu\n",
        recorded.load(), refused.load(), static_cast<unsigned long long>(r->replayed),
        static_cast<unsigned long long>(r->deduplicated), at_final, kNames,
        static_cast<unsigned long long>(again->replayed),
        static_cast<unsigned long long>(cs.handed_off),
        static_cast<unsigned long long>(cs.claimed));
  }
}

}  // namespace
}  // namespace echo::test
