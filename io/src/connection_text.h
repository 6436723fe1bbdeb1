// SPDX-License-Identifier: MIT
// Private to the connector's sources (connection.cc, connection_tls.cc): how a peer's bytes are
// shown in a cause, so a plain and a TLS connection describe a strange peer the same way.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace echo::io {

inline constexpr std::size_t kShownBytes = 24;  // a peer's first bytes kept for a cause

// A peer's bytes as a C string literal would show them, for a cause ("?what\r\n").
std::string escaped(std::string_view bytes);

}  // namespace echo::io
