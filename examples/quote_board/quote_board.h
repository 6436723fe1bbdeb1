// SPDX-License-Identifier: MIT
// A quote board that embeds the engine: one node reprices instruments (Quote structs keyed by
// symbols, one publish each on the broadcast-lane table `quotes`), another node's reader threads
// read them in place at L1 speed, and the run checks its own answer at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace echo::examples {

struct QuoteBoardOptions {
  std::string server;    // HOST:PORT; empty: start redis-server on loopback (LocalServer)
  int instruments = 16;  // 1..1000
  int readers = 3;       // 1..64 reader threads on the reading node
  int reprices = 2000;   // repricings by the writer thread (round robin over instruments)
};

struct QuoteBoardSummary {
  bool ok = false;               // every reader's last read of every instrument was final
  std::uint64_t reads = 0;       // reads by all readers
  std::uint64_t l1_hits = 0;     // of those, answered from L1
  std::uint64_t misses = 0;      // of those, answered a miss at once (try_read never waits)
  std::uint64_t mismatches = 0;  // final reads that were not the final price
  std::uint64_t publishes = 0;
  double writer_seconds = 0;  // the writer thread's repricing time
  double read_ns_p50 = 0;     // a reader's read() on an L1 hit, median
};

// The program's arguments (argv[1..argc-1]): [--server H:P] [--instruments N] [--readers N]
// [--reprices N], each number whole decimal digits within its range above and the server a strict
// HOST:PORT. nullopt for anything else (the program's usage error, exit 2); never throws.
std::optional<QuoteBoardOptions> parse_quote_board_args(int argc, const char* const* argv);

// Runs the board and prints a short summary to `out`. Throws std::invalid_argument for an option
// out of range, std::runtime_error when the setup fails (no redis-server, no connection) or the
// server is lost during the run (after every thread of the run has stopped); a wrong answer is
// ok == false, not a throw.
QuoteBoardSummary run_quote_board(const QuoteBoardOptions& options, std::ostream& out);

}  // namespace echo::examples
