// SPDX-License-Identifier: MIT
// A journal file damaged or contended: an unreadable page of the applied memory fails the open,
// one of the intents fails the replay (never a partial load or replay), and another process
// cannot open a live journal (the exclusive lock) until it is closed.
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

}  // namespace
}  // namespace echo::engine
