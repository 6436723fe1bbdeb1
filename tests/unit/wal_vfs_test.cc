// SPDX-License-Identifier: MIT
// The journal's VFS (engine::journal_vfs(), engine/src/wal_vfs.cc): a transaction's WAL frames
// reach the file in one write, and every committed byte is in the file when COMMIT returns --
// checked by what the operating system holds (the WAL's size, a copy of the files opened with
// SQLite's default VFS, as a SIGKILLed process would leave them), through cache spills, frames
// rewritten in place, checkpoints and WAL restarts.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <echo/engine/journal.h>

#include "support/temp_dir.h"

namespace echo::engine {
namespace {

namespace fs = std::filesystem;

constexpr int kPage = 1024;

class WalVfsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (db_ != nullptr) sqlite3_close(db_);
  }
  // Opens dir_/t.db through `vfs` in WAL mode (NORMAL, 1 KiB pages), the WAL hook noting the
  // frames SQLite says it appended.
  void open(const char* vfs) {
    ASSERT_EQ(sqlite3_open_v2((dir_ / "t.db").c_str(), &db_,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs),
              SQLITE_OK);
    exec(
        "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL UNIQUE, "
        "b BLOB)");
    sqlite3_wal_hook(
        db_,
        [](void* frames, sqlite3*, const char*, int n) {
          *static_cast<int*>(frames) = n;
          return SQLITE_OK;
        },
        &wal_frames_);
  }
  void exec(const std::string& sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    ASSERT_EQ(rc, SQLITE_OK) << (err ? err : "?");
  }
  std::uintmax_t wal_size() const { return fs::file_size(dir_ / "t.db-wal"); }
  // Copies the database and its WAL as they are on disk now (the connection stays open: what a
  // process killed at this instant leaves behind) and counts t's rows in the copy through
  // SQLite's default VFS, which recovers from the copied WAL; also runs its integrity check.
  std::string rows_in_a_copy_of_the_files() {
    const fs::path copy = dir_ / "copy";
    fs::remove_all(copy);
    fs::create_directories(copy);
    fs::copy_file(dir_ / "t.db", copy / "t.db");
    fs::copy_file(dir_ / "t.db-wal", copy / "t.db-wal");
    sqlite3* c = nullptr;
    EXPECT_EQ(sqlite3_open_v2((copy / "t.db").c_str(), &c, SQLITE_OPEN_READWRITE, nullptr),
              SQLITE_OK);
    std::string out;
    const auto collect = [](void* o, int n, char** v, char**) {
      for (int i = 0; i < n; ++i)
        *static_cast<std::string*>(o) += std::string(v[i] ? v[i] : "NULL") + ";";
      return 0;
    };
    sqlite3_exec(c, "SELECT count(*), coalesce(max(k), 0) FROM t; PRAGMA integrity_check", collect,
                 &out, nullptr);
    sqlite3_close(c);
    return out;
  }

  test::TempDir temp_{"echostore-walvfs-"};
  const fs::path& dir_ = temp_.path();
  sqlite3* db_ = nullptr;
  int wal_frames_ = 0;
};

TEST_F(WalVfsTest, EveryFrameOfACommitIsInTheFileWhenCommitReturns) {
  open(journal_vfs());
  for (int i = 1; i <= 50; ++i) {
    exec("INSERT INTO t(v) VALUES('row" + std::to_string(i) + "')");
    ASSERT_GT(wal_frames_, 0);
    // The WAL on disk holds its header and exactly the frames SQLite reports: nothing held back.
    EXPECT_EQ(wal_size(), 32u + static_cast<std::uintmax_t>(wal_frames_) * (24 + kPage))
        << "commit " << i;
    EXPECT_EQ(rows_in_a_copy_of_the_files(), std::to_string(i) + ";" + std::to_string(i) + ";ok;");
  }
}

// The write(2) calls this process made so far (Linux /proc/self/io: syscw).
long write_calls() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long value = 0;
  while (io >> key >> value) {
    if (key == "syscw:") return value;
  }
  return -1;
}

TEST_F(WalVfsTest, ACommitsFramesTakeOneWriteInsteadOfTwoEach) {
  ASSERT_GE(write_calls(), 0)
      << "/proc/self/io has no syscw (a kernel without task I/O accounting)";
  auto writes_per_commit = [this](const char* vfs) {
    open(vfs);
    exec("INSERT INTO t(v) VALUES('warm')");
    const long before = write_calls();
    const int frames_before = wal_frames_;
    exec("INSERT INTO t(v) VALUES('measured')");  // the row, the UNIQUE index, sqlite_sequence
    const long writes = write_calls() - before;
    const int frames = wal_frames_ - frames_before;
    sqlite3_close(db_);
    db_ = nullptr;
    fs::remove(dir_ / "t.db");
    fs::remove(dir_ / "t.db-wal");
    fs::remove(dir_ / "t.db-shm");
    return std::pair{writes, frames};
  };
  const auto [plain_writes, plain_frames] = writes_per_commit(nullptr);
  const auto [ours, our_frames] = writes_per_commit(journal_vfs());
  EXPECT_EQ(our_frames, plain_frames);
  EXPECT_GE(plain_frames, 3);
  EXPECT_EQ(plain_writes, 2 * plain_frames) << "SQLite's default: a header and a page per frame";
  EXPECT_EQ(ours, 1) << "the journal's VFS: the whole commit in one write";
}

