// SPDX-License-Identifier: MIT
// What lanes_bench's files share (lanes_bench.cc says what the bench measures and how): the
// run's server, the thread placements, the samples' ends and the closing table's results, the
// nodes, and each benchmark's entry point.
#pragma once

#include <benchmark/benchmark.h>
#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/harness/hiredis.h>
#include <echo/harness/lane.h>
#include <echo/harness/placement.h>
#include <echo/harness/samples.h>
#include <echo/harness/stage.h>
#include <echo/io/uring_loop.h>
#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/l1_reader.h>
#include <echo/table/names.h>
#include <echo/testing/local_server.h>
#include <echo/testing/local_tls.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lanes_bench {

using namespace echo::harness;  // the measurement harness this bench is built on
using echo::engine::CoherenceMode;
using echo::engine::Engine;
using echo::engine::EngineOptions;
using echo::engine::TableSpec;
using echo::io::Backend;
using echo::table::BrandedId;

// The run's server, and its TLS listener's files (it listens on both ports: the TLS rows against
// the plain ones on one server, in one run).
extern echo::testing::LocalServer* g_server;
extern echo::testing::LocalTlsFiles* g_tls;

struct Placement {
  const char* name;
  int bench_cpu, server_cpu, receiver_cpu, sender_cpu;
};
inline constexpr Placement kPlacements[] = {
    {"one-core", 0, 0, 0, 0},
    {"spread", 0, 1, 0, 0},
    {"split", 0, 1, 1, 0},
};

// Pins the bench thread and the server as `p` says.
void place(const Placement& p);
// A plain hiredis client of the run's server.
Context connect();
// Send -> the writer's apply, and send -> the receiving io thread's decode (lanes_bench.cc).
double applied_us(const Engine& e, const char* table, std::chrono::steady_clock::time_point t0);
double decoded_us(const Engine& e, const char* table, std::chrono::steady_clock::time_point t0);

// Samples of one lane's messages, ended three ways.
struct Ends {
  Samples seen;     // send -> the row seen gone by the sending thread (after its send returned)
  Samples applied;  // send -> the writer's apply (its own clock, no observer in the way)
  Samples decoded;  // send -> the receiving io thread's decode
  void sort() {
    seen.sort();
    applied.sort();
    decoded.sort();
  }
};

// A timed message's end (lanes_bench.cc).
void keep(const Engine& e, const char* table, Clock::time_point t0, Samples* out, Samples& applied,
          benchmark::State* st, Samples* decoded = nullptr);
// The messages per latency benchmark (ECHO_BENCH_MESSAGES, default 10,000).
int messages();
// Medians by (benchmark, placement), for the closing table.
extern std::map<std::string, std::map<std::string, Samples>> g_results;
// The backend each results key's receiver ran on (auto resolves to one of the two).
extern std::map<std::string, Backend> g_backend_of;
// A benchmark's samples as its counters and into g_results.
void report(benchmark::State& state, const std::string& bench, const Placement& p, Samples s);
// The run's nodes (no heartbeat; the io loop on `backend`), and the same over TLS.
EngineOptions node(unsigned id, int cpu, Backend backend = Backend::kAuto);
EngineOptions tls_node(unsigned id, int cpu);
void start_or_throw(Engine& e);

// The benchmarks: the floor and the server hop (lanes_bench.cc), the lanes (lanes_bench_lanes.cc),
// L1 hit vs L2 GET (lanes_bench_reads.cc); the closing table (lanes_bench_table.cc).
void BM_Hiredis_PublishToMessage(benchmark::State& state, const Placement& p);
void BM_Hiredis_HandOffToDeliver(benchmark::State& state, const Placement& p);
void BM_BroadcastLane_PublishToDrop(benchmark::State& state, const Placement& p, bool via_engine,
                                    Backend backend);
void BM_BroadcastLane_TlsBroadcastToDrop(benchmark::State& state, const Placement& p);
void BM_JobLane_EnqueueToDrop(benchmark::State& state, const Placement& p);
void BM_Lanes_Alternating(benchmark::State& state, const Placement& p);
void BM_JobLane_Throughput(benchmark::State& state, const Placement& p, int consumers);
void BM_JobLane_ServerHop(benchmark::State& state, const Placement& p);
void BM_Engine_GetL1Hit(benchmark::State& state, const Placement& p);
void BM_Table_ReadL1Hit(benchmark::State& state, const Placement& p);
void BM_Table_MapVisitL1Hit(benchmark::State& state, const Placement& p);
void BM_Hiredis_Get(benchmark::State& state, const Placement& p);
void BM_Engine_GetL2(benchmark::State& state, const Placement& p);
void print_table();

}  // namespace lanes_bench
