// SPDX-License-Identifier: MIT
// Names the calling thread as top, ps -L and gdb show it ("echo-io:0", "echo-w:quotes"): Linux
// keeps 15 bytes, so a longer name is cut there.
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace echo::engine {

inline void name_this_thread(std::string_view name) noexcept {
  char buf[16] = {};
  name.copy(buf, sizeof buf - 1);
  pthread_setname_np(pthread_self(), buf);  // fails only for a name over 15 bytes
}

}  // namespace echo::engine
