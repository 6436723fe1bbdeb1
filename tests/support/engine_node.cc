// SPDX-License-Identifier: MIT
#include "support/engine_node.h"

#include "support/io_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <utility>

namespace echo::test {
namespace {

std::unique_ptr<engine::Engine> start(engine::EngineOptions options,
                                      std::vector<engine::TableSpec> tables,
                                      engine::Journal* journal,
                                      std::optional<std::chrono::milliseconds> timeout) {
  const unsigned id = options.node_id;
  auto e = std::make_unique<engine::Engine>(std::move(options), std::move(tables));
  if (journal != nullptr) e->use_journal(e->directory().front().name, *journal);
  const std::error_code ec = timeout ? e->start(*timeout) : e->start();
  EXPECT_FALSE(ec) << "node " << id << " did not start: " << ec.message();
  if (ec) return nullptr;
  // A run registered for one backend proves it runs there (auto may land on either).
  const io::Backend asked = test_io_backend();
  if (asked != io::Backend::kAuto) {
    EXPECT_EQ(e->stats().io_backend, asked)
        << "node " << id << " runs on " << io::to_string(e->stats().io_backend);
  }
  return e;
}

}  // namespace

engine::EngineOptions node_options(const std::string& host, int port, unsigned node) {
  engine::EngineOptions o;
  o.host = host;
  o.port = port;
  o.node_id = node;
  // Short enough that a node restarted under its id after a SIGKILL starts within start()'s
  // timeout (it waits for the predecessor's lease to lapse), long enough for an ASan run's
  // stalls (held 2.7 s past each renewal, renewed every second).
  o.node_lease = std::chrono::seconds(3);
  o.io = test_loop_options(o.io);
  o.io_threads = test_io_threads();
  return o;
}

engine::EngineOptions node_options(const testing::LocalServer& server, unsigned node) {
  return node_options(server.host(), server.port(), node);
}

engine::EngineOptions node_options(const testing::LocalCluster& cluster, unsigned node) {
  engine::EngineOptions o;
  o.mode = engine::ServerMode::kCluster;
  o.cluster_seeds = cluster.seeds();
  o.node_id = node;
  // Longer than a failover of the master that holds the lease keys (the cluster drills kill
  // masters; a lapse would stop the test's minting), and no test restarts a cluster node.
  o.node_lease = std::chrono::seconds(30);
  o.io = test_loop_options(o.io);
  return o;
}

std::unique_ptr<engine::Engine> start_node(engine::EngineOptions options,
                                           std::vector<engine::TableSpec> tables) {
  return start(std::move(options), std::move(tables), nullptr, std::nullopt);
}

std::unique_ptr<engine::Engine> start_node(const testing::LocalServer& server, unsigned node,
                                           std::vector<engine::TableSpec> tables,
                                           engine::Journal* journal) {
  return start(node_options(server, node), std::move(tables), journal, std::nullopt);
}

std::unique_ptr<engine::Engine> start_node(const testing::LocalCluster& cluster, unsigned node,
                                           std::vector<engine::TableSpec> tables,
                                           engine::Journal* journal) {
  return start(node_options(cluster, node), std::move(tables), journal, std::chrono::seconds(15));
}

}  // namespace echo::test
