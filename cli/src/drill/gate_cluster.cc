// SPDX-License-Identifier: MIT
// `echostore drill --cluster`: the gates against a local Valkey/Redis Cluster the drill starts
// itself (3 masters, 3 replicas). C1 the slot router (KEYSLOT agreement, one shard per tag,
// ASK during a migration, MOVED after it); F2 newer-wins and F3 the broadcast lane on sharded
// pub/sub, F3's band derived from a plain SSUBSCRIBE/SPUBLISH floor on the same shard measured
// in the same run; F5 the job lane's once-effect on its queue's shard. FO, the failover drill, is
// gate_cluster_failover.cc's; what the two files share, gate_cluster.h.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/harness/stage.h>
#include <echo/io/cluster_client.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>
#include <echo/testing/local_cluster.h>
#include <hiredis/hiredis.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "drill/drill.h"
#include "drill/floors.h"
#include "drill/gate_cluster.h"
#include "git_commit.h"

namespace echo::cli {
namespace {

using cluster_gates::kDrillNode;
using cluster_gates::spec;
using engine::CoherenceMode;
using engine::Engine;
using engine::Loaded;
using engine::LoadResult;
using engine::Source;
using floors::cached;
using floors::Clock;
using floors::cluster_node_options;
using floors::fmt;
using table::BrandedId;

// The master serving `key`'s slot now, as a drill target.
DrillTarget owner_of(const DrillTarget& target, const std::string& key) {
  testing::LocalCluster& c = *target.cluster;
  const int i = c.master_of(io::hash_slot(key));
  return DrillTarget{c.server(static_cast<std::size_t>(i)).host(),
                     c.server(static_cast<std::size_t>(i)).port(),
                     {},
                     nullptr};
}

void c1_router(GateRun& run, const DrillTarget& target) {
  testing::LocalCluster& cluster = *target.cluster;
  run.stage(
      "io::ClusterClient on its own loop: 60 SETs under 60 hash tags; then slot {mig} is "
      "migrated by the cluster's own CLUSTER SETSLOT steps while the client reads through it");
  run.derive(
      "the slot is CRC16 of the hash tag, as the server's CLUSTER KEYSLOT says; each key lands "
      "on the master the cluster names; a key the migrating source lacks is answered after "
      "ASK (map unchanged), and after the move MOVED updates the map and refreshes it");
  int agree = 0;
  const std::vector<std::string> probes = {"ecc:{quotes}:AST0KHTOWnGLuC", "{emq}:version",
                                           "emq:{ecc.coh.quotes}:members", "123456789"};
  for (const auto& k : probes) {
    agree += cluster.admin(0, {"CLUSTER", "KEYSLOT", k}) == std::to_string(io::hash_slot(k));
  }
  run.expect(agree == 4, "io::hash_slot agrees with CLUSTER KEYSLOT on 4 of 4 keys");
  io::LoopThread lt;
  io::ClusterOptions o;
  o.seeds = io::parse_seeds(target.cluster_seeds);
  io::ClusterClient client(lt.loop(), o);
  client.start();
  if (!run.expect(!client.wait_ready(std::chrono::seconds(10)), "the client reads the map")) {
    return;
  }
  std::set<int> shards;
  int landed = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string key = "drill:{c" + std::to_string(i) + "}";
    const bool ok = !client.call_blocking({"SET", key, "v"}).ec;
    const int owner = cluster.master_of(io::hash_slot(key));
    shards.insert(owner);
    landed += ok && cluster.admin(static_cast<std::size_t>(owner), {"GET", key}) == "v";
  }
  run.expect(landed == 60, fmt("60 of 60 keys on their slot's master (%d)", landed));
  run.expect(shards.size() == 3, "the 60 tags cover all 3 shards");
  const std::uint16_t slot = io::hash_slot("mig");
  const int target_master = cluster.other_master(slot);
  cluster.begin_migration(slot, target_master);
  auto asked = client.call_blocking({"GET", "{mig}:absent"});
  run.expect(!asked.ec && asked.reply.view().is_null() && client.stats().ask == 1,
             "mid-migration: a key the source lacks is answered after one ASK");
  (void)client.call_blocking({"SET", "{mig}:k", "moved"});
  cluster.finish_migration(slot, target_master);
  const auto before = client.stats();
  auto moved = client.call_blocking({"GET", "{mig}:k"});
  const auto after = client.stats();
  run.expect(!moved.ec && moved.reply.view().str() == "moved" && after.moved == before.moved + 1,
             "after the move: one MOVED, the value read on the new owner");
  run.expect(floors::eventually([&] { return client.stats().refreshes > before.refreshes; }),
             "MOVED refreshed the whole map");
  run.figure(fmt("60 keys on 3 shards; ask %llu, moved %llu, map refreshes %llu",
                 static_cast<unsigned long long>(client.stats().ask),
                 static_cast<unsigned long long>(client.stats().moved),
                 static_cast<unsigned long long>(client.stats().refreshes)));
}

void f2_newer_wins(GateRun& run, const DrillTarget& target) {
  run.stage(
      "quotes (broadcast) on nodes A and B of the cluster; A puts px=105.00 at v_new, then B "
      "SPUBLISHes the older v_old's invalidation and A asks drop_l2(v_old), then drop_l2(v_fresh)");
  run.derive(
      "newer-wins does not depend on where the keys live: expect v_old stale on A's L1 (row "
      "kept), drop_l2 0 on the shard owning {quotes}, drop_l2(v_fresh) 1");
  std::atomic<int> loads{0};
  Engine a(cluster_node_options(target, 301), {spec("quotes", CoherenceMode::kBroadcast, loads)});
  Engine b(cluster_node_options(target, 302), {spec("quotes", CoherenceMode::kBroadcast, loads)});
  if (!run.expect(!a.start(std::chrono::seconds(15)) && !b.start(std::chrono::seconds(15)),
                  "nodes A and B start on the cluster")) {
    return;
  }
  table::Minter writer(kDrillNode);
  const BrandedId name = writer.mint("AST").value();
  const BrandedId v_old = writer.mint("TXN").value(), v_new = writer.mint("TXN").value();
  run.expect(a.put("quotes", name.view(), "px=105.00", v_new).has_value(), "A puts v_new");
  const auto stale_before = engine::internal::writer_of(a, "quotes")->stats().stale;
  run.expect(b.broadcast("quotes", name.view(), v_old).has_value(), "B SPUBLISHes v_old");
  run.expect(floors::eventually([&] {
               return engine::internal::writer_of(a, "quotes")->stats().stale > stale_before;
             }),
             "A answered v_old stale");
  auto kept = a.get("quotes", name.view());
  run.expect(kept && kept->source == Source::kL1 && kept->version == v_new,
             "A's row is still px=105.00 at v_new");
  auto d_old = a.drop_l2("quotes", name.view(), v_old);
  run.expect(d_old && !*d_old, "drop_l2(v_old) kept the L2 row (0)");
  auto d_fresh = a.drop_l2("quotes", name.view(), writer.mint("TXN").value());
  run.expect(d_fresh && *d_fresh, "drop_l2(v_fresh) deleted it (1)");
  run.expect(loads.load() == 0, "no loader ran");
  run.figure("v_old stale on L1 and L2; v_fresh applied");
}

void f3_broadcast(GateRun& run, const DrillTarget& target) {
  constexpr int kMessages = 500, kWarmup = 50;
  const std::string channel = table::coherence_channel("board").value();
  const DrillTarget shard = owner_of(target, channel);
  run.stage(
      "the floor first: 500 SPUBLISHes of 29 bytes to a blocking hiredis SSUBSCRIBEr on the "
      "master owning {board} (port " +
      std::to_string(shard.port) +
      "); then node B holds 550 rows and 550 newer invalidations are SPUBLISHed one at a time "
      "(50 unmeasured); then writer A and subscribers B, C share one name");
  const floors::Samples floor =
      floors::publish_floor(shard, "ecc:{board}:floor", kMessages, 29, floors::kShardedPubSub);
  const double lo = 0.5 * floor.median(), hi = 4.0 * floor.median();
  run.derive("floor: SPUBLISH sent -> message counted, median " + fmt("%.0f", floor.median()) +
             " us; the lane is the same hop plus a RESP3 decode, a ring publish and a writer "
             "wake -- expect the median push between 0.5x and 4x the floor: " +
             fmt("%.0f", lo) + " to " + fmt("%.0f", hi) + " us");
  std::atomic<int> loads{0};
  Engine b(cluster_node_options(target, 312), {spec("board", CoherenceMode::kBroadcast, loads)});
  if (!run.expect(!b.start(std::chrono::seconds(15)), "node B starts and SSUBSCRIBEs")) return;
  table::Minter writer(kDrillNode + 1);
  const int total = kMessages + kWarmup;
  std::vector<BrandedId> names, versions;
  int put_ok = 0;
  for (int i = 0; i < total; ++i) {
    names.push_back(writer.mint("AST").value());
    put_ok +=
        b.put("board", names.back().view(), "px=105.00", writer.mint("TXN").value()).has_value();
  }
  for (int i = 0; i < total; ++i) versions.push_back(writer.mint("TXN").value());
  run.expect(put_ok == total, "550 rows cached on B");
  floors::Redis pub(shard);
  floors::Samples lane;
  for (int i = 0; i < total; ++i) {
    const auto frame = table::make_frame(names[i], versions[i]);
    const std::string_view bytes = table::view(frame);
    const auto t0 = Clock::now();
    floors::Reply r =
        pub.command("SPUBLISH %b %b", channel.data(), channel.size(), bytes.data(), bytes.size());
    if (!r || !floors::spin_until([&] { return !cached(b, "board", names[i]); })) break;
    if (i >= kWarmup) lane.us.push_back(floors::since_us(t0));
  }
  lane.sort();
  const double median = lane.median();
  run.expect(lane.us.size() == static_cast<std::size_t>(kMessages),
             "500 measured messages each dropped its row");
  run.expect(median >= lo && median <= hi,
             "median push " + fmt("%.0f", median) + " us inside the derived band");

  Engine a(cluster_node_options(target, 311), {spec("board", CoherenceMode::kNone, loads)});
  Engine c(cluster_node_options(target, 313), {spec("board", CoherenceMode::kBroadcast, loads)});
  if (!run.expect(!a.start(std::chrono::seconds(15)) && !c.start(std::chrono::seconds(15)),
                  "nodes A and C start")) {
    return;
  }
  const BrandedId name = writer.mint("AST").value();
  (void)a.put("board", name.view(), "px=105.00", writer.mint("TXN").value());
  (void)b.get("board", name.view());
  (void)c.get("board", name.view());
  const BrandedId v2 = writer.mint("TXN").value();
  const bool put = a.put("board", name.view(), "px=106.00", v2).has_value();
  auto heard = a.broadcast("board", name.view(), v2);
  const bool dropped =
      floors::spin_until([&] { return !cached(b, "board", name) && !cached(c, "board", name); });
  run.expect(put && heard && *heard == 2, "A's SPUBLISH reached B and C on {board}'s shard");
  auto next = b.get("board", name.view());
  run.expect(dropped && next && next->source == Source::kL2 && next->value == "px=106.00",
             "B and C dropped the row; B's next read is l2 px=106.00");
  run.figure("median push " + fmt("%.0f", median) +
             " us = " + fmt("%.2f", median / floor.median()) + "x the SPUBLISH floor " +
             fmt("%.0f", floor.median()) + " us (shard port " + std::to_string(shard.port) + ")");
}

void f5_job_lane(GateRun& run, const DrillTarget& target) {
  testing::LocalCluster& cluster = *target.cluster;
  const auto keys = engine::JobLaneKeys::for_table("lanes");
  const int owner = cluster.master_of(io::hash_slot(keys.qbase));
  // C's node id: the first from 305 whose member queue lands on another master than the
  // membership, so the gate shows the two tags on two shards.
  unsigned cid = 305;
  while (cid < 1023 &&
         cluster.master_of(io::hash_slot(keys.member_base(std::to_string(cid)))) == owner) {
    ++cid;
  }
  const std::string member = std::to_string(cid);
  const std::string mbase = keys.member_base(member);
  const int queue_owner = cluster.master_of(io::hash_slot(mbase));
  run.stage(
      "job-lane table lanes on consumer node C (member " + member +
      "), writer W; C caches v1, W "
      "enqueues v2 (one job into C's member queue), then enqueues v2 again under a new job id");
  run.derive(
      "the membership carries the table's tag {ecc.coh.lanes} and C's member queue its own tag "
      "{ecc.coh.lanes|" +
      member +
      "}, on another shard: each lives on the shard owning its slot "
      "and no other master holds a key of either; the job is applied once, its replay answers "
      "stale");
  std::atomic<int> loads{0};
  Engine w(cluster_node_options(target, 340), {spec("lanes", CoherenceMode::kNone, loads)});
  Engine c(cluster_node_options(target, cid), {spec("lanes", CoherenceMode::kJob, loads)});
  if (!run.expect(!w.start(std::chrono::seconds(15)) && !c.start(std::chrono::seconds(15)),
                  "nodes W and C start")) {
    return;
  }
  run.expect(queue_owner != owner, "C's member queue and the membership on two masters");
  run.expect(
      floors::eventually(
          [&] {
            return !cluster.admin(static_cast<std::size_t>(owner), {"ZSCORE", keys.members, member})
                        .empty();
          },
          std::chrono::seconds(5)),
      "C registered in the members zset on the table's shard");
  table::Minter writer(kDrillNode + 2);
  const BrandedId name = writer.mint("AST").value(), group = writer.mint("PRT").value();
  (void)w.put("lanes", name.view(), "px=100.00", writer.mint("AST").value());
  (void)c.get("lanes", name.view());
  const BrandedId v2 = writer.mint("AST").value();
  (void)w.put("lanes", name.view(), "px=107.00", v2);
  auto admitted = w.enqueue("lanes", group, name.view(), v2);
  run.expect(admitted && admitted->size() == 1, "one member queue admitted the job");
  auto consumer = [&] { return c.stats().tables.front().consumer.value(); };
  run.expect(
      floors::eventually([&] { return consumer().completed == 1; }, std::chrono::seconds(10)),
      "C applied and completed it");
  auto after = c.get("lanes", name.view());
  run.expect(after && after->version == v2 && after->value == "px=107.00",
             "C's next read is px=107.00 at v2");
  (void)w.enqueue("lanes", group, name.view(), v2);
  run.expect(
      floors::eventually([&] { return consumer().completed == 2; }, std::chrono::seconds(10)),
      "the replay was completed too");
  // The lead (an SPUBLISH a server turn ahead of each admission) or the first job dropped the
  // row; every other apply, the replay's among them, found it gone.
  run.expect(consumer().applied + consumer().stale_applies == 2 && consumer().stale_applies >= 1 &&
                 engine::internal::writer_of(c, "lanes")->stats().applied == 1,
             "the replay answered stale: one effective drop");
  int foreign = 0, held = 0;
  for (const auto& n : cluster.nodes()) {
    if (!n.master || !n.running) continue;
    const bool table_keys =
        cluster.admin(static_cast<std::size_t>(n.index), {"KEYS", keys.qbase + "*"}) != "";
    const bool queue_keys =
        cluster.admin(static_cast<std::size_t>(n.index), {"KEYS", mbase + "*"}) != "";
    foreign += (table_keys && n.index != owner) + (queue_keys && n.index != queue_owner);
    held += (table_keys && n.index == owner) + (queue_keys && n.index == queue_owner);
  }
  run.expect(foreign == 0 && held == 2,
             "the membership only on its slot's master, C's member queue only on its own");
  run.figure(
      fmt("applied 1, replay stale 1, membership on the master at port %d, C's member "
          "queue on port %d",
          cluster.server(static_cast<std::size_t>(owner)).port(),
          cluster.server(static_cast<std::size_t>(queue_owner)).port()));
}

void add_cluster_gates(std::vector<Gate>& gates) {
  gates.push_back({"C1", "slot router (cluster)", c1_router});
  gates.push_back({"F2", "newer-wins (cluster)", f2_newer_wins});
  gates.push_back({"F3", "sharded broadcast (cluster)", f3_broadcast});
  gates.push_back({"F5", "job lane once-effect (cluster)", f5_job_lane});
}

const GateGroup kGroup{kClusterGateOrder + 1, add_cluster_gates};

}  // namespace

int drill_cluster(std::ostream& out) {
  std::unique_ptr<testing::LocalCluster> cluster;
  try {
    cluster = std::make_unique<testing::LocalCluster>();
  } catch (const std::exception& e) {
    std::cerr << "echostore drill --cluster: " << e.what() << '\n';
    return 1;  // the local cluster did not start: not a usage error
  }
  DrillTarget target{cluster->host(), cluster->server(0).port(), cluster->seeds(), cluster.get()};
  out << "header: redis-server " << cluster->server(0).version() << " cluster of "
      << cluster->size() << " nodes (3 masters, 3 replicas) on " << target.cluster_seeds
      << " (started by the drill) | echostore " << ECHO_VERSION << " (" << git_commit()
      << ") | SQLite " << sqlite3_libversion() << " | cores " << std::thread::hardware_concurrency()
      << "\n\n";
  return run_drill(registered_gates(/*cluster=*/true), target, out) == 0 ? 0 : 1;
}

}  // namespace echo::cli
