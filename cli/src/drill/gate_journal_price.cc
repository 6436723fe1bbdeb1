// SPDX-License-Identifier: MIT
// Gate H6 (docs/wire.md, "The gates"): the journal's price, derived from a plain SQLite WAL commit
// and the bare job lane measured in the same run: record+mark pairs single and under 4 writers,
// then the remembered lane against the bare one, message by message. The other journal gates
// (H1-H5) are gate_journal.cc's; what they share, gate_journal.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <latch>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/harness/plain_wal.h>
#include <echo/table/branded_id.h>

#include "drill/drill.h"
#include "drill/floors.h"
#include "drill/gate_journal.h"

namespace echo::cli {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Journal;
using floors::Clock;
using floors::fmt;
using floors::node_options;
using floors::Redis;
using journal_gates::JournalDir;
using journal_gates::lane_enqueue;
using journal_gates::lane_table;
using journal_gates::member;
using journal_gates::mint;
using journal_gates::minter;
using journal_gates::options;
using table::BrandedId;
namespace fs = std::filesystem;

constexpr int kPairs = 1000, kWriters = 4, kLoadedPairs = 2000, kMessages = 400, kWarmup = 20;

void narrate(GateRun& run) {
  run.stage(
      "a plain SQLite WAL table (synchronous=NORMAL, the journal's page size, one "
      "autocommitted INSERT per call) and "
      "the journal in one temp dir: 1,000 record+mark pairs single, 2,000 under 4 writers (each "
      "on its own name, timed from their common start once all four threads exist to the last "
      "mark in the file); node R with two job-lane tables, jb (bare) and jm (the journal), "
      "sender S; 400 messages each, one at a time and alternating lane by lane, from the send to "
      "the row gone from R's L1");
}

// A plain WAL commit, the pair's baseline (us per commit); nullopt when it could not run.
std::optional<double> plain_commit_us(const fs::path& dir) {
  double plain_us = 0;
  bool ok = true;
  try {
    harness::PlainWal wal(dir / "plain.db");
    const auto t0 = Clock::now();
    for (int i = 0; ok && i < kPairs; ++i) ok = wal.commit(mint("AST").str());
    plain_us = floors::since_us(t0) / kPairs;
  } catch (const std::runtime_error&) {
    ok = false;
  }
  if (!ok) return std::nullopt;
  return plain_us;
}

// One record+mark pair on `j`. A record the file refused ends the loop (counted by the caller):
// the figures would time nothing.
bool record_and_mark(Journal& j, std::atomic<bool>& refused, const BrandedId& name) {
  const auto job = j.record(name, mint("AST"));
  if (!job) {
    refused = true;
    return false;
  }
  j.mark_enqueued(*job);
  return true;
}

// kLoadedPairs pairs under kWriters writers, each on its own name: us per pair.
double loaded_pair_us(Journal& j, std::atomic<bool>& refused) {
  Clock::time_point t0;
  {
    // The clock starts once every writer thread exists (their creation is not a pair's cost),
    // as Google Benchmark's threads start in journal_bench's BM_Journal_RecordMarkPairConcurrent.
    std::latch spawned(kWriters), go(1);
    std::vector<std::jthread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&] {
        const BrandedId own = mint("AST");
        spawned.count_down();
        go.wait();
        for (int i = 0; i < kLoadedPairs / kWriters; ++i) {
          if (!record_and_mark(j, refused, own)) break;
        }
      });
    }
    spawned.wait();
    t0 = Clock::now();
    go.count_down();
  }
  (void)j.flush();  // its error, if any, shows as marks not in the file
  return floors::since_us(t0) / kLoadedPairs;
}

struct PairPrice {
  double single_us = 0, loaded_us = 0;
  double per_commit = 0;  // records and marks per commit under the writers (the gathering's)
  double hi = 0;          // the single pair's band's top
};

