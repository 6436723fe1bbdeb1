// SPDX-License-Identifier: MIT
// The engine on a real local cluster (3 masters, 3 replicas): the mode is checked at start, L2
// reads and writes and the scripts route by their key's slot, the broadcast lane rides sharded
// pub/sub (F2 newer-wins and F3 broadcast, as in broadcast_lane_test.cc), tables spread over
// every shard, publish_and_wait's receipts ride the table's shard, and a table whose slot moves
// is resubscribed on the new owner (the server's sunsubscribe), its disconnect policy applied.
// The failover drill is cluster_failover_test.cc.
#include <echo/engine/engine.h>
#include <echo/engine/l2_frame.h>
#include <echo/engine/stats_export.h>
#include <echo/io/cluster_map.h>
#include <echo/io/io_error.h>
#include <echo/testing/local_cluster.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "integration/engine_nodes.h"
#include "integration/metric_refs.h"
#include "support/cluster_fixture.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Source;
using table::BrandedId;

class ClusterEngine : public ClusterTest {
 protected:
  // Table names `prefix`<n> whose hash tags land on three different masters.
  static std::vector<std::string> one_table_per_master(const std::string& prefix) {
    std::vector<std::string> names;
    std::set<int> owners;
    for (int i = 0; names.size() < 3 && i < 200; ++i) {
      const std::string t = prefix + std::to_string(i);
      if (owners.insert(cluster().master_of(io::hash_slot(t))).second) names.push_back(t);
    }
    return names;
  }
  // A broadcast table of kind AST for each name, loading through `loader`.
  static std::vector<engine::TableSpec> broadcast_tables(const std::vector<std::string>& names,
                                                         const LoaderProbe& loader) {
    std::vector<engine::TableSpec> specs;
    for (const auto& t : names) {
      specs.push_back(table_spec(t, "AST", CoherenceMode::kBroadcast, loader.answer("l")));
    }
    return specs;
  }
  // The raw L2 bytes of `key`, read from the master the cluster names for its slot.
  static std::string l2(const std::string& key) {
    const int owner = cluster().master_of(io::hash_slot(key));
    return cluster().admin(owner, {"GET", key});
  }
};

TEST_F(ClusterEngine, TheModeIsCheckedAtStart) {
  LoaderProbe loader;
  auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("x"));
  engine::EngineOptions single;
  single.port = cluster().server(0).port();
  Engine wrong(single, {spec});
  EXPECT_EQ(wrong.start(), make_error_code(engine::Errc::kWrongMode));

  testing::LocalServer plain;
  engine::EngineOptions o;
  o.mode = engine::ServerMode::kCluster;
  o.port = plain.port();
  Engine not_a_cluster(o, {spec});
  EXPECT_EQ(not_a_cluster.start(), make_error_code(io::IoErrc::kTopologyRefused));

  o.cluster_seeds = "127.0.0.1";
  EXPECT_THROW(Engine(o, {spec}), engine::ConfigError);
  o.cluster_seeds = cluster().seeds();
  o.cluster_max_redirects = 17;
  EXPECT_THROW(Engine(o, {spec}), engine::ConfigError);
  single.cluster_seeds = cluster().seeds();
  EXPECT_THROW(Engine(single, {spec}), engine::ConfigError);
}

// ---- F2 newer-wins, on a cluster ----
TEST_F(ClusterEngine, F2LateStaleDropBouncesOffBothLayers) {
  LoaderProbe loader;
  F2Nodes n;
  ASSERT_NO_FATAL_FAILURE(f2_late_broadcast(
      [&](unsigned id, std::vector<engine::TableSpec> t) { return node(id, std::move(t)); }, loader,
      n));
  auto& [a, b, name, key, v_old, v_new] = n;
  EXPECT_EQ(l2(key), engine::frame_l2_value(v_new, "px=105.00"));

  auto dropped = a->drop_l2("quotes", name.view(), v_old);  // a script, routed by its key
  ASSERT_TRUE(dropped);
  EXPECT_FALSE(*dropped);
  EXPECT_EQ(l2(key), engine::frame_l2_value(v_new, "px=105.00"));
  const BrandedId v_fresh = newer_than("AST", v_new);
  dropped = a->drop_l2("quotes", name.view(), v_fresh);
  ASSERT_TRUE(dropped);
  EXPECT_TRUE(*dropped);
  EXPECT_EQ(l2(key), "");
  EXPECT_EQ(loader.runs(), 0);
  ASSERT_TRUE(a->stats().cluster);
  EXPECT_EQ(a->stats().cluster->masters, 3u);
}

