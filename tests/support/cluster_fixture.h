// SPDX-License-Identifier: MIT
// The cluster tests' real servers: one engine::LocalCluster (3 masters, 3 replicas, each a
// redis-server on a free loopback port, stopped by pid) shared by a whole suite, since creating
// one takes seconds. A suite that cannot start it fails every test; it never skips.
#pragma once

#include <echo/engine/local_cluster.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace echo::test {

class LocalClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  static engine::LocalCluster& cluster() { return *cluster_; }

 private:
  static std::unique_ptr<engine::LocalCluster> cluster_;
  static std::string start_error_;
};

}  // namespace echo::test
