// SPDX-License-Identifier: MIT
// The Node.js peers (bench/peers): finding `node` and the pinned packages, and running a peer
// script as a child process with a pipe on its stdin and one on its stdout (stderr is this
// process's). `bench --peers` (bench/peers.cc) and `referee --peers` (referee/real_clients.cc)
// use them; nothing of a peer is linked into the library.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo::cli {

// Node.js or the peers' packages are not installed: the message names the command that installs
// them.
struct PeersMissing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The `node` to run `dir`/`script` with: $ECHO_NODE when set, else the first `node` on PATH.
// Throws PeersMissing when the script, node or one of `packages` (dir/node_modules/<package>) is
// missing, naming scripts/setup.sh --peers and npm ci. `who` prefixes the messages ("peers").
std::string peer_node(const std::string& who, const std::string& dir, const std::string& script,
                      std::initializer_list<const char*> packages);

// A running child process (argv[0] is the program's path). The destructor closes its stdin (a
// peer script ends when its stdin does), waits up to 5 s and then kills it.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // One line to its stdin; false when it is gone.
  bool write_line(const std::string& line);
  // Its next stdout line (without the newline); nullopt when it ended or said nothing within
  // `limit`. One reading thread at a time.
  std::optional<std::string> read_line(std::chrono::milliseconds limit);
  // Closes its stdin (a peer script then ends). Idempotent.
  void close_stdin();
  // Closes its stdin, waits up to 5 s for it to end, then kills it. Idempotent.
  void finish();
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

}  // namespace echo::cli
