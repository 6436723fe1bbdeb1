// SPDX-License-Identifier: MIT
// The journal against real SQLite files (docs/wire.md, "The journal"): the file, the pragmas and
// the exact schema; the writer's edge (record, mark); the applied memory (newer-only, survives a
// reopen); replay's coverage predicate and seq order; compaction. The enqueue side here is a
// function recording what it was asked (the bus itself is the integration tests' business).
// Group commit is journal_commit_test.cc's; a damaged or contended file journal_faults_test.cc's.
#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include <echo/engine/journal.h>
#include <echo/engine/table_spec.h>
#include <echo/table/journal_file.h>
#include <echo/table/names.h>

#include "journal_fixture.h"
#include "journal_impl.h"  // JournalTestAccess: a real SQLite limit on the journal's connection
#include "support/temp_dir.h"

namespace echo::engine {
namespace {

TEST_F(JournalTest, OpensOneFilePerGroupWithTheWireSchema) {
  Journal j(options());
  EXPECT_EQ(j.path(), dir_ / "nested" / "dir" / "journal-PRT0KHTOWnGLuC.db");
  EXPECT_TRUE(std::filesystem::exists(j.path()));
  Journal other(options("PRT0NgWEfAEJfs"));
  EXPECT_NE(other.path(), j.path());
  const std::string schema = query(j.path(),
                                   "SELECT sql FROM sqlite_master WHERE type='table' AND name IN "
                                   "('intents','applied') ORDER BY name");
  EXPECT_NE(
      schema.find("applied(name_id TEXT PRIMARY KEY, version TEXT NOT NULL, seq INTEGER NOT NULL)"),
      std::string::npos);
  EXPECT_NE(
      schema.find("intents(seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL UNIQUE"),
      std::string::npos);
  EXPECT_EQ(query(j.path(), "PRAGMA journal_mode"), "wal\n");
  EXPECT_EQ(j.stats().intents, 0u);
}

TEST_F(JournalTest, RefusesANonBrandedGroupAtTheDoor) {
  EXPECT_THROW(Journal(options("not-a-branded-id")), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "nested"));
}

// flusher_cpus: the flusher (echo-jrnl) runs on the set given; a CPU out of range is refused.
TEST_F(JournalTest, TheFlusherRunsOnTheCpusGiven) {
  JournalOptions bad = options();
  bad.flusher_cpus = {CPU_SETSIZE};
  EXPECT_THROW(Journal{bad}, ConfigError);
  const unsigned cpus = std::thread::hardware_concurrency();
  if (cpus < 2) GTEST_SKIP() << "one CPU: no set to tell apart from the default";
  JournalOptions o = options();
  o.flusher_cpus = {static_cast<int>(cpus - 1)};
  Journal j(o);
  // The flusher names itself as it begins: find it, then read the CPUs it may run on.
  std::string allowed;
  for (int tries = 0; tries < 500 && allowed.empty(); ++tries) {
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::string comm;
      std::getline(std::ifstream(task.path() / "comm"), comm);
      if (comm != "echo-jrnl") continue;
      std::ifstream status(task.path() / "status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("Cpus_allowed_list:", 0) == 0) {
          allowed = line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
        }
      }
    }
    if (allowed.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(allowed, std::to_string(cpus - 1));
  EXPECT_EQ(j.stats().flusher_pin_failures, 0u);
}

TEST_F(JournalTest, RecordsIntentsInSeqOrderAndMarksThem) {
  Journal j(options());
  const auto job1 = j.record(id("AST", 1), id("TXN", 10)).value();
  const auto jobs =
      j.record_many({{id("AST", 2), id("TXN", 20)}, {id("AST", 3), id("TXN", 30)}}).value();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(job1.ns(), "JOB");
  EXPECT_TRUE(table::newer(jobs[0], job1));
  j.mark_enqueued(jobs[0]);
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(query(j.path(), "SELECT seq, name_id, enqueued FROM intents ORDER BY seq"),
            "1|AST00000000001|0\n2|AST00000000002|1\n3|AST00000000003|0\n");
  // record_many shares one recorded_at.
  EXPECT_EQ(query(j.path(), "SELECT count(DISTINCT recorded_at) FROM intents WHERE seq > 1"),
            "1\n");
  const auto s = j.stats();
  EXPECT_EQ(s.intents, 3u);
  EXPECT_EQ(s.pending_enqueue, 2u);
}

TEST_F(JournalTest, AppliedMemoryIsNewerOnlyAndAnswersRememberedStale) {
  Journal j(options());
  const auto name = id("AST", 7);
  EXPECT_FALSE(j.remembered_stale(name, id("TXN", 1)));
  j.remember(name, id("TXN", 5));
  EXPECT_TRUE(j.remembered_stale(name, id("TXN", 4)));
  EXPECT_TRUE(j.remembered_stale(name, id("TXN", 5)));  // equal is not newer
  EXPECT_FALSE(j.remembered_stale(name, id("TXN", 6)));
  j.remember(name, id("TXN", 3));  // older: ignored
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(j.last_applied(name)->view(), id("TXN", 5).view());
  EXPECT_EQ(query(j.path(), "SELECT version, seq FROM applied"),
            std::string(id("TXN", 5).view()) + "|0\n");
}

TEST_F(JournalTest, MemorySurvivesAReopen) {
  const auto name = id("AST", 8);
  {
    Journal j(options());
    j.remember(name, id("TXN", 50));
    EXPECT_TRUE(j.flush());
  }
  Journal again(options());
  EXPECT_TRUE(again.remembered_stale(name, id("TXN", 49)));
  EXPECT_EQ(again.stats().remembered, 1u);
}

TEST_F(JournalTest, ReplayEnqueuesUncoveredIntentsInSeqOrderUnderRecordedIds) {
  Journal j(options());
  std::vector<BrandedId> jobs;
  for (std::uint64_t i = 1; i <= 5; ++i) {
    jobs.push_back(j.record(id("AST", i), id("TXN", 100 + i)).value());
  }
  j.remember(id("AST", 2), id("TXN", 102));  // covers intent 2 (equal)
  j.remember(id("AST", 4), id("TXN", 999));  // covers intent 4 (newer)
  j.remember(id("AST", 5), id("TXN", 1));    // older: does not cover intent 5
  std::vector<std::string> asked;
  std::set<std::string> bus = {jobs[2].str()};  // intent 3 is already on the bus (seam B)
  auto enqueue = [&](const BrandedId& job, std::string_view, const BrandedId&) -> Result<bool> {
    asked.push_back(job.str());
    return bus.insert(job.str()).second;
  };
  auto r = j.replay(enqueue);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->replayed, 2u);      // intents 1 and 5
  EXPECT_EQ(r->deduplicated, 1u);  // intent 3
  EXPECT_EQ(asked, (std::vector<std::string>{jobs[0].str(), jobs[2].str(), jobs[4].str()}));
  // Replay is idempotent: now everything is on the bus.
  auto again = j.replay(enqueue);
  EXPECT_EQ(again->replayed, 0u);
  EXPECT_EQ(again->deduplicated, 3u);
}

