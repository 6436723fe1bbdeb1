// SPDX-License-Identifier: MIT
#include "support/cluster_fixture.h"

#include <utility>

#include "support/engine_node.h"
#include "support/redis_fixture.h"

namespace echo::test {

std::unique_ptr<testing::LocalCluster> ClusterTest::cluster_;
std::string ClusterTest::start_error_;

void ClusterTest::start_cluster() {
  cluster_ = start_for_suite<testing::LocalCluster>(start_error_);
}

void ClusterTest::stop_cluster() { cluster_.reset(); }

void ClusterTest::SetUp() { ASSERT_TRUE(cluster_) << "LocalCluster: " << start_error_; }

std::unique_ptr<engine::Engine> ClusterTest::node(unsigned id,
                                                  std::vector<engine::TableSpec> tables,
                                                  engine::Journal* journal) {
  return start_node(*cluster_, id, std::move(tables), journal);
}

}  // namespace echo::test
