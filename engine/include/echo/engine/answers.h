// SPDX-License-Identifier: MIT
// What the verbs answer besides a value: where a read was served from, and the journal-aware
// apply's verdict.
#pragma once

#include <cstdint>
#include <string_view>

namespace echo::engine {

// Where a read was answered from (L1, or a flight's L2 GET or loader: docs/wire.md,
// "Table semantics").
enum class Source : std::uint8_t { kL1, kL2, kLoader };
std::string_view to_string(Source s) noexcept;

// apply_and_remember's verdicts: applied (the row dropped, remembered), stale (not newer than
// the row or the memory's entry), remembered_stale (the journal's memory answered first).
enum class Applied : std::uint8_t { kApplied, kStale, kRememberedStale };
std::string_view to_string(Applied a) noexcept;

}  // namespace echo::engine
