// SPDX-License-Identifier: MIT
// Build and parse of the 29-byte coherence message (docs/wire.md, "The coherence message") and of
// the text-key message (docs/wire.md, "Text keys").
#include <echo/table/coherence_frame.h>

#include <cstring>

namespace echo::table {

std::string_view to_string(FrameError e) noexcept {
  switch (e) {
    case FrameError::kLength:
      return "length";
    case FrameError::kSeparator:
      return "separator";
    case FrameError::kName:
      return "name";
    case FrameError::kVersion:
      return "version";
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

Expected<TextFrame, NameError> make_text_frame(std::string_view key,
                                               const BrandedId& version) noexcept {
  if (auto k = check_text_key(key); !k) return Unexpected{k.error()};
  // key.size() <= kMaxTextKey (checked), so every write below lands inside f.bytes.
  TextFrame f;
  std::memcpy(f.bytes.data(), key.data(), key.size());
  f.bytes[key.size()] = kFrameSeparator;
  std::memcpy(f.bytes.data() + key.size() + 1, version.view().data(), kIdSize);
  f.size = static_cast<std::uint8_t>(key.size() + 1 + kIdSize);
  return f;
}

Expected<TextMessage, FrameRefusal> parse_text_frame(std::string_view bytes) noexcept {
  if (bytes.size() < kMinTextFrameSize || bytes.size() > kMaxTextFrameSize) {
    return Unexpected{FrameRefusal{FrameError::kLength}};
  }
  // From the right: the separator sits just before the last 14 bytes; the length gate puts it
  // at index 1..200, so the key before it is never empty and every index read is in range.
  const std::size_t sep = bytes.size() - kIdSize - 1;
  if (bytes[sep] != kFrameSeparator) return Unexpected{FrameRefusal{FrameError::kSeparator}};
  const std::string_view key = bytes.substr(0, sep);
  if (auto k = check_text_key(key); !k) {
    return Unexpected{FrameRefusal{FrameError::kName, IdError::kLength, k.error()}};
  }
  auto version = BrandedId::parse(bytes.substr(sep + 1));
  if (!version) return Unexpected{FrameRefusal{FrameError::kVersion, version.error()}};
  return TextMessage{key, *version};
}

Expected<CarriedMessage, FrameRefusal> parse_carried_frame(std::string_view bytes) noexcept {
  if (bytes.size() < kMinCarriedFrameSize || bytes.size() > kMaxCarriedFrameSize ||
      bytes[0] != kCarriedOpen) {
    return Unexpected{FrameRefusal{FrameError::kLength}};
  }
  // The key is 1..200 bytes and holds no '}': the first '}' after byte 1 closes it.
  const std::size_t close = bytes.substr(0, 2 + kMaxTextKey).find(kCarriedClose, 2);
  if (close == std::string_view::npos || bytes.size() - close - 1 < kIdSize) {
    return Unexpected{FrameRefusal{FrameError::kSeparator}};
  }
  const std::string_view key = bytes.substr(1, close - 1);
  if (auto k = check_text_key(key); !k) {
    return Unexpected{FrameRefusal{FrameError::kName, IdError::kLength, k.error()}};
  }
  auto version = BrandedId::parse(bytes.substr(close + 1, kIdSize));
  if (!version) return Unexpected{FrameRefusal{FrameError::kVersion, version.error()}};
  return CarriedMessage{key, *version, bytes.substr(close + 1 + kIdSize)};
}

void append_carried_frame(std::string& out, std::string_view key, const BrandedId& version,
                          std::string_view value) {
  out.reserve(out.size() + kCarriedOverhead + key.size() + value.size());
  out += kCarriedOpen;
  out += key;
  out += kCarriedClose;
  out += version.view();
  out += value;
}

}  // namespace echo::table
