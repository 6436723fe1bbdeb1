// SPDX-License-Identifier: MIT
// The 29-byte coherence message (WIRE §2.1): name(14) ":" version(14). Building needs only the
// lengths; parsing refuses anything but exactly 29 bytes, a colon at byte 14 and two valid ids.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <echo/table/branded_id.h>

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

enum class FrameError : std::uint8_t {
  kLength = 1,     // not exactly 29 bytes (build: a half not exactly 14 bytes)
  kSeparator = 2,  // byte 14 is not ':'
  kName = 3,       // the name half fails an id gate (see FrameRefusal::id)
  kVersion = 4,    // the version half fails an id gate
};

// Why a frame was refused: the frame-level gate and, for kName/kVersion, the id gate.
struct FrameRefusal {
  FrameError error;
  IdError id = IdError::kLength;  // meaningful only for kName and kVersion
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

}  // namespace echo::table
