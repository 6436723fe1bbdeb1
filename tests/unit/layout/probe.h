// SPDX-License-Identifier: MIT
// One class's size and alignment as a translation unit saw it (layout/probe.cc).
#pragma once

#include <cstddef>
#include <vector>

namespace echo::test {

struct Layout {
  const char* name;
  std::size_t size, align;
};

std::vector<Layout> layouts_with_ndebug();     // probe.cc compiled with -DNDEBUG
std::vector<Layout> layouts_without_ndebug();  // probe.cc compiled with -UNDEBUG

}  // namespace echo::test
