// SPDX-License-Identifier: MIT
// Failovers of a real local cluster. The slot-aware client: the master serving a slot is
// SIGKILLed, calls for that slot are held (never sent twice) while its replica takes over, and
// the client follows the promoted master by refreshing its map. The failover drill: the master
// owning a broadcast table's slot is killed while a writer node and two reader nodes run; the
// engines follow, resubscribe on the promoted master (flushing, their disconnect policy), and
// after recovery every node's every read agrees with L2 (stale reads after the failover: 0).
#include <echo/engine/engine.h>
#include <echo/io/cluster_client.h>
#include <echo/testing/local_cluster.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "integration/engine_nodes.h"
#include "support/cluster_fixture.h"

namespace echo::io {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Each test its own cluster: each kills a master.
class ClusterFailover : public test::FreshClusterTest {};

TEST_F(ClusterFailover, ClientFollowsThePromotedReplica) {
  LoopThread lt;
  ClusterOptions o;
  o.seeds = parse_seeds(cluster().seeds());
  o.route_timeout = milliseconds(30000);  // generous: failover on a loaded 2-core machine
  ClusterClient c(lt.loop(), std::move(o));
  c.start();
  ASSERT_EQ(c.wait_ready(milliseconds(10000)), std::error_code{});

  const std::uint16_t slot = hash_slot("fo");
  for (int i = 0; i < 20; ++i) {
    ASSERT_FALSE(c.call_blocking({"SET", "{fo}:" + std::to_string(i), "x"}).ec);
  }
  const int old_master = cluster().kill_master_of(slot);

  // Issued right after the kill: held until the replica is promoted, then sent once there.
  auto held = c.call_blocking({"SET", "{fo}:after", "y"});
  ASSERT_FALSE(held.ec) << held.ec.message() << " " << held.reply.view().to_debug_string();
  const int promoted = cluster().wait_failover(slot, old_master, milliseconds(30000));
  EXPECT_NE(promoted, old_master);
  EXPECT_EQ(c.address_of(slot).port, cluster().server(promoted).port());
  EXPECT_EQ(cluster().admin(promoted, {"GET", "{fo}:after"}), "y");
  const auto s = c.stats();
  EXPECT_GE(s.held, 1u);
  EXPECT_EQ(s.held_expired, 0u);
  EXPECT_GE(s.refreshes, 2u);
  EXPECT_EQ(s.masters, 3u);

  // Every slot answers again through the new map.
  for (int i = 0; i < 30; ++i) {
    const std::string key = "ecc:{after" + std::to_string(i) + "}:k";
    auto r = c.call_blocking({"SET", key, "z"});
    ASSERT_FALSE(r.ec) << key << ": " << r.ec.message();
  }
}

TEST_F(ClusterFailover, DrillEveryNodeAgreesWithL2AfterTheTablesMasterIsKilled) {
  using engine::CoherenceMode;
  using table::BrandedId;
  test::LoaderProbe loader;
  const auto spec =
      test::table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("loaded"));
  auto writer = node(1, {spec});
  auto r1 = node(2, {spec});
  auto r2 = node(3, {spec});
  ASSERT_TRUE(writer && r1 && r2);
  std::vector<engine::Engine*> nodes = {writer.get(), r1.get(), r2.get()};

  constexpr int kNames = 40;
  std::vector<BrandedId> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(test::fresh_id("AST"));
    ASSERT_TRUE(writer->put("quotes", names.back().view(), "v0"));
  }
  for (auto* e : nodes) {
    for (const auto& n : names) ASSERT_TRUE(e->get("quotes", n.view()));
  }

  // Writers and readers run through the kill, the election and the resubscription.
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
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::uint16_t slot = hash_slot("quotes");
  const auto t_kill = Clock::now();
  const int old_master = cluster().kill_master_of(slot);
  const int promoted = cluster().wait_failover(slot, old_master, std::chrono::seconds(30));
  const auto t_promoted = Clock::now();
  // Every node subscribed again on the promoted master (lost → flush → confirmed).
  for (auto* e : nodes) {
    ASSERT_TRUE(test::eventually(
        [&] {
          const auto w = test::writer_of(*e, "quotes").stats();
          return e->stats().cluster->resubscribes >= 1 && w.disconnect_flushes >= 1 && !w.suspended;
        },
        std::chrono::seconds(20)));
  }
  const auto t_followed = Clock::now();
  const int writes_at_follow = writes.load();
  ASSERT_TRUE(test::eventually([&] { return writes.load() >= writes_at_follow + kNames; },
                               std::chrono::seconds(20)));
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
    ASSERT_TRUE(test::eventually([&] {
      for (const auto& n : names) {
        if (test::l1_holds(*e, "quotes", n)) {
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
      const std::string key = test::l2_key("quotes", names[i]);
      const std::string raw = cluster().admin(promoted, {"GET", key});
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
      "[ failover ] master killed -> replica promoted %lld ms -> every node resubscribed %lld ms; "
      "writes ok %d, refused during the outage %d; reads ok %d, refused %d; stale reads after "
      "recovery %d of %d\n",
      static_cast<long long>(ms(t_promoted - t_kill)),
      static_cast<long long>(ms(t_followed - t_kill)), writes.load(), write_errors.load(),
      reads.load(), read_errors.load(), stale, kNames * 3);
}

}  // namespace
}  // namespace echo::io
