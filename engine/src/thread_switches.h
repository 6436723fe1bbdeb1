// SPDX-License-Identifier: MIT
// How often the kernel put one of the engine's threads to sleep and took it off its CPU: the
// wakes and preemptions a neighbour on the same CPU pays for, as /proc counts them. Read by
// stats, never on a hot path.
#pragma once

#include <cstdint>

namespace echo::engine {

struct ThreadSwitches {
  std::uint64_t voluntary = 0;    // the thread slept (futex, poll, io_uring wait): one wake each
  std::uint64_t involuntary = 0;  // the scheduler took its CPU away
};

// The calling thread's kernel id (gettid). Any thread; one syscall.
int current_tid() noexcept;

// The counts of thread `tid` of this process; zeros when it is gone or /proc is not mounted.
// Any thread; opens and reads one small file.
ThreadSwitches thread_switches(int tid) noexcept;

}  // namespace echo::engine
