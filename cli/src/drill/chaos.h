// SPDX-License-Identifier: MIT
// `echostore drill --chaos SECONDS`: three engine nodes in this process, each behind its own fault
// proxy toward one server, writing and reading a set of names while a scheduler injects random
// network faults (harness/fault_proxy.h) and server-side ones (CLIENT KILL, CLIENT PAUSE WRITE,
// DEBUG SLEEP), heals each, and checks that every node converges to L2. Every read is judged by the
// referee's oracle; the job lane runs with a journal so that "journal intents lost" is a counted
// figure. Seedable; exits non-zero when a goal fails.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace echo::cli::chaos {

struct ChaosConfig {
  int seconds = 60;        // of faults, writes and reads: 10 .. 86,400
  std::uint64_t seed = 0;  // 0: drawn from std::random_device (printed either way, for --seed)
  std::string server;      // HOST:PORT; empty: the drill starts its own redis-server
};

// Runs the chaos drill, printing its progress and report to `out`. The process's exit code:
// 0 every goal held, 1 a goal failed or the run could not be staged, 2 bad arguments.
int drill_chaos(const ChaosConfig& config, std::ostream& out);

}  // namespace echo::cli::chaos
