// SPDX-License-Identifier: MIT
#include "support/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace echo::test {

int child_or_tests_main(int argc, char** argv, const char* flag, int (*child)(int, char**)) {
  if (argc >= 2 && std::strcmp(argv[1], flag) == 0) return child(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

std::optional<std::string> read_line(int fd, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  std::string line;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char ch;
    const ssize_t n = ::read(fd, &ch, 1);
    if (n <= 0) return std::nullopt;
    if (ch == '\n') return line;
    line.push_back(ch);
  }
}

void write_line(int fd, const std::string& line) {
  const std::string out = line + "\n";
  std::size_t off = 0;
  while (off < out.size()) {
    const ssize_t n = ::write(fd, out.data() + off, out.size() - off);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

std::unique_ptr<ChildProcess> ChildProcess::spawn(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return nullptr;
  if (::pipe2(from, O_CLOEXEC) != 0) {
    ::close(to[0]);
    ::close(to[1]);
    return nullptr;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: this process has one thread of many.
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  if (pid < 0) {
    ::close(to[1]);
    ::close(from[0]);
    return nullptr;
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, to[1], from[0]));
}

ChildProcess::~ChildProcess() {
  kill_now();
  ::close(in_);
  ::close(out_);
}

bool ChildProcess::kill_now() {
  if (pid_ <= 0) return false;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  int status = 0;
  const bool reaped = ::waitpid(pid_, &status, 0) == pid_;
  pid_ = -1;
  return reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

int ChildProcess::wait_exit() {
  if (pid_ <= 0) return -1;
  int status = 0;
  const bool reaped = ::waitpid(pid_, &status, 0) == pid_;
  pid_ = -1;
  return reaped && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ChildProcess::pause() const {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void ChildProcess::resume() const {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

}  // namespace echo::test
