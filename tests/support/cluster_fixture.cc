// SPDX-License-Identifier: MIT
#include "support/cluster_fixture.h"

#include "support/redis_fixture.h"

namespace echo::test {

std::unique_ptr<engine::LocalCluster> LocalClusterTest::cluster_;
std::string LocalClusterTest::start_error_;

void LocalClusterTest::SetUpTestSuite() {
  cluster_ = start_for_suite<engine::LocalCluster>(start_error_);
}

void LocalClusterTest::TearDownTestSuite() { cluster_.reset(); }

void LocalClusterTest::SetUp() { ASSERT_TRUE(cluster_) << "LocalCluster: " << start_error_; }

}  // namespace echo::test
