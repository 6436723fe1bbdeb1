// SPDX-License-Identifier: MIT
// The padding unit for anything two threads must not share a line for.
#pragma once

#include <cstddef>

namespace echo::base {

// One cache line on every x86-64 and on the ARM cores we deploy to. A constant rather than
// std::hardware_destructive_interference_size, which GCC warns is ABI-unstable across -mtune.
inline constexpr std::size_t kCacheLine = 64;
static_assert((kCacheLine & (kCacheLine - 1)) == 0, "alignas needs a power of two");

}  // namespace echo::base
