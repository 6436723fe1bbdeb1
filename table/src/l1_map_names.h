// SPDX-License-Identifier: MIT
// Name comparison shared by the L1 map's readers and its writer (l1_map_read.cc,
// l1_map_write.cc): private to echostore::table.
#pragma once

#include <cstddef>
#include <cstring>

#include <echo/table/l1_map.h>

namespace echo::table::detail {

// Name bytes equal (sizes already equal). A branded id's 14 bytes compare inline (two 8-byte
// loads each side: perf/ops.cc's l1_hit); longer names through memcmp.
// Up to 16 bytes (the usual text key) compare as two overlapping loads a side, no call.
inline bool same_name(const char* a, const char* b, std::size_t n) noexcept {
  if (n == kIdSize) return std::memcmp(a, b, kIdSize) == 0;
  if (n >= 8 && n <= 16) {
    return ((load64(a) ^ load64(b)) | (load64(a + n - 8) ^ load64(b + n - 8))) == 0;
  }
  if (n >= 4 && n < 8) {
    return ((load32(a) ^ load32(b)) | (load32(a + n - 4) ^ load32(b + n - 4))) == 0;
  }
  return std::memcmp(a, b, n) == 0;
}

}  // namespace echo::table::detail
