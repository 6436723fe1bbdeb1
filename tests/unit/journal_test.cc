// SPDX-License-Identifier: MIT
// The journal against real SQLite files (docs/wire.md, "The journal"): the file, the pragmas and
// the exact schema; the writer's edge (record, mark, group commit); the applied memory (newer-only,
// survives a reopen); replay's coverage predicate and seq order; compaction. The enqueue side here
// is a function recording what it was asked (the bus itself is the integration tests' business).
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

#include "journal_impl.h"  // JournalTestAccess: a real SQLite limit on the journal's connection
#include "support/temp_dir.h"

namespace echo::engine {
namespace {

using table::BrandedId;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

class JournalTest : public ::testing::Test {
 protected:
  JournalOptions options(std::string group = "PRT0KHTOWnGLuC") {
    JournalOptions o;
    o.dir = dir_ / "nested" / "dir";
    o.group = std::move(group);
    return o;
  }
  std::string query(const std::filesystem::path& file, const char* sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    std::string out;
    sqlite3_exec(
        db, sql,
        [](void* o, int n, char** v, char**) {
          auto* s = static_cast<std::string*>(o);
          for (int i = 0; i < n; ++i)
            *s += (v[i] ? v[i] : "NULL") + std::string(i + 1 < n ? "|" : "\n");
          return 0;
        },
        &out, nullptr);
    sqlite3_close(db);
    return out;
  }
  test::TempDir temp_{"echostore-journal-"};
  const std::filesystem::path& dir_ = temp_.path();
};

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

TEST_F(JournalTest, ConcurrentIntentsShareTransactions) {
  Journal j(options());
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        ASSERT_TRUE(j.record(id("AST", t * 1000 + i), id("TXN", i + 1)));
    });
  }
  for (auto& th : threads) th.join();
  const auto s = j.stats();
  EXPECT_EQ(s.intents, static_cast<std::uint64_t>(kThreads * kEach));
  EXPECT_EQ(query(j.path(), "SELECT count(DISTINCT job_id) FROM intents"),
            std::to_string(kThreads * kEach) + "\n");
  EXPECT_LE(s.transactions, s.grouped);
  // Four writers overlap: some commit carried another's record (flat combining, not one each).
  EXPECT_LT(s.transactions, static_cast<std::uint64_t>(kThreads * kEach));
}

