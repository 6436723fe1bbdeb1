// SPDX-License-Identifier: MIT
// journal_bench's lanes (journal_bench.cc says what the bench measures): the bare job lane's
// enqueue -> row gone against the remembered lane's (intend_and_enqueue -> row gone), message by
// message, with the record's commit and a cold plain commit at the same point of the cycle.
#include "journal_bench.h"

#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/harness/placement.h>
#include <echo/harness/plain_wal.h>
#include <echo/harness/samples.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace journal_bench {

// ---- the lanes ----

// The lanes' nodes: nothing on the wire but the measured traffic (no heartbeat).
EngineOptions node(unsigned id, int cpu) {
  return echo::harness::quiet_node_options(g_server->host(), g_server->port(), id, cpu);
}

int messages() {
  const char* env = std::getenv("ECHO_BENCH_MESSAGES");
  return env != nullptr ? std::max(100, std::atoi(env)) : 2000;
}

namespace {

// Receiver R and sender S, started, and the journal both of the remembered lane's edges use.
struct LaneNodes {
  LaneNodes(const Placement& p, const fs::path& dir)
      : j(journal_options(dir, false)),
        group(j.group()),
        r(node(51, p.bench_cpu), {lane_table("jb", CoherenceMode::kJob, p.bench_cpu),
                                  lane_table("jm", CoherenceMode::kJob, p.bench_cpu)}),
        s(node(52, p.bench_cpu), {lane_table("jb", CoherenceMode::kNone, p.bench_cpu),
                                  lane_table("jm", CoherenceMode::kNone, p.bench_cpu)}) {
    r.use_journal("jm", j);
    if (r.start() || s.start())
      throw std::runtime_error("journal_bench: the lane nodes did not start");
  }
  Journal j;
  const BrandedId group;
  Engine r, s;
};

struct Lane {
  const char* table;
  bool remembered;
  JobLaneTurns turns;  // the consumer settled and parked again before each send
  Samples samples;
  // Send -> R's writer applied the batch that dropped the row (WriterStats::last_applied_ns, its
  // own steady clock): the sender also observes, and its call returns after the enqueue's reply,
  // so "until the row is gone" ends at max(apply, return); this ends at the apply.
  Samples applied;
};

// Both lanes on one row of R, and the record's floor beside them.
struct LanePair {
  LanePair(const Placement& p, const fs::path& dir)
      : nodes(p, dir),
        enqueue([this](const BrandedId& job, std::string_view n, const BrandedId& version) {
          enqueue_at = Clock::now();
          return nodes.s.enqueue_job("jm", nodes.group, job, n, version);
        }),
        plain(dir / "plain.db", false),
        name(mint("AST")),
        lanes{{"jb", false, JobLaneTurns(nodes.r, "jb")},
              {"jm", true, JobLaneTurns(nodes.r, "jm")}} {}