// ---- F3 broadcast, on a cluster: SPUBLISH on the table's shard ----
TEST_F(ClusterEngine, F3ThreeNodesHearTheShardedBroadcastAndRefillFromL2) {
  LoaderProbe loader;
  F3Nodes n;  // every node's SSUBSCRIBE is on the shard that owns {quotes}
  ASSERT_NO_FATAL_FAILURE(f3_round_trip(
      [&](unsigned id, std::vector<engine::TableSpec> t) { return node(id, std::move(t)); }, loader,
      n));
  EXPECT_EQ(loader.runs(), 0);
  std::printf("[ F3 cluster ] SPUBLISH reached %lld; the other nodes' next reads were l2\n",
              n.heard);
}

// The cluster families the docs and alert rules name (metric_refs.h), in a live node's
// exposition, and the command connection's label matcher against `cmd@host:port`.
TEST_F(ClusterEngine, TheClusterSeriesTheDocsAndAlertsNameAreExported) {
  LoaderProbe loader;
  auto e = node(1, {quotes_spec(loader)});
  ASSERT_NE(e, nullptr);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(e->publish("quotes", name.view(), "px=1"));
  ASSERT_TRUE(e->get("quotes", name.view()));
  const auto problems = metric_refs::problems(
      engine::to_prometheus(engine::take_snapshot(*e, "1")), [](const metric_refs::Ref& r) {
        return r.name.starts_with("echostore_cluster_") || (r.regex && r.label == "connection");
      });
  EXPECT_TRUE(problems.empty()) << metric_refs::joined(problems);
}

TEST_F(ClusterEngine, TablesOnEveryShardEachHearTheirOwnBroadcast) {
  const std::vector<std::string> names = one_table_per_master("t");
  ASSERT_EQ(names.size(), 3u);
  LoaderProbe loader;
  const std::vector<engine::TableSpec> specs = broadcast_tables(names, loader);
  auto a = node(4, specs);
  auto b = node(5, specs);
  ASSERT_TRUE(a && b);
  for (const auto& t : names) {
    const BrandedId name = fresh_id("AST");
    ASSERT_TRUE(a->put(t, name.view(), "one", a->mint("AST").value()));
    ASSERT_EQ(b->get(t, name.view())->value, "one");
    const BrandedId v2 = a->mint("AST").value();
    ASSERT_TRUE(a->put(t, name.view(), "two", v2));
    auto heard = a->broadcast(t, name.view(), v2);
    ASSERT_TRUE(heard);
    EXPECT_EQ(*heard, 2) << t;  // both nodes, on that table's shard
    ASSERT_TRUE(eventually([&] { return !l1_holds(*b, t, name); })) << t;
    EXPECT_EQ(b->get(t, name.view())->value, "two");
  }
  EXPECT_EQ(a->stats().cluster->moved, 0u);
}

// publish on a cluster: one script on the table's slot SETs the row and SPUBLISHes its message
// (redis-server 7.0 lets a script SPUBLISH on a channel of its own slot), on every shard.
TEST_F(ClusterEngine, PublishOnEveryShardWritesTheRowAndItsShardedMessageInOneScript) {
  std::vector<std::string> names;
  std::set<int> owners;
  for (int i = 0; names.size() < 3 && i < 200; ++i) {
    const std::string t = "p" + std::to_string(i);
    const int owner = cluster().master_of(io::hash_slot(t));
    if (owners.insert(owner).second) names.push_back(t);
  }
  ASSERT_EQ(names.size(), 3u);
  LoaderProbe loader;
  std::vector<engine::TableSpec> specs;
  for (const auto& t : names) {
    specs.push_back(table_spec(t, "AST", CoherenceMode::kBroadcast, loader.answer("l")));
  }
  auto a = node(8, specs);
  auto b = node(9, specs);
  ASSERT_TRUE(a && b);
  for (const auto& t : names) {
    const BrandedId name = fresh_id("AST");
    ASSERT_TRUE(a->put(t, name.view(), "one"));
    ASSERT_EQ(b->get(t, name.view())->value, "one");
    ASSERT_TRUE(l1_holds(*b, t, name));
    auto v = a->publish(t, name.view(), "two");
    ASSERT_TRUE(v) << t << ": " << v.error().message();
    EXPECT_EQ(l2(l2_key(t, name)), engine::frame_l2_value(*v, "two")) << t;
    ASSERT_TRUE(eventually([&] { return !l1_holds(*b, t, name); })) << t;
    auto r = b->get(t, name.view());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->source, Source::kL2) << t;
    EXPECT_EQ(r->value, "two") << t;
    EXPECT_EQ(r->version, *v) << t;
  }
  EXPECT_EQ(a->stats().cluster->moved, 0u);
}

