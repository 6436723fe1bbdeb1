// SPDX-License-Identifier: MIT
// Where an engine's housekeeping threads run (EngineOptions::housekeeping_cpus): the node lease,
// the loaders, the relay, the job sender and the stats publisher, each named and pinned to one
// CPU set as it starts, so that a service can keep them off the CPUs its own threads own.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

namespace echo::engine {

class Housekeeping {
 public:
  // `cpus` empty: the threads run where the scheduler puts them. Each CPU must lie in
  // 0..CPU_SETSIZE-1 (the engine's validation says so before this is built).
  explicit Housekeeping(const std::vector<int>& cpus) noexcept;

  // On the housekeeping thread itself, first thing: names it (`name`, as top and ps -L show it)
  // and pins it to the set. A refusal (a CPU outside the process's cpuset) is counted in
  // pin_failures(); the thread then runs unpinned. Never throws.
  void enter(std::string_view name) const noexcept;

  std::uint64_t pin_failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  cpu_set_t set_{};
  bool pinned_ = false;
  mutable std::atomic<std::uint64_t> failures_{0};
};

}  // namespace echo::engine
