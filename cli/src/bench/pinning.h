// SPDX-License-Identifier: MIT
// The placement a bench part changes for its own rows and puts back when it is done, so the rows
// after it keep theirs: the calling thread's CPU set, and the started redis-server's pinning
// (neighbour.cc, churn.cc).
#pragma once

#include <pthread.h>
#include <sched.h>
#include <sys/types.h>

#include <echo/harness/placement.h>

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

}  // namespace echo::cli::bench
