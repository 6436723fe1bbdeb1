// SPDX-License-Identifier: MIT
// How an io thread's loop runs (uring_loop.h): its backend, its wait, its pinning. Apart from the
// loop itself so that a program declaring options (EngineOptions::io) need not see the loop.
#pragma once

#include <cstdint>
#include <string_view>

namespace echo::io {

enum class WaitMode : std::uint8_t {
  kBlock,     // sleep in io_uring_enter until a completion arrives (default)
  kBusyPoll,  // never sleep: spin on the completion queue (for a pinned, dedicated core)
};

// Which kernel interface drives the loop.
enum class Backend : std::uint8_t {
  kAuto,   // io_uring; epoll when the kernel refuses io_uring_setup with EPERM or ENOSYS (a
           // container's seccomp profile, kernel.io_uring_disabled, a kernel without it)
  kUring,  // io_uring or nothing: a refusal throws std::system_error
  kEpoll,  // epoll readiness plus non-blocking syscalls; never tries io_uring
};
// "auto", "uring", "epoll".
std::string_view to_string(Backend b) noexcept;

struct LoopOptions {
  unsigned entries = 256;  // io_uring: SQ size; epoll: events per epoll_wait; 8 .. 32768
  WaitMode wait = WaitMode::kBlock;
  Backend backend = Backend::kAuto;  // default auto: io_uring, falling back to epoll (see Backend)
  int cpu = -1;                      // pin the loop thread to this CPU; -1 = no pinning
  // IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN: completions run as task work only when this
  // thread asks for events, which saves a wakeup per completion. The price: every run() /
  // run_until() must be on the one thread that first ran the loop (a second thread aborts), so a
  // Connection must be destroyed while that thread runs the loop, or on that thread. io_uring
  // only: the epoll backend ignores it.
  bool single_thread_taskrun = false;
};

}  // namespace echo::io
