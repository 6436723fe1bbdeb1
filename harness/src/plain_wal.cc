// SPDX-License-Identifier: MIT
// PlainWal over the SQLite C API.
#include <echo/harness/plain_wal.h>

#include <echo/engine/journal.h>
#include <sqlite3.h>

#include <stdexcept>
#include <string>

namespace echo::harness {

PlainWal::PlainWal(const std::filesystem::path& file, bool full, const char* vfs) {
  const std::string pragmas =
      "PRAGMA page_size=" + std::to_string(engine::kJournalPageSize) +
      "; PRAGMA journal_mode=WAL; PRAGMA synchronous=" + (full ? "FULL" : "NORMAL") +
      "; CREATE TABLE t(k INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL)";
  if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) !=
          SQLITE_OK ||
      sqlite3_exec(db_, pragmas.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, "INSERT INTO t(v) VALUES(?)", -1, &insert_, nullptr) != SQLITE_OK) {
    const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_finalize(insert_);
    sqlite3_close(db_);
    throw std::runtime_error("the plain SQLite WAL baseline (" + file.string() + "): " + why);
  }
}

PlainWal::~PlainWal() {
  sqlite3_finalize(insert_);
  sqlite3_close(db_);
}

bool PlainWal::commit(std::string_view v) noexcept {
  sqlite3_bind_text(insert_, 1, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  const bool ok = sqlite3_step(insert_) == SQLITE_DONE;
  sqlite3_reset(insert_);
  return ok;
}

}  // namespace echo::harness