TEST_F(JournalTest, QueuedMarksAndUpsertsReachTheFileWithoutAFlush) {
  Journal j(options());
  const auto job = j.record(id("AST", 11), id("TXN", 1)).value();
  j.mark_enqueued(job);
  j.remember(id("AST", 11), id("TXN", 1));
  // Nobody records or flushes: the flusher commits them within its linger (2 ms a tick).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string marked, remembered;
  while (std::chrono::steady_clock::now() < until) {
    marked = query(j.path(), "SELECT enqueued FROM intents");
    remembered = query(j.path(), "SELECT count(*) FROM applied");
    if (marked == "1\n" && remembered == "1\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(marked, "1\n");
  EXPECT_EQ(remembered, "1\n");
}

TEST_F(JournalTest, QueuedMarksAndUpsertsReachTheFileAtClose) {
  std::filesystem::path path;
  {
    Journal j(options());
    path = j.path();
    for (std::uint64_t i = 1; i <= 20; ++i) {
      j.mark_enqueued(j.record(id("AST", i), id("TXN", i)).value());
      j.remember(id("AST", i), id("TXN", i));
    }
  }  // closed at once: what is still queued is committed by the destructor
  EXPECT_EQ(query(path, "SELECT count(*) FROM intents WHERE enqueued = 1"), "20\n");
  EXPECT_EQ(query(path, "SELECT count(*) FROM applied"), "20\n");
}

TEST_F(JournalTest, ConcurrentWritersEachGetTheirOwnCommittedIntent) {
  // Flat combining: whichever writer holds the connection commits the others' records; each
  // caller must still get back exactly its own job ids, every one committed before the return.
  Journal j(options());
  constexpr int kThreads = 8, kEach = 100;
  std::vector<std::vector<std::pair<BrandedId, BrandedId>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const BrandedId name = id("AST", static_cast<std::uint64_t>(t * 1000 + i));
        const BrandedId job = j.record(name, id("TXN", static_cast<std::uint64_t>(i + 1))).value();
        j.mark_enqueued(job);
        got[t].emplace_back(job, name);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(j.flush());
  std::set<std::string> expected;
  for (const auto& per : got) {
    for (const auto& [job, name] : per) expected.insert(job.str() + "|" + name.str());
  }
  EXPECT_EQ(expected.size(), static_cast<std::size_t>(kThreads * kEach))
      << "a job id was answered twice";
  std::set<std::string> in_file;
  const std::string rows = query(j.path(), "SELECT job_id, name_id FROM intents");
  for (std::size_t at = 0, nl; (nl = rows.find('\n', at)) != std::string::npos; at = nl + 1) {
    in_file.insert(rows.substr(at, nl - at));
  }
  EXPECT_EQ(in_file, expected) << "each caller got back the job id recorded for its own name";
  const auto s = j.stats();
  EXPECT_EQ(s.intents, static_cast<std::uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.pending_enqueue, 0u);
}

TEST_F(JournalTest, WritersBatchWritersAndCallsOnMoreThreadsThanCoresAreAllAnswered) {
  // More threads than cores: waiters outlast their poll and sleep on the generation word, and
  // the connection passes among writers, record_many callers and calls (flush, stats). Every
  // caller must be answered (a lost wake hangs here), with its own ids in order, every row in
  // the file once.
  Journal j(options());
  constexpr int kWriters = 8, kEach = 150, kBatchers = 2, kBatches = 40, kRows = 3, kCallers = 2;
  std::vector<std::vector<std::pair<BrandedId, BrandedId>>> got(kWriters + kBatchers);
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const BrandedId name = id("AST", static_cast<std::uint64_t>(t * 1000 + i));
        const BrandedId job = j.record(name, id("TXN", static_cast<std::uint64_t>(i + 1))).value();
        j.mark_enqueued(job);
        got[t].emplace_back(job, name);
      }
    });
  }
  for (int t = kWriters; t < kWriters + kBatchers; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<std::pair<BrandedId, BrandedId>> rows;
        for (int r = 0; r < kRows; ++r) {
          rows.emplace_back(id("AST", static_cast<std::uint64_t>(t * 1000 + b * kRows + r)),
                            id("TXN", static_cast<std::uint64_t>(b + 1)));
        }
        const auto jobs = j.record_many(rows).value();
        ASSERT_EQ(jobs.size(), rows.size());
        for (int r = 0; r < kRows; ++r) got[t].emplace_back(jobs[r], rows[r].first);
      }
    });
  }
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        if (t == 0) {
          EXPECT_TRUE(j.flush());
        } else {
          (void)j.stats();
        }
        calls.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(calls.load(), kCallers * 60);
  std::set<std::string> expected;
  for (const auto& per : got) {
    for (const auto& [job, name] : per) expected.insert(job.str() + "|" + name.str());
  }
  constexpr int kTotal = kWriters * kEach + kBatchers * kBatches * kRows;
  EXPECT_EQ(expected.size(), static_cast<std::size_t>(kTotal)) << "a job id was answered twice";
  std::set<std::string> in_file;
  const std::string rows = query(j.path(), "SELECT job_id, name_id FROM intents");
  for (std::size_t at = 0, nl; (nl = rows.find('\n', at)) != std::string::npos; at = nl + 1) {
    in_file.insert(rows.substr(at, nl - at));
  }
  EXPECT_EQ(in_file, expected) << "each caller got back the job ids recorded for its own names";
  EXPECT_EQ(j.stats().intents, static_cast<std::uint64_t>(kTotal));
  EXPECT_EQ(j.stats().pending_enqueue, static_cast<std::uint64_t>(kBatchers * kBatches * kRows))
      << "the writers' marks all reached the file, the unmarked batches stay pending";
}

