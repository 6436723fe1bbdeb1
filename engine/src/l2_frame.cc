// SPDX-License-Identifier: MIT
// L2 value framing (docs/wire.md, "L2 values").
#include <echo/engine/l2_frame.h>

namespace echo::engine {

std::string frame_l2_value(const table::BrandedId& version, std::string_view value) {
  std::string out;
  append_l2_value(out, version, value);
  return out;
}

void append_l2_value(std::string& out, const table::BrandedId& version, std::string_view value) {
  out.reserve(out.size() + table::kIdSize + value.size());
  out.append(version.view());
  out.append(value);
}

table::Expected<L2Row, L2FrameError> split_l2_frame(std::string_view stored) noexcept {
  if (stored.size() < table::kIdSize) return table::Unexpected{L2FrameError::kCorrupt};
  auto version = table::BrandedId::parse(stored.substr(0, table::kIdSize));
  if (!version) return table::Unexpected{L2FrameError::kCorrupt};
  return L2Row{*version, stored.substr(table::kIdSize)};
}

}  // namespace echo::engine
