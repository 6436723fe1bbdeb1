// SPDX-License-Identifier: MIT
// `echostore bench --peers`: the job lane beside BullMQ, the work queue a Node.js user would pick
// instead, on the one redis-server of the run and in the same rounds. The peer is a child process
// (node bench/peers/peers.mjs, its packages pinned by bench/peers/package-lock.json) that answers
// one JSON line per request line (the requests: the top of peers.mjs); nothing of it is linked
// into the library. The EchoStore side is measured here, in this process, between the peer's
// answers, so a noisy neighbour meets both.
//
// Throughput: a backlog of jobs added before any consumer runs, then the time from the consumer's
// start to its last completion. BullMQ: addBulk, then one Worker with concurrency 1 or 16 from
// run() to the n-th "completed" event. EchoStore: a raw client registers node R's member queue
// (its live key and member_beat, as the drill's F5 does), a writer node enqueues the backlog into
// it, then R starts and the time runs from its start() to its consumer's n-th completion. BullMQ's
// concurrency is how many jobs one worker holds active at once; the job lane's analogue is the
// consumer's credits (TableSpec::job_credits: jobs claimed and not yet applied), so c1 runs R with
// job_credits 1 and c16 with 16. Both complete every job on the server before it counts.
//
// Latency, one job at a time: BullMQ's queue.add -> its processor's start (one Worker,
// concurrency 1; the next add once the previous job completed), on the peer's clock. EchoStore:
// Engine::enqueue on node S -> node R's writer applying the job (WriterStats::last_applied_ns),
// on a job-lane table without its lead (job_lead off), so what is timed is the job's own delivery
// (BullMQ has no at-most-once lead to race it); R's consumer settled and parked before each send,
// as the lanes rows take it. p50 and p99 of each round; the rows are the medians of the rounds.
//
// The cache rows, first (each referee run FLUSHALLs the server, so before any engine of the job
// rows runs, and only on a server the bench started): the Cache Referee's workload and oracle, one
// run each of the tracking lane, the broadcast lane with carried values and node-redis's
// client-side cache (referee/real_clients.cc): stale reads, rows stale once quiet, write start ->
// the node's cache applied its message. Beside them a hit's cost in each side's own terms
// (Engine::get in C++, await client.get in JS), reported, not ranked.

#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/harness/lane.h>
#include <echo/harness/stage.h>
#include <echo/table/branded_id.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "drill/floors.h"
#include "peer_process.h"
#include "referee/referee.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::TableSpec;
using nlohmann::json;
using table::BrandedId;

constexpr unsigned kReceiver = 951, kWriter = 952, kMinter = 953;
constexpr std::size_t kNames = 1000;  // the backlog's jobs cycle over this many rows
constexpr int kLatencyWarmup = 20;

// The peer process (peers.mjs): one request line, one JSON line back.
class Peer {
 public:
  Peer(const std::string& node, const std::string& script, const DrillTarget& target,
       const std::string& prefix)
      : child_({node, script, "--host", target.host, "--port", std::to_string(target.port),
                "--prefix", prefix}) {}

  // Throws when the peer fails, answers {"error":..}, ends or is silent for `seconds`.
  json ask(const std::string& request, int seconds = 300) {
    if (!child_.write_line(request)) {
      throw std::runtime_error("peers: the peer process is gone (" + request + ")");
    }
    const auto answer = child_.read_line(std::chrono::seconds(seconds));
    if (!answer) throw std::runtime_error("peers: no answer to " + request);
    json j = json::parse(*answer, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      throw std::runtime_error("peers: the peer answered '" + *answer + "' to " + request);
    }
    if (j.contains("error")) {
      throw std::runtime_error("peers: " + request + ": " + j["error"].dump());
    }
    return j;
  }

 private:
  ChildProcess child_;
};

// p in [0, 1] of `v` (nearest rank, as harness::Samples).
double pct(std::vector<double> v, double p) {
  floors::Samples s{std::move(v)};
  s.sort();
  return s.pct(p);
}

