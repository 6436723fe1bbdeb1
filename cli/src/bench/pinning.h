// SPDX-License-Identifier: MIT
// The placement a bench part changes for its own rows and puts back when it is done, so the rows
// after it keep theirs: the calling thread's CPU set, and the started redis-server's pinning
// (neighbour.cc, churn.cc), and the CPUs a part may deal its threads on (churn.cc, lanes.cc).
#pragma once

#include <pthread.h>
#include <sched.h>
#include <sys/types.h>

#include <echo/harness/placement.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace echo::cli::bench {

// The calling thread's CPU set, put back on scope exit.
class ThreadMaskGuard {
 public:
  ThreadMaskGuard() { saved_ = pthread_getaffinity_np(pthread_self(), sizeof mask_, &mask_) == 0; }
  ~ThreadMaskGuard() {
    if (saved_) (void)pthread_setaffinity_np(pthread_self(), sizeof mask_, &mask_);
  }
  ThreadMaskGuard(const ThreadMaskGuard&) = delete;
  ThreadMaskGuard& operator=(const ThreadMaskGuard&) = delete;

 private:
  cpu_set_t mask_{};
  bool saved_ = false;
};

// The started server back where --placement put it (or unpinned) once the part is done; pid 0
// (a given server, or nothing moved) leaves it alone.
class ServerPinGuard {
 public:
  ServerPinGuard(pid_t pid, int restore) : pid_(pid), restore_(restore) {}
  ~ServerPinGuard() {
    if (pid_ > 0) (void)harness::pin_process(pid_, restore_);
  }
  ServerPinGuard(const ServerPinGuard&) = delete;
  ServerPinGuard& operator=(const ServerPinGuard&) = delete;

 private:
  pid_t pid_;
  int restore_;
};

// Pins the calling thread to `cpu` (cpu < 0: leaves it where it is). Throws naming the CPU when
// the kernel refuses: a row measured elsewhere than its placement says would mislead.
inline void pin_to(int cpu, const std::string& who) {
  if (cpu >= 0 && !harness::pin_thread(cpu)) {
    throw std::runtime_error("cannot pin " + who + " to CPU " + std::to_string(cpu));
  }
}

// The CPUs this process may use: the bench thread's set, widened first when --placement pinned
// it (spread pins it to CPU 0; the kernel keeps the widened set within the process's cpuset) and
// put back after.
inline std::vector<int> allowed_cpus(const BenchConfig& c) {
  const ThreadMaskGuard back;
  if (c.process_cpu >= 0) (void)harness::pin_thread(-1);
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

}  // namespace echo::cli::bench
