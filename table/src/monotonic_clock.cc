// SPDX-License-Identifier: MIT
// The two monotonic millisecond clocks an L1 map can run on (L1Config.clock): exact
// steady_clock, and CLOCK_MONOTONIC_COARSE for hosts where reading the TSC costs more than a hit.
#include <echo/table/l1_map.h>

#include <chrono>

#if defined(__linux__)
#include <time.h>
#endif

namespace echo::table {

std::int64_t steady_clock_ms() noexcept {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::int64_t coarse_monotonic_ms() noexcept {
#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // vDSO: no syscall
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
#else
  return steady_clock_ms();
#endif
}

}  // namespace echo::table
