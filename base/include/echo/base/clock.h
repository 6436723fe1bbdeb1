// SPDX-License-Identifier: MIT
// The one monotonic timestamp: nanoseconds on std::chrono::steady_clock. Comparable only with
// another steady_ns() of the same process (intervals, deadlines, decode-to-apply stamps).
#pragma once

#include <chrono>
#include <cstdint>

namespace echo::base {

inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace echo::base