TEST_F(WalVfsTest, ATransactionOfHundredsOfFramesCommitsInWritesTheDefaultVfsTakes) {
  // No spill (the default cache): every frame is appended at COMMIT, ~900 KiB of them. The
  // default VFS takes at most 128 KiB - 1 bytes per write and calls a larger one a full disk.
  open(journal_vfs());
  exec("BEGIN");
  for (int i = 1; i <= 800; ++i) {
    exec("INSERT INTO t(v, b) VALUES('wide" + std::to_string(i) + "', randomblob(900))");
  }
  exec("COMMIT");
  EXPECT_GT(wal_frames_, 800);
  EXPECT_EQ(wal_size(), 32u + static_cast<std::uintmax_t>(wal_frames_) * (24 + kPage));
  EXPECT_EQ(rows_in_a_copy_of_the_files(), "800;800;ok;");
}

TEST_F(WalVfsTest, ABigTransactionThatSpillsAndRewritesFramesCommitsWhole) {
  // A 10-page cache makes SQLite spill dirty pages to the WAL mid-transaction, then write some
  // of them again (in place, and rewriting the checksums of the frames after them at commit).
  open(journal_vfs());
  exec("PRAGMA cache_size=10");
  exec("BEGIN");
  for (int i = 1; i <= 400; ++i) {
    exec("INSERT INTO t(v, b) VALUES('big" + std::to_string(i) + "', randomblob(600))");
  }
  exec("UPDATE t SET b = randomblob(500) WHERE k % 3 = 0");
  exec("COMMIT");
  EXPECT_EQ(wal_size(), 32u + static_cast<std::uintmax_t>(wal_frames_) * (24 + kPage));
  EXPECT_EQ(rows_in_a_copy_of_the_files(), "400;400;ok;");
  // A rolled-back spill leaves the committed state alone.
  exec("BEGIN");
  for (int i = 1; i <= 200; ++i)
    exec("INSERT INTO t(v, b) VALUES('gone" + std::to_string(i) + "', randomblob(600))");
  exec("ROLLBACK");
  exec("INSERT INTO t(v) VALUES('after')");
  EXPECT_EQ(rows_in_a_copy_of_the_files(), "401;401;ok;");
}

TEST_F(WalVfsTest, CheckpointsAndWalRestartsKeepEveryCommitInTheFile) {
  open(journal_vfs());
  int rows = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 300; ++i, ++rows) {
      exec("INSERT INTO t(v, b) VALUES('r" + std::to_string(rows) + "', randomblob(200))");
    }
    // Copied back and restarted: the next commit writes the WAL from its start again.
    ASSERT_EQ(sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr),
              SQLITE_OK);
    exec("INSERT INTO t(v) VALUES('restart" + std::to_string(round) + "')");
    ++rows;
    EXPECT_EQ(wal_size(), 32u + static_cast<std::uintmax_t>(wal_frames_) * (24 + kPage));
    EXPECT_EQ(rows_in_a_copy_of_the_files(),
              std::to_string(rows) + ";" + std::to_string(rows) + ";ok;");
  }
  // And a second connection of this process (SQLite's default VFS; the journal's own VFS holds
  // the file's lock for the process, so only this process's connections may open it) reads
  // every row while ours stays open.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ / "t.db").c_str(), &other, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  std::string count;
  sqlite3_exec(
      other, "SELECT count(*) FROM t",
      [](void* o, int, char** v, char**) {
        *static_cast<std::string*>(o) = v[0];
        return 0;
      },
      &count, nullptr);
  sqlite3_close(other);
  EXPECT_EQ(count, std::to_string(rows));
}

TEST_F(WalVfsTest, ARestartOverAnOlderLongerWalKeepsEveryCommitInTheFile) {
  // The journal's way: PASSIVE checkpoints on a second connection of the process, no
  // truncation, so after a restart our connection writes the WAL's header and new frames over
  // the older, longer WAL's first frames; the file keeps its size and the old frames beyond the
  // new ones (recovery tells them apart by the header's salts).
  open(journal_vfs());
  sqlite3* ck = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ / "t.db").c_str(), &ck, SQLITE_OPEN_READWRITE, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(ck, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr),
            SQLITE_OK);
  int rows = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 200; ++i, ++rows) {
      exec("INSERT INTO t(v, b) VALUES('r" + std::to_string(rows) + "', randomblob(200))");
    }
    const int frames = wal_frames_;
    int log = 0, done = 0;
    ASSERT_EQ(sqlite3_wal_checkpoint_v2(ck, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done),
              SQLITE_OK);
    ASSERT_EQ(done, log) << "round " << round;
    const std::uintmax_t longest = wal_size();
    for (int i = 0; i < 5; ++i, ++rows) {
      exec("INSERT INTO t(v) VALUES('restart" + std::to_string(round) + "." + std::to_string(i) +
           "')");
      EXPECT_EQ(rows_in_a_copy_of_the_files(),
                std::to_string(rows + 1) + ";" + std::to_string(rows + 1) + ";ok;");
    }
    EXPECT_LT(wal_frames_, frames) << "the WAL did not restart in round " << round;
    EXPECT_EQ(wal_size(), longest) << "restarted over the old frames, not truncated";
  }
  sqlite3_close(ck);
}

TEST_F(WalVfsTest, AFailedOpenThroughTheShimIsAnErrorNotACrash) {
  sqlite3* db = nullptr;
  EXPECT_NE(sqlite3_open_v2((dir_ / "missing" / "t.db").c_str(), &db, SQLITE_OPEN_READWRITE,
                            journal_vfs()),
            SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace
}  // namespace echo::engine
