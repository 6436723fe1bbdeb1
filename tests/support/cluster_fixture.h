// SPDX-License-Identifier: MIT
// The integration tests' cluster mode: one testing::LocalCluster (3 masters, 3 replicas, each a
// redis-server on a free loopback port, stopped by pid) shared by a whole suite, since creating
// one takes seconds (ClusterTest); or, for suites whose tests kill masters, one per test
// (FreshClusterTest). A suite that cannot start it fails every test; it never skips. The
// single-server mode is redis_fixture.h.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/testing/local_cluster.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace echo::test {

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { start_cluster(); }
  static void TearDownTestSuite() { stop_cluster(); }
  void SetUp() override;

  static testing::LocalCluster& cluster() { return *cluster_; }
  // Node `id` of `tables` on the cluster, its job lane consulting `journal` if one is given
  // (start_node, support/engine_node.h); a failure to start fails the test (nullptr).
  static std::unique_ptr<engine::Engine> node(unsigned id, std::vector<engine::TableSpec> tables,
                                              engine::Journal* journal = nullptr);

  static void start_cluster();
  static void stop_cluster();

 private:
  static std::unique_ptr<testing::LocalCluster> cluster_;
  static std::string start_error_;
};

// A cluster of the test's own, started before it and stopped after it: a master a test kills
// (and the replica promoted in its place) never leaves the next test a changed cluster.
class FreshClusterTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() {}
  static void TearDownTestSuite() {}
  void SetUp() override {
    start_cluster();
    ClusterTest::SetUp();
  }
  void TearDown() override { stop_cluster(); }
};

}  // namespace echo::test
