// SPDX-License-Identifier: MIT
// The job lane on a real local cluster (3 masters, 3 replicas). Every key of a table's queue
// shares the hash tag {ecc.coh.<t>}, so the router sends every script to that one shard and the
// consumer parks there. F5's once-effect (a job applied once, a replay of its version stale) and
// H4 (the journal replays what the bus lost) run against the cluster; in H4 the bus is lost by
// killing the queue's master and then erasing what its promoted replica kept.
#include <echo/engine/engine.h>
#include <echo/engine/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/engine/local_cluster.h>
#include <echo/io/cluster_map.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "integration/engine_nodes.h"

namespace echo::test {
namespace {

namespace fs = std::filesystem;
using engine::Admission;
using engine::Applied;
using engine::CoherenceMode;
using engine::Engine;
using engine::Journal;
using table::BrandedId;

constexpr std::int64_t kLeaseMs = 2000;

engine::TableSpec lane_spec(const std::string& t, LoaderProbe& loader) {
  auto s = table_spec(t, "AST", CoherenceMode::kJob, loader.answer("loaded"));
  s.job_lease_ms = kLeaseMs;
  s.job_beat_ms = 100;
  s.job_retry_delay_ms = 20;
  return s;
}

engine::TableSpec writer_spec(const std::string& t, LoaderProbe& loader) {
  auto s = table_spec(t, "AST", CoherenceMode::kNone, loader.answer("loaded"));
  s.job_lease_ms = kLeaseMs;
  return s;
}

class ClusterJobLane : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      cluster_ = std::make_unique<engine::LocalCluster>();
    } catch (const std::exception& e) {
      FAIL() << "LocalCluster: " << e.what();
    }
  }

  std::unique_ptr<Engine> node(unsigned id, std::vector<engine::TableSpec> tables,
                               Journal* journal = nullptr) {
    engine::EngineOptions o;
    o.mode = engine::ServerMode::kCluster;
    o.cluster_seeds = cluster_->seeds();
    o.node_id = id;
    auto e = std::make_unique<Engine>(o, std::move(tables));
    if (journal != nullptr) e->use_journal(e->directory().front().name, *journal);
    const std::error_code ec = e->start(std::chrono::seconds(15));
    EXPECT_FALSE(ec) << "node " << id << ": " << ec.message();
    if (ec) return nullptr;
    return e;
  }

  // A command on the master that owns the queue's slot now.
  std::string on_queue_shard(const std::string& t, const std::vector<std::string>& args) {
    const auto keys = engine::JobLaneKeys::for_table(t);
    return cluster_->admin(cluster_->master_of(io::hash_slot(keys.qbase)), args);
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

  std::unique_ptr<engine::LocalCluster> cluster_;
};

// ---- F5's once-effect, on a cluster ----
TEST_F(ClusterJobLane, F5TheQueueLivesOnItsShardAJobAppliesOnceAndItsReplayIsStale) {
  const std::string t = "f5c";
  LoaderProbe loader;
  auto w = node(40, {writer_spec(t, loader)});
  auto c = node(5, {lane_spec(t, loader)});
  ASSERT_TRUE(w && c);
  ASSERT_TRUE(eventually([&] { return is_member(t, 5); }));
  // Only the queue's own shard holds its keys.
  const auto keys = engine::JobLaneKeys::for_table(t);
  const int owner = cluster_->master_of(io::hash_slot(keys.qbase));
  for (const auto& n : cluster_->nodes()) {
    if (!n.master || n.index == owner) continue;
    EXPECT_EQ(cluster_->admin(n.index, {"DBSIZE"}), "0") << "a key outside its shard";
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
  EXPECT_EQ(consumer().applied, 1u);
  EXPECT_FALSE(l1_holds(*c, t, name));
  auto after = c->get(t, name.view());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->version, v2);
  EXPECT_EQ(after->value, "px=107.00");

  auto replayed = w->enqueue(t, group, name.view(), v2);  // a new job for the same version
  ASSERT_TRUE(replayed);
  ASSERT_TRUE(eventually([&] { return consumer().completed == 2; }, 10s));
  EXPECT_EQ(consumer().stale_applies, 1u);
  EXPECT_EQ(writer_of(*c, t).stats().applied, 1u) << "exactly one effective drop";
  EXPECT_EQ(c->get(t, name.view())->source, engine::Source::kL1);
  EXPECT_EQ(loader.runs(), 0);
}

