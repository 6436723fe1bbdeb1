// SPDX-License-Identifier: MIT
// Class layouts do not depend on NDEBUG: the same public classes measured by a translation unit
// built with NDEBUG and by one built without (layout/probe.cc, twice) must agree, or a debug
// program linked with the release package would read its objects at the wrong offsets.
#include <gtest/gtest.h>

#include <string>

#include "layout/probe.h"

namespace echo::test {
namespace {

TEST(NdebugLayout, EveryPublicClassHasOneLayout) {
  const auto with = layouts_with_ndebug(), without = layouts_without_ndebug();
  ASSERT_EQ(with.size(), without.size());
  ASSERT_GE(with.size(), 20u);
  for (std::size_t i = 0; i < with.size(); ++i) {
    ASSERT_STREQ(with[i].name, without[i].name);
    EXPECT_EQ(with[i].size, without[i].size) << with[i].name;
    EXPECT_EQ(with[i].align, without[i].align) << with[i].name;
  }
}

}  // namespace
}  // namespace echo::test
