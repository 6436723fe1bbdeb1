// SPDX-License-Identifier: MIT
// L2 values (docs/wire.md, "L2 values"): version(14) ‖ raw value bytes, no separator, no length. A
// GET of 0..13 bytes (or a version that is not a branded id) is corrupt_l2_frame: passed to every
// waiter, nothing cached, nothing deleted.
#pragma once

#include <string>
#include <string_view>

#include <echo/table/branded_id.h>
#include <echo/table/expected.h>

namespace echo::engine {

enum class L2FrameError : std::uint8_t {
  kCorrupt = 1,  // shorter than 14 bytes, or the version half is not a branded id
};

struct L2Row {
  table::BrandedId version;
  std::string_view value;  // a view into the stored bytes given to split_l2_frame
};

// version ‖ value, the bytes SET stores. Any thread; allocates the result.
std::string frame_l2_value(const table::BrandedId& version, std::string_view value);
// The same bytes appended to `out` (allocates only as `out` grows).
void append_l2_value(std::string& out, const table::BrandedId& version, std::string_view value);

// Splits stored L2 bytes into version and value. Any thread; no allocation.
table::Expected<L2Row, L2FrameError> split_l2_frame(std::string_view stored) noexcept;

}  // namespace echo::engine