// A text-key table's intents and applied rows (docs/wire.md, "Text keys": name_id is TEXT):
// recorded, covered, replayed and reloaded under the key itself, colons and all; a name that is
// neither a branded id nor a text key never reaches the file.
TEST_F(JournalTest, TextKeysAreRecordedRememberedAndReplayedUnderTheKey) {
  const std::string long_key = "EUR:USD:" + std::string(192, 'K');
  std::vector<BrandedId> jobs;
  {
    Journal j(options());
    jobs.push_back(j.record("AAPL", id("TXN", 10)).value());
    jobs.push_back(j.record("EUR:USD", id("TXN", 11)).value());
    const IntentRow rows[] = {{long_key, id("TXN", 12)}, {"MSFT", id("TXN", 13)}};
    const std::vector<BrandedId> recorded = j.record_many(rows).value();
    jobs.insert(jobs.end(), recorded.begin(), recorded.end());
    j.remember("EUR:USD", id("TXN", 11));  // covers its intent (equal)
    j.remember("MSFT", id("TXN", 99));     // covers its intent (newer)
    EXPECT_TRUE(j.remembered_stale("MSFT", id("TXN", 50)));
    EXPECT_FALSE(j.remembered_stale("AAPL", id("TXN", 50)));  // nothing remembered for it
    ASSERT_TRUE(j.last_applied("EUR:USD"));
    EXPECT_EQ(*j.last_applied("EUR:USD"), id("TXN", 11));
    // Refused at the door, typed (kBadKey, the name in the detail), nothing written: alone, or
    // beside a good name in one record_many.
    const auto before = j.stats();
    for (const std::string& bad :
         {std::string(), std::string("AA PL"), std::string("{x}"), std::string(201, 'K')}) {
      auto one = j.record(bad, id("TXN", 1));
      ASSERT_FALSE(one) << bad;
      EXPECT_EQ(one.error(), Errc::kBadKey);
      EXPECT_NE(one.error().message().find("'" + bad.substr(0, 64) + "'"), std::string::npos)
          << one.error().message();
      const IntentRow mixed[] = {{"GOOD", id("TXN", 1)}, {bad, id("TXN", 1)}};
      auto many = j.record_many(mixed);
      ASSERT_FALSE(many) << bad;
      EXPECT_EQ(many.error(), Errc::kBadKey);
      auto r = j.intend_and_enqueue(
          bad, id("TXN", 1),
          [](const BrandedId&, std::string_view, const BrandedId&) -> Result<bool> {
            ADD_FAILURE() << "a bad name was enqueued";
            return true;
          });
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, make_error_code(Errc::kBadKey));
    }
    const auto after = j.stats();
    EXPECT_EQ(after.intents, 4u);
    EXPECT_EQ(after.transactions, before.transactions) << "a refused name opened a transaction";
    EXPECT_EQ(after.failed, 0u);
  }
  Journal again(options());  // the memory reloads the keys from the file
  EXPECT_EQ(again.stats().remembered, 2u);
  EXPECT_TRUE(again.remembered_stale("MSFT", id("TXN", 98)));
  std::vector<std::pair<std::string, std::string>> sent;
  auto r = again.replay(
      [&](const BrandedId& job, std::string_view name, const BrandedId&) -> Result<bool> {
        sent.emplace_back(job.str(), std::string(name));
        return true;
      });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->replayed, 2u);
  EXPECT_EQ(r->malformed, 0u);
  EXPECT_EQ(sent, (std::vector<std::pair<std::string, std::string>>{{jobs[0].str(), "AAPL"},
                                                                    {jobs[2].str(), long_key}}));
}