  // One message down `lane` after R re-puts the row (untimed): send -> the row gone in us, -1
  // when it was not applied; kept (with the writer's apply and the record's share) when `keep`.
  double one(Lane& lane, bool keep) {
    Engine& r = nodes.r;
    if (!lane.turns.settled()) return -1;
    if (!r.put(lane.table, name.view(), "px=105.00", mint("TXN"))) return -1;
    const BrandedId v = mint("TXN");
    const auto t0 = Clock::now();
    bool sent = false;
    if (lane.remembered) {
      sent = nodes.j.intend_and_enqueue(name, v, enqueue).has_value();
      if (keep)
        record_us.us.push_back(std::chrono::duration<double, std::micro>(enqueue_at - t0).count());
    } else {
      auto admitted = nodes.s.enqueue("jb", nodes.group, name.view(), v);
      sent = admitted && admitted->size() == 1;
    }
    if (!sent) return -1;
    lane.turns.sent();
    char buf[64];
    const bool gone = spin_until([&] {
      return echo::engine::internal::writer_of(r, lane.table)
                 ->map()
                 .read(name.view(), buf)
                 .status == echo::table::ReadStatus::kMiss;
    });
    if (!gone) return -1;
    const double us = since_us(t0);
    if (keep) {
      lane.samples.us.push_back(us);
      const std::int64_t at =
          echo::engine::internal::writer_of(r, lane.table)->stats().last_applied_ns;
      lane.applied.us.push_back(
          static_cast<double>(
              at -
              std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
          1e3);
    }
    return us;
  }

  // Warm-up (unmeasured) until both lanes' consumers are registered and parked.
  bool warm_up() {
    for (int i = 0; i < 100; ++i) {
      if (one(lanes[0], false) < 0 || one(lanes[1], false) < 0) return false;
    }
    return true;
  }

  // The benchmark's counters, and the closing table's figures.
  void report(benchmark::State& state, const Placement& p) {
    if (!nodes.j.flush()) state.SkipWithError("the journal's flush failed");
    const auto last = nodes.j.last_applied(name);
    if (!last) state.SkipWithError("the applied memory holds nothing for the lane's name");
    for (Samples* x : {&lanes[0].samples, &lanes[1].samples, &lanes[0].applied, &lanes[1].applied,
                       &record_us, &plain_us}) {
      x->sort();
    }
    const double bare = lanes[0].samples.pct(0.5), mem = lanes[1].samples.pct(0.5);
    state.counters["bare_p50_us"] = bare;
    state.counters["remembered_p50_us"] = mem;
    state.counters["bare_p99_us"] = lanes[0].samples.pct(0.99);
    state.counters["remembered_p99_us"] = lanes[1].samples.pct(0.99);
    state.counters["p50_ratio"] = bare > 0 ? mem / bare : 0;
    state.counters["record_p50_us"] = record_us.pct(0.5);
    state.SetItemsProcessed(state.iterations());
    state.SetLabel(p.name);
    g_figures[std::string("bare_") + p.name] = bare;
    g_figures[std::string("mem_") + p.name] = mem;
    g_figures[std::string("rec_") + p.name] = record_us.pct(0.5);
    g_figures[std::string("plain_cold_") + p.name] = plain_us.pct(0.5);
    state.counters["plain_cold_p50_us"] = plain_us.pct(0.5);
    g_figures[std::string("bare_applied_") + p.name] = lanes[0].applied.pct(0.5);
    g_figures[std::string("mem_applied_") + p.name] = lanes[1].applied.pct(0.5);
    state.counters["bare_applied_p50_us"] = lanes[0].applied.pct(0.5);
    state.counters["remembered_applied_p50_us"] = lanes[1].applied.pct(0.5);
  }

  LaneNodes nodes;
  // When the remembered lane's enqueue starts: the record's commit is over (the split above).
  Clock::time_point enqueue_at;
  const echo::engine::EnqueueFn enqueue;
  Samples record_us;  // the remembered send's record (its commit), from the send to the enqueue
  // The record's floor at the same point of the cycle: a plain WAL commit (PlainWal, the same page
  // size and synchronous) timed where a record would start, once per iteration, cold as the record
  // is (the lanes' threads and the server ran in between), not in a hot loop.
  PlainWal plain;
  Samples plain_us;
  const BrandedId name;
  Lane lanes[2];
};

}  // namespace

// Receiver R consumes two job-lane tables: jb (bare) and jm (its consumer consults the journal's
// applied memory and remembers every verdict). Sender S enqueues jb's jobs with Engine::enqueue
// and jm's through the journal's writer edge (record -> enqueue under the recorded job id ->
// mark), the journal being both edges' as in the drill's H6. Each iteration sends one message
// down each lane, alternating which goes first; between messages (untimed) the lane's consumer
// has completed the last job and parked again and R re-puts the row, so every send finds it
// parked. The manual time is the remembered lane's; the bare lane's samples are its baseline.
void BM_JobLane_RememberedVsBare(benchmark::State& state, const Placement& p) {
  pin_thread_or_warn(p.bench_cpu);
  pin_process_or_warn(g_server->pid(), p.server_cpu);  // redis-server's bio threads too
  TempDir dir(kDirPrefix);
  LanePair pair(p, dir.path());
  if (!pair.warm_up()) {
    state.SkipWithError("a warm-up job was not applied");
    return;
  }
  // The timed loop's names, as it had them before its setup moved into LanePair.
  Engine& r = pair.nodes.r;
  Lane* const lanes = pair.lanes;
  PlainWal& plain = pair.plain;
  Samples& plain_us = pair.plain_us;
  const BrandedId& name = pair.name;
  const auto one = [&pair](Lane& lane, bool keep) { return pair.one(lane, keep); };
  std::uint64_t iteration = 0;
  for (auto _ : state) {
    const bool bare_first = (iteration++ & 1) == 0;
    const double a = one(lanes[bare_first ? 0 : 1], true);
    const double b = one(lanes[bare_first ? 1 : 0], true);
    // The cold plain commit, staged as a remembered send is: both lanes settled, the row put back.
    bool plain_ok = false;
    if (a >= 0 && b >= 0 && lanes[0].turns.settled() && lanes[1].turns.settled() &&
        r.put("jm", name.view(), "px=105.00", mint("TXN"))) {
      const auto t0 = Clock::now();
      plain_ok = plain.commit(mint("AST").view());
      plain_us.us.push_back(since_us(t0));
    }
    if (a < 0 || b < 0 || !plain_ok) {
      state.SkipWithError("a job was not applied");
      break;
    }
    state.SetIterationTime((bare_first ? b : a) / 1e6);
  }
  pair.report(state, p);
}

}  // namespace journal_bench
