// SPDX-License-Identifier: MIT
// Gate FO of `echostore drill --cluster` (gate_cluster.cc has the others and starts the cluster):
// the master of a broadcast table's slot SIGKILLed under writers and readers; the same master owns
// a job-lane table's queue, fed through a journal, which loses nothing it recorded. Told as: the
// cast, the loads, the kill and the follow, the last versions read back, the journal's replay.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>
#include <echo/io/cluster_client.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>
#include <echo/testing/local_cluster.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "drill/drill.h"
#include "drill/floors.h"
#include "drill/gate_cluster.h"

namespace echo::cli {
namespace {

using cluster_gates::kDrillNode;
using cluster_gates::spec;
using engine::CoherenceMode;
using engine::Engine;
using floors::cached;
using floors::Clock;
using floors::cluster_node_options;
using floors::fmt;
using table::BrandedId;

constexpr int kNames = 30;     // the broadcast table's names
constexpr int kJobNames = 12;  // the job-lane table's

void narrate(GateRun& run) {
  run.stage(
      "table fo (broadcast) on writer W and readers R1, R2; W puts and SPUBLISHes every name in "
      "rounds while R1 and R2 read; W also records and enqueues (Journal::intend_and_enqueue) "
      "new versions of 12 names into job-lane table foj* (its membership and R1's member queue "
      "on the same master, R1 the journalled consumer); the master owning {fo} is SIGKILLed "
      "mid-run");
  run.derive(
      "a replica is promoted after cluster-node-timeout (" + std::to_string(2000) +
      " ms here); the nodes' held calls go to it, each node resubscribes there and flushes "
      "(its disconnect policy); after one last version per name, every node's read equals L2: "
      "stale reads after the failover 0; after one journal replay every job-lane name is at "
      "the last version the journal recorded (lost 0) and a second replay sends nothing");
}

// A job-lane table whose membership and whose consumer R1's member queue both live on the
// master that owns {fo}: one kill covers all three. "" when none of 400 names does.
std::string job_table_on(testing::LocalCluster& cluster, int fo_master) {
  for (int k = 0; k < 400; ++k) {
    std::string candidate = "foj" + std::to_string(k);
    const auto keys = engine::JobLaneKeys::for_table(candidate);
    if (cluster.master_of(io::hash_slot(keys.qbase)) == fo_master &&
        cluster.master_of(io::hash_slot(keys.member_base("322"))) == fo_master) {
      return candidate;
    }
  }
  return "";
}

// The gate's nodes and names. The journal is declared before the engines: it outlives them.
struct Cast {
  Cast(const DrillTarget& target, const std::string& job_table, const harness::TempDir& dir)
      : jt(job_table),
        writer(kDrillNode + 3),
        group(writer.mint("PRT").value()),
        journal(harness::journal_options(dir.path(), group.str(), kDrillNode + 4)),
        w(cluster_node_options(target, 321),
          {spec("fo", CoherenceMode::kBroadcast, loads), spec(jt, CoherenceMode::kNone, loads)}),
        r1(cluster_node_options(target, 322),
           {spec("fo", CoherenceMode::kBroadcast, loads), spec(jt, CoherenceMode::kJob, loads)}),
        r2(cluster_node_options(target, 323), {spec("fo", CoherenceMode::kBroadcast, loads)}) {
    r1.use_journal(jt, journal);
  }

  bool start() {
    return !w.start(std::chrono::seconds(15)) && !r1.start(std::chrono::seconds(15)) &&
           !r2.start(std::chrono::seconds(15));
  }
  std::array<Engine*, 3> nodes() { return {&w, &r1, &r2}; }

  // Every name put by W and cached by all three nodes.
  void seed() {
    for (int i = 0; i < kNames; ++i) {
      names.push_back(writer.mint("AST").value());
      (void)w.put("fo", names.back().view(), "v0");
    }
    for (Engine* e : nodes()) {
      for (const auto& n : names) (void)e->get("fo", n.view());
    }
  }

  std::string jt;
  table::Minter writer;
  BrandedId group;
  engine::Journal journal;
  std::atomic<int> loads{0};
  Engine w, r1, r2;
  std::vector<BrandedId> names, job_names;
};

// The loads while the master dies. They stop on `stop` (set once the failover is measured) or on
// their jthread's stop_token: a throw anywhere before that (kill_master_of, wait_failover, an
// admin call) unwinds through the jthreads, whose destructors request stop and join. Watching
// `stop` alone left them running and the unwinding's join waiting for ever.
struct Loads {
  explicit Loads(Cast& c) : finals(kJobNames) {
    wl = std::jthread([this, &c](const std::stop_token& st) { write_rounds(c, st); });
    rl = std::jthread([this, &c](const std::stop_token& st) { read(c, st); });
    for (int i = 0; i < kJobNames; ++i) c.job_names.push_back(c.writer.mint("AST").value());
    enqueue = [&c](const BrandedId& job, std::string_view n, const BrandedId& v) {
      return c.w.enqueue_job(c.jt, c.group, job, n, v);
    };
    jl = std::jthread([this, &c](const std::stop_token& st) { record_and_enqueue(c, st); });
  }

