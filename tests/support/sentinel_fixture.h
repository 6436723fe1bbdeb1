// SPDX-License-Identifier: MIT
// The integration tests' sentinel mode: one master and one replica (LocalServers, the replica
// started with --replicaof) and three redis-sentinel processes (Debian's redis-sentinel), each on
// a free loopback port with a writable config file of its own in a temp dir, started and stopped
// by pid, dying with their parent. The constructor returns once every sentinel monitors the
// master, sees the replica linked and knows the other sentinels. A suite that cannot start it
// fails; it never skips.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/testing/local_server.h>

namespace echo::test {

struct SentinelGroupOptions {
  std::string master_name = "echo-master";     // the name the sentinels monitor the master under
  int sentinels = 3;                           // 1..7
  int quorum = 2;                              // 1..sentinels
  std::chrono::milliseconds down_after{1000};  // sentinel down-after-milliseconds
  std::chrono::milliseconds failover_timeout{10000};
  std::chrono::milliseconds ready_timeout{30000};  // start until every sentinel is ready
  // Non-empty: each sentinel's requirepass (and sentinel-pass, which they present to each other).
  std::string password;
  std::string binary = "redis-sentinel";  // on PATH; $ECHO_REDIS_SENTINEL overrides
};

// One redis-sentinel process: its config in its own temp dir (sentinels rewrite it).
class SentinelProcess {
 public:
  // Writes the config, starts the process and waits until it answers PING. Throws
  // std::runtime_error naming what failed.
  SentinelProcess(const SentinelGroupOptions& options, int master_port);
  ~SentinelProcess();  // stop()
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  void stop() noexcept;  // SIGTERM, SIGKILL after 5 s; reaps. Idempotent.

 private:
  bool spawn(const std::string& binary, const std::string& password);
  int port_ = 0;
  pid_t pid_ = -1;
  std::filesystem::path dir_;
};

class SentinelGroup {
 public:
  // Throws std::runtime_error naming the step that failed. Blocks for seconds.
  explicit SentinelGroup(SentinelGroupOptions options = {});
  ~SentinelGroup();

  const std::string& master_name() const noexcept { return options_.master_name; }
  const std::string& password() const noexcept { return options_.password; }
  // "127.0.0.1:p1,127.0.0.1:p2,...": EngineOptions::sentinels.
  std::string sentinels() const;
  // The two data servers: 0 started as the master, 1 as its replica (roles swap at a failover).
  testing::LocalServer& server(std::size_t i) { return *servers_.at(i); }
  SentinelProcess& sentinel(std::size_t i) { return *sentinels_.at(i); }

  // The master's port as sentinel `i` names it now (0 when it names none).
  int named_master(std::size_t i) const;
  // SENTINEL FAILOVER <name> on sentinel `via`, retried while it answers that no replica is fit
  // yet (NOGOODSLAVE) or that a failover is under way, until `timeout`. Throws on timeout.
  void failover(std::chrono::milliseconds timeout, std::size_t via = 0);
  // Waits until every running sentinel names a master other than `old_port`, and that server
  // answers ROLE master. Returns its port; throws on timeout.
  int wait_switch(int old_port, std::chrono::milliseconds timeout) const;

  // One command on the server at `port` (RESP2, hiredis): a string's bytes, an integer's
  // decimal, an array's elements joined by '\n', "(nil)". Throws on an error reply.
  static std::string admin(int port, const std::vector<std::string>& args);

 private:
  bool ready() const;
  SentinelGroupOptions options_;
  std::vector<std::unique_ptr<testing::LocalServer>> servers_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

// Engine options for node `node` in sentinel mode on the group's sentinels.
engine::EngineOptions sentinel_node_options(const SentinelGroup& group, unsigned node);

}  // namespace echo::test
