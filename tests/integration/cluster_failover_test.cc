// SPDX-License-Identifier: MIT
// The slot-aware client through a failover of a real local cluster: the master serving a slot is
// SIGKILLed, calls for that slot are held (never sent twice) while its replica takes over, and
// the client follows the promoted master by refreshing its map; calls for other slots keep
// working meanwhile.
#include <echo/engine/local_cluster.h>
#include <echo/io/cluster_client.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace echo::io {
namespace {

using std::chrono::milliseconds;

TEST(ClusterFailover, ClientFollowsThePromotedReplica) {
  engine::LocalCluster cluster;
  LoopThread lt;
  ClusterOptions o;
  o.seeds = parse_seeds(cluster.seeds());
  o.route_timeout = milliseconds(30000);  // generous: failover on a loaded 2-core machine
  ClusterClient c(lt.loop(), std::move(o));
  c.start();
  ASSERT_EQ(c.wait_ready(milliseconds(10000)), std::error_code{});

  const std::uint16_t slot = hash_slot("fo");
  for (int i = 0; i < 20; ++i) {
    ASSERT_FALSE(c.call_blocking({"SET", "{fo}:" + std::to_string(i), "x"}).ec);
  }
  const int old_master = cluster.kill_master_of(slot);

  // Issued right after the kill: held until the replica is promoted, then sent once there.
  auto held = c.call_blocking({"SET", "{fo}:after", "y"});
  ASSERT_FALSE(held.ec) << held.ec.message() << " " << held.reply.view().to_debug_string();
  const int promoted = cluster.wait_failover(slot, old_master, milliseconds(30000));
  EXPECT_NE(promoted, old_master);
  EXPECT_EQ(c.address_of(slot).port, cluster.server(promoted).port());
  EXPECT_EQ(cluster.admin(promoted, {"GET", "{fo}:after"}), "y");
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

}  // namespace
}  // namespace echo::io
