// SPDX-License-Identifier: MIT
// The two coherence lanes end to end against their floor, measured in the same run with the same
// thread placement: a plain hiredis subscriber's PUBLISH -> message latency (the floor), the
// broadcast lane's PUBLISH -> row gone from the receiving engine's L1, the job lane's enqueue ->
// row gone (the consumer parked, so the hand-off path), job-lane throughput with 1 and 2 consumer
// nodes, and an L1 hit against an L2 GET.
//
// Placements (threads -> CPU; the bench thread publishes and polls the map, spinning then
// yielding exactly as for the floor):
//   one-core: everything on CPU 0 (bench, subscriber / io threads, writers, redis-server);
//   spread:   redis-server on CPU 1; bench, subscriber / io threads and writers on CPU 0;
//   split:    bench thread and the sender's io thread on CPU 0; redis-server, the floor's
//             subscriber thread, the receiver's io thread and writer on CPU 1.
// Each latency benchmark is one message per iteration with manual timing (the refill between
// messages is not timed); p50/p99 are counters; the run ends with a table of medians and ratios.
// BM_JobLane_ServerHop measures the script's share alone (member_enqueue's hand-off round trip
// against a PUBLISH's, plain client), so the table can print the job lane's floor with this
// script: the broadcast lane plus that difference. BM_Hiredis_HandOffToDeliver is the job lane's
// own plain-client floor, as BM_Hiredis_PublishToMessage is the broadcast lane's: member_enqueue
// -> a parked BLMPOP's reply, no engine in it. BM_Lanes_Alternating runs both lanes message by
// message in one loop, ended at the sender, the writer's apply and the receiving io thread.
// The broadcast lane runs on the default io backend (auto: io_uring where the kernel allows it)
// and again with the receiver and sender on epoll (the suffix /epoll: what a container that
// refuses io_uring gets); the table prints epoll against io_uring, both measured in this run.
// ECHO_BENCH_MESSAGES overrides the message count (default 10,000; the job lane takes a fifth).
// The parts: lanes_bench.h (what they share), this file (the floor, the server hop, main),
// lanes_bench_lanes.cc (the lanes), lanes_bench_reads.cc (L1 hit vs L2 GET), lanes_bench_table.cc
// (the closing table).
#include "lanes_bench.h"