TEST_F(JournalTest, MarksAndUpsertsOfARefusedTransactionAreQueuedAgainNotLost) {
  // The file may not grow (RLIMIT_FSIZE: writes past the limit fail with EFBIG, SIGXFSZ
  // ignored): SQLite refuses the transaction carrying the queued marks and upserts. Nobody
  // waits for those, so the journal must keep them for the next transaction, not drop them.
  Journal j(options());
  const BrandedId job = j.record(id("AST", 1), id("TXN", 1)).value();
  EXPECT_TRUE(j.flush());
  const auto wal = std::filesystem::path(j.path().string() + "-wal");
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit tight = before;
  tight.rlim_cur = std::filesystem::file_size(wal);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);
  j.mark_enqueued(job);
  for (std::uint64_t n = 1; n <= 50; ++n) j.remember(id("AST", 100 + n), id("TXN", n));
  auto refused = j.flush();
  ASSERT_FALSE(refused) << "the transaction was refused, and the flush says so";
  EXPECT_EQ(refused.error(), Errc::kJournalIo);
  EXPECT_NE(refused.error().message().find("(SQLITE_"), std::string::npos)
      << "the detail names SQLite's cause: " << refused.error().message();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  ::signal(SIGXFSZ, SIG_DFL);
  EXPECT_TRUE(j.flush());  // the same marks and upserts, now in the file
  const auto s = j.stats();
  EXPECT_GE(s.failed, 1u);
  EXPECT_EQ(s.pending_enqueue, 0u) << "the mark was lost";
  EXPECT_EQ(s.remembered, 50u) << "upserts were lost";
  EXPECT_EQ(query(j.path(), "SELECT count(*) FROM applied"), "50\n");
}

// A full disk, staged for real: PRAGMA max_page_count on the journal's own connection
// (JournalTestAccess), so a commit that would grow the file fails SQLITE_FULL in SQLite itself.
// Every record that rode the refused commit answers kJournalIo naming the cause (no exception,
// none of its rows in the file), concurrent callers each get the error, intend_and_enqueue sends
// nothing, the failures are counted, and once the limit is lifted a record succeeds.
TEST_F(JournalTest, AFullFileAnswersEveryRecordJournalIoAndALaterRecordSucceeds) {
  Journal j(options());
  ASSERT_TRUE(j.record(id("AST", 1), id("TXN", 1)));
  // SQLite never sets the limit below the file's size: 1 means "no page more than now".
  ASSERT_GT(JournalTestAccess::max_page_count(j, 1), 0);
  const JournalStats before = j.stats();
  // 100 rows of ~110 bytes need pages the file may not take, whoever's commit carries them.
  constexpr int kThreads = 4, kRows = 100;
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<BrandedId, BrandedId>> rows;
      for (int r = 0; r < kRows; ++r) {
        rows.emplace_back(id("AST", static_cast<std::uint64_t>(1000 * (t + 1) + r)), id("TXN", 2));
      }
      const auto jobs = j.record_many(rows);
      ASSERT_FALSE(jobs) << "a record past the file's limit answered ids";
      EXPECT_EQ(jobs.error(), Errc::kJournalIo);
      EXPECT_NE(jobs.error().message().find("database or disk is full (SQLITE_FULL)"),
                std::string::npos)
          << jobs.error().message();
      ++refused;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), kThreads);
  // Single records until one no longer fits: the one that does not fits no better a second time,
  // so intend_and_enqueue is refused too, before its enqueue.
  Result<BrandedId> single = id("AST", 1);
  std::uint64_t fitted = 0;
  for (std::uint64_t n = 1; n <= 1000 && single; ++n) {
    single = j.record(id("AST", 5000 + n), id("TXN", 3));
    fitted += single.has_value();
  }
  ASSERT_FALSE(single) << "1,000 records fit under the limit";
  EXPECT_EQ(single.error(), Errc::kJournalIo);
  EXPECT_EQ(std::string(to_string(Errc::kJournalIo)), "journal_io");
  EXPECT_EQ(single.error().message(), "journal: record: database or disk is full (SQLITE_FULL)");
  auto intended = j.intend_and_enqueue(
      id("AST", 9000), id("TXN", 3),
      [](const BrandedId&, std::string_view, const BrandedId&) -> Result<bool> {
        ADD_FAILURE() << "an intent the file refused was enqueued";
        return true;
      });
  ASSERT_FALSE(intended);
  EXPECT_EQ(intended.error(), Errc::kJournalIo);
  const JournalStats full = j.stats();
  EXPECT_GE(full.failed, before.failed + 3) << "the refused commits are counted";
  EXPECT_EQ(full.intents, before.intents + fitted) << "a refused record left rows in the file";
  // The limit lifted (SQLite's default, 2^30 - 1 pages): the same rows go in.
  ASSERT_GT(JournalTestAccess::max_page_count(j, 1073741823), 1000000);
  std::vector<std::pair<BrandedId, BrandedId>> rows;
  for (int r = 0; r < kRows; ++r) {
    rows.emplace_back(id("AST", static_cast<std::uint64_t>(1000 + r)), id("TXN", 2));
  }
  const auto jobs = j.record_many(rows);
  ASSERT_TRUE(jobs) << jobs.error().message();
  EXPECT_EQ(jobs->size(), static_cast<std::size_t>(kRows));
  EXPECT_EQ(j.stats().intents, full.intents + kRows);
}

