// SPDX-License-Identifier: MIT
// lanes_bench's lanes (lanes_bench.cc says what the bench measures): the broadcast lane's
// PUBLISH -> drop, over TLS too; the job lane's enqueue -> drop; both alternating message by
// message; the job lane's throughput with 1 and 2 consumer nodes.
#include "lanes_bench.h"

namespace lanes_bench {

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

namespace {

// A table of its own per run: a stopped node stays in the membership set for its member ttl (3
// beats), and the writer would still feed its queue.
std::string next_throughput_table() {
  static int run_no = 0;
  return "limits" + std::to_string(run_no++);
}

std::vector<std::unique_ptr<Engine>> start_consumers(const std::string& table, int consumers,
                                                     const Placement& p) {
  std::vector<std::unique_ptr<Engine>> nodes;
  for (int i = 0; i < consumers; ++i) {
    nodes.push_back(std::make_unique<Engine>(
        node(31 + static_cast<unsigned>(i), p.receiver_cpu),
        std::vector<TableSpec>{lane_table(table, CoherenceMode::kJob, p.receiver_cpu)}));
    start_or_throw(*nodes.back());
  }
  return nodes;
}

std::vector<std::string> member_bases(const std::string& table, int consumers) {
  const auto lane_keys = echo::engine::JobLaneKeys::for_table(table);
  std::vector<std::string> mbases;
  for (int i = 0; i < consumers; ++i)
    mbases.push_back(lane_keys.member_base(std::to_string(31 + i)));
  return mbases;
}

// Throughput's consumer nodes, and what the admission pipeline sends them: member_enqueue (the
// script Engine::enqueue runs) loaded, every member queue's base, `n` job ids and frames.
struct ThroughputRig {
  ThroughputRig(const Placement& p, int consumers, int n)
      : table(next_throughput_table()),
        nodes(start_consumers(table, consumers, p)),
        admit(echo::lua::find_script("member_enqueue")),
        pub(connect()),
        loaded(command(pub.get(), "SCRIPT LOAD %b", admit->source.data(), admit->source.size())),
        mbases(member_bases(table, consumers)),
        sha(admit->sha1),
        minter(102),
        group(minter.mint("PRT").value()) {
    for (int i = 0; i < n; ++i) {
      jobs.push_back(minter.mint("JOB").value().str());
      const auto frame =
          echo::table::make_frame(minter.mint("AST").value(), minter.mint("TXN").value());
      frames.emplace_back(echo::table::view(frame));
    }
  }

  // Every node completed `base` jobs (applied them, or found them gone or stale).
  bool done(std::uint64_t base) const {
    for (const auto& e : nodes) {
      const auto c = *e->stats().tables.at(0).consumer;
      if (c.completed + c.complete_gone + c.complete_stale < base) return false;
    }
    return true;
  }

  const std::string table;
  const std::vector<std::unique_ptr<Engine>> nodes;
  const echo::lua::Script* admit;
  Context pub;
  Reply loaded;
  const std::vector<std::string> mbases;
  const std::string sha;
  echo::table::Minter minter;
  const BrandedId group;
  std::vector<std::string> jobs, frames;
};

void report_throughput(benchmark::State& state, const Placement& p, int consumers,
                       std::uint64_t total, double seconds) {
  const double jobs_per_s = seconds > 0 ? static_cast<double>(total) / seconds : 0;
  state.counters["jobs_per_s"] = jobs_per_s;
  state.counters["applies_per_s"] = jobs_per_s * consumers;
  state.SetItemsProcessed(static_cast<std::int64_t>(total));
  state.SetLabel(p.name);
  g_results["throughput_" + std::to_string(consumers)][p.name].us.push_back(jobs_per_s);
}

}  // namespace

// Throughput: `consumers` receiver nodes, each applying every job; a hiredis pipeline admits
// `n` jobs through the same member_enqueue script Engine::enqueue runs, one per member queue (in
// batches of 64 jobs, so the producer is not the bottleneck); the clock stops when every node
// completed all n.
void BM_JobLane_Throughput(benchmark::State& state, const Placement& p, int consumers) {
  place(p);
  const int n = std::max(1000, messages() / 2);
  ThroughputRig rig(p, consumers, n);
  // The timed loop's names, as it had them before its setup moved into ThroughputRig.
  Context& pub = rig.pub;
  const std::vector<std::string>& mbases = rig.mbases;
  const std::string& sha = rig.sha;
  echo::table::Minter& minter = rig.minter;
  const BrandedId& group = rig.group;
  std::vector<std::string>& jobs = rig.jobs;
  const std::vector<std::string>& frames = rig.frames;
  const auto done = [&rig](std::uint64_t base) { return rig.done(base); };
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
  report_throughput(state, p, consumers, total, seconds);
}

}  // namespace lanes_bench
