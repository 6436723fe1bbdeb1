// SPDX-License-Identifier: MIT
// The baseline under the journal (drill H6, `echostore bench`'s journal row, journal_bench):
// one autocommitted INSERT per commit into a WAL table at the journal's page size
// (engine::kJournalPageSize) and synchronous setting, statement prepared once -- the cheapest
// durable write SQLite offers the way the journal writes.
#pragma once

#include <filesystem>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace echo::harness {

class PlainWal {
 public:
  // Creates `file` with one table; synchronous=FULL with `full`, else NORMAL (the journal's
  // default); through the VFS named `vfs` (nullptr: SQLite's default; engine::journal_vfs():
  // the journal's). Throws std::runtime_error with SQLite's message when it cannot be set up.
  explicit PlainWal(const std::filesystem::path& file, bool full = false,
                    const char* vfs = nullptr);
  ~PlainWal();
  PlainWal(const PlainWal&) = delete;
  PlainWal& operator=(const PlainWal&) = delete;

  // One committed INSERT of `v` (autocommit: BEGIN, the row, COMMIT's WAL write); false when
  // SQLite refused it.
  bool commit(std::string_view v) noexcept;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
};

}  // namespace echo::harness