// The pairs single and under the writers, and the single pair's band from the plain commit.
PairPrice price_pairs(GateRun& run, Journal& j, double plain_us) {
  const BrandedId pname = mint("AST");
  std::atomic<bool> refused{false};
  const auto t0 = Clock::now();
  for (int i = 0; i < kPairs; ++i) {
    if (!record_and_mark(j, refused, pname)) break;
  }
  (void)j.flush();  // its error, if any, shows as marks not in the file below
  PairPrice p;
  p.single_us = floors::since_us(t0) / kPairs;
  const auto before = j.stats();
  p.loaded_us = loaded_pair_us(j, refused);
  const auto js = j.stats();
  run.expect(!refused && js.intents == kPairs + kLoadedPairs && js.pending_enqueue == 0,
             "every pair recorded and marked");
  p.per_commit =
      static_cast<double>(js.grouped - before.grouped) /
      static_cast<double>(std::max<std::uint64_t>(1, js.transactions - before.transactions));
  const double pair_lo = 0.25 * plain_us;
  p.hi = 10 * plain_us + 200;
  run.derive(
      "a plain WAL commit costs " + fmt("%.1f", plain_us) +
      " us here; a pair is one "
      "commit the caller runs on its own thread (the connection free: no hand-off) plus a "
      "mark the flusher commits within ms, on a schema that writes an index page more (the plain "
      "table checkpoints inline, the journal on its flusher's connection): expect " +
      fmt("%.0f", pair_lo) + " to " + fmt("%.0f", p.hi) +
      " us single (goal <= 2x the "
      "plain commit: " +
      fmt("%.1f", 2 * plain_us) + " us)");
  run.expect(p.single_us >= pair_lo && p.single_us <= p.hi,
             "single pair " + fmt("%.1f", p.single_us) + " us inside the derived band");
  return p;
}

// One lane of R's two: its samples, and how many kept messages came as a hand-off.
struct Lane {
  std::string table;
  floors::JobLaneTurns turns;
  floors::Samples seen, applied;
  int handed = 0;
};

// One message down `lane` through `send`; each kept one also asks the consumer whether it came
// as a hand-off or by a claim. False when it was not applied.
template <class Send>
bool one(Engine& rn, const BrandedId& name, Lane& lane, bool keep, Send send) {
  const auto at_send = floors::consumer_of(rn, lane.table);
  const auto timed = [&](const BrandedId& v) {
    if (!send(v)) return false;
    lane.turns.sent();
    return true;
  };
  if (!floors::lane_message(
          rn, lane.table, name, rn, minter(), [&] { return lane.turns.settled(); }, timed, keep,
          lane.seen, lane.applied)) {
    return false;
  }
  const auto took = [&] {
    const auto c = floors::consumer_of(rn, lane.table);
    return c.handed_off > at_send.handed_off || c.claimed > at_send.claimed;
  };
  if (keep && floors::spin_until(took) &&
      floors::consumer_of(rn, lane.table).handed_off > at_send.handed_off) {
    ++lane.handed;
  }
  return true;
}

// Message by message, alternating, so both lanes see the same moment of a noisy machine: the
// bare lane through S's enqueue, the remembered one through the journal's writer edge.
void alternate(Engine& rn, Engine& sn, Journal& lj, const BrandedId& group, const BrandedId& name,
               Lane& bare, Lane& mem) {
  const auto enqueue = lane_enqueue(sn, "jm", group);
  const auto send_bare = [&](const BrandedId& v) {
    auto a = sn.enqueue("jb", group, name.view(), v);
    return a && a->size() == 1;
  };
  const auto send_mem = [&](const BrandedId& v) {
    return lj.intend_and_enqueue(name, v, enqueue).has_value();
  };
  for (int i = 0; i < kMessages + kWarmup; ++i) {
    if (!one(rn, name, bare, i >= kWarmup, send_bare) ||
        !one(rn, name, mem, i >= kWarmup, send_mem)) {
      break;
    }
  }
  bare.seen.sort();
  mem.seen.sort();
}