// ---- H4 on a cluster: the queue's master killed, the bus lost, the journal replays ----
TEST_F(ClusterJobLane, H4TheQueuesMasterKilledAndTheBusLostTheJournalReplaysEveryName) {
  const std::string t = "h4c";
  constexpr unsigned kConsumer = 222;
  LoaderProbe loader;
  char tmpl[] = "/tmp/echo-cluster-journal-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const BrandedId group = fresh_id("PRT");
  {
    engine::JournalOptions jo;
    jo.dir = dir;
    jo.group = group.str();
    jo.node_id = 221;
    Journal j(jo);
    auto w = node(220, {writer_spec(t, loader)});
    auto c = node(kConsumer, {lane_spec(t, loader)}, &j);
    ASSERT_TRUE(w && c);
    ASSERT_TRUE(eventually([&] { return is_member(t, kConsumer); }));
    const auto keys = engine::JobLaneKeys::for_table(t);
    const std::string base = keys.member_base(std::to_string(kConsumer));
    on_queue_shard(t, {"SADD", base + "paused", group.str()});  // jobs wait, unclaimed

    constexpr int kNames = 50, kApplied = 20;
    std::vector<BrandedId> names, versions, jobs;
    const engine::EnqueueFn enqueue = [&](const BrandedId& job, const BrandedId& n,
                                          const BrandedId& v) {
      return w->enqueue_job(t, group, job, n.view(), v);
    };
    for (int i = 0; i < kNames; ++i) {
      names.push_back(fresh_id("AST"));
      versions.push_back(w->mint("AST").value());
      auto job = j.intend_and_enqueue(names[i], versions[i], enqueue);
      ASSERT_TRUE(job) << job.error().message();
      jobs.push_back(*job);
    }
    for (int i = 0; i < kApplied; ++i) {
      auto a = c->apply_and_remember(t, names[i].view(), versions[i]);
      ASSERT_TRUE(a);
      EXPECT_NE(*a, Applied::kRememberedStale);
    }
    j.flush();

    // The loss: the queue's master dies, a replica takes over, and whatever it kept of the bus
    // is erased too (asynchronous replication may keep any part of it).
    const std::uint16_t slot = io::hash_slot(keys.qbase);
    const int old_master = cluster_->kill_master_of(slot);
    const int promoted = cluster_->wait_failover(slot, old_master, std::chrono::seconds(30));
    std::istringstream listed(cluster_->admin(promoted, {"KEYS", "emq:{" + keys.queue + "}:*"}));
    for (std::string k; std::getline(listed, k);) cluster_->admin(promoted, {"DEL", k});
    // The consumer's beats may already register it again; no job row may be left.
    EXPECT_EQ(cluster_->admin(promoted, {"KEYS", "emq:{" + keys.queue + "}:*job:*"}), "");

    // The consumer's next beat registers it again on the promoted master.
    ASSERT_TRUE(eventually([&] { return is_member(t, kConsumer); }, 20s))
        << "the consumer never re-registered after the failover";
    ASSERT_TRUE(
        eventually([&] { return w->drop_l2(t, names[0].view(), versions[0]).has_value(); }, 20s));
    std::vector<BrandedId> order;
    auto r = j.replay([&](const BrandedId& job, const BrandedId& n, const BrandedId& v) {
      order.push_back(job);
      return enqueue(job, n, v);
    });
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->replayed, static_cast<std::uint64_t>(kNames - kApplied));
    EXPECT_EQ(r->deduplicated, 0u);
    EXPECT_EQ(order, std::vector<BrandedId>(jobs.begin() + kApplied, jobs.end()))
        << "the uncovered intents in seq order under their recorded ids";
    ASSERT_TRUE(eventually(
        [&] {
          for (int i = 0; i < kNames; ++i) {
            if (j.last_applied(names[i]) != versions[i]) return false;
          }
          return true;
        },
        20s))
        << "the consumer never drained the replay";
    int final_versions = 0;
    for (int i = 0; i < kNames; ++i) final_versions += j.last_applied(names[i]) == versions[i];
    EXPECT_EQ(final_versions, kNames);
    std::printf(
        "[ H4 cluster ] 50 enqueued, 20 applied directly, queue master killed and bus lost -> "
        "replay {%llu, %llu} in seq order; %d of 50 names at their final versions\n",
        static_cast<unsigned long long>(r->replayed),
        static_cast<unsigned long long>(r->deduplicated), final_versions);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace echo::test
