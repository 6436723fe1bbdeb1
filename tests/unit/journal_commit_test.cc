// SPDX-License-Identifier: MIT
// The journal's commits against real SQLite files: callers that group-commit each other's
// records (flat combining), marks and upserts riding the flusher, a refused transaction's work
// queued again, a full disk answered journal_io, max_group, and the WAL kept bounded by
// checkpoints beside a writer that never pauses.
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