// The remembered lane's band from the bare lane's median and the pair's band.
void expect_lane_band(GateRun& run, const Lane& bare, const Lane& mem, double pair_hi) {
  run.expect(bare.seen.us.size() == kMessages && mem.seen.us.size() == kMessages,
             "400 messages through each lane");
  run.expect(2 * bare.handed >= kMessages && 2 * mem.handed >= kMessages,
             "most messages were handed to the parked consumer (bare " +
                 std::to_string(bare.handed) + ", remembered " + std::to_string(mem.handed) +
                 " of 400)");
  const double bm = bare.seen.median(), mm = mem.seen.median();
  const double lo = 0.8 * bm, hi = 4 * bm + 3 * pair_hi;
  run.derive(
      "the bare lane's median " + fmt("%.0f", bm) +
      " us; the remembered lane adds the "
      "writer's record commit before the enqueue and an in-memory check and a queued upsert at the "
      "apply: expect " +
      fmt("%.0f", lo) + " to " + fmt("%.0f", hi) +
      " us (goal <= 1.3x "
      "the bare lane: " +
      fmt("%.0f", 1.3 * bm) + " us; the original paid 3.5x)");
  run.expect(mm >= lo && mm <= hi,
             "remembered lane median " + fmt("%.0f", mm) + " us inside the derived band");
}

std::string price_figure(double plain_us, const PairPrice& p, double bm, double mm) {
  return fmt("%.1f", p.single_us) + " us per record+mark pair single (" +
         fmt("%.2f", p.single_us / plain_us) + "x a plain WAL commit of " + fmt("%.1f", plain_us) +
         " us; goal 2x " + (p.single_us <= 2 * plain_us ? "met" : "not met") + "), " +
         fmt("%.1f", p.loaded_us) + " us amortized under " + std::to_string(kWriters) +
         " writers (goal 10 us " + (p.loaded_us <= 10 ? "met" : "not met") + "; " +
         fmt("%.1f", p.per_commit) + " records and marks per commit); remembered lane median " +
         fmt("%.0f", mm) + " us vs the bare lane's " + fmt("%.0f", bm) + " us, " +
         fmt("%.2f", mm / bm) + "x (goal 1.3x " + (mm <= 1.3 * bm ? "met" : "not met") + ")";
}

void h6_price(GateRun& run, const DrillTarget& target) {
  narrate(run);
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal files")) return;
  const std::optional<double> plain = plain_commit_us(dir.path());
  if (!run.expect(plain.has_value(), "the plain WAL baseline ran")) return;
  const BrandedId group = mint("PRT");
  Journal j(options(dir.path(), group));
  const PairPrice pairs = price_pairs(run, j, *plain);

  // The lanes: bare and remembered on one node, the journal the remembered lane's both edges.
  JournalDir lane_dir;
  if (!run.expect(lane_dir.ok(), "a temp dir for the lane's journal")) return;
  Journal lj(options(lane_dir.path(), group));
  Engine rn(node_options(target, 448),
            {lane_table("jb", CoherenceMode::kJob), lane_table("jm", CoherenceMode::kJob)});
  rn.use_journal("jm", lj);
  Engine sn(node_options(target, 449),
            {lane_table("jb", CoherenceMode::kNone), lane_table("jm", CoherenceMode::kNone)});
  if (!run.expect(!rn.start() && !sn.start(), "nodes R and S start")) return;
  Redis r(target);
  run.expect(floors::eventually([&] { return member(r, "jb", 448) && member(r, "jm", 448); }),
             "R registered on both lanes");
  const BrandedId name = mint("AST");
  Lane bare{"jb", floors::JobLaneTurns(rn, "jb")}, mem{"jm", floors::JobLaneTurns(rn, "jm")};
  alternate(rn, sn, lj, group, name, bare, mem);
  expect_lane_band(run, bare, mem, pairs.hi);
  run.figure(price_figure(*plain, pairs, bare.seen.median(), mem.seen.median()));
}

void add_journal_price_gate(std::vector<Gate>& gates) {
  gates.push_back({"H6", "price", h6_price});
}

// After gate_journal.cc's H1-H5 (4401), before the TLS gate (4500).
const GateGroup kGroup{4402, add_journal_price_gate};

}  // namespace
}  // namespace echo::cli
