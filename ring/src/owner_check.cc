// SPDX-License-Identifier: MIT
// The cold half of the debug single-producer / single-consumer check: say which rule broke,
// then abort (a second producer on an SPSC ring corrupts it silently; stopping loudly is kinder).
#include <echo/ring/detail/owner_check.h>

#include <cstdio>
#include <cstdlib>

namespace echo::ring::detail {

void owner_violation(const char* what) noexcept {
  std::fprintf(stderr,
               "echo::ring: %s called from a second thread; an SPSC ring has exactly one "
               "producer thread and one consumer thread (give the new thread its own ring)\n",
               what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace echo::ring::detail
