// SPDX-License-Identifier: MIT
// What journal_bench's files share (journal_bench.cc says what the bench measures): the run's
// server, the ids' minter, the journal's options, the closing table's figures, the placements,
// and the parts' entry points.
#pragma once

#include <benchmark/benchmark.h>
#include <echo/engine/journal.h>
#include <echo/harness/lane.h>
#include <echo/table/branded_id.h>
#include <echo/testing/local_server.h>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace journal_bench {

using namespace echo::harness;  // the measurement harness this bench is built on
using echo::engine::CoherenceMode;
using echo::engine::Engine;
using echo::engine::EngineOptions;
using echo::engine::Journal;
using echo::engine::JournalOptions;
using echo::table::BrandedId;
namespace fs = std::filesystem;

// The run's server (main starts it) and the ids' minter (journal_bench.cc).
extern echo::testing::LocalServer* g_server;
extern echo::table::Minter g_minter;  // one atomic cell: safe from every writer thread

inline BrandedId mint(std::string_view ns) { return g_minter.mint(ns).value(); }

constexpr const char* kDirPrefix = "echostore-journal-bench-";

// A journal in `dir` for this bench's node, synchronous FULL or NORMAL.
JournalOptions journal_options(const fs::path& dir, bool full);

// Figures for the closing table, by name; the last call of a benchmark wins (Google Benchmark's
// final call is the one it reports, with the most iterations). journal_bench.cc defines it.
extern std::map<std::string, double> g_figures;

// ---- placement ----

struct Placement {
  const char* name;
  int bench_cpu, server_cpu;  // the nodes' io threads and writers go with the bench thread
};
inline constexpr Placement kPlacements[] = {{"one-core", 0, 0}, {"spread", 0, 1}};

// The lanes (journal_bench_lanes.cc): the messages per lane (ECHO_BENCH_MESSAGES), and the
// remembered job lane against the bare one.
int messages();
void BM_JobLane_RememberedVsBare(benchmark::State& state, const Placement& p);
// The closing table of the goals' ratios (journal_bench_table.cc).
void print_table();

}  // namespace journal_bench
