// SPDX-License-Identifier: MIT
// Housekeeping::enter: name, then pin (housekeeping.h).
#include "housekeeping.h"

#include <echo/base/counter.h>

#include <pthread.h>

#include "thread_name.h"

namespace echo::engine {

Housekeeping::Housekeeping(const std::vector<int>& cpus) noexcept {
  CPU_ZERO(&set_);
  for (const int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) {
      CPU_SET(cpu, &set_);
      pinned_ = true;
    }
  }
}

void Housekeeping::enter(std::string_view name) const noexcept {
  name_this_thread(name);
  if (pinned_ && pthread_setaffinity_np(pthread_self(), sizeof set_, &set_) != 0) {
    base::shared_add(failures_);
  }
}

}  // namespace echo::engine