namespace lanes_bench {

echo::testing::LocalServer* g_server = nullptr;
// The server's TLS listener's files (it listens on both ports: the TLS rows against the plain
// ones on one server, in one run).
echo::testing::LocalTlsFiles* g_tls = nullptr;

// ---- placement ----

void place(const Placement& p) {
  pin_thread_or_warn(p.bench_cpu);
  pin_process_or_warn(g_server->pid(), p.server_cpu);  // redis-server's bio threads too
}

// ---- plain hiredis ----

Context connect() { return echo::harness::connect(g_server->host(), g_server->port()); }

// ---- measuring ----

// Send -> the writer's apply of the batch that dropped the row, on the writer's own clock
// (WriterStats::last_applied_ns, steady_clock). The bench thread that sent is also the observer:
// a blocking send (Engine::enqueue waits for its reply) returns after the row may already be gone,
// so "spin until the row is gone" ends at max(apply, the send's return); this ends at the apply.
double applied_us(const Engine& e, const char* table, std::chrono::steady_clock::time_point t0) {
  const std::int64_t at = echo::engine::internal::writer_of(e, table)->stats().last_applied_ns;
  return static_cast<double>(
             at -
             std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
         1e3;
}

// Send -> the receiving io thread's decode of the message that dropped the row
// (WriterStats::last_decoded_ns): the wire and the server; the rest up to the apply is the ring.
double decoded_us(const Engine& e, const char* table, std::chrono::steady_clock::time_point t0) {
  const std::int64_t at = echo::engine::internal::writer_of(e, table)->stats().last_decoded_ns;
  return static_cast<double>(
             at -
             std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
         1e3;
}

// A timed message's end, its row just seen gone: send -> gone into `out` and send -> the writer's
// apply into `applied` (neither while warming up: out null), and send -> gone as the iteration's
// manual time.
void keep(const Engine& e, const char* table, Clock::time_point t0, Samples* out, Samples& applied,
          benchmark::State* st, Samples* decoded) {
  const double us = since_us(t0);
  if (out != nullptr) {
    out->us.push_back(us);
    applied.us.push_back(applied_us(e, table, t0));
    if (decoded != nullptr) decoded->us.push_back(decoded_us(e, table, t0));
  }
  if (st != nullptr) st->SetIterationTime(us / 1e6);
}

int messages() {
  const char* env = std::getenv("ECHO_BENCH_MESSAGES");
  return env != nullptr ? std::max(100, std::atoi(env)) : 10000;
}

std::map<std::string, std::map<std::string, Samples>> g_results;

void report(benchmark::State& state, const std::string& bench, const Placement& p, Samples s) {
  s.sort();
  state.counters["p50_us"] = s.pct(0.5);
  state.counters["p99_us"] = s.pct(0.99);
  state.SetItemsProcessed(static_cast<std::int64_t>(s.us.size()));
  state.SetLabel(p.name);
  g_results[bench][p.name] = std::move(s);
}

// ---- engines ----

// The run's nodes: nothing on the wire but the measured traffic (no heartbeat); the io loop on
// `backend`.
EngineOptions node(unsigned id, int cpu, Backend backend) {
  EngineOptions o = echo::harness::quiet_node_options(g_server->host(), g_server->port(), id, cpu);
  o.io.backend = backend;
  return o;
}

// The same node over TLS (the server's TLS port, the run's CA).
EngineOptions tls_node(unsigned id, int cpu) {
  EngineOptions o =
      echo::harness::quiet_node_options(g_server->host(), g_server->tls_port(), id, cpu);
  o.tls.enabled = true;
  o.tls.ca_file = g_tls->ca_file();
  return o;
}

std::map<std::string, Backend> g_backend_of;

void start_or_throw(Engine& e) {
  if (auto ec = e.start()) throw std::runtime_error("lanes_bench: engine start: " + ec.message());
}

// ---- the floor ----

// A blocking hiredis subscriber on its own thread (pinned where the receiving engine's io thread
// goes) counts messages; the bench thread PUBLISHes 29 bytes and waits for the count to move.
void BM_Hiredis_PublishToMessage(benchmark::State& state, const Placement& p) {
  place(p);
  const std::string channel = "lanes_bench:floor";
  Context sub = connect(), pub = connect();
  Reply ok = command(sub.get(), "SUBSCRIBE %s", channel.c_str());
  std::atomic<long> heard{0};
  std::atomic<bool> quit{false};
  std::thread listener([&] {
    pin_thread_or_warn(p.receiver_cpu);
    while (!quit.load(std::memory_order_relaxed)) {
      void* raw = nullptr;
      if (redisGetReply(sub.get(), &raw) != REDIS_OK) return;
      Reply m(static_cast<redisReply*>(raw));
      if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
          std::string_view(m->element[0]->str) == "message") {
        heard.fetch_add(1, std::memory_order_release);  // pairs with the bench thread's acquire
      }
    }
  });
  const std::string payload(29, 'x');
  Samples s;
  long sent = 0;
  for (int i = 0; i < 200; ++i) {  // warm-up, unmeasured
    Reply r = command(pub.get(), "PUBLISH %s %b", channel.c_str(), payload.data(), payload.size());
    ++sent;
    spin_until([&] { return heard.load(std::memory_order_acquire) >= sent; });
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    Reply r = command(pub.get(), "PUBLISH %s %b", channel.c_str(), payload.data(), payload.size());
    ++sent;
    if (!r || !spin_until([&] { return heard.load(std::memory_order_acquire) >= sent; })) {
      state.SkipWithError("the floor lost a message");
      break;
    }
    const double us = since_us(t0);
    s.us.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  quit.store(true, std::memory_order_relaxed);
  command(pub.get(), "PUBLISH %s %b", channel.c_str(), payload.data(), payload.size());
  listener.join();
  report(state, "floor", p, std::move(s));
}

// usec_per_call of `command` in an INFO commandstats reply (0 when absent).
double usec_per_call(const std::string& info, const std::string& command) {
  const std::string head = "cmdstat_" + command + ":";
  const auto line = info.find(head);
  if (line == std::string::npos) return 0;
  const auto field = info.find("usec_per_call=", line);
  return field == std::string::npos ? 0 : std::atof(info.c_str() + field + 14);
}

// The job lane's floor the same way: a blocking hiredis client (pinned where the receiving
// engine's io thread goes) parked in BLMPOP on a member queue's deliver list, one hand-off credit
// listed; the bench thread sends member_enqueue (the script Engine::enqueue sends) and waits for
// the parked client to have the job. So the floor includes what the script costs the server and
// the unblocking of the parked client, and nothing of the engine.
void BM_Hiredis_HandOffToDeliver(benchmark::State& state, const Placement& p) {
  place(p);
  Context c = connect(), parked = connect();
  const echo::lua::Script* admit = echo::lua::find_script("member_enqueue");
  Reply loaded = command(c.get(), "SCRIPT LOAD %b", admit->source.data(), admit->source.size());
  const std::string mbase = echo::engine::JobLaneKeys::for_table("handoff").member_base("0"),
                    sha(admit->sha1);
  const std::string live = mbase + "live", credits = mbase + "parked", deliver = mbase + "deliver";
  Reply registered = command(c.get(), "SET %s 30000 PX 600000", live.c_str());
  echo::table::Minter minter(106);
  const std::string group = minter.mint("PRT").value().str();
  const auto frame =
      echo::table::make_frame(minter.mint("AST").value(), minter.mint("TXN").value());
  const auto payload = echo::table::view(frame);
  std::atomic<long> heard{0};
  std::atomic<bool> quit{false};
  std::thread listener([&] {
    pin_thread_or_warn(p.receiver_cpu);
    while (!quit.load(std::memory_order_relaxed)) {
      Reply r = command(parked.get(), "BLMPOP 1 1 %s LEFT COUNT 1", deliver.c_str());
      if (!r) return;
      if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        heard.fetch_add(1, std::memory_order_release);
    }
  });
  auto one = [&](Samples* out) {
    // Untimed: one credit listed, the last job's row and lease gone, the client parked again.
    const std::string id = minter.mint("JOB").value().str();
    Reply clear = command(c.get(), "DEL %s %sactive %sgactive", credits.c_str(), mbase.c_str(),
                          mbase.c_str());
    Reply credit = command(c.get(), "RPUSH %s 30000", credits.c_str());
    if (!spin_until([&] {
          Reply n = command(c.get(), "INFO clients");
          return n && n->type == REDIS_REPLY_STRING &&
                 std::string_view(n->str, n->len).find("blocked_clients:1\r") !=
                     std::string_view::npos;
        })) {
      return false;
    }
    const long before = heard.load(std::memory_order_acquire);
    const auto t0 = Clock::now();
    Reply r = command(c.get(), "EVALSHA %s 1 %s %s %s %b %s 30000", sha.c_str(), live.c_str(),
                      mbase.c_str(), id.c_str(), payload.data(), payload.size(), group.c_str());
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 2) return false;
    if (!spin_until([&] { return heard.load(std::memory_order_acquire) > before; })) return false;
    const double us = since_us(t0);
    if (out != nullptr) out->us.push_back(us);
    if (out != nullptr) state.SetIterationTime(us / 1e6);
    Reply gone = command(c.get(), "DEL %sjob:%s", mbase.c_str(), id.c_str());
    return true;
  };
  for (int i = 0; i < 100; ++i) one(nullptr);
  Reply reset = command(c.get(), "CONFIG RESETSTAT");
  Samples s;
  for (auto _ : state) {
    if (!one(&s)) {
      state.SkipWithError("the parked client did not get the hand-off");
      break;
    }
  }
  // The server's own time: the script, and the parked BLMPOP's service when the script's RPUSH
  // unblocked it (Redis counts that under blmpop).
  Reply stats = command(c.get(), "INFO commandstats");
  const std::string text =
      stats && stats->type == REDIS_REPLY_STRING ? std::string(stats->str, stats->len) : "";
  g_results["handoff_server_evalsha"][p.name].us.assign(1, usec_per_call(text, "evalsha"));
  g_results["handoff_server_blmpop"][p.name].us.assign(1, usec_per_call(text, "blmpop"));
  quit.store(true, std::memory_order_relaxed);
  listener.join();  // its BLMPOP times out within a second
  Reply left = command(c.get(), "DEL %s %s %s %sactive %sgactive", live.c_str(), credits.c_str(),
                       deliver.c_str(), mbase.c_str(), mbase.c_str());
  report(state, "job_floor", p, std::move(s));
}

// ---- the server hop ----

// The job lane's one extra cost on the server, alone: the round trip of member_enqueue handing a
// job to a parked member (its 7 calls inside one script) against a PUBLISH's round trip with one
// subscriber, on a plain hiredis client, alternating message by message in the same loop. The
// difference is what the script adds to the job lane over the broadcast lane; the closing table
// adds it to the broadcast lane's median as the job lane's floor with this script.

void BM_JobLane_ServerHop(benchmark::State& state, const Placement& p) {
  place(p);
  Context c = connect(), sub = connect();
  const std::string channel = "lanes_bench:hop";
  Reply subscribed = command(sub.get(), "SUBSCRIBE %s", channel.c_str());
  const echo::lua::Script* admit = echo::lua::find_script("member_enqueue");
  Reply l1 = command(c.get(), "SCRIPT LOAD %b", admit->source.data(), admit->source.size());
  const auto keys = echo::engine::JobLaneKeys::for_table("hop");
  const std::string mbase = keys.member_base("0"), sha(admit->sha1);
  Reply live = command(c.get(), "SET %slive 30000 PX 600000", mbase.c_str());
  echo::table::Minter minter(105);
  const std::string group = minter.mint("PRT").value().str();
  const auto frame =
      echo::table::make_frame(minter.mint("AST").value(), minter.mint("TXN").value());
  const auto payload = echo::table::view(frame);
  Samples publish, hop;
  // The server's own time per command (INFO commandstats, from here to the loop's end): the
  // script's share without the wakes and the scheduling that the round trips above include.
  Reply reset = command(c.get(), "CONFIG RESETSTAT");
  for (auto _ : state) {
    // Untimed: one hand-off credit listed (as member_park lists it: the member's lease) and no
    // earlier rows, so each call takes the hand-off.
    Reply clear = command(c.get(), "DEL %sparked %sdeliver %sactive %sgactive", mbase.c_str(),
                          mbase.c_str(), mbase.c_str(), mbase.c_str());
    Reply credit = command(c.get(), "RPUSH %sparked 30000", mbase.c_str());
    auto t0 = Clock::now();
    Reply pub = command(c.get(), "PUBLISH %s %b", channel.c_str(), payload.data(), payload.size());
    publish.us.push_back(since_us(t0));
    void* raw = nullptr;
    if (redisGetReply(sub.get(), &raw) == REDIS_OK) freeReplyObject(raw);
    const std::string id = minter.mint("JOB").value().str();
    t0 = Clock::now();
    Reply r = command(c.get(), "EVALSHA %s 1 %slive %s %s %b %s 30000", sha.c_str(), mbase.c_str(),
                      mbase.c_str(), id.c_str(), payload.data(), payload.size(), group.c_str());
    const double us = since_us(t0);
    hop.us.push_back(us);
    state.SetIterationTime(us / 1e6);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 2) {
      state.SkipWithError("member_enqueue did not hand the job off");
      break;
    }
    Reply gone = command(c.get(), "DEL %sjob:%s", mbase.c_str(), id.c_str());
  }
  Reply stats = command(c.get(), "INFO commandstats");
  const std::string text =
      stats && stats->type == REDIS_REPLY_STRING ? std::string(stats->str, stats->len) : "";
  g_results["server_evalsha"][p.name].us.assign(1, usec_per_call(text, "evalsha"));
  g_results["server_publish"][p.name].us.assign(1, usec_per_call(text, "publish"));
  Reply left = command(c.get(), "DEL %slive %sparked %sdeliver %sactive %sgactive", mbase.c_str(),
                       mbase.c_str(), mbase.c_str(), mbase.c_str(), mbase.c_str());
  publish.sort();
  state.counters["publish_p50_us"] = publish.pct(0.5);
  g_results["publish_rtt"][p.name] = std::move(publish);
  report(state, "fanout_rtt", p, std::move(hop));
}

}  // namespace lanes_bench