// Found by the soak (cluster_job_lane_test's second replay sent 1): a version the memory shows
// (last_applied) is in the file by the time a replay that follows reads it. remember() released
// its memory lock before it queued the upsert, so a replay in that window read the file without
// it. Here an applier remembers newer versions while this thread, each time it sees the newest
// in the memory, replays the intent recorded under it: none may be replayed.
TEST_F(JournalTest, AVersionTheMemoryShowsCoversItsIntentInTheReplayThatFollows) {
  Journal j(options());
  constexpr int kRounds = 400;
  std::vector<BrandedId> versions;
  for (int k = 1; k <= kRounds; ++k)
    versions.push_back(id("TXN", 1000 + static_cast<std::uint64_t>(k)));
  std::atomic<int> next{-1};
  std::thread applier([&] {
    for (int k = 0; k < kRounds; ++k) {
      while (next.load(std::memory_order_acquire) < k) std::this_thread::yield();
      j.remember(id("AST", 7), versions[k]);
    }
  });
  auto never = [](const BrandedId&, std::string_view, const BrandedId&) -> Result<bool> {
    return true;
  };
  int replayed = 0;
  for (int k = 0; k < kRounds; ++k) {
    ASSERT_TRUE(j.record(id("AST", 7), versions[k]));  // the intent this round's remember covers
    next.store(k, std::memory_order_release);
    while (j.last_applied(id("AST", 7)) != versions[k]) std::this_thread::yield();
    auto r = j.replay(never);
    ASSERT_TRUE(r);
    replayed += static_cast<int>(r->replayed);
  }
  applier.join();
  EXPECT_EQ(replayed, 0) << "a replay re-sent an intent the memory had already covered";
}

TEST_F(JournalTest, CompactionRetiresCoveredIntentsAndKeepsTheMemory) {
  Journal j(options());
  for (std::uint64_t i = 1; i <= 50; ++i) ASSERT_TRUE(j.record(id("AST", i), id("TXN", i)));
  for (std::uint64_t i = 1; i <= 30; ++i) j.remember(id("AST", i), id("TXN", i));
  EXPECT_EQ(j.compact().value(), 30u);
  EXPECT_EQ(j.compact().value(), 0u);
  auto s = j.stats();
  EXPECT_EQ(s.intents, 20u);
  EXPECT_EQ(s.remembered, 30u);
}

TEST_F(JournalTest, IntendAndEnqueueRecordsBeforeItEnqueues) {
  Journal j(options());
  bool durable_first = false;
  auto enqueue = [&](const BrandedId& job, std::string_view, const BrandedId&) -> Result<bool> {
    // At enqueue time the intent is already committed in the file.
    durable_first =
        query(j.path(),
              ("SELECT count(*) FROM intents WHERE job_id='" + job.str() + "'").c_str()) == "1\n";
    return true;
  };
  auto job = j.intend_and_enqueue(id("AST", 1), id("TXN", 1), enqueue);
  ASSERT_TRUE(job);
  EXPECT_TRUE(durable_first);
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(j.stats().pending_enqueue, 0u);
}

TEST_F(JournalTest, AnEmptyRecordManyRecordsNothing) {
  Journal j(options());
  EXPECT_TRUE(j.record_many(std::span<const IntentRow>()).value().empty());
  const auto s = j.stats();
  EXPECT_EQ(s.intents, 0u);
  EXPECT_EQ(s.transactions, 0u);
}

}  // namespace
}  // namespace echo::engine
