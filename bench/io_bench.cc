// SPDX-License-Identifier: MIT
// The connector's cost against its floor, measured in the same run (docs/architecture.md,
// "Measuring"): a PING round trip through our Connection with the loop on the benchmark thread (so
// the placement equals the baseline's) against a plain blocking hiredis client: *_BlockingRun is
// the production wait (run(), left by stop() from the reply callback), *_Blocking the
// deadline-bounded run_until(), *_BusyPoll the spinning loop, *DeferTaskrun the
// single_thread_taskrun knob. Then pipelined PING throughput at depth 1, 16 and 256 against
// hiredis's append/get pipeline, and a cross-thread call_blocking for reference. Placement: the
// benchmark thread is pinned to CPU 0; redis-server (started here with echo::testing::LocalServer)
// to CPU 1, or CPU 0 with ECHO_BENCH_SAME_CORE=1. On a shared machine run it as `chrt -f 20
// io_bench` (the server inherits the policy); never busy-poll on the server's core under SCHED_FIFO
// (the spinner would starve the server).
#include <hiredis/hiredis.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <echo/harness/hiredis.h>
#include <echo/harness/placement.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <echo/testing/local_server.h>

namespace {

using namespace std::chrono_literals;
using echo::io::Connection;
using echo::io::ConnectionOptions;
using echo::io::ConnStatus;
using echo::io::LoopOptions;
using echo::io::Resp3Value;
using echo::io::UringLoop;
using echo::io::WaitMode;

echo::testing::LocalServer* g_server = nullptr;

// One task (0: this thread); the server's main thread only, as its bio threads stay off the path.
void pin(pid_t pid, int cpu) {
  if (!echo::harness::pin_task(pid, cpu)) {
    std::fprintf(stderr, "io_bench: cannot pin pid %d to CPU %d\n", static_cast<int>(pid), cpu);
  }
}

ConnectionOptions bench_options() {
  ConnectionOptions o;
  o.host = g_server->host();
  o.port = g_server->port();
  o.heartbeat = 0ms;  // nothing but the measured traffic on the socket
  return o;
}

echo::harness::Context hiredis_client() {
  return echo::harness::connect(g_server->host(), g_server->port());
}

// Starts `conn`, running `loop` on this thread until it is ready; false (the benchmark skipped)
// when it does not boot within 5 s.
bool booted(UringLoop& loop, Connection& conn, benchmark::State& state) {
  conn.start();
  if (loop.run_until([&] { return conn.status() == ConnStatus::kReady; }, 5000ms)) return true;
  state.SkipWithError("connection did not boot");
  return false;
}

// Baseline: one blocking PING through hiredis (write + read on this thread).
void BM_Hiredis_PingRoundTrip(benchmark::State& state) {
  auto c = hiredis_client();
  for (auto _ : state) {
    auto* r = static_cast<redisReply*>(redisCommand(c.get(), "PING"));
    if (r == nullptr || r->type != REDIS_REPLY_STATUS) state.SkipWithError("PING failed");
    freeReplyObject(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Hiredis_PingRoundTrip)->UseRealTime();

// Ours: the loop runs on the benchmark thread, so the placement equals hiredis's.
void ping_round_trip(benchmark::State& state, LoopOptions options) {
  UringLoop loop(options);
  std::uint64_t errors = 0;
  {
    Connection conn(loop, bench_options());
    if (!booted(loop, conn, state)) return;
    bool done = false;
    auto on_reply = [&](std::error_code ec, const Resp3Value&) {
      errors += ec ? 1 : 0;
      done = true;
    };
    const auto until_done = [&] { return done; };
    for (auto _ : state) {
      done = false;
      if (conn.call({"PING"}, on_reply)) ++errors;
      loop.run_until(until_done, 5000ms);
    }
  }
  if (errors != 0) state.SkipWithError("PING failed");
  state.SetItemsProcessed(state.iterations());
}

// The production wait: run() (no deadline), left by stop() from the reply callback.
void ping_round_trip_run(benchmark::State& state, LoopOptions options) {
  UringLoop loop(options);
  std::uint64_t errors = 0;
  {
    Connection conn(loop, bench_options());
    if (!booted(loop, conn, state)) return;
    auto on_reply = [&](std::error_code ec, const Resp3Value&) {
      errors += ec ? 1 : 0;
      loop.stop();
    };
    for (auto _ : state) {
      if (conn.call({"PING"}, on_reply)) ++errors;
      loop.run();
    }
  }
  if (errors != 0) state.SkipWithError("PING failed");
  state.SetItemsProcessed(state.iterations());
}
void BM_Connection_PingRoundTrip_Blocking(benchmark::State& state) {
  ping_round_trip(state, LoopOptions{.wait = WaitMode::kBlock});
}
void BM_Connection_PingRoundTrip_BusyPoll(benchmark::State& state) {
  ping_round_trip(state, LoopOptions{.wait = WaitMode::kBusyPoll});
}
// The same with IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (LoopOptions::single_thread_taskrun).
void BM_Connection_PingRoundTrip_BlockingDeferTaskrun(benchmark::State& state) {
  ping_round_trip(state, LoopOptions{.wait = WaitMode::kBlock, .single_thread_taskrun = true});
}
void BM_Connection_PingRoundTrip_BusyPollDeferTaskrun(benchmark::State& state) {
  ping_round_trip(state, LoopOptions{.wait = WaitMode::kBusyPoll, .single_thread_taskrun = true});
}
void BM_Connection_PingRoundTrip_BlockingRun(benchmark::State& state) {
  ping_round_trip_run(state, LoopOptions{.wait = WaitMode::kBlock});
}
void BM_Connection_PingRoundTrip_BlockingRunDeferTaskrun(benchmark::State& state) {
  ping_round_trip_run(state, LoopOptions{.wait = WaitMode::kBlock, .single_thread_taskrun = true});
}
BENCHMARK(BM_Connection_PingRoundTrip_Blocking)->UseRealTime();
BENCHMARK(BM_Connection_PingRoundTrip_BlockingRun)->UseRealTime();
BENCHMARK(BM_Connection_PingRoundTrip_BlockingRunDeferTaskrun)->UseRealTime();
BENCHMARK(BM_Connection_PingRoundTrip_BusyPoll)->UseRealTime();
BENCHMARK(BM_Connection_PingRoundTrip_BlockingDeferTaskrun)->UseRealTime();
BENCHMARK(BM_Connection_PingRoundTrip_BusyPollDeferTaskrun)->UseRealTime();

// For reference: a caller on another thread hands the call to a loop thread and waits.
void BM_Connection_PingCallBlocking_CrossThread(benchmark::State& state) {
  echo::io::LoopThread lt(LoopOptions{.cpu = 0});
  Connection conn(lt.loop(), bench_options());
  conn.start();
  if (conn.wait_ready(5000ms)) {
    state.SkipWithError("connection did not boot");
    return;
  }
  for (auto _ : state) {
    auto r = conn.call_blocking({"PING"});
    if (r.ec) state.SkipWithError("PING failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Connection_PingCallBlocking_CrossThread)->UseRealTime();

// Baseline: hiredis pipelining `depth` PINGs (append all, then read all).
void BM_Hiredis_PipelinedPing(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  auto c = hiredis_client();
  for (auto _ : state) {
    for (int i = 0; i < depth; ++i) redisAppendCommand(c.get(), "PING");
    for (int i = 0; i < depth; ++i) {
      void* r = nullptr;
      if (redisGetReply(c.get(), &r) != REDIS_OK) state.SkipWithError("PING failed");
      freeReplyObject(r);
    }
  }
  state.SetItemsProcessed(state.iterations() * depth);
}
BENCHMARK(BM_Hiredis_PipelinedPing)->Arg(1)->Arg(16)->Arg(256)->UseRealTime();

// Ours: `depth` PINGs issued in one pass (one send), then the loop runs until all replied.
void BM_Connection_PipelinedPing(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  UringLoop loop;
  std::uint64_t errors = 0;
  {
    Connection conn(loop, bench_options());
    if (!booted(loop, conn, state)) return;
    int left = 0;
    auto on_reply = [&](std::error_code ec, const Resp3Value&) {
      errors += ec ? 1 : 0;
      --left;
    };
    const auto all_back = [&] { return left == 0; };
    for (auto _ : state) {
      left = depth;
      for (int i = 0; i < depth; ++i) {
        if (conn.call({"PING"}, on_reply)) {
          ++errors;
          --left;
        }
      }
      loop.run_until(all_back, 5000ms);
    }
  }
  if (errors != 0) state.SkipWithError("PING failed");
  state.SetItemsProcessed(state.iterations() * depth);
}
BENCHMARK(BM_Connection_PipelinedPing)->Arg(1)->Arg(16)->Arg(256)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  const bool same_core = std::getenv("ECHO_BENCH_SAME_CORE") != nullptr &&
                         std::string(std::getenv("ECHO_BENCH_SAME_CORE")) == "1";
  echo::testing::LocalServer server;
  g_server = &server;
  pin(0, 0);
  pin(server.pid(), same_core ? 0 : 1);
  std::printf("io_bench: redis-server %s on %s:%d; benchmark thread on CPU 0, server on CPU %d\n",
              server.version().c_str(), server.host().c_str(), server.port(), same_core ? 0 : 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
