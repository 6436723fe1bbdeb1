// SPDX-License-Identifier: MIT
// The L2 frame (docs/wire.md, "L2 values"): version(14) ‖ value framing; a short or unversioned
// frame is corrupt_l2_frame.
#include <gtest/gtest.h>

#include <echo/engine/l2_frame.h>

namespace echo::engine {
namespace {

TEST(L2Frame, FramesVersionThenValueWithoutSeparator) {
  const auto v = table::BrandedId::parse("TXN0NgWEfAEJfs").value();
  EXPECT_EQ(frame_l2_value(v, "px=105.00"), "TXN0NgWEfAEJfspx=105.00");
  EXPECT_EQ(frame_l2_value(v, ""), "TXN0NgWEfAEJfs");
  const std::string binary("\0\xff\r\n", 4);
  EXPECT_EQ(frame_l2_value(v, binary).substr(14), binary);
}

TEST(L2Frame, SplitsVersionAndValue) {
  auto row = split_l2_frame("TXN0NgWEfAEJfspx=105.00");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->version.view(), "TXN0NgWEfAEJfs");
  EXPECT_EQ(row->value, "px=105.00");
  auto empty = split_l2_frame("TXN0NgWEfAEJfs");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->value, "");
}

TEST(L2Frame, ShortFrameIsCorrupt) {
  for (std::size_t n = 0; n < 14; ++n) {
    auto row = split_l2_frame(std::string_view("TXN0NgWEfAEJfs").substr(0, n));
    ASSERT_FALSE(row) << n;
    EXPECT_EQ(row.error(), L2FrameError::kCorrupt);
  }
}

TEST(L2Frame, UnversionedFrameIsCorrupt) {
  EXPECT_FALSE(split_l2_frame("not a version at all"));
  EXPECT_FALSE(split_l2_frame("txn0NgWEfAEJfsvalue"));
}

}  // namespace
}  // namespace echo::engine