namespace lanes_bench {
namespace {

// The latency benchmarks (one message per iteration, manual time) at `p`, `n` messages each (the
// job lane and the server hop fewer).
void register_latencies(const Placement& p, int n) {
  const std::string tag = std::string("/") + p.name;
  benchmark::RegisterBenchmark(("BM_Hiredis_PublishToMessage" + tag).c_str(),
                               BM_Hiredis_PublishToMessage, p)
      ->Iterations(n)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_Hiredis_HandOffToDeliver" + tag).c_str(),
                               BM_Hiredis_HandOffToDeliver, p)
      ->Iterations(std::max(1000, n / 5))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  for (Backend b : {Backend::kAuto, Backend::kEpoll}) {
    const std::string on = b == Backend::kEpoll ? "/epoll" : "";
    benchmark::RegisterBenchmark(("BM_BroadcastLane_PublishToDrop" + tag + on).c_str(),
                                 BM_BroadcastLane_PublishToDrop, p, false, b)
        ->Iterations(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_BroadcastLane_BroadcastToDrop" + tag + on).c_str(),
                                 BM_BroadcastLane_PublishToDrop, p, true, b)
        ->Iterations(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark(("BM_BroadcastLane_TlsBroadcastToDrop" + tag).c_str(),
                               BM_BroadcastLane_TlsBroadcastToDrop, p)
      ->Iterations(n)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_JobLane_EnqueueToDrop" + tag).c_str(), BM_JobLane_EnqueueToDrop,
                               p)
      ->Iterations(std::max(2000, n / 5))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_JobLane_ServerHop" + tag).c_str(), BM_JobLane_ServerHop, p)
      ->Iterations(std::max(1000, n / 10))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_Lanes_Alternating" + tag).c_str(), BM_Lanes_Alternating, p)
      ->Iterations(std::max(2000, n / 5))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

void register_throughput(const Placement& p) {
  const std::string tag = std::string("/") + p.name;
  for (int consumers : {1, 2}) {
    benchmark::RegisterBenchmark(
        ("BM_JobLane_Throughput" + tag + "/consumers:" + std::to_string(consumers)).c_str(),
        BM_JobLane_Throughput, p, consumers)
        ->Iterations(3)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// L1 hit against L2 reads (lanes_bench_reads.cc).
void register_reads(const Placement& p) {
  const std::string tag = std::string("/") + p.name;
  benchmark::RegisterBenchmark(("BM_Engine_GetL1Hit" + tag).c_str(), BM_Engine_GetL1Hit, p)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("BM_Table_ReadL1Hit" + tag).c_str(), BM_Table_ReadL1Hit, p)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("BM_Table_MapVisitL1Hit" + tag).c_str(), BM_Table_MapVisitL1Hit, p)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("BM_Hiredis_Get" + tag).c_str(), BM_Hiredis_Get, p)->UseRealTime();
  benchmark::RegisterBenchmark(("BM_Engine_GetL2" + tag).c_str(), BM_Engine_GetL2, p)
      ->Iterations(1500)
      ->UseRealTime();
}

// The run's server listens on a TLS port too, with `tls`'s certificates.
echo::testing::LocalServerOptions server_options(const echo::testing::LocalTlsFiles& tls) {
  echo::testing::LocalServerOptions o;
  o.tls.cert_file = tls.server_cert();
  o.tls.key_file = tls.server_key();
  o.tls.ca_file = tls.ca_file();
  return o;
}

}  // namespace
}  // namespace lanes_bench

using namespace lanes_bench;  // NOLINT(google-build-using-namespace): main registers them all

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  echo::testing::LocalTlsFiles tls;
  g_tls = &tls;
  echo::testing::LocalServer server(server_options(tls));
  g_server = &server;
  const int n = messages();
  for (const Placement& p : kPlacements) register_latencies(p, n);
  for (const Placement& p : kPlacements) register_throughput(p);
  for (const Placement& p : {kPlacements[0], kPlacements[1]}) register_reads(p);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}
