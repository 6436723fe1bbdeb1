// SPDX-License-Identifier: MIT
// Build and parse of the 29-byte coherence message (WIRE §2.1).
#include <echo/table/coherence_frame.h>

#include <cstring>

namespace echo::table {

std::string_view to_string(FrameError e) noexcept {
  switch (e) {
    case FrameError::kLength: return "length";
    case FrameError::kSeparator: return "separator";
    case FrameError::kName: return "name";
    case FrameError::kVersion: return "version";
  }
  return "unknown";
}

Frame make_frame(const BrandedId& name, const BrandedId& version) noexcept {
  Frame f;
  std::memcpy(f.data(), name.view().data(), kIdSize);
  f[kIdSize] = kFrameSeparator;
  std::memcpy(f.data() + kIdSize + 1, version.view().data(), kIdSize);
  return f;
}

Expected<Frame, FrameError> make_frame(std::string_view name, std::string_view version) noexcept {
  if (name.size() != kIdSize || version.size() != kIdSize) return Unexpected{FrameError::kLength};
  Frame f;
  std::memcpy(f.data(), name.data(), kIdSize);
  f[kIdSize] = kFrameSeparator;
  std::memcpy(f.data() + kIdSize + 1, version.data(), kIdSize);
  return f;
}

Expected<CoherenceMessage, FrameRefusal> parse_frame(std::string_view bytes) noexcept {
  if (bytes.size() != kFrameSize) return Unexpected{FrameRefusal{FrameError::kLength}};
  if (bytes[kIdSize] != kFrameSeparator) return Unexpected{FrameRefusal{FrameError::kSeparator}};
  auto name = BrandedId::parse(bytes.substr(0, kIdSize));
  if (!name) return Unexpected{FrameRefusal{FrameError::kName, name.error()}};
  auto version = BrandedId::parse(bytes.substr(kIdSize + 1));
  if (!version) return Unexpected{FrameRefusal{FrameError::kVersion, version.error()}};
  return CoherenceMessage{*name, *version};
}

}  // namespace echo::table
