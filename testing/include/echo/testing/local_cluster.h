// SPDX-License-Identifier: MIT
// A local Valkey/Redis Cluster for tests and the drill: 3 masters and 3 replicas, each a
// LocalServer (free loopback port, own directory, dies with its parent, stopped by pid) started
// with --cluster-enabled, joined by `redis-cli --cluster create ... --cluster-replicas 1`, and
// healthy (cluster_state:ok on every node, all 16384 slots served, every replica linked) before
// the constructor returns. It can kill the master of a slot and wait for the failover, and move
// a slot between masters (the MOVED and ASK cases) through the cluster's own admin commands.
#pragma once

#include <echo/testing/local_server.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace echo::testing {

struct LocalClusterOptions {
  int masters = 3;   // 3..16 (redis-cli refuses fewer than 3)
  int replicas = 1;  // per master, 0..2
  // cluster-node-timeout: how long a silent master stays up before its replicas take over.
  std::chrono::milliseconds node_timeout{2000};
  std::chrono::milliseconds ready_timeout{60000};  // creation until healthy
  std::string cli_binary = "redis-cli";            // $ECHO_REDIS_CLI overrides
  // enabled(): every node also listens for TLS, and the bus and replication speak TLS
  // (tls-cluster, tls-replication): the topology then names each node's TLS port.
  LocalServerTls tls;
};

// One node as the cluster sees it.
struct ClusterNodeInfo {
  int index = -1;  // into LocalCluster's servers
  std::string id;  // the 40-hex node id
  int port = 0;
  bool master = false;
  bool running = false;
};

class LocalCluster {
 public:
  // Starts every server, creates the cluster and waits until it is healthy. Throws
  // std::runtime_error naming the step that failed. Caller thread; blocks for seconds.
  explicit LocalCluster(LocalClusterOptions options = {});
  ~LocalCluster();  // stops every server
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  std::size_t size() const noexcept { return servers_.size(); }
  LocalServer& server(std::size_t i) { return *servers_.at(i); }
  const std::string& host() const noexcept { return servers_.front()->host(); }
  // "127.0.0.1:p1,127.0.0.1:p2,..." of the running nodes: a seed list for a cluster client.
  std::string seeds() const;
  // The same with each node's TLS port (LocalClusterOptions::tls).
  std::string tls_seeds() const;
  std::vector<int> ports() const;

  // Every node's id, port and current role (asks a running node).
  std::vector<ClusterNodeInfo> nodes() const;
  // The index of the running master that serves `slot` now (asks a running node).
  int master_of(std::uint16_t slot) const;
  // The index of a running master that does not serve `slot`.
  int other_master(std::uint16_t slot) const;

  // SIGKILLs the master that serves `slot` and returns its index.
  int kill_master_of(std::uint16_t slot);
  // Waits until a replica has taken over `slot` (a master other than `old_master` serves it)
  // and every running node says cluster_state:ok. Throws on timeout. Returns the new master.
  int wait_failover(std::uint16_t slot, int old_master, std::chrono::milliseconds timeout);

  // Slot migration (CLUSTER SETSLOT), the cluster's own reshard steps:
  // begin: target IMPORTING, source MIGRATING (the source answers ASK for keys it lacks).
  void begin_migration(std::uint16_t slot, int target);
  // MIGRATE every key of the slot to the target, then SETSLOT NODE target on every master
  // (every node now answers MOVED to the target).
  void finish_migration(std::uint16_t slot, int target);

  // Runs one command on node `i` (RESP2, hiredis) and returns its reply as text: a string's
  // bytes, an integer's decimal, an array's elements joined by '\n'. Throws on an error reply.
  std::string admin(std::size_t i, const std::vector<std::string>& args) const;
  // True when every running node says cluster_state:ok and cluster_slots_ok:16384.
  bool healthy() const;

 private:
  void create();
  void wait_until(const char* what, std::chrono::milliseconds timeout,
                  const std::function<bool()>& done) const;
  std::size_t any_running() const;

  LocalClusterOptions options_;
  std::vector<std::unique_ptr<LocalServer>> servers_;
};

}  // namespace echo::testing