// A B-tree leaf page of `table` in the database file (SQLite's dbstat table), after the WAL was
// copied back; and a page made unreadable: its type byte zeroed, which SQLite reports as
// SQLITE_CORRUPT when a read reaches it (a disk's bad sector, as far as a journal can tell).
int a_leaf_page_of(const std::filesystem::path& db, const char* table) {
  sqlite3* c = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &c), SQLITE_OK);
  int page = 0;
  const std::string sql = std::string("SELECT pageno FROM dbstat WHERE name = '") + table +
                          "' AND pagetype = 'leaf' ORDER BY pageno";
  std::vector<int> pages;
  sqlite3_exec(
      c, sql.c_str(),
      [](void* o, int, char** v, char**) {
        static_cast<std::vector<int>*>(o)->push_back(std::atoi(v[0]));
        return 0;
      },
      &pages, nullptr);
  sqlite3_close(c);
  if (pages.size() >= 3) page = pages[pages.size() / 2];
  return page;
}
void clobber_page(const std::filesystem::path& db, int page) {
  std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(page - 1) * kJournalPageSize);
  const char zero = 0;
  f.write(&zero, 1);
}

TEST_F(JournalTest, AnUnreadableAppliedMemoryFailsTheOpenInsteadOfLoadingPartOfIt) {
  std::filesystem::path file;
  {
    Journal j(options());
    for (std::uint64_t n = 1; n <= 3000; ++n) j.remember(id("AST", n), id("TXN", n));
    EXPECT_TRUE(j.flush());
    file = j.path();
  }  // closed: the WAL copied back into the file
  const int page = a_leaf_page_of(file, "applied");
  ASSERT_GT(page, 1) << "no leaf page of applied found";
  clobber_page(file, page);
  try {
    Journal j(options());
    ADD_FAILURE() << "opened with " << (j.last_applied(id("AST", 3000)) ? "" : "not ")
                  << "all of its applied memory: a name's row would be missing and an old "
                     "version applied";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("applied memory"), std::string::npos) << e.what();
  }
}

