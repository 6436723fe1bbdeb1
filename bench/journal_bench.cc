// SPDX-License-Identifier: MIT
// The journal's price against its baselines, measured in the same binary and run: a plain SQLite
// WAL commit (one autocommitted INSERT, the same synchronous setting and 1 KiB pages) vs the
// writer's record+mark pair, single and amortized under 2/4/8 concurrent writers; and the bare job
// lane's enqueue -> row gone vs the remembered lane's (intend_and_enqueue -> row gone, the applier
// consulting and updating the applied memory), against a redis-server it starts itself.
//
// Placements: the SQLite benchmarks run unpinned (the scheduler's placement over every core);
// the lanes run one-core (everything on CPU 0) and spread (redis-server on CPU 1; the bench
// thread, both nodes' io threads and writers on CPU 0; the journal's flusher unpinned). The two
// lanes alternate message by message inside one benchmark, so the machine's load drifts hit the
// remembered lane and its baseline alike. The run ends with a table of the goals' ratios.
// ECHO_BENCH_MESSAGES overrides the lane messages per lane (default 2,000).
// Its parts: journal_bench_lanes.cc (the lanes), journal_bench_table.cc (the closing table);
// what they share, journal_bench.h. This file: the SQLite rows (the baselines and the pair) and
// main, which registers every benchmark.
#include "journal_bench.h"

#include <echo/engine/journal.h>
#include <echo/harness/placement.h>
#include <echo/harness/plain_wal.h>
#include <echo/harness/samples.h>
#include <echo/harness/temp_dir.h>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace journal_bench {

echo::testing::LocalServer* g_server = nullptr;
echo::table::Minter g_minter(105);  // one atomic cell: safe from every writer thread

JournalOptions journal_options(const fs::path& dir, bool full) {
  return echo::harness::journal_options(dir, mint("PRT").str(), 105, full);
}

std::map<std::string, double> g_figures;

// ---- SQLite: the baseline and the pair ----

// The baseline: one autocommitted INSERT per call into a WAL file at the journal's synchronous
// setting and page size (harness::PlainWal, the drill's H6 and echostore bench's too).

void BM_Sqlite_PlainWalCommit(benchmark::State& state, bool full) {
  pin_thread_or_warn(-1);
  TempDir dir(kDirPrefix);
  PlainWal plain(dir.path() / "plain.db", full);
  const auto t0 = Clock::now();
  for (auto _ : state) {
    if (!plain.commit(mint("AST").view())) {
      state.SkipWithError("the plain INSERT failed");
      break;
    }
  }
  const double us =
      since_us(t0) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  state.counters["us_per_commit"] = us;
  state.SetItemsProcessed(state.iterations());
  g_figures[full ? "plain_full" : "plain"] = us;
}

// The journal's VFS against SQLite's default on the same plain commit, in its two steps: the
// shim over "unix" (engine::journal_vfs(false): a transaction's WAL frames in one write) and over
// "unix-excl" (journal_vfs(): that, and the process holding the file's lock, so no fcntl() per
// transaction), alternating commit by commit between three files (the order rotating) so the
// machine's drift hits all alike; each commit timed alone, medians compared.
void BM_Sqlite_JournalVfsVsDefault(benchmark::State& state) {
  pin_thread_or_warn(-1);
  TempDir dir(kDirPrefix);
  PlainWal plain(dir.path() / "default.db", false);
  PlainWal coalesced(dir.path() / "coalesced.db", false, echo::engine::journal_vfs(false));
  PlainWal exclusive(dir.path() / "exclusive.db", false, echo::engine::journal_vfs());
  std::array<PlainWal*, 3> files{&plain, &coalesced, &exclusive};
  std::array<Samples, 3> samples;
  int turn = 0;
  for (auto _ : state) {
    turn = (turn + 1) % 3;
    for (int k = 0; k < 3; ++k) {
      const int f = (turn + k) % 3;
      const auto t0 = Clock::now();
      const bool ok = files[f]->commit(mint("AST").view());
      samples[f].us.push_back(since_us(t0));
      if (!ok) {
        state.SkipWithError("a plain INSERT failed");
        return;
      }
    }
  }
  for (Samples& x : samples) x.sort();
  const double d = samples[0].median(), one_write = samples[1].median(), j = samples[2].median();
  state.counters["default_p50_us"] = d;
  state.counters["one_write_p50_us"] = one_write;
  state.counters["journal_vfs_p50_us"] = j;
  state.counters["ratio"] = d > 0 ? j / d : 0;
  g_figures["vfs_default"] = d;
  g_figures["vfs_one_write"] = one_write;
  g_figures["vfs_journal"] = j;
}

