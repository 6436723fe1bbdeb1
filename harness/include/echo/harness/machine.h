// SPDX-License-Identifier: MIT
// What a figure was measured on, for the headers the drill and `echostore bench` print above
// their figures: the compiler that built the measuring code and the CPU model.
#pragma once

#include <string>

namespace echo::harness {

// "g++ 12.2.0", "clang 14.0.6", or "unknown".
std::string compiler();

// The first "model name" of /proc/cpuinfo, or "unknown".
std::string cpu_model();

}  // namespace echo::harness
