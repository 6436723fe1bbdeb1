// SPDX-License-Identifier: MIT
// pin_task, pin_thread and pin_process over sched_setaffinity.
#include <echo/harness/placement.h>

#include <errno.h>  // program_invocation_short_name
#include <sched.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

namespace echo::harness {

bool pin_task(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu < 0) {
    for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) CPU_SET(c, &set);
  } else {
    CPU_SET(cpu, &set);
  }
  return sched_setaffinity(tid, sizeof set, &set) == 0;
}

bool pin_thread(int cpu) { return pin_task(0, cpu); }

bool pin_process(pid_t pid, int cpu) {
  std::error_code ec;
  bool ok = true;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    ok = pin_task(static_cast<pid_t>(std::stoi(task.path().filename().string())), cpu) && ok;
  }
  return ok && !ec;
}

void pin_thread_or_warn(int cpu) {
  if (!pin_thread(cpu)) {
    std::fprintf(stderr, "%s: cannot pin a thread to CPU %d\n", program_invocation_short_name, cpu);
  }
}

void pin_process_or_warn(pid_t pid, int cpu) {
  if (!pin_process(pid, cpu)) {
    std::fprintf(stderr, "%s: cannot pin every thread of pid %d to CPU %d\n",
                 program_invocation_short_name, static_cast<int>(pid), cpu);
  }
}

}  // namespace echo::harness
