// SPDX-License-Identifier: MIT
// A second OS process for the crash drills: this test binary re-executed with its own arguments
// (the test's main() dispatches on them), its stdin and stdout piped to the parent, one line per
// message. The destructor SIGKILLs and reaps a child still alive, so none outlives its test; the
// child also dies with the parent (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace echo::test {

// One line from `fd` (without the newline), or nullopt after `timeout` or at EOF.
std::optional<std::string> read_line(int fd, std::chrono::milliseconds timeout);
// `line` and a newline, all of it unless the pipe closed.
void write_line(int fd, const std::string& line);

// main() of a test binary that is also its own child process: `child(argc, argv)` when argv[1] is
// `flag`, otherwise the tests.
int child_or_tests_main(int argc, char** argv, const char* flag, int (*child)(int, char**));

class ChildProcess {
 public:
  // Runs /proc/self/exe with `args` as argv[1..]: only async-signal-safe calls between fork and
  // exec (the parent has many threads), every descriptor above 2 closed in the child (no socket or
  // ring of the parent's engines). nullptr if a pipe or the fork failed.
  static std::unique_ptr<ChildProcess> spawn(const std::vector<std::string>& args);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void send(const std::string& line) const { write_line(in_, line); }
  std::optional<std::string> receive(std::chrono::milliseconds timeout) const {
    return read_line(out_, timeout);
  }
  // SIGKILL (after a SIGCONT, in case it was paused) and reap; true iff it died of the SIGKILL.
  bool kill_now();
  // Waits for the child to exit by itself: its exit status, or -1 (killed by a signal, or not
  // waitable).
  int wait_exit();
  void pause() const;   // SIGSTOP
  void resume() const;  // SIGCONT
  pid_t pid() const noexcept { return pid_; }

 private:
  ChildProcess(pid_t pid, int in, int out) : pid_(pid), in_(in), out_(out) {}
  pid_t pid_;
  int in_, out_;
};

}  // namespace echo::test
