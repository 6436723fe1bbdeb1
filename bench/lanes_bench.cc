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

namespace {

using namespace echo::harness;  // the measurement harness this bench is built on
using echo::engine::CoherenceMode;
using echo::engine::Engine;
using echo::engine::EngineOptions;
using echo::engine::TableSpec;
using echo::io::Backend;
using echo::table::BrandedId;

echo::testing::LocalServer* g_server = nullptr;
// The server's TLS listener's files (it listens on both ports: the TLS rows against the plain
// ones on one server, in one run).
echo::testing::LocalTlsFiles* g_tls = nullptr;

// ---- placement ----

struct Placement {
  const char* name;
  int bench_cpu, server_cpu, receiver_cpu, sender_cpu;
};
constexpr Placement kPlacements[] = {
    {"one-core", 0, 0, 0, 0},
    {"spread", 0, 1, 0, 0},
    {"split", 0, 1, 1, 0},
};

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

// A timed message's end, its row just seen gone: send -> gone into `out` and send -> the writer's
// apply into `applied` (neither while warming up: out null), and send -> gone as the iteration's
// manual time.
void keep(const Engine& e, const char* table, Clock::time_point t0, Samples* out, Samples& applied,
          benchmark::State* st, Samples* decoded = nullptr) {
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

// Medians by (benchmark, placement), for the closing table.
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
EngineOptions node(unsigned id, int cpu, Backend backend = Backend::kAuto) {
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

// The backend each results key's receiver ran on (auto resolves to one of the two).
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

// ---- the broadcast lane ----

// Receiver R holds one row of `table`; each message is a newer invalidation, ended when R's L1 no
// longer holds the row; then R re-puts it (untimed). `via_engine`: the sender is
// Engine::broadcast on node S (one hop through S's io thread) instead of a plain hiredis PUBLISH.
// `backend`: both nodes' io loops.
class BroadcastProbe {
 public:
  // `backend`: both nodes' io loops; `tls`: both speak TLS to the server's TLS port (the sender
  // must be the engine then; TLS nodes run on the default backend).
  BroadcastProbe(const Placement& p, const char* table, unsigned id, bool via_engine,
                 Backend backend = Backend::kAuto, bool tls = false)
      : table_(table),
        via_engine_(via_engine),
        r_(tls ? tls_node(id, p.receiver_cpu) : node(id, p.receiver_cpu, backend),
           {lane_table(table, CoherenceMode::kBroadcast, p.receiver_cpu)}),
        s_(tls ? tls_node(id + 1, p.sender_cpu) : node(id + 1, p.sender_cpu, backend),
           {lane_table(table, CoherenceMode::kNone, p.sender_cpu)}),
        pub_(connect()),
        channel_(echo::table::coherence_channel(table).value()),
        minter_(100 + id),
        name_(minter_.mint("AST").value()) {
    start_or_throw(r_);
    start_or_throw(s_);
  }

  // One message: send -> gone into `out` and send -> the writer's apply into `applied` (both
  // skipped when out is null: warm-up). False when it was not applied.
  bool one(Samples* out, Samples& applied, benchmark::State* st, Samples* decoded = nullptr) {
    if (!r_.put(table_, name_.view(), "px=105.00", minter_.mint("TXN").value())) return false;
    const BrandedId v = minter_.mint("TXN").value();
    const auto t0 = Clock::now();
    if (!send(v) || !spin_until([&] { return !cached(r_, table_, name_); })) return false;
    keep(r_, table_, t0, out, applied, st, decoded);
    return true;
  }
  std::uint64_t dropped() const { return r_.stats().tables.at(0).rings.at(0).dropped; }
  Backend backend() const { return r_.stats().io_backend; }

 private:
  bool send(const BrandedId& v) {
    if (via_engine_) {
      auto heard = s_.broadcast(table_, name_.view(), v);
      return heard.has_value() && *heard == 1;
    }
    const auto frame = echo::table::make_frame(name_, v);
    const auto bytes = echo::table::view(frame);
    Reply rep = command(pub_.get(), "PUBLISH %b %b", channel_.data(), channel_.size(), bytes.data(),
                        bytes.size());
    return rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
  }

  const char* table_;
  bool via_engine_;
  Engine r_, s_;
  Context pub_;
  std::string channel_;
  echo::table::Minter minter_;
  BrandedId name_;
};

void BM_BroadcastLane_PublishToDrop(benchmark::State& state, const Placement& p, bool via_engine,
                                    Backend backend) {
  place(p);
  BroadcastProbe probe(p, "board", 11, via_engine, backend);
  Samples applied;  // the same messages, ended at the writer's apply (no observer in the way)
  for (int i = 0; i < 200; ++i) probe.one(nullptr, applied, nullptr);
  const std::uint64_t dropped = probe.dropped();
  Samples samples;
  for (auto _ : state) {
    if (!probe.one(&samples, applied, &state)) {
      state.SkipWithError("a broadcast was not applied");
      break;
    }
  }
  state.counters["ring_dropped"] = static_cast<double>(probe.dropped() - dropped);
  applied.sort();
  // The default backend keeps the keys the other rows compare against; epoll gets its own.
  const std::string key = std::string(via_engine ? "broadcast_engine" : "broadcast") +
                          (backend == Backend::kEpoll ? "_epoll" : "");
  g_backend_of[key] = probe.backend();
  g_results[key + "_applied"][p.name] = std::move(applied);
  report(state, key, p, std::move(samples));
}

// The same as BroadcastToDrop with both nodes over TLS: Engine::broadcast on S -> TLS record ->
// server -> TLS record -> R's io thread decrypts -> ring -> row gone. Its baseline is
// BM_BroadcastLane_BroadcastToDrop, plain, same server, same run.
void BM_BroadcastLane_TlsBroadcastToDrop(benchmark::State& state, const Placement& p) {
  place(p);
  BroadcastProbe probe(p, "tlsboard", 31, /*via_engine=*/true, Backend::kAuto, /*tls=*/true);
  Samples applied;
  for (int i = 0; i < 200; ++i) probe.one(nullptr, applied, nullptr);
  Samples samples;
  for (auto _ : state) {
    if (!probe.one(&samples, applied, &state)) {
      state.SkipWithError("a broadcast over TLS was not applied");
      break;
    }
  }
  report(state, "broadcast_engine_tls", p, std::move(samples));
}

// ---- the job lane ----

// Receiver J consumes `table` from its member queue; sender S enqueues. Between messages
// (untimed) J's consumer has completed the previous job and parked again, and J re-puts the row;
// so every enqueue finds J parked and hands the job off (counted: handed_off must equal the
// messages).
// `lead`: TableSpec::job_lead on both nodes (the default), so the row goes with the lead push,
// the job a server turn behind it; off, the row goes with the job.
TableSpec job_table(const char* table, CoherenceMode mode, int cpu, bool lead) {
  TableSpec s = lane_table(table, mode, cpu);
  s.job_lead = lead;
  return s;
}

class JobProbe {
 public:
  JobProbe(const Placement& p, const char* table, unsigned id, bool lead = true)
      : table_(table),
        j_(node(id, p.receiver_cpu), {job_table(table, CoherenceMode::kJob, p.receiver_cpu, lead)}),
        s_(node(id + 1, p.sender_cpu),
           {job_table(table, CoherenceMode::kNone, p.sender_cpu, lead)}),
        minter_(100 + id),
        name_(minter_.mint("AST").value()),
        group_(minter_.mint("PRT").value()) {
    start_or_throw(j_);
    start_or_throw(s_);
  }

  echo::engine::JobConsumerStats consumer() const { return consumer_of(j_, table_); }

  // As BroadcastProbe::one; `handed` counts the messages the writer's admission handed off.
  bool one(Samples* out, Samples& applied, benchmark::State* st, Samples* decoded = nullptr) {
    // Settled: the last job completed and the consumer parked again (its hand-off credits stay
    // listed: it lists them again whenever half are taken).
    if (!turns_.settled()) return false;
    if (!j_.put(table_, name_.view(), "px=105.00", minter_.mint("TXN").value())) return false;
    const BrandedId v = minter_.mint("TXN").value();
    const auto t0 = Clock::now();
    auto admitted = s_.enqueue(table_, group_, name_.view(), v);
    if (!admitted || admitted->size() != 1) return false;
    turns_.sent();
    if (admitted->front().admission == echo::engine::Admission::kHandedOff) ++handed;
    if (!spin_until([&] { return !cached(j_, table_, name_); })) return false;
    keep(j_, table_, t0, out, applied, st, decoded);
    return true;
  }
  std::uint64_t handed = 0;

 private:
  const char* table_;
  Engine j_, s_;
  echo::table::Minter minter_;
  BrandedId name_, group_;
  JobLaneTurns turns_{j_, table_};
};

void BM_JobLane_EnqueueToDrop(benchmark::State& state, const Placement& p) {
  place(p);
  JobProbe probe(p, "risk", 21);
  Samples applied;  // the same messages, ended at the writer's apply (no observer in the way)
  for (int i = 0; i < 100; ++i) probe.one(nullptr, applied, nullptr);
  probe.handed = 0;
  const auto c0 = probe.consumer();
  Samples samples;
  for (auto _ : state) {
    if (!probe.one(&samples, applied, &state)) {
      state.SkipWithError("a job was not applied");
      break;
    }
  }
  // The consumer's own round trips per job (each one a command on the receiving io thread).
  const auto c1 = probe.consumer();
  const double jobs = std::max<double>(1, static_cast<double>(samples.us.size()));
  state.counters["empty_claims_per_job"] =
      static_cast<double>(c1.empty_claims - c0.empty_claims) / jobs;
  state.counters["parks_per_job"] = static_cast<double>(c1.parks - c0.parks) / jobs;
  state.counters["handed_off_pct"] =
      samples.us.empty()
          ? 0
          : 100.0 * static_cast<double>(probe.handed) / static_cast<double>(samples.us.size());
  applied.sort();
  g_results["job_applied"][p.name] = std::move(applied);
  report(state, "job", p, std::move(samples));
}

// ---- both lanes, alternating ----

// The lanes message by message in one loop (broadcast through Engine::broadcast, a job through
// Engine::enqueue with its lead, and a job without it, each on its own pair of nodes), so all see
// the same moment of a noisy machine: the ratio of their medians here is the like-for-like one.
// Manual time: the job lane's (with its lead).
void BM_Lanes_Alternating(benchmark::State& state, const Placement& p) {
  place(p);
  BroadcastProbe bc(p, "board3", 51, true);
  JobProbe job(p, "risk3", 53);
  JobProbe bare(p, "risk4", 55, false);
  Ends b, j, n;
  for (int i = 0; i < 100; ++i) {
    bc.one(nullptr, b.applied, nullptr);
    job.one(nullptr, j.applied, nullptr);
    bare.one(nullptr, n.applied, nullptr);
  }
  job.handed = 0;
  bare.handed = 0;
  for (auto _ : state) {
    if (!bc.one(&b.seen, b.applied, nullptr, &b.decoded) ||
        !bare.one(&n.seen, n.applied, nullptr, &n.decoded) ||
        !job.one(&j.seen, j.applied, &state, &j.decoded)) {
      state.SkipWithError("a message was not applied");
      break;
    }
  }
  state.counters["handed_off_pct"] = j.seen.us.empty() ? 0
                                                       : 100.0 * static_cast<double>(job.handed) /
                                                             static_cast<double>(j.seen.us.size());
  state.counters["bare_handed_off_pct"] =
      n.seen.us.empty()
          ? 0
          : 100.0 * static_cast<double>(bare.handed) / static_cast<double>(n.seen.us.size());
  b.sort();
  j.sort();
  n.sort();
  state.counters["bc_p50_us"] = b.seen.pct(0.5);
  state.counters["bare_p50_us"] = n.seen.pct(0.5);
  g_results["alt_bare_applied"][p.name] = std::move(n.applied);
  g_results["alt_bare_decoded"][p.name] = std::move(n.decoded);
  g_results["alt_bare"][p.name] = std::move(n.seen);
  g_results["alt_bc_applied"][p.name] = std::move(b.applied);
  g_results["alt_job_applied"][p.name] = std::move(j.applied);
  g_results["alt_bc_decoded"][p.name] = std::move(b.decoded);
  g_results["alt_job_decoded"][p.name] = std::move(j.decoded);
  g_results["alt_bc"][p.name] = std::move(b.seen);
  report(state, "alt_job", p, std::move(j.seen));
}

// Throughput: `consumers` receiver nodes, each applying every job; a hiredis pipeline admits
// `n` jobs through the same member_enqueue script Engine::enqueue runs, one per member queue (in
// batches of 64 jobs, so the producer is not the bottleneck); the clock stops when every node
// completed all n.
void BM_JobLane_Throughput(benchmark::State& state, const Placement& p, int consumers) {
  place(p);
  // A table of its own per run: a stopped node stays in the membership set for its member ttl
  // (3 beats), and the writer would still feed its queue.
  static int run_no = 0;
  const std::string table = "limits" + std::to_string(run_no++);
  const int n = std::max(1000, messages() / 2);
  std::vector<std::unique_ptr<Engine>> nodes;
  for (int i = 0; i < consumers; ++i) {
    nodes.push_back(std::make_unique<Engine>(
        node(31 + static_cast<unsigned>(i), p.receiver_cpu),
        std::vector<TableSpec>{lane_table(table, CoherenceMode::kJob, p.receiver_cpu)}));
    start_or_throw(*nodes.back());
  }
  const echo::lua::Script* admit = echo::lua::find_script("member_enqueue");
  Context pub = connect();
  Reply loaded = command(pub.get(), "SCRIPT LOAD %b", admit->source.data(), admit->source.size());
  const auto lane_keys = echo::engine::JobLaneKeys::for_table(table);
  std::vector<std::string> mbases;
  for (int i = 0; i < consumers; ++i)
    mbases.push_back(lane_keys.member_base(std::to_string(31 + i)));
  const std::string sha(admit->sha1);
  echo::table::Minter minter(102);
  const BrandedId group = minter.mint("PRT").value();
  std::vector<std::string> jobs, frames;
  for (int i = 0; i < n; ++i) {
    jobs.push_back(minter.mint("JOB").value().str());
    const auto frame =
        echo::table::make_frame(minter.mint("AST").value(), minter.mint("TXN").value());
    frames.emplace_back(echo::table::view(frame));
  }
  auto done = [&](std::uint64_t base) {
    for (const auto& e : nodes) {
      const auto c = *e->stats().tables.at(0).consumer;
      if (c.completed + c.complete_gone + c.complete_stale < base) return false;
    }
    return true;
  };
  std::uint64_t total = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; i += 64) {
      const int end = std::min(n, i + 64);
      for (int k = i; k < end; ++k) {
        for (const auto& mbase : mbases) {
          redisAppendCommand(pub.get(), "EVALSHA %s 1 %slive %s %s %b %s 30000", sha.c_str(),
                             mbase.c_str(), mbase.c_str(), jobs[k].c_str(), frames[k].data(),
                             frames[k].size(), group.str().c_str());
        }
      }
      for (int k = i; k < end; ++k) {
        for (std::size_t m = 0; m < mbases.size(); ++m) {
          void* raw = nullptr;
          if (redisGetReply(pub.get(), &raw) != REDIS_OK)
            throw std::runtime_error("admission pipeline lost");
          Reply rep(static_cast<redisReply*>(raw));
          if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 1) {
            throw std::runtime_error(
                "member_enqueue answered " +
                std::string(rep->type == REDIS_REPLY_ERROR ? rep->str : "not 1 or 2"));
          }
        }
      }
    }
    total += static_cast<std::uint64_t>(n);
    // A sleeping wait: a spinning bench thread would take the receivers' CPU in this run.
    const auto limit = Clock::now() + std::chrono::seconds(30);
    while (!done(total) && Clock::now() < limit)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (!done(total)) {
      state.SkipWithError("jobs were not all completed");
      break;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    seconds += s;
    state.SetIterationTime(s);
    // New ids next round (dedup is per queue, and completion deleted the rows anyway).
    for (auto& id : jobs) id = minter.mint("JOB").value().str();
  }
  const double jobs_per_s = seconds > 0 ? static_cast<double>(total) / seconds : 0;
  state.counters["jobs_per_s"] = jobs_per_s;
  state.counters["applies_per_s"] = jobs_per_s * consumers;
  state.SetItemsProcessed(static_cast<std::int64_t>(total));
  state.SetLabel(p.name);
  g_results["throughput_" + std::to_string(consumers)][p.name].us.push_back(jobs_per_s);
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

// ---- L1 hit vs L2 GET ----

// The mean microseconds per iteration of a loop, for the closing table's ratio line; the last
// call wins (Google Benchmark's final call is the one it reports, with the most iterations).
struct Mean {
  const char* bench;
  const Placement& p;
  benchmark::State& state;
  Clock::time_point t0 = Clock::now();
  ~Mean() {
    if (state.iterations() > 0) {
      g_results[bench][p.name].us.assign(1, since_us(t0) / static_cast<double>(state.iterations()));
    }
  }
};

void BM_Engine_GetL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(41, p.receiver_cpu), {lane_table("quotes", CoherenceMode::kNone, p.receiver_cpu)});
  start_or_throw(e);
  echo::table::Minter minter(103);
  const BrandedId name = minter.mint("AST").value();
  if (!e.put("quotes", name.view(), "px=106.00")) throw std::runtime_error("put failed");
  Mean mean{"l1_hit", p, state};
  for (auto _ : state) {
    auto got = e.get("quotes", name.view());
    benchmark::DoNotOptimize(got);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// The typed handle's hit (goal: at most 1.1x the map's own) against the same row read through the
// handle's map directly (L1Map::visit): a text key, a struct read in place.
struct BenchQuote {
  double bid, ask;
  std::int64_t size;
};
echo::engine::TableSpec typed_quotes(int cpu) {
  TableSpec s = lane_table("tquotes", CoherenceMode::kNone, cpu);
  s.keys = echo::engine::KeyKind::kText;
  return echo::engine::typed<BenchQuote>(std::move(s));
}
void BM_Table_ReadL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(43, p.receiver_cpu), {typed_quotes(p.receiver_cpu)});
  start_or_throw(e);
  const auto quotes = e.table<BenchQuote>("tquotes");
  if (!quotes.put("AAPL", BenchQuote{189.1, 189.2, 300})) throw std::runtime_error("put failed");
  double sum = 0;
  for (auto _ : state) {
    auto r = quotes.read("AAPL", [&sum](const BenchQuote& q, std::string_view) { sum += q.bid; });
    benchmark::DoNotOptimize(r);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}
void BM_Table_MapVisitL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(44, p.receiver_cpu), {typed_quotes(p.receiver_cpu)});
  start_or_throw(e);
  const auto quotes = e.table<BenchQuote>("tquotes");
  if (!quotes.put("AAPL", BenchQuote{189.1, 189.2, 300})) throw std::runtime_error("put failed");
  const echo::table::L1Reader map = quotes.l1();
  double sum = 0;
  for (auto _ : state) {
    const bool hit = map.visit("AAPL", [&sum](std::string_view v, std::string_view) {
      sum += reinterpret_cast<const BenchQuote*>(v.data())->bid;
    });
    benchmark::DoNotOptimize(hit);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// A plain blocking hiredis GET of a framed row (the floor under a miss).
void BM_Hiredis_Get(benchmark::State& state, const Placement& p) {
  place(p);
  Context c = connect();
  Reply set = command(c.get(), "SET lanes_bench:get %s", "TXN0000000000000px=106.00");
  Mean mean{"l2_get", p, state};
  for (auto _ : state) {
    Reply r = command(c.get(), "GET lanes_bench:get");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// An engine read whose row is in L2 only: the miss, the writer's flight, one GET on the io
// thread, the fill, the answer. Each name is read once (then it would hit).
void BM_Engine_GetL2(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(42, p.receiver_cpu), {lane_table("quotes2", CoherenceMode::kNone, p.receiver_cpu)});
  start_or_throw(e);
  echo::table::Minter minter(104);
  Context c = connect();
  const int n = 2000;
  std::vector<BrandedId> names;
  for (int i = 0; i < n; ++i) {
    names.push_back(minter.mint("AST").value());
    const std::string key = echo::table::l2_key("quotes2", names.back().view()).value();
    const std::string value = minter.mint("TXN").value().str() + "px=106.00";
    redisAppendCommand(c.get(), "SET %b %b", key.data(), key.size(), value.data(), value.size());
  }
  for (int i = 0; i < n; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c.get(), &raw) == REDIS_OK) freeReplyObject(raw);
  }
  std::size_t next = 0;
  Mean mean{"engine_l2", p, state};
  for (auto _ : state) {
    if (next == names.size()) {
      state.SkipWithError("out of cold names");
      break;
    }
    auto got = e.get("quotes2", names[next++].view());
    if (!got || got->source != echo::engine::Source::kL2) {
      state.SkipWithError("the read did not come from l2");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// ---- the closing table ----

void print_table() {
  // Percentile `p` of a benchmark's samples at a placement; 0 when it did not run there.
  auto pct = [](const std::string& bench, const char* place, double p) {
    const auto b = g_results.find(bench);
    if (b == g_results.end()) return 0.0;
    const auto s = b->second.find(place);
    return s == b->second.end() ? 0.0 : s->second.pct(p);
  };
  auto median = [&](const std::string& bench, const char* place) { return pct(bench, place, 0.5); };
  auto p99 = [&](const std::string& bench, const char* place) { return pct(bench, place, 0.99); };
  std::printf("\n%-10s | %-22s | %-22s | %-22s | %-22s | %-9s | %-9s | %-9s\n", "placement",
              "floor p50/p99 us", "broadcast (PUBLISH)", "broadcast (Engine)", "job lane",
              "bc/floor", "job/bc(E)", "job/bc(P)");
  for (const Placement& p : kPlacements) {
    const double f = median("floor", p.name), b = median("broadcast", p.name),
                 be = median("broadcast_engine", p.name), j = median("job", p.name);
    if (f == 0 && b == 0 && j == 0) continue;
    std::printf(
        "%-10s | %9.1f / %-10.1f | %9.1f / %-10.1f | %9.1f / %-10.1f | %9.1f / %-10.1f | %8.2fx | "
        "%8.2fx | %8.2fx\n",
        p.name, f, p99("floor", p.name), b, p99("broadcast", p.name), be,
        p99("broadcast_engine", p.name), j, p99("job", p.name), f > 0 ? b / f : 0,
        be > 0 ? j / be : 0, b > 0 ? j / b : 0);
  }
  for (const Placement& p : kPlacements) {
    const double pub = median("publish_rtt", p.name), fan = median("fanout_rtt", p.name),
                 be = median("broadcast_engine", p.name), j = median("job", p.name);
    if (fan == 0) continue;
    const double floor = be + (fan - pub);
    std::printf(
        "%-10s | server hop: member_enqueue hand-off round trip %.1f us vs PUBLISH %.1f us (+%.1f "
        "us); "
        "job-lane floor with this script = bc(E) + %.1f = %.1f us (%.2fx bc(E)); job lane %.2fx "
        "that floor\n",
        p.name, fan, pub, fan - pub, fan - pub, floor, be > 0 ? floor / be : 0,
        floor > 0 ? j / floor : 0);
    const double se = median("server_evalsha", p.name), sp = median("server_publish", p.name);
    if (se > 0 && sp > 0) {
      std::printf(
          "%-10s | server time (INFO commandstats, no wakes in it): member_enqueue %.1f us vs "
          "PUBLISH %.1f us "
          "(+%.1f us); bc(E) + that = %.1f us (%.2fx bc(E))\n",
          p.name, se, sp, se - sp, be + se - sp, be > 0 ? (be + se - sp) / be : 0);
    }
  }
  for (const Placement& p : kPlacements) {
    const double be = median("broadcast_engine_applied", p.name), j = median("job_applied", p.name);
    if (be == 0 || j == 0) continue;
    std::printf(
        "%-10s | send -> the writer's apply (its own clock, no observer): broadcast (Engine) %.1f "
        "us, "
        "job lane %.1f us: %.2fx\n",
        p.name, be, j, j / be);
  }
  for (const Placement& p : kPlacements) {
    const double f = median("floor", p.name), jf = median("job_floor", p.name);
    if (f == 0 || jf == 0) continue;
    std::printf(
        "%-10s | plain-client floors: PUBLISH -> message %.1f us; member_enqueue -> the parked "
        "BLMPOP's "
        "hand-off %.1f us: %.2fx (what the script and the unblock cost the server, no engine in "
        "it; "
        "server time: the script %.1f us, the BLMPOP's service %.1f us)\n",
        p.name, f, jf, jf / f, median("handoff_server_evalsha", p.name),
        median("handoff_server_blmpop", p.name));
  }
  for (const Placement& p : kPlacements) {
    const double b = median("alt_bc", p.name), j = median("alt_job", p.name);
    const double ba = median("alt_bc_applied", p.name), ja = median("alt_job_applied", p.name);
    if (b == 0 || j == 0) continue;
    const double bd = median("alt_bc_decoded", p.name), jd = median("alt_job_decoded", p.name);
    std::printf(
        "%-10s | alternating, message by message: broadcast (Engine) %.1f us, job lane %.1f us: "
        "%.2fx; "
        "at the writer's apply %.1f vs %.1f us: %.2fx; at the receiving io thread's decode %.1f vs "
        "%.1f us: %.2fx\n",
        p.name, b, j, j / b, ba, ja, ba > 0 ? ja / ba : 0, bd, jd, bd > 0 ? jd / bd : 0);
    const double n = median("alt_bare", p.name), na = median("alt_bare_applied", p.name),
                 nd = median("alt_bare_decoded", p.name);
    if (n > 0) {
      std::printf(
          "%-10s | the same loop, the job lane without its lead (job_lead off): %.1f us: %.2fx bc; "
          "at the apply %.1f us: %.2fx bc; at the decode %.1f us: %.2fx bc; with the lead / "
          "without: "
          "sender %.2fx, apply %.2fx\n",
          p.name, n, n / b, na, ba > 0 ? na / ba : 0, nd, bd > 0 ? nd / bd : 0, j / n,
          na > 0 ? ja / na : 0);
    }
  }
  for (const Placement& p : kPlacements) {
    const double t1 = median("throughput_1", p.name), t2 = median("throughput_2", p.name);
    if (t1 == 0 && t2 == 0) continue;
    std::printf(
        "%-10s | job lane throughput: 1 consumer %.0f jobs/s; 2 consumers %.0f jobs/s each (%.0f "
        "applies/s)\n",
        p.name, t1, t2, 2 * t2);
  }
  for (const Placement& p : kPlacements) {
    const double hit = median("l1_hit", p.name), get = median("l2_get", p.name),
                 miss = median("engine_l2", p.name);
    if (hit == 0) continue;
    std::printf(
        "%-10s | L1 hit %.0f ns vs plain L2 GET %.1f us (%.0fx) and an engine read from L2 %.1f us "
        "(the original: 762 ns vs 31 us, 40x)\n",
        p.name, hit * 1000, get, hit > 0 ? get / hit : 0, miss);
  }
  for (const Placement& p : kPlacements) {
    const double plain = median("broadcast_engine", p.name),
                 tls = median("broadcast_engine_tls", p.name);
    if (plain == 0 || tls == 0) continue;
    std::printf(
        "%-10s | broadcast (Engine) over TLS %.1f / %.1f us (p50/p99) vs plain %.1f / %.1f us: "
        "tls/plain %.2fx (goal <= 1.10x)\n",
        p.name, tls, p99("broadcast_engine_tls", p.name), plain, p99("broadcast_engine", p.name),
        tls / plain);
  }
  for (const Placement& p : kPlacements) {
    for (const std::string key : {"broadcast", "broadcast_engine"}) {
      const std::string epoll = key + "_epoll";
      const double u = median(key, p.name), e = median(epoll, p.name);
      const double ua = median(key + "_applied", p.name), ea = median(epoll + "_applied", p.name);
      if (u == 0 || e == 0) continue;
      std::printf(
          "%-10s | %s on epoll %.1f us (p99 %.1f) vs on %s %.1f us (p99 %.1f): %.2fx; at the "
          "writer's apply %.1f vs %.1f us: %.2fx\n",
          p.name, key == "broadcast" ? "bc(P)" : "bc(E)", e, p99(epoll, p.name),
          std::string(echo::io::to_string(g_backend_of[key])).c_str(), u, p99(key, p.name), e / u,
          ea, ua, ua > 0 ? ea / ua : 0);
    }
  }
  std::printf(
      "goals: broadcast lane median <= 1.15x the floor; job lane median <= 1.3x the "
      "broadcast lane's. bc(E): sent by Engine::broadcast, the same verb shape as "
      "Engine::enqueue; bc(P): sent by a plain hiredis PUBLISH.\n");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  echo::testing::LocalTlsFiles tls;
  g_tls = &tls;
  echo::testing::LocalServerOptions server_options;
  server_options.tls.cert_file = tls.server_cert();
  server_options.tls.key_file = tls.server_key();
  server_options.tls.ca_file = tls.ca_file();
  echo::testing::LocalServer server(server_options);
  g_server = &server;
  const int n = messages();
  for (const Placement& p : kPlacements) {
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
    benchmark::RegisterBenchmark(("BM_JobLane_EnqueueToDrop" + tag).c_str(),
                                 BM_JobLane_EnqueueToDrop, p)
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
  for (const Placement& p : kPlacements) {
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
  for (const Placement& p : {kPlacements[0], kPlacements[1]}) {
    const std::string tag = std::string("/") + p.name;
    benchmark::RegisterBenchmark(("BM_Engine_GetL1Hit" + tag).c_str(), BM_Engine_GetL1Hit, p)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_Table_ReadL1Hit" + tag).c_str(), BM_Table_ReadL1Hit, p)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_Table_MapVisitL1Hit" + tag).c_str(), BM_Table_MapVisitL1Hit,
                                 p)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_Hiredis_Get" + tag).c_str(), BM_Hiredis_Get, p)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_Engine_GetL2" + tag).c_str(), BM_Engine_GetL2, p)
        ->Iterations(1500)
        ->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}