TEST_F(JournalTest, AReplayThatCannotReadEveryIntentFailsTypedInsteadOfReplayingPart) {
  std::filesystem::path file;
  {
    Journal j(options());
    std::vector<std::pair<BrandedId, BrandedId>> batch;
    for (std::uint64_t n = 1; n <= 3000; ++n) batch.emplace_back(id("AST", n), id("TXN", n));
    ASSERT_TRUE(j.record_many(batch));
    file = j.path();
  }
  const int page = a_leaf_page_of(file, "intents");
  ASSERT_GT(page, 1) << "no leaf page of intents found";
  clobber_page(file, page);
  Journal j(options());
  std::atomic<int> sent{0};
  const auto r = j.replay([&sent](const BrandedId&, std::string_view, const BrandedId&) {
    ++sent;
    return Result<bool>(true);
  });
  ASSERT_FALSE(r) << sent.load() << " of 3000 sent and the replay answered as if complete";
  EXPECT_EQ(r.error(), Errc::kJournalIo);
  EXPECT_NE(r.error().message().find("replay: read the uncovered intents"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("(SQLITE_CORRUPT"), std::string::npos) << r.error().message();
  EXPECT_EQ(sent.load(), 0) << "nothing is sent before every row was read";
}

TEST_F(JournalTest, UnderFullUpsertsQueuedPastMaxGroupNeverStallTheWriter) {
  // synchronous=FULL, where the writers' batches take the queued marks and upserts: with more
  // than max_group queued while a writer commits, the flusher must wait for the writer, not spin
  // holding the journal's mutex (which the writer needs to answer its batch).
  JournalOptions o = options();
  o.synchronous_full = true;
  o.max_group = 4;
  Journal j(o);
  std::atomic<bool> stop{false};
  std::atomic<int> recorded{0};
  std::thread applier([&] {  // bursts of 16 remembers (4 times max_group), 1 ms apart
    for (std::uint64_t v = 1; !stop.load(); ++v) {
      j.remember(id("AST", 1 + v % 512), id("TXN", v));
      if (v % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::thread writer([&] {
    for (std::uint64_t n = 1; n <= 100 && !stop.load(); ++n) {
      j.mark_enqueued(j.record(id("AST", 9999), id("TXN", n)).value());
      ++recorded;
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (recorded.load() < 100 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (recorded.load() < 100) {
    // A deadlocked journal cannot be joined or destroyed: report and end the binary here.
    std::fprintf(stderr, "FAILED: the writer stalled after %d of 100 records under FULL\n",
                 recorded.load());
    std::_Exit(1);
  }
  stop = true;
  writer.join();
  applier.join();
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(j.stats().intents, 100u);
}

TEST_F(JournalTest, ABurstOfRemembersGoesInTransactionsOfAtMostMaxGroupAndAFlushWaitsForAll) {
  // 20,000 upserts queued at once: no transaction takes more than max_group of them (a record
  // never waits behind one unbounded transaction), and flush() still returns only once every one
  // is in the file, over as many transactions as that takes.
  JournalOptions o = options();
  o.max_group = 256;
  Journal j(o);
  constexpr std::uint64_t kNames = 20000;
  for (std::uint64_t n = 1; n <= kNames; ++n) j.remember(id("AST", n), id("TXN", n));
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(query(j.path(), "SELECT count(*) FROM applied"), std::to_string(kNames) + "\n")
      << "flush returned before everything queued before it was in the file";
  const JournalStats s = j.stats();
  EXPECT_EQ(s.remembered, kNames);
  EXPECT_GE(s.transactions, kNames / o.max_group)
      << s.grouped << " requests in " << s.transactions << " transactions";
  // A record made while another 20,000 are queued is committed, and a flush then finds every one
  // of the newer versions in the file.
  for (std::uint64_t n = 1; n <= kNames; ++n) j.remember(id("AST", n), id("TXN", kNames + n));
  const BrandedId job = j.record(id("AST", 1), id("TXN", 1)).value();
  EXPECT_EQ(
      query(j.path(), ("SELECT count(*) FROM intents WHERE job_id = '" + job.str() + "'").c_str()),
      "1\n");
  EXPECT_TRUE(j.flush());
  EXPECT_EQ(query(j.path(), ("SELECT count(*) FROM applied WHERE substr(version, 4) > '" +
                             id("TXN", kNames).str().substr(3) + "'")
                                .c_str()),
            std::to_string(kNames) + "\n");
}

// What another process sees of `file`: 'j' opens it as a Journal of its own ("opened N" with
// N intents, or the error it threw), 'r' reads it with SQLite's default VFS ("read N" or
// SQLite's error). Run in a child forked before the parent opens anything, answering one
// command at a time over pipes, until its input ends.
[[noreturn]] void other_process(int in, int out, const JournalOptions& o) {
  for (char command = 0; ::read(in, &command, 1) == 1;) {
    std::string answer;
    if (command == 'j') {
      try {
        Journal j(o);
        answer = "opened " + std::to_string(j.stats().intents);
      } catch (const std::exception& e) {
        answer = e.what();
      }
    } else {
      sqlite3* db = nullptr;
      sqlite3_stmt* st = nullptr;
      const std::filesystem::path file = table::journal_file(o.dir, o.group).value();
      if (sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
          sqlite3_prepare_v2(db, "SELECT count(*) FROM intents", -1, &st, nullptr) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        answer = "read " + std::to_string(sqlite3_column_int(st, 0));
      } else {
        answer = sqlite3_errmsg(db);
      }
      sqlite3_finalize(st);
      sqlite3_close(db);
    }
    answer.resize(255);
    if (::write(out, answer.c_str(), 256) != 256) break;
  }
  std::_Exit(0);  // no destructor of the parent's objects (its temporary directory) runs here
}

TEST_F(JournalTest, AnotherProcessCannotOpenALiveJournalAndOpensItOnceItIsClosed) {
  // One owner per file, enforced under `exclusive` (the default): while this process has the
  // journal open, another process's Journal on the file is refused at once with the cause named,
  // and its plain SQLite read is refused too; once closed, the other process opens it and finds
  // every intent. Under exclusive = false the live file stays readable from outside.
  JournalOptions o = options();
  std::filesystem::create_directories(o.dir);
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    other_process(to_child[0], from_child[1], o);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  auto ask = [&](char command) {
    char answer[256] = {};
    if (::write(to_child[1], &command, 1) != 1 || ::read(from_child[0], answer, 256) != 256) {
      return std::string("no answer");
    }
    return std::string(answer);
  };
  {
    Journal j(o);
    for (std::uint64_t v = 1; v <= 3; ++v)
      j.mark_enqueued(j.record(id("AST", 1), id("TXN", v)).value());
    EXPECT_TRUE(j.flush());
    const auto refused = std::chrono::steady_clock::now();
    const std::string journal = ask('j');
    EXPECT_NE(journal.find("is open in another process (one owner per file"), std::string::npos)
        << journal;
    EXPECT_LT(std::chrono::steady_clock::now() - refused, std::chrono::seconds(2))
        << "refused at once, not after the busy timeout";
    EXPECT_EQ(ask('r'), "database is locked");
    EXPECT_TRUE(j.record(id("AST", 1), id("TXN", 4)));  // the owner goes on, its lock intact
  }
  EXPECT_EQ(ask('j'), "opened 4");
  o.exclusive = false;
  {
    Journal j(o);
    EXPECT_TRUE(j.record(id("AST", 1), id("TXN", 5)));
    EXPECT_EQ(ask('r'), "read 5");
  }
  ::close(to_child[1]);  // the child's read sees the end and it exits
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(from_child[0]);
}

TEST_F(JournalTest, AnEmptyRecordManyRecordsNothing) {
  Journal j(options());
  EXPECT_TRUE(j.record_many(std::span<const IntentRow>()).value().empty());
  const auto s = j.stats();
  EXPECT_EQ(s.intents, 0u);
  EXPECT_EQ(s.transactions, 0u);
}

// The WAL-index header in <db>-shm (sqlite.org/walformat.html, native byte order): mxFrame, the
// frames in the WAL, at byte 16; WalCkptInfo.nBackfill, the frames a checkpoint copied into the
// database file, at byte 96.
struct WalIndex {
  std::uint32_t frames = 0, backfilled = 0;
};
WalIndex read_wal_index(const std::filesystem::path& db) {
  std::ifstream shm(db.string() + "-shm", std::ios::binary);
  unsigned char h[100] = {};
  shm.read(reinterpret_cast<char*>(h), sizeof h);
  WalIndex out;
  if (shm) {
    std::memcpy(&out.frames, h + 16, 4);
    std::memcpy(&out.backfilled, h + 96, 4);
  }
  return out;
}

TEST_F(JournalTest, TheFlusherCheckpointsTheWalBesideTheWriter) {
  // Past 1,000 WAL frames the flusher copies them back on its own connection, with no commit
  // paying for it. (Its connection had never read the file, so SQLite took it for a rollback
  // journal's and answered every checkpoint with nothing copied: every checkpoint fell to a
  // committing caller, inline, once the WAL reached 4,000 frames.) Under SQLite's default
  // locking the wal-index is in the -shm file, read here; under `exclusive` (the default) it is
  // in the process's heap, so the WAL's size counts the frames (no restart before the first
  // complete checkpoint) and the database file's growth shows the copy.
  for (const bool exclusive : {false, true}) {
    SCOPED_TRACE(exclusive ? "exclusive" : "SQLite's default locking");
    JournalOptions o = options(exclusive ? "PRT0KHTOWnGLuD" : "PRT0KHTOWnGLuC");
    o.exclusive = exclusive;
    Journal j(o);
    const std::filesystem::path wal = j.path().string() + "-wal";
    EXPECT_EQ(std::filesystem::exists(j.path().string() + "-shm"), !exclusive);
    auto frames = [&] {
      if (!exclusive) return read_wal_index(j.path()).frames;
      const auto size = std::filesystem::exists(wal) ? std::filesystem::file_size(wal) : 0;
      return static_cast<std::uint32_t>(size < 32 ? 0 : (size - 32) / (kJournalPageSize + 24));
    };
    const std::uintmax_t db_before = std::filesystem::file_size(j.path());
    std::uint64_t v = 0;
    while (frames() < 1100) {
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(j.record(id("AST", 1), id("TXN", ++v)));
    }
    ASSERT_LT(frames(), 4000u) << "past the inline checkpoint's threshold";
    // The frames land in the file during the flusher's checkpoint, and its counter moves once
    // the checkpoint has returned: wait for both (reading the counter as soon as the file showed
    // the frames found it still 0 under load).
    auto copied = [&] {
      return exclusive ? std::filesystem::file_size(j.path()) > db_before
                       : read_wal_index(j.path()).backfilled >= 1000;
    };
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((!copied() || j.stats().checkpoints == 0) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(copied()) << "the flusher copied no frame back";
    const JournalStats s = j.stats();
    EXPECT_GE(s.checkpoints, 1u);
    EXPECT_EQ(s.inline_checkpoints, 0u) << "a committing caller checkpointed";
    EXPECT_EQ(s.intents, v);
  }
}

TEST_F(JournalTest, TheWalStaysBoundedUnderAWriterThatNeverPauses) {
  // Checkpoints run off the committing thread; a writer that never pauses must still see the
  // WAL copied back and restarted (the leader's inline pass past 4,000 frames), not growing with
  // every commit. A record's commit appends ~3.6 frames of kJournalPageSize + 24 bytes, so 10,000
  // of them unchecked would leave ~36,000 frames (~37 MB); the bound, 12,000 frames, allows the
  // inline threshold plus what the writer appends while one flusher pass (begun below it, at
  // most 4,000 frames to copy) finishes, twice over: a third of the unchecked WAL.
  Journal j(options());
  constexpr int kRecords = 10000;
  for (int i = 0; i < kRecords; ++i)
    j.mark_enqueued(j.record(id("AST", 1), id("TXN", static_cast<std::uint64_t>(i + 1))).value());
  EXPECT_TRUE(j.flush());
  const auto wal = std::filesystem::path(j.path().string() + "-wal");
  ASSERT_TRUE(std::filesystem::exists(wal));
  const JournalStats s = j.stats();
  const std::uintmax_t size = std::filesystem::file_size(wal);
  const std::string seen = "WAL " + std::to_string(size) + " bytes after " +
                           std::to_string(s.transactions) + " commits, " +
                           std::to_string(s.checkpoints) + " flusher checkpoints, " +
                           std::to_string(s.inline_checkpoints) + " inline";
  EXPECT_LT(size, 12000u * (kJournalPageSize + 24)) << "the WAL grew with every commit: " << seen;
  EXPECT_EQ(s.intents, static_cast<std::uint64_t>(kRecords));
  EXPECT_GE(s.checkpoints + s.inline_checkpoints, 1u) << seen;
}

}  // namespace
}  // namespace echo::engine
