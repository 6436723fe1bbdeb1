// SPDX-License-Identifier: MIT
// The coherence messages. make_frame and parse_frame are the 29-byte message of a branded table
// (docs/wire.md, "The coherence message"): name(14) ":" version(14); building needs only the
// lengths, parsing refuses anything but exactly 29 bytes, a colon at byte 14 and two valid ids.
// make_text_frame and parse_text_frame are the message of a table of text keys ("Text keys", an
// EchoStore extension): key ":" version(14), 16..215 bytes, split from the right because the key
// may hold ':'. parse_carried_frame is the message that carries the value ("Carried values", an
// EchoStore extension): "{" key "}" version(14) value.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <echo/table/branded_id.h>
#include <echo/table/names.h>

namespace echo::table {

inline constexpr std::size_t kFrameSize = 2 * kIdSize + 1;
inline constexpr char kFrameSeparator = ':';

using Frame = std::array<char, kFrameSize>;

inline std::string_view view(const Frame& f) noexcept { return {f.data(), f.size()}; }

// A parsed message: which name to drop, and the version that must be newer than the row's.
struct CoherenceMessage {
  BrandedId name;
  BrandedId version;
};

// The gates, in the order both parsers check them. Text frames: kLength is outside
// 16..215 bytes, kSeparator the byte before the last 14, kName the key's text-key check.
enum class FrameError : std::uint8_t {
  kLength = 1,     // not exactly 29 bytes (build: a half not exactly 14 bytes)
  kSeparator = 2,  // byte 14 is not ':'
  kName = 3,       // the name half fails an id gate (see FrameRefusal::id), or the text key fails
                   // check_text_key (see FrameRefusal::key)
  kVersion = 4,    // the version half fails an id gate
};

// Why a frame was refused: the frame-level gate and, for kName/kVersion, the id or key check.
struct FrameRefusal {
  FrameError error;
  IdError id = IdError::kLength;      // meaningful only for kVersion, and kName from parse_frame
  NameError key = NameError::kEmpty;  // meaningful only for kName from parse_text_frame
};

// "length", "separator", "name", "version".
std::string_view to_string(FrameError e) noexcept;

// payload(id, v) for two ids: cannot fail. Any thread; no allocation.
Frame make_frame(const BrandedId& name, const BrandedId& version) noexcept;
// payload(id, v) for raw bytes: both exactly 14 bytes (validity not checked), else kLength.
Expected<Frame, FrameError> make_frame(std::string_view name, std::string_view version) noexcept;

// Parses a frame: kLength, kSeparator, kName or kVersion (with the id gate). Any thread; no
// allocation; never reads outside `bytes`.
Expected<CoherenceMessage, FrameRefusal> parse_frame(std::string_view bytes) noexcept;

// ---- text keys (docs/wire.md, "Text keys") ----

inline constexpr std::size_t kMinTextFrameSize = 1 + 1 + kIdSize;            // 16
inline constexpr std::size_t kMaxTextFrameSize = kMaxTextKey + 1 + kIdSize;  // 215

// A built text-key message: the bytes live in the struct (no allocation), the first `size` used.
struct TextFrame {
  std::array<char, kMaxTextFrameSize> bytes{};
  std::uint8_t size = 0;
};
static_assert(kMaxTextFrameSize <= UINT8_MAX, "TextFrame::size holds the longest text frame");

inline std::string_view view(const TextFrame& f) noexcept { return {f.bytes.data(), f.size}; }

// A parsed text-key message. `key` views into the parsed bytes: it lives as long as they do.
struct TextMessage {
  std::string_view key;
  BrandedId version;
};

// key ":" version: kEmpty, kTooLong or kForbiddenByte when check_text_key refuses the key. Any
// thread; no allocation.
Expected<TextFrame, NameError> make_text_frame(std::string_view key,
                                               const BrandedId& version) noexcept;

// Parses key ":" version from the right: kLength outside 16..215 bytes; kSeparator when the byte
// before the last 14 is not ':'; kName when the key fails check_text_key (FrameRefusal::key:
// within the length gate the key is 1..200 bytes, so kForbiddenByte); kVersion when the last 14
// bytes fail an id gate (FrameRefusal::id). The key is checked before the version, as parse_frame
// checks the name first. A valid 29-byte branded frame parses here too, its name as the key. Any
// thread; no allocation; never reads outside `bytes`.
Expected<TextMessage, FrameRefusal> parse_text_frame(std::string_view bytes) noexcept;

// ---- carried values (docs/wire.md, "Carried values") ----
// "{" key "}" ‖ the L2 framed value (version(14) ‖ value): the first byte tells it from the other
// two forms (neither a branded id nor a text key holds '{'), and the key ends at the first '}'.
inline constexpr char kCarriedOpen = '{';
inline constexpr char kCarriedClose = '}';
inline constexpr std::size_t kMaxCarriedValue = 65536;            // the largest value it carries
inline constexpr std::size_t kCarriedOverhead = 1 + 1 + kIdSize;  // "{" "}" version: 16 bytes
inline constexpr std::size_t kMinCarriedFrameSize = kCarriedOverhead + 1;  // a 1-byte key
inline constexpr std::size_t kMaxCarriedFrameSize =
    kCarriedOverhead + kMaxTextKey + kMaxCarriedValue;

// A parsed carried message: views into the parsed bytes (they live as long as those do).
struct CarriedMessage {
  std::string_view key;
  BrandedId version;
  std::string_view value;  // 0..kMaxCarriedValue bytes
};

// True when `bytes` is a carried message's (its first byte is '{'): then parse_carried_frame is
// the parser that applies, and any refusal is the frame's.
inline bool is_carried(std::string_view bytes) noexcept {
  return !bytes.empty() && bytes[0] == kCarriedOpen;
}

// Parses "{" key "}" version value: kLength outside kMinCarriedFrameSize..kMaxCarriedFrameSize;
// kSeparator when no '}' closes the key within its 1..200 bytes or the bytes after it cannot hold
// a version; kName when the key fails check_text_key (FrameRefusal::key); kVersion when the 14
// bytes after '}' fail an id gate (FrameRefusal::id). A branded table's key is a text key of 14
// bytes here: its caller checks the id. Any thread; no allocation; never reads outside `bytes`.
Expected<CarriedMessage, FrameRefusal> parse_carried_frame(std::string_view bytes) noexcept;

// Appends "{" key "}" version value to `out` (the caller checked the key and the value's size).
void append_carried_frame(std::string& out, std::string_view key, const BrandedId& version,
                          std::string_view value);

}  // namespace echo::table
