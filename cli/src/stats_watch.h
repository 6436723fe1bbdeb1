// SPDX-License-Identifier: MIT
// `echostore stats --watch`: the one-screen view. Each refresh turns the snapshots every node
// published into one headline per table (rows, hit ratio, drops/s, ring occupancy, writer lag p99,
// connections up/down), the rates computed between this refresh and the last.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace echo::cli {

// One table's headline, summed over the nodes that published it.
struct TableHeadline {
  std::size_t nodes = 0;
  std::uint64_t rows = 0, hits = 0, misses = 0, dropped = 0, occupancy = 0, capacity = 0;
  std::uint64_t lag_p99_ns = 0;  // the upper bound of the bucket holding the 99th percentile
  std::uint64_t conns_up = 0, conns_down = 0;
};

// The headlines of `snapshots` (JSON as published; a value that does not parse is skipped: the
// caller already refused it by node), by table name.
std::map<std::string, TableHeadline> headlines(const std::vector<std::string>& snapshots);

// The screen: ANSI clear and home, a title line naming `where` and the period, then one row per
// table. Hit ratio and drops/s come from the difference with `before` over `elapsed` when the
// table was in it (else the hit ratio since start and drops/s as "-").
std::string render_screen(const std::string& where, std::chrono::milliseconds period,
                          const std::map<std::string, TableHeadline>& now,
                          const std::map<std::string, TableHeadline>* before,
                          std::chrono::duration<double> elapsed);

}  // namespace echo::cli