// The EchoStore side of the throughput rows: n jobs enqueued into R's member queues before R
// runs (dealt round-robin over `tables` job-lane tables <t>_0.. of R, each with its own member
// queue and its own consumer), then R's start() -> its consumers' n-th completion, each consumer
// with `credits` job credits. Jobs per second.
double lane_throughput(const BenchConfig& c, const DrillTarget& target, table::Minter& minter,
                       const std::string& t, std::size_t credits, int tables, int n) {
  auto node = [&](unsigned id) {
    return harness::node_options(target.host, target.port, id, c.process_cpu);
  };
  std::vector<std::string> names_of;
  std::vector<TableSpec> ws, rs;
  floors::Redis raw(target);
  const std::string member = std::to_string(kReceiver);
  for (int i = 0; i < tables; ++i) {
    const std::string ti = t + "_" + std::to_string(i);
    const auto keys = engine::JobLaneKeys::for_table(ti);
    // R's member queue, registered as its consumer's beat would (the drill's F5), so the
    // writer's fan-out admits the backlog into it before R runs.
    const std::string live = keys.member_base(member) + "live";
    floors::Reply set = raw.command("SET %s 60000 PX 60000", live.c_str());
    floors::Reply beat = raw.eval("member_beat", {keys.members, keys.epoch}, {member, "60000"});
    if (!set || !beat || beat->type != REDIS_REPLY_ARRAY) {
      throw std::runtime_error("peers: cannot register R's member queue of " + ti);
    }
    names_of.push_back(ti);
    ws.push_back(lane_spec(ti, CoherenceMode::kNone, c));
    ws.back().job_lead = false;  // nobody listens while the backlog is added
    rs.push_back(lane_spec(ti, CoherenceMode::kJob, c));
    rs.back().job_credits = std::min(credits, c.ring_capacity);  // the engine's bound (validate)
  }
  Engine w(node(kWriter), ws);
  if (auto ec = w.start()) {
    throw std::runtime_error("peers: the writer did not start: " + ec.message());
  }
  const BrandedId group = minter.mint("PRT").value();
  std::vector<BrandedId> names;
  for (std::size_t i = 0; i < kNames; ++i) names.push_back(minter.mint("AST").value());
  std::atomic<int> answered{0}, failed{0};
  for (int i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    auto job = w.enqueue_async(names_of[at % names_of.size()], group, names[at % kNames].view(),
                               minter.mint("TXN").value(),
                               [&](const engine::Result<std::vector<engine::MemberAdmission>>& a) {
                                 if (!a || a->size() != 1) failed.fetch_add(1);
                                 answered.fetch_add(1);
                               });
    if (!job) throw std::runtime_error("peers: the backlog's enqueue failed");
  }
  if (!floors::eventually([&] { return answered.load() == n; }, std::chrono::seconds(60)) ||
      failed.load() != 0) {
    throw std::runtime_error("peers: the backlog of " + t +
                             " was not all admitted into R's queues");
  }
  Engine r(node(kReceiver), rs);
  const auto t0 = floors::Clock::now();
  if (auto ec = r.start()) throw std::runtime_error("peers: node R did not start: " + ec.message());
  const auto done = [&] {
    std::uint64_t sum = 0;
    for (const auto& ti : names_of) {
      const auto s = harness::consumer_of(r, ti);
      sum += s.completed + s.complete_gone + s.complete_stale;
    }
    return sum >= static_cast<std::uint64_t>(n);
  };
  while (!done()) {
    if (floors::since_us(t0) > 120e6) {
      throw std::runtime_error("peers: R did not complete its backlog of " + t + " within 120 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const double seconds = floors::since_us(t0) / 1e6;
  for (const auto& ti : names_of) {
    (void)raw.command("DEL %s", engine::JobLaneKeys::for_table(ti).members.c_str());
  }
  return n / seconds;
}

// One referee run of `contestant` (its workload, its oracle) for the cache rows; throws when it
// could not run.
referee::Figures referee_run(referee::Contestant& contestant, const referee::RefereeConfig& rc,
                             const DrillTarget& target, const std::vector<std::string>& names) {
  referee::Figures f = referee::run_contestant(contestant, rc, target, names, std::cerr);
  if (!f.failure.empty()) {
    throw std::runtime_error("peers: the referee's " + f.name + " did not run: " + f.failure);
  }
  return f;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// An L1 hit's cost in EchoStore's own terms: Engine::get of a row node H holds, timed over
// `n` calls together (ns per call). Throws when a call is not a hit.
double l1_hit_ns(const BenchConfig& c, const DrillTarget& target, table::Minter& minter, int n) {
  const std::string t = "peers_hit_" + minter.mint("BEN").value().str();
  Engine h(harness::node_options(target.host, target.port, kReceiver + 20, c.process_cpu),
           {lane_spec(t, CoherenceMode::kTracking, c)});
  if (auto ec = h.start()) throw std::runtime_error("peers: node H did not start: " + ec.message());
  const BrandedId name = minter.mint("AST").value();
  // The fill, then until a read is a hit (the node caches once its lane is established).
  if (!floors::eventually([&] {
        auto got = h.get(t, name.view());
        return got && got->source == engine::Source::kL1;
      })) {
    throw std::runtime_error("peers: node H did not cache its row within 2 s");
  }
  std::uint64_t missed = 0;
  const auto t0 = floors::Clock::now();
  for (int i = 0; i < n; ++i) {
    auto got = h.get(t, name.view());
    if (!got || got->source != engine::Source::kL1) ++missed;
  }
  const double ns = floors::since_us(t0) * 1e3 / n;
  if (missed != 0) throw std::runtime_error("peers: node H's reads were not all L1 hits");
  return ns;
}

// The cache rows: the Cache Referee's workload and oracle (referee.h), one run of each contestant
// in turn on this server (each run FLUSHALLs it): EchoStore's tracking lane and its broadcast lane
// with carried values against node-redis's client-side cache (referee/real_clients.cc).
std::vector<Row> cache_rows_of(const BenchConfig& c, const DrillTarget& target,
                               const std::string& dir, const json& v, table::Minter& minter,
                               double js_hit_ns) {
  const double hit_ns = l1_hit_ns(c, target, minter, c.quick ? 100000 : 1000000);
  referee::RefereeConfig rc;
  rc.quick = c.quick;
  rc.names = c.quick ? 500 : 2000;
  rc.seconds = c.quick ? 3 : 5;
  std::vector<std::string> ref_names;
  for (std::size_t i = 0; i < rc.names; ++i) ref_names.push_back(minter.mint("REF").value().str());
  std::vector<std::unique_ptr<referee::Contestant>> lanes = referee::echostore_lanes();
  auto lane_named = [&](std::string_view name) -> referee::Contestant& {
    for (auto& l : lanes) {
      if (l->name() == name) return *l;
    }
    throw std::runtime_error("peers: the referee has no contestant " + std::string(name));
  };
  const referee::Figures tracking =
      referee_run(lane_named("echostore_tracking"), rc, target, ref_names);
  const referee::Figures carried =
      referee_run(lane_named("echostore_broadcast_carried"), rc, target, ref_names);
  auto real = referee::real_clients(dir);
  const referee::Figures csc = referee_run(*real.front(), rc, target, ref_names);
  const std::string csc_name =
      "node-redis " + v.value("redis", "?") + " clientSideCache on Node.js " + v.value("node", "?");
  const std::string load =
      std::to_string(rc.names) +
      " names, Zipf(0.99), 2 writers at 2,000 writes/s, 3 nodes x 4 readers, " +
      std::to_string(rc.seconds) + " s";
  const std::string cache_placement =
      placement_of(c,
                   "the referee's writer and reader threads, each node's threads; node-redis's "
                   "nodes: one node process each",
                   true);
  auto cache_row = [&](std::string id, std::string what, const referee::Figures& ours,
                       std::string ours_name, std::string unit, bool higher_better, double o,
                       double b) {
    Row x;
    x.id = std::move(id);
    x.what = std::move(what) + " (" + load + ")";
    x.ours = std::move(ours_name);
    x.baseline = csc_name;
    x.unit = std::move(unit);
    x.higher_better = higher_better;
    x.placement = cache_placement;
    x.ours_rounds.push_back(o);
    x.base_rounds.push_back(b);
    x.beside = {{"ours reads", static_cast<double>(ours.reads)},
                {"baseline reads", static_cast<double>(csc.reads)},
                {"ours longest stale window, ms", ours.judged.max_stale_ms},
                {"baseline longest stale window, ms", csc.judged.max_stale_ms},
                {"ours write -> applied p99, us", ours.judged.p99_us},
                {"baseline write -> applied p99, us", csc.judged.p99_us}};
    return x;
  };
  std::vector<Row> cache_rows;
  for (const auto* lane : {&tracking, &carried}) {
    const bool is_tracking = lane == &tracking;
    const std::string stem = is_tracking ? "tracking_lane" : "carried_values";
    const std::string who = is_tracking ? "engine tracking lane"
                                        : "engine broadcast lane, carried values (carry = update)";
    Row stale =
        cache_row(stem + "_vs_node_redis_csc_stale_reads", "stale reads by the referee's oracle",
                  *lane, who, "stale reads", false, static_cast<double>(lane->judged.stale_reads),
                  static_cast<double>(csc.judged.stale_reads));
    stale.ratio_offset = 1;  // 0 against 0 reads 1.00x
    // A hit's cost, each in its own language's terms: reported beside, not ranked.
    stale.beside.emplace_back("ours L1 hit (Engine::get, C++), ns", hit_ns);
    stale.beside.emplace_back("baseline cache hit (await client.get, JS), ns", js_hit_ns);
    stale.what +=
        floors::fmt(" (a hit, reported, not ranked: Engine::get %.0f ns in C++; ", hit_ns) +
        floors::fmt("await client.get %.0f ns in JS)", js_hit_ns);
    Row left = cache_row(stem + "_vs_node_redis_csc_permanently_stale",
                         "rows stale once quiet (over all nodes)", *lane, who, "rows", false,
                         static_cast<double>(lane->permanently_stale),
                         static_cast<double>(csc.permanently_stale));
    left.ratio_offset = 1;
    Row applied = cache_row(stem + "_vs_node_redis_csc_applied_p50",
                            "write start -> the node's cache applied its message, p50 (node-redis: "
                            "its invalidation handler ran, heard one pipe hop later)",
                            *lane, who, "us", false, lane->judged.p50_us, csc.judged.p50_us);
    cache_rows.push_back(std::move(stale));
    cache_rows.push_back(std::move(left));
    cache_rows.push_back(std::move(applied));
  }

  return cache_rows;
}

}  // namespace

void run_peers(const BenchConfig& c, const DrillTarget& target, bool scratch, Progress& progress,
               std::vector<Row>& rows, std::vector<std::pair<std::string, std::string>>& peers) {
  const std::string dir = c.peers_dir, script = dir + "/peers.mjs";
  const std::string node = peer_node("peers", dir, "peers.mjs", {"bullmq", "ioredis", "redis"});

  table::Minter minter(kMinter);
  const std::string run_id = minter.mint("BEN").value().str();
  Peer peer(node, script, target, "echostore-bench-peers-" + run_id);
  const json v = peer.ask("versions", 60);
  const std::string bullmq = "BullMQ " + v.value("bullmq", "?") + " (ioredis " +
                             v.value("ioredis", "?") + ") on Node.js " + v.value("node", "?");
  peers = {{"node", v.value("node", "?")},
           {"bullmq", v.value("bullmq", "?")},
           {"ioredis", v.value("ioredis", "?")},
           {"redis", v.value("redis", "?")},
           {"date", utc_now()}};

  // First, while no engine of the job rows runs: each referee run FLUSHALLs the server.
  std::vector<Row> cache_rows;
  if (scratch) {
    progress.step("tracking lane, carried values and node-redis's cache (the referee's workload)",
                  0, 1);
    const double js_hit_ns =
        peer.ask("hit " + std::to_string(c.quick ? 100000 : 1000000)).at("ns").get<double>();
    cache_rows = cache_rows_of(c, target, dir, v, minter, js_hit_ns);
  } else {
    std::cerr << "echostore bench: the cache rows left out: the referee's workload FLUSHALLs "
                 "its server, and --server named one the bench did not start\n";
  }

  const int jobs = c.quick ? 1000 : 10000;
  const int messages = c.quick ? 50 : 200;
  const std::string placement = placement_of(
      c, "the bench thread, R's and the writer's io and writer threads; the peer's node process",
      true);
  auto throughput_row = [&](std::string id, int conc) {
    Row x;
    x.id = std::move(id);
    x.what = "job lane, a pre-added backlog of " + std::to_string(jobs) + " jobs, " +
             std::to_string(conc) + " concurrent: consumer start -> last completion";
    x.ours = "node R's job consumer, job_credits " + std::to_string(conc);
    x.baseline = bullmq + ", one Worker, concurrency " + std::to_string(conc);
    x.unit = "jobs/s";
    x.placement = placement;
    return x;
  };
  Row c1 = throughput_row("job_lane_vs_bullmq_throughput_c1", 1);
  Row c16 = throughput_row("job_lane_vs_bullmq_throughput_c16", 16);
  Row p50 = latency_row("job_lane_vs_bullmq_latency_p50",
                        "job lane, one job at a time, p50 of each round: send -> applied",
                        "Engine::enqueue -> R's writer applies it (job_lead off)",
                        bullmq + ": queue.add -> processor start", placement);
  Row p99 = latency_row("job_lane_vs_bullmq_latency_p99",
                        "job lane, one job at a time, p99 of each round: send -> applied", p50.ours,
                        p50.baseline, placement);

  // The latency pair: R and S on one job-lane table without its lead, for the whole run.
  const std::string lat = "peers_lat_" + run_id;
  auto node_of = [&](unsigned id) {
    return harness::node_options(target.host, target.port, id, c.process_cpu);
  };
  auto bare = [&](CoherenceMode mode) {
    TableSpec s = lane_spec(lat, mode, c);
    s.job_lead = false;
    return s;
  };
  Engine r(node_of(kReceiver + 10), {bare(CoherenceMode::kJob)});
  Engine s(node_of(kWriter + 10), {bare(CoherenceMode::kNone)});
  if (auto ec = r.start()) throw std::runtime_error("peers: node R did not start: " + ec.message());
  if (auto ec = s.start()) throw std::runtime_error("peers: node S did not start: " + ec.message());
  const BrandedId group = minter.mint("PRT").value(), name = minter.mint("AST").value();
  harness::JobLaneTurns turns(r, lat);
  auto one = [&](bool keep, harness::Samples& seen, harness::Samples& applied) {
    const bool ok = harness::lane_message(
        r, lat, name, r, minter, [&] { return turns.settled(); },
        [&](const BrandedId& version) {
          auto admitted = s.enqueue(lat, group, name.view(), version);
          if (!admitted || admitted->size() != 1) return false;
          turns.sent();
          return true;
        },
        keep, seen, applied);
    if (!ok) throw std::runtime_error("peers: a job to " + lat + " was not applied within 2 s");
  };
  {
    harness::Samples seen, applied;
    for (int i = 0; i < kLatencyWarmup; ++i) one(false, seen, applied);
    (void)peer.ask("latency " + std::to_string(kLatencyWarmup));
  }

  std::vector<double> split;  // jobs/s, 16 tables x 1 credit, per round
  for (int round = 0; round < c.rounds; ++round) {
    progress.step("job lane vs BullMQ, throughput, 1 concurrent", round, c.rounds);
    const std::string t = "peers_tp_" + run_id + "_" + std::to_string(round);
    c1.ours_rounds.push_back(lane_throughput(c, target, minter, t + "_c1", 1, 1, jobs));
    json b = peer.ask("throughput 1 " + std::to_string(jobs));
    c1.base_rounds.push_back(b.at("jobs").get<double>() / b.at("seconds").get<double>());

    progress.step("job lane vs BullMQ, throughput, 16 concurrent", round, c.rounds);
    b = peer.ask("throughput 16 " + std::to_string(jobs));
    c16.base_rounds.push_back(b.at("jobs").get<double>() / b.at("seconds").get<double>());
    c16.ours_rounds.push_back(lane_throughput(c, target, minter, t + "_c16", 16, 1, jobs));
    // Beside the row: the backlog dealt over 16 tables of R, one consumer each (1 credit).
    split.push_back(lane_throughput(c, target, minter, t + "_t16", 1, 16, jobs));

    progress.step("job lane vs BullMQ, latency, one job at a time", round, c.rounds);
    harness::Samples seen, applied;
    for (int i = 0; i < messages; ++i) one(true, seen, applied);
    const std::vector<double> theirs =
        peer.ask("latency " + std::to_string(messages)).at("us").get<std::vector<double>>();
    p50.ours_rounds.push_back(pct(applied.us, 0.5));
    p99.ours_rounds.push_back(pct(applied.us, 0.99));
    p50.base_rounds.push_back(pct(theirs, 0.5));
    p99.base_rounds.push_back(pct(theirs, 0.99));
    p50.ours_samples.insert(p50.ours_samples.end(), applied.us.begin(), applied.us.end());
    p50.base_samples.insert(p50.base_samples.end(), theirs.begin(), theirs.end());
  }
  const double split_median = median_of(split);
  c16.beside.emplace_back("16 tables of R, one consumer each, 1 credit: jobs/s", split_median);
  c16.what +=
      " (beside: the backlog dealt over 16 job-lane tables of R, one consumer and 1 "
      "credit each: " +
      floors::grouped(split_median) + " jobs/s)";
  rows.push_back(std::move(c1));
  rows.push_back(std::move(c16));
  rows.push_back(std::move(p50));
  rows.push_back(std::move(p99));
  for (Row& row : cache_rows) rows.push_back(std::move(row));
}

}  // namespace echo::cli::bench