// publish_and_wait on a cluster's broadcast lane: the receipt ask is SPUBLISHed on the table's
// slot, heard on the connection that carried the message, and counted in a key of that slot.
TEST_F(ClusterEngine, PublishAndWaitOnEveryShardCountsEveryNode) {
  const std::vector<std::string> names = one_table_per_master("r");
  ASSERT_EQ(names.size(), 3u);
  LoaderProbe loader;
  const std::vector<engine::TableSpec> specs = broadcast_tables(names, loader);
  auto a = node(14, specs);
  auto b = node(13, specs);
  ASSERT_TRUE(a && b);
  for (const auto& t : names) {
    const BrandedId name = fresh_id("AST");
    ASSERT_TRUE(b->get(t, name.view()));
    auto applied = a->publish_and_wait(t, name.view(), "two", 10s);
    ASSERT_TRUE(applied) << t << ": " << applied.error().message();
    EXPECT_EQ(*applied, 2u) << t;
    EXPECT_FALSE(l1_holds(*b, t, name)) << t << ": applied before the answer";
    EXPECT_EQ(b->get(t, name.view())->value, "two") << t;
  }
  EXPECT_EQ(a->stats().cluster->moved, 0u);
}

// The job lane's publish on a cluster: the SET answers first, then the fan-out to the member
// queues on their own slots; the member drops its row and reads the new value from L2.
TEST_F(ClusterEngine, AJobLanePublishWritesTheRowThenEveryMemberDropsIt) {
  const std::string t = "plane";
  auto member = table_spec(t, "AST", CoherenceMode::kJob, answering("l"));
  member.job_lease_ms = 30000;
  member.job_beat_ms = 100;
  auto writer = table_spec(t, "AST", CoherenceMode::kNone, answering("l"));
  writer.job_lease_ms = 30000;
  auto m = node(10, {member});
  auto w = node(11, {writer});
  ASSERT_TRUE(m && w);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(w->put(t, name.view(), "one"));
  ASSERT_EQ(m->get(t, name.view())->value, "one");
  ASSERT_TRUE(l1_holds(*m, t, name));
  auto v = w->publish(t, fresh_id("PRT"), name.view(), "two");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2(l2_key(t, name)), engine::frame_l2_value(*v, "two"));
  ASSERT_TRUE(eventually([&] { return !l1_holds(*m, t, name); }, 10s));
  auto r = m->get(t, name.view());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->source, Source::kL2);
  EXPECT_EQ(r->value, "two");
}

TEST_F(ClusterEngine, ASlotMoveResubscribesOnTheNewOwnerAndFlushes) {
  LoaderProbe loader;
  auto spec = table_spec("moving", "AST", CoherenceMode::kBroadcast, loader.answer("l"));
  auto a = node(6, {spec});
  auto b = node(7, {spec});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(a->put("moving", name.view(), "before", a->mint("AST").value()));
  ASSERT_EQ(b->get("moving", name.view())->value, "before");
  ASSERT_TRUE(l1_holds(*b, "moving", name));

  const std::uint16_t slot = io::hash_slot("moving");
  const int target = cluster().other_master(slot);
  cluster().begin_migration(slot, target);
  cluster().finish_migration(slot, target);
  // The old owner pushed sunsubscribe; each node subscribes again where the slot now lives, and
  // the flush policy drops the rows cached while messages could be lost.
  ASSERT_TRUE(eventually([&] { return b->stats().cluster->resubscribes >= 1; }, 15s));
  ASSERT_TRUE(eventually(
      [&] {
        const auto w = writer_of(*b, "moving").stats();
        return w.disconnect_flushes >= 1 && !w.suspended;  // lost (flush), then confirmed again
      },
      15s));
  EXPECT_FALSE(l1_holds(*b, "moving", name));
  ASSERT_EQ(b->get("moving", name.view())->value, "before");  // refilled from L2 (moved too)

  const BrandedId v2 = a->mint("AST").value();
  ASSERT_TRUE(a->put("moving", name.view(), "after", v2));
  ASSERT_TRUE(eventually(
      [&] {
        const auto w = writer_of(*a, "moving").stats();
        return w.disconnect_flushes >= 1 && !w.suspended;
      },
      15s));
  auto heard = a->broadcast("moving", name.view(), v2);
  ASSERT_TRUE(heard);
  EXPECT_EQ(*heard, 2);
  ASSERT_TRUE(eventually([&] { return !l1_holds(*b, "moving", name); }));
  EXPECT_EQ(b->get("moving", name.view())->value, "after");
  // The put went to the new owner (by MOVED, or by the map the sunsubscribe refreshed).
  EXPECT_EQ(cluster().master_of(slot), target);
  EXPECT_EQ(cluster().admin(target, {"GET", l2_key("moving", name)}),
            engine::frame_l2_value(v2, "after"));
}

}  // namespace
}  // namespace echo::test
