// SPDX-License-Identifier: MIT
// Thread placement for the measurements: which CPU the measuring thread, a server's threads and
// the engines' threads run on is part of every latency figure (a wake across cores costs ~20 us
// on a small VM), so the benches and `echostore bench` pin them with these. Each returns false
// when the kernel refuses (the _or_warn forms say so themselves).
#pragma once

#include <sys/types.h>

namespace echo::harness {

// Pins one task (0: the calling thread) to `cpu`; cpu < 0 lets it run on every CPU again.
// Threads the task starts afterwards inherit the set.
bool pin_task(pid_t tid, int cpu);

// pin_task(0, cpu): the calling thread.
bool pin_thread(int cpu);

// Every thread of process `pid` (redis-server runs a few bio threads beside its main one),
// through /proc/<pid>/task. False when one thread or the listing failed.
bool pin_process(pid_t pid, int cpu);

// The benches' form: pin_thread / pin_process, and when the kernel refuses, one line on stderr
// ("lanes_bench: cannot pin a thread to CPU 1") and the run goes on where it is.
void pin_thread_or_warn(int cpu);
void pin_process_or_warn(pid_t pid, int cpu);

}  // namespace echo::harness