// The pair's SQLite work alone, no journal around it: on the journal's schema, one BEGIN IMMEDIATE,
// the previous intent's mark, one INSERT ... RETURNING seq, COMMIT — what a single-writer pair
// commits. Pair minus this is the journal's own cost (locking, minting, the hand-off).
void BM_Sqlite_WireSchemaPairCommit(benchmark::State& state) {
  pin_thread_or_warn(-1);
  TempDir dir(kDirPrefix);
  sqlite3* db = nullptr;
  if (sqlite3_open((dir.path() / "wire.db").c_str(), &db) != SQLITE_OK)
    throw std::runtime_error("open");
  sqlite3_stmt *ins = nullptr, *mark = nullptr, *begin = nullptr, *commit = nullptr;
  const bool ok =
      sqlite3_exec(
          db,
          ("PRAGMA page_size=" + std::to_string(echo::engine::kJournalPageSize) +
           "; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE intents(seq INTEGER "
           "PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL UNIQUE, name_id TEXT NOT NULL, version "
           "TEXT NOT NULL, enqueued INTEGER NOT NULL DEFAULT 0, recorded_at INTEGER NOT NULL)")
              .c_str(),
          nullptr, nullptr, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(
          db,
          "INSERT INTO intents(job_id, name_id, version, recorded_at) VALUES(?, ?, ?, ?) "
          "RETURNING seq",
          -1, &ins, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "UPDATE intents SET enqueued = 1 WHERE job_id = ?", -1, &mark,
                         nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "COMMIT", -1, &commit, nullptr) == SQLITE_OK;
  if (!ok)
    throw std::runtime_error(std::string("journal_bench: wire table: ") + sqlite3_errmsg(db));
  const BrandedId name = mint("AST");
  std::string last_job;
  auto text = [](sqlite3_stmt* st, int i, std::string_view v) {
    sqlite3_bind_text(st, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  const auto t0 = Clock::now();
  for (auto _ : state) {
    const BrandedId job = mint("JOB"), version = mint("AST");
    bool good = sqlite3_step(begin) == SQLITE_DONE;
    sqlite3_reset(begin);
    if (!last_job.empty()) {
      text(mark, 1, last_job);
      good = good && sqlite3_step(mark) == SQLITE_DONE;
      sqlite3_reset(mark);
    }
    text(ins, 1, job.view());
    text(ins, 2, name.view());
    text(ins, 3, version.view());
    sqlite3_bind_int64(ins, 4, 0);
    good = good && sqlite3_step(ins) == SQLITE_ROW;
    sqlite3_reset(ins);
    good = good && sqlite3_step(commit) == SQLITE_DONE;
    sqlite3_reset(commit);
    if (!good) {
      state.SkipWithError(sqlite3_errmsg(db));
      break;
    }
    last_job = job.str();
  }
  const double us =
      since_us(t0) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  for (sqlite3_stmt* st : {ins, mark, begin, commit}) sqlite3_finalize(st);
  sqlite3_close(db);
  state.counters["us_per_commit"] = us;
  state.SetItemsProcessed(state.iterations());
  g_figures["wire"] = us;
}

// One writer: record (a commit the caller waits for) then mark (queued for the next commit), as
// intend_and_enqueue does around its enqueue. The clock includes the final flush of the last mark.
void BM_Journal_RecordMarkPair(benchmark::State& state, bool full) {
  pin_thread_or_warn(-1);
  TempDir dir(kDirPrefix);
  Journal j(journal_options(dir.path(), full));
  const BrandedId name = mint("AST");
  const auto t0 = Clock::now();
  for (auto _ : state) {
    const auto job = j.record(name, mint("AST"));
    if (!job) {
      state.SkipWithError("the journal refused a record");
      break;
    }
    j.mark_enqueued(*job);
  }
  if (!j.flush()) state.SkipWithError("the journal's flush failed");
  const double us =
      since_us(t0) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  const auto s = j.stats();
  if (s.intents != static_cast<std::uint64_t>(state.iterations()) || s.pending_enqueue != 0) {
    state.SkipWithError("not every pair reached the file");
  }
  state.counters["us_per_pair"] = us;
  state.counters["requests_per_commit"] =
      static_cast<double>(s.grouped) /
      static_cast<double>(std::max<std::uint64_t>(1, s.transactions));
  state.SetItemsProcessed(state.iterations());
  g_figures[full ? "pair_full" : "pair"] = us;
}

// `threads` writers on one journal, each looping record+mark on its own name; amortized = the
// wall time from the first pair to the last mark in the file over every pair made.
struct Shared {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<Journal> journal;
  Clock::time_point t0;
};
Shared g_shared;

void BM_Journal_RecordMarkPairConcurrent(benchmark::State& state) {
  if (state.thread_index() == 0) {
    pin_thread_or_warn(-1);
    g_shared.dir = std::make_unique<TempDir>(kDirPrefix);
    g_shared.journal = std::make_unique<Journal>(journal_options(g_shared.dir->path(), false));
    g_shared.t0 = Clock::now();
  }
  const BrandedId name = mint("AST");
  for (auto _ : state) {
    const auto job = g_shared.journal->record(name, mint("AST"));
    if (!job) {
      state.SkipWithError("the journal refused a record");
      break;
    }
    g_shared.journal->mark_enqueued(*job);
  }
  // The loop's end is a barrier: every writer is done when thread 0 gets here.
  if (state.thread_index() == 0) {
    if (!g_shared.journal->flush()) state.SkipWithError("the journal's flush failed");
    const double pairs = static_cast<double>(state.iterations()) * state.threads();
    const double us = since_us(g_shared.t0) / pairs;
    const auto s = g_shared.journal->stats();
    if (static_cast<double>(s.intents) != pairs || s.pending_enqueue != 0) {
      state.SkipWithError("not every pair reached the file");
    }
    state.counters["us_per_pair"] = us;
    state.counters["requests_per_commit"] =
        static_cast<double>(s.grouped) /
        static_cast<double>(std::max<std::uint64_t>(1, s.transactions));
    g_figures["pair_" + std::to_string(state.threads())] = us;
    g_shared.journal.reset();
    g_shared.dir.reset();
  }
  state.SetItemsProcessed(state.iterations());
}

// The tail of a record a service makes now and then (a writer pausing 100 us between pairs),
// beside a plain commit on the same VFS that checkpoints as SQLite does by default (inline, in
// the commit that takes the WAL past 1,000 frames): the journal checkpoints on its flusher's own
// connection and a caller's commit only past 4,000 frames. Alternating pair by pair; each timed
// alone. Percentiles and the journal's checkpoint counts in the counters. With `bursts`, an
// applier thread remembers 2,000 new versions at once every 10 ms (a storm's worth of applies,
// 200k upserts/s on average, below what SQLite writes): what a record waits behind is then the
// flusher's transaction of queued upserts, at most max_group (256) of them.
void BM_Journal_RecordTail(benchmark::State& state, bool bursts) {
  pin_thread_or_warn(-1);
  TempDir dir(kDirPrefix);
  Journal j(journal_options(dir.path(), false));
  PlainWal plain(dir.path() / "plain.db", false, echo::engine::journal_vfs());
  const BrandedId name = mint("AST");
  Samples rec, base;
  std::atomic<bool> stop{false};
  std::thread applier;
  if (bursts) {
    applier = std::thread([&j, &stop] {
      std::vector<BrandedId> names;
      for (int i = 0; i < 5000; ++i) names.push_back(mint("AST"));
      for (std::size_t k = 0; !stop.load(std::memory_order_relaxed);) {
        for (int i = 0; i < 2000; ++i, ++k) j.remember(names[k % names.size()], mint("TXN"));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  for (auto _ : state) {
    auto t0 = Clock::now();
    const auto job = j.record(name, mint("AST"));
    if (!job) {
      state.SkipWithError("the journal refused a record");
      break;
    }
    j.mark_enqueued(*job);
    rec.us.push_back(since_us(t0));
    t0 = Clock::now();
    if (!plain.commit(mint("AST").view())) {
      state.SkipWithError("the plain INSERT failed");
      return;
    }
    base.us.push_back(since_us(t0));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  stop = true;
  if (applier.joinable()) applier.join();
  rec.sort();
  base.sort();
  const auto s = j.stats();
  const std::string key = bursts ? "tail_bursts_" : "tail_";
  const std::pair<const char*, double> pcts[] = {
      {"p50", 0.5}, {"p99", 0.99}, {"p999", 0.999}, {"max", 1.0}};
  for (const auto& [tag, p] : pcts) {
    state.counters[std::string("record_") + tag + "_us"] = rec.pct(p);
    state.counters[std::string("plain_") + tag + "_us"] = base.pct(p);
    g_figures[key + "rec_" + tag] = rec.pct(p);
    g_figures[key + "plain_" + tag] = base.pct(p);
  }
  state.counters["checkpoints"] = static_cast<double>(s.checkpoints);
  state.counters["inline_checkpoints"] = static_cast<double>(s.inline_checkpoints);
  state.counters["remembered"] = static_cast<double>(s.remembered);
  g_figures[key + "checkpoints"] = static_cast<double>(s.checkpoints);
  g_figures[key + "inline"] = static_cast<double>(s.inline_checkpoints);
  g_figures[key + "n"] = static_cast<double>(rec.us.size());
}

}  // namespace journal_bench

using namespace journal_bench;  // NOLINT(google-build-using-namespace): main registers them all

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  echo::testing::LocalServer server;
  g_server = &server;
  for (bool full : {false, true}) {
    const char* tag = full ? "/full" : "/normal";
    benchmark::RegisterBenchmark((std::string("BM_Sqlite_PlainWalCommit") + tag).c_str(),
                                 BM_Sqlite_PlainWalCommit, full)
        ->Unit(benchmark::kMicrosecond);
    if (!full) {
      benchmark::RegisterBenchmark("BM_Sqlite_JournalVfsVsDefault/normal",
                                   BM_Sqlite_JournalVfsVsDefault)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark("BM_Sqlite_WireSchemaPairCommit/normal",
                                   BM_Sqlite_WireSchemaPairCommit)
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark((std::string("BM_Journal_RecordMarkPair") + tag).c_str(),
                                 BM_Journal_RecordMarkPair, full)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("BM_Journal_RecordTail", BM_Journal_RecordTail, false)
      ->Iterations(8000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Journal_RecordTail/bursts", BM_Journal_RecordTail, true)
      ->Iterations(8000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Journal_RecordMarkPairConcurrent",
                               BM_Journal_RecordMarkPairConcurrent)
      ->Threads(2)
      ->Threads(4)
      ->Threads(8)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  const int n = messages();
  for (const Placement& p : kPlacements) {
    benchmark::RegisterBenchmark((std::string("BM_JobLane_RememberedVsBare/") + p.name).c_str(),
                                 BM_JobLane_RememberedVsBare, p)
        ->Iterations(n)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}
