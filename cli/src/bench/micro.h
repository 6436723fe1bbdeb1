// SPDX-License-Identifier: MIT
// What the in-process rows' files share: micro.cc (the ring and RESP3 rows, and run_micro, which
// runs them all in order) and micro_l1.cc (the L1 rows): the clock they time by, a row's making,
// and the L1 rows' entry.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace echo::cli::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A row of `unit`, higher or lower better, run under `placement` (micro.cc).
Row make_row(std::string id, std::string what, std::string ours, std::string base, std::string unit,
             bool higher_better, std::string placement);

// run_micro's L1 rows (micro_l1.cc), appended to `rows` in order: the L1 get against an
// unsynchronised flat map (writer idle) and a std::shared_mutex map (both churning), then the
// typed hit in place against a flat map's find (writer idle, then churning).
void run_micro_l1(const BenchConfig& c, Progress& progress, std::vector<Row>& rows);

}  // namespace echo::cli::bench