  bool stopping(const std::stop_token& st) const { return stop.load() || st.stop_requested(); }

  void write_rounds(Cast& c, const std::stop_token& st) {
    for (int round = 1; !stopping(st); ++round) {
      for (const auto& n : c.names) {
        auto v = c.w.put("fo", n.view(), "r" + std::to_string(round));
        (v && c.w.broadcast("fo", n.view(), *v) ? writes : refused).fetch_add(1);
      }
    }
  }

  void read(Cast& c, const std::stop_token& st) {
    for (int i = 0; !stopping(st); ++i) {
      if (c.r1.get("fo", c.names[i % kNames].view())) reads.fetch_add(1);
      if (c.r2.get("fo", c.names[(i + 7) % kNames].view())) reads.fetch_add(1);
    }
  }

  void record_and_enqueue(Cast& c, const std::stop_token& st) {
    table::Minter versions(kDrillNode + 5);
    while (!stopping(st)) {
      for (int i = 0; i < kJobNames && !stopping(st); ++i) {
        const BrandedId v = versions.mint("AST").value();
        auto job = c.journal.intend_and_enqueue(c.job_names[i], v, enqueue);
        if (!job && job.error() == engine::Errc::kJournalIo) {
          record_refused.fetch_add(1);  // not in the file, so nothing to lose; the gate fails
        } else {
          finals[i] = v;
          recorded.fetch_add(1);
          if (!job) enqueue_refused.fetch_add(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }

  void join() {
    stop = true;
    wl.join();
    rl.join();
    jl.join();
  }

  std::atomic<bool> stop{false};
  std::atomic<int> writes{0}, refused{0}, reads{0};
  // The journalled writer: every intent is durable before its enqueue is tried (held or refused
  // while the queue's master is down), so `recorded` counts what must not be lost.
  std::vector<std::optional<BrandedId>> finals;  // the last version recorded per name
  std::atomic<int> recorded{0}, enqueue_refused{0}, record_refused{0};
  engine::EnqueueFn enqueue;
  std::jthread wl, rl, jl;  // last: joined before what they use goes
};

struct Followed {
  int promoted = -1;
  double promoted_ms = 0, followed_ms = 0;
};

// The kill: the master owning `slot` SIGKILLed, a replica promoted, and every node resubscribed
// on it (lost, flushed, confirmed); both timed from the kill.
Followed kill_and_follow(GateRun& run, testing::LocalCluster& cluster, std::uint16_t slot,
                         Cast& c) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  const int old_master = cluster.kill_master_of(slot);
  Followed out;
  try {
    out.promoted = cluster.wait_failover(slot, old_master, std::chrono::seconds(30));
  } catch (const std::exception& e) {
    run.expect(false, e.what());
  }
  out.promoted_ms = floors::since_us(t0) / 1000;
  bool followed = true;
  for (Engine* e : c.nodes()) {
    followed = followed && floors::eventually(
                               [&] {
                                 const auto s = e->stats();
                                 const auto wr = engine::internal::writer_of(*e, "fo")->stats();
                                 return s.cluster && s.cluster->resubscribes >= 1 &&
                                        wr.disconnect_flushes >= 1 && !wr.suspended;
                               },
                               std::chrono::seconds(20));
  }
  out.followed_ms = floors::since_us(t0) / 1000;
  run.expect(out.promoted >= 0 && out.promoted != old_master, "a replica was promoted");
  run.expect(followed, "every node resubscribed on the promoted master (lost, flushed, confirmed)");
  return out;
}

// Lets the loads run on the promoted master (a round of writes, two of journalled enqueues),
// then stops them; whether the enqueues resumed.
bool resume_and_stop(Loads& l) {
  const int at_follow = l.writes.load(), recorded_at_follow = l.recorded.load();
  floors::eventually([&] { return l.writes.load() >= at_follow + kNames; },
                     std::chrono::seconds(20));
  const bool jobs_resumed =
      floors::eventually([&] { return l.recorded.load() >= recorded_at_follow + 2 * kJobNames; },
                         std::chrono::seconds(20));
  l.join();
  return jobs_resumed;
}

// One last version per name, heard by all three nodes; then every node's read must equal L2 on
// the promoted master.
void expect_last_versions(GateRun& run, testing::LocalCluster& cluster, int promoted, Cast& c) {
  std::vector<BrandedId> last;
  int heard_all = 0;
  for (const auto& n : c.names) {
    auto v = c.w.put("fo", n.view(), "final");
    if (!v) continue;
    last.push_back(*v);
    auto heard = c.w.broadcast("fo", n.view(), *v);
    heard_all += heard && *heard == 3;
  }
  run.expect(
      static_cast<int>(last.size()) == kNames && heard_all == kNames,
      fmt("the last version of every name reached all 3 nodes (%d of %d)", heard_all, kNames));
  floors::eventually(
      [&] {
        for (Engine* e : {&c.r1, &c.r2}) {
          for (const auto& n : c.names) {
            if (cached(*e, "fo", n)) {
              auto g = e->get("fo", n.view());
              if (!g || g->value != "final") return false;
            }
          }
        }
        return true;
      },
      std::chrono::seconds(5));
  int stale = 0;
  for (Engine* e : c.nodes()) {
    for (std::size_t i = 0; i < last.size(); ++i) {
      const std::string raw =
          cluster.admin(static_cast<std::size_t>(promoted),
                        {"GET", table::l2_key("fo", c.names[i].view()).value()});
      auto g = e->get("fo", c.names[i].view());
      stale +=
          !g || raw.size() < 14 || g->version->view() != raw.substr(0, 14) || g->version != last[i];
    }
  }
  run.expect(stale == 0, fmt("stale reads after the failover: %d of %d", stale, 3 * kNames));
}

struct Replayed {
  std::uint64_t replayed = 0;  // what the first replay re-enqueued
  int at_final = 0;            // job-lane names at their last recorded version
};

// The job lane: one replay re-enqueues what no applied version covers; then every name must
// reach the last version recorded for it, and nothing may be left uncovered.
Replayed replay_journal(GateRun& run, testing::LocalCluster& cluster, Cast& c, const Loads& l) {
  // R1 is admitted again once its live key is on its member queue's current master (its first
  // beat there); a replay before that would answer no_live_member and leave the intents for later.
  const std::string r1_live = engine::JobLaneKeys::for_table(c.jt).member_base("322") + "live";
  floors::eventually(
      [&] {
        try {
          const int at = cluster.master_of(io::hash_slot(r1_live));
          return cluster.admin(static_cast<std::size_t>(at), {"EXISTS", r1_live}) == "1";
        } catch (const std::exception&) {
          return false;  // the shard is electing
        }
      },
      std::chrono::seconds(20));
  auto replayed = c.journal.replay(l.enqueue);
  run.expect(replayed.has_value(), "the journal replayed after recovery");
  int at_final = 0;
  floors::eventually(
      [&] {
        at_final = 0;
        for (int i = 0; i < kJobNames; ++i) {
          at_final += c.journal.last_applied(c.job_names[i]) == l.finals[i];
        }
        return at_final == kJobNames;
      },
      std::chrono::seconds(30));
  auto again = c.journal.replay(l.enqueue);
  const std::uint64_t uncovered = again ? again->replayed : ~0ull;
  run.expect(at_final == kJobNames,
             fmt("job-lane names at the journal's last recorded version: %d of %d (lost %d)",
                 at_final, kJobNames, kJobNames - at_final));
  run.expect(uncovered == 0, fmt("a second replay finds %llu intents uncovered",
                                 static_cast<unsigned long long>(uncovered)));
  run.expect(l.record_refused.load() == 0,
             fmt("the journal refused %d records (journal_io)", l.record_refused.load()));
  return {replayed ? replayed->replayed : 0, at_final};
}

void fo_failover(GateRun& run, const DrillTarget& target) {
  testing::LocalCluster& cluster = *target.cluster;
  const std::uint16_t slot = io::hash_slot("fo");
  narrate(run);
  const std::string jt = job_table_on(cluster, cluster.master_of(slot));
  const harness::TempDir dir("echostore-drill-fo-", std::nothrow);
  if (!run.expect(!jt.empty() && dir.ok(),
                  "a job-lane table on the same master, and a journal directory")) {
    return;
  }
  Cast cast(target, jt, dir);
  if (!run.expect(cast.start(), "W, R1, R2 start")) return;
  cast.seed();
  Loads loads(cast);
  const Followed fo = kill_and_follow(run, cluster, slot, cast);
  run.expect(resume_and_stop(loads), "the journalled writer's enqueues resumed after the failover");
  expect_last_versions(run, cluster, fo.promoted, cast);
  const Replayed replayed = replay_journal(run, cluster, cast, loads);
  run.figure(
      fmt("promoted %.0f ms after the kill, every node followed at %.0f ms; %d writes, %d "
          "refused in the outage, %d reads; stale after 0 of %d",
          fo.promoted_ms, fo.followed_ms, loads.writes.load(), loads.refused.load(),
          loads.reads.load(), 3 * kNames));
  run.figure(
      fmt("job lane: %d intents recorded (%d enqueues refused in the outage), replay "
          "re-enqueued %llu; %d of %d names final, lost 0, second replay 0",
          loads.recorded.load(), loads.enqueue_refused.load(),
          static_cast<unsigned long long>(replayed.replayed), replayed.at_final, kJobNames));
}

void add_failover_gate(std::vector<Gate>& gates) {
  gates.push_back({"FO", "failover drill (cluster)", fo_failover});
}

// Right after gate_cluster.cc's C1, F2, F3 and F5 (kClusterGateOrder + 1).
const GateGroup kGroup{kClusterGateOrder + 2, add_failover_gate};

}  // namespace
}  // namespace echo::cli
