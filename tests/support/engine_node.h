// SPDX-License-Identifier: MIT
// One way to start an engine node in each server mode the integration tests run against: a single
// redis-server (a LocalServer, or a loopback port for a child process that only knows the port)
// or a LocalCluster. The options carry what a node of that mode needs and nothing else, so a test
// spells out only what it changes; the suites' fixtures (SingleServerTest, ClusterTest) wrap these.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/testing/local_cluster.h>
#include <echo/testing/local_server.h>

#include <memory>
#include <string>
#include <vector>

namespace echo::test {

// A node of id `node` on the single server at host:port.
engine::EngineOptions node_options(const std::string& host, int port, unsigned node);
engine::EngineOptions node_options(const testing::LocalServer& server, unsigned node);
// A node of id `node` on the cluster, seeded with every one of its servers.
engine::EngineOptions node_options(const testing::LocalCluster& cluster, unsigned node);

// Constructs node `node` with `tables`, points its first table's job lane at `journal` when one is
// given (use_journal, before start), and starts it: within the engine's default 5 s on a single
// server, within 15 s on a cluster (its map and one subscription per shard, on a loaded machine).
// A failure to start is a test failure, and nullptr.
// An engine of `options` (node_options' with changes), started; nullptr and a test failure if not.
std::unique_ptr<engine::Engine> start_node(engine::EngineOptions options,
                                           std::vector<engine::TableSpec> tables);
std::unique_ptr<engine::Engine> start_node(const testing::LocalServer& server, unsigned node,
                                           std::vector<engine::TableSpec> tables,
                                           engine::Journal* journal = nullptr);
std::unique_ptr<engine::Engine> start_node(const testing::LocalCluster& cluster, unsigned node,
                                           std::vector<engine::TableSpec> tables,
                                           engine::Journal* journal = nullptr);

}  // namespace echo::test
