// SPDX-License-Identifier: MIT
#include "peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

extern char** environ;

namespace echo::cli {
namespace {

std::string setup_hint(const std::string& dir) {
  return "scripts/setup.sh --peers installs Node.js and npm (Debian's) and the pinned packages; "
         "or, with Node.js present: npm ci --prefix " +
         dir;
}

// The first `node` on PATH ("" if none).
std::string node_on_path() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = (end > at ? dirs.substr(at, end - at) : ".") + "/node";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return "";
}

}  // namespace

std::string peer_node(const std::string& who, const std::string& dir, const std::string& script,
                      std::initializer_list<const char*> packages) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir + "/" + script)) {
    throw PeersMissing(who + ": no " + dir + "/" + script +
                       " (the source tree's bench/peers; --peers-dir names another)");
  }
  std::string node;
  if (const char* given = std::getenv("ECHO_NODE"); given != nullptr && *given != '\0') {
    if (access(given, X_OK) != 0) {
      throw PeersMissing(who + ": $ECHO_NODE (" + given + ") is not an executable");
    }
    node = given;
  } else {
    node = node_on_path();
  }
  if (node.empty()) {
    throw PeersMissing(
        who + ": Node.js is not installed (no node on PATH, nor $ECHO_NODE): " + setup_hint(dir));
  }
  for (const char* package : packages) {
    if (!fs::exists(dir + "/node_modules/" + package + "/package.json")) {
      throw PeersMissing(who + ": " + dir + "/node_modules lacks " + package + ": " +
                         setup_hint(dir));
    }
  }
  // A peer that dies mid-request must not end this process with SIGPIPE on the next write.
  signal(SIGPIPE, SIG_IGN);
  return node;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe to a child process");
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    throw std::runtime_error("cannot make a pipe to a child process");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (auto& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  const int rc = posix_spawn(&pid_, args.at(0).c_str(), &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  to_ = in[1];
  from_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    close(to_);
    close(from_);
    to_ = from_ = -1;
    throw std::runtime_error("cannot start " + args[0] + " (" + std::strerror(rc) + ")");
  }
}

ChildProcess::~ChildProcess() { finish(); }

bool ChildProcess::write_line(const std::string& line) {
  const std::string bytes = line + '\n';
  for (std::size_t at = 0; at < bytes.size();) {
    const ssize_t n = write(to_, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0 || from_ < 0) return std::nullopt;
    pollfd p{from_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(from_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void ChildProcess::close_stdin() {
  if (to_ >= 0) close(to_);
  to_ = -1;
}

void ChildProcess::finish() {
  close_stdin();
  if (pid_ > 0) {
    bool ended = false;
    for (int i = 0; i < 500 && !ended; ++i) {  // 5 s to close its connections
      ended = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!ended) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  if (from_ >= 0) close(from_);
  from_ = -1;
}

}  // namespace echo::cli
