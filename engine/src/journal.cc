// SPDX-License-Identifier: MIT
// The journal (docs/wire.md, "The journal"): opening its file. The options' checks, the
// connection (WAL, the durability asked for, the schema), the statements prepared once, the
// applied memory's mirror read once, the WAL hook and the checkpointer's own connection; then the
// flusher starts. What writes the file (the group commit, compact) is in journal_commit.cc, the
// calls that read it (replay, flush, stats) in journal_replay.cc, the state they share in
// journal_impl.h.
#include <echo/engine/journal.h>

#include <sqlite3.h>

#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

#include <echo/engine/table_spec.h>
#include <echo/table/journal_file.h>
#include <echo/table/names.h>

#include "journal_impl.h"

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace journal_detail;  // Stmt, fail, each_row, column_text, intent_name

// SQLite's primary result codes by number (sqlite3.h), for the error's words: sqlite3_errmsg's
// "database or disk is full" is for people; SQLITE_FULL is what a program or an alert matches.
constexpr const char* kSqliteCodes[] = {
    "SQLITE_OK",       "SQLITE_ERROR",   "SQLITE_INTERNAL", "SQLITE_PERM",     "SQLITE_ABORT",
    "SQLITE_BUSY",     "SQLITE_LOCKED",  "SQLITE_NOMEM",    "SQLITE_READONLY", "SQLITE_INTERRUPT",
    "SQLITE_IOERR",    "SQLITE_CORRUPT", "SQLITE_NOTFOUND", "SQLITE_FULL",     "SQLITE_CANTOPEN",
    "SQLITE_PROTOCOL", "SQLITE_EMPTY",   "SQLITE_SCHEMA",   "SQLITE_TOOBIG",   "SQLITE_CONSTRAINT",
    "SQLITE_MISMATCH", "SQLITE_MISUSE",  "SQLITE_NOLFS",    "SQLITE_AUTH",     "SQLITE_FORMAT",
    "SQLITE_RANGE",    "SQLITE_NOTADB",  "SQLITE_NOTICE",   "SQLITE_WARNING"};

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(std::string("journal: ") + sql + ": " + msg);
  }
}

Stmt prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
    fail(db, std::string("prepare ") + sql);
  }
  return Stmt(s);
}

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS intents(seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT "
    "NULL "
    "UNIQUE, name_id TEXT NOT NULL, version TEXT NOT NULL, enqueued INTEGER NOT NULL DEFAULT 0, "
    "recorded_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS applied(name_id TEXT PRIMARY KEY, version TEXT NOT NULL, seq "
    "INTEGER NOT NULL);";

// Coverage: an applied row for the name at least as new as the intent (payload bytes 4..14).
constexpr const char* kUncovered =
    "SELECT i.job_id, i.name_id, i.version FROM intents i WHERE NOT EXISTS (SELECT 1 FROM applied "
    "a "
    "WHERE a.name_id = i.name_id AND substr(a.version, 4) >= substr(i.version, 4)) ORDER BY i.seq";
constexpr const char* kCompact =
    "DELETE FROM intents WHERE EXISTS (SELECT 1 FROM applied a WHERE a.name_id = intents.name_id "
    "AND substr(a.version, 4) >= substr(intents.version, 4))";

// The group the options name, once every knob is in range; else ConfigError naming the knob.
BrandedId checked_group(const JournalOptions& options) {
  auto group = BrandedId::parse(options.group);
  if (!group) {
    throw ConfigError("journal group must be a valid branded id, got '" + options.group +
                      "' (gate " + std::string(table::to_string(group.error())) + ")");
  }
  if (options.node_id > table::kMaxNode) {
    throw ConfigError("journal node_id must lie in 0..1023, got " +
                      std::to_string(options.node_id));
  }
  if (options.max_group < 1 || options.max_group > 65536) {
    throw ConfigError("journal max_group must lie in 1..65536, got " +
                      std::to_string(options.max_group));
  }
  for (const int cpu : options.flusher_cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      throw ConfigError("journal flusher_cpus: each CPU must lie in 0.." +
                        std::to_string(CPU_SETSIZE - 1) + ", got " + std::to_string(cpu));
    }
  }
  return *group;
}

}  // namespace

Error journal_detail::sqlite_error(sqlite3* db, std::string_view what) {
  std::string detail = "journal: ";
  detail.append(what);
  if (db == nullptr) return {Errc::kJournalIo, detail + ": out of memory (SQLITE_NOMEM)"};
  const int extended = sqlite3_extended_errcode(db);
  const int primary = extended & 0xff;
  detail += ": ";
  detail += sqlite3_errmsg(db);
  detail += " (";
  if (primary >= 0 && primary < static_cast<int>(std::size(kSqliteCodes))) {
    detail += kSqliteCodes[primary];
  } else {
    detail += "SQLite code " + std::to_string(primary);
  }
  if (extended != primary) detail += ", extended code " + std::to_string(extended);
  detail += ")";
  return {Errc::kJournalIo, std::move(detail)};
}

void journal_detail::fail(sqlite3* db, const std::string& what) {
  throw std::runtime_error(sqlite_error(db, what).detail);
}

Journal::Journal(const JournalOptions& options) {
  const BrandedId group = checked_group(options);
  impl_ = std::make_unique<Impl>(options, group);
  auto& d = *impl_;
  std::filesystem::create_directories(options.dir);
  d.path = table::journal_file(options.dir, options.group).value();
  d.open_connection();
  d.prepare_statements();
  d.load_memory();
  d.watch_wal();
  d.open_checkpointer();
  d.start_flusher();
}

// The connection: WAL, synchronous NORMAL or FULL, busy_timeout 5000, the schema.
void Journal::Impl::open_connection() {
  // The connection passes between threads (one at a time, ordered by the hand-off under mu):
  // SQLite's multi-thread mode, which a single-thread build of the library cannot give.
  if (sqlite3_threadsafe() == 0)
    throw std::runtime_error("journal: SQLite was built single-threaded");
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 journal_vfs(options.exclusive));
  db.reset(raw);
  if (rc != SQLITE_OK) fail(raw, "open " + path.string());
  // A new file gets 1 KiB pages (an existing one keeps its own): an intent row is ~110 bytes, and
  // a record's commit writes three pages (its row, the job_id index, sqlite_sequence) to the WAL,
  // so a smaller page is a 4x smaller write for the caller waiting on it (journal_bench A/B: the
  // remembered lane 1.32-1.41x the bare lane vs 1.48-1.60x with 4 KiB pages, alternating runs).
  exec(raw, ("PRAGMA page_size=" + std::to_string(kJournalPageSize)).c_str());
  // The first read: under `exclusive` it takes the process's lock on the file, which another
  // process's exclusive journal refuses (waiting would not help: an owner holds it until it
  // closes), so this names the cause rather than SQLite's "database is locked".
  if (sqlite3_exec(raw, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) != SQLITE_OK) {
    if (sqlite3_errcode(raw) == SQLITE_BUSY) {
      throw std::runtime_error("journal: " + path.string() +
                               " is open in another process (one owner per file: its lock is "
                               "held until that process closes the journal or exits)");
    }
    fail(raw, "PRAGMA journal_mode=WAL");
  }
  exec(raw, options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  exec(raw, "PRAGMA busy_timeout=5000");
  exec(raw, kSchema);
}

void Journal::Impl::prepare_statements() {
  sqlite3* raw = db.get();
  for (std::size_t w = 0; w < kInsertWidths.size(); ++w) {
    std::string sql =
        "INSERT INTO intents(job_id, name_id, version, recorded_at) VALUES(?, ?, ?, ?)";
    for (std::size_t k = 1; k < kInsertWidths[w]; ++k) sql += ", (?, ?, ?, ?)";
    insert[w] = prepare(raw, sql.c_str());
  }
  for (std::size_t w = 0; w < kMarkWidths.size(); ++w) {
    std::string sql = "UPDATE intents SET enqueued = 1 WHERE job_id IN (?";
    for (std::size_t k = 1; k < kMarkWidths[w]; ++k) sql += ", ?";
    mark[w] = prepare(raw, (sql + ")").c_str());
  }
  upsert =
      prepare(raw,
              "INSERT INTO applied(name_id, version, seq) VALUES(?, ?, 0) ON CONFLICT(name_id) "
              "DO UPDATE SET version = excluded.version WHERE substr(excluded.version, 4) > "
              "substr(applied.version, 4)");
  uncovered = prepare(raw, kUncovered);
  compact = prepare(raw, kCompact);
  count_intents = prepare(raw, "SELECT count(*) FROM intents");
  count_pending = prepare(raw, "SELECT count(*) FROM intents WHERE enqueued = 0");
  count_applied = prepare(raw, "SELECT count(*) FROM applied");
  begin = prepare(raw, "BEGIN IMMEDIATE");
  commit = prepare(raw, "COMMIT");
  rollback = prepare(raw, "ROLLBACK");
}

// The applied memory's mirror: read once here, kept current by remember().
void Journal::Impl::load_memory() {
  Stmt all = prepare(db.get(), "SELECT name_id, version FROM applied");
  const Error error = each_row(db.get(), all.get(), "load the applied memory from " + path.string(),
                               [this](sqlite3_stmt* row) {
                                 // A branded id, or a text-key table's key (docs/wire.md, "Text
                                 // keys").
                                 const std::string_view name = column_text(row, 0);
                                 auto version = BrandedId::parse(column_text(row, 1));
                                 if (version && intent_name(name)) {
                                   memory.insert_or_assign(std::string(name), *version);
                                 }
                               });
  if (error) throw std::runtime_error(error.detail);
}

// Checkpoints leave the committing thread: the hook (which replaces SQLite's autocheckpoint)
// only notes the WAL's size, and the flusher checkpoints on its own connection.
void Journal::Impl::watch_wal() {
  sqlite3_wal_hook(
      db.get(),
      [](void* impl, sqlite3*, const char*, int pages) {
        auto& j = *static_cast<Impl*>(impl);
        if (pages < j.hook_pages) j.backfilled.store(0, std::memory_order_relaxed);  // restarted
        j.hook_pages = pages;
        j.wal_pages.store(pages, std::memory_order_relaxed);
        return SQLITE_OK;
      },
      this);
}

void Journal::Impl::open_checkpointer() {
  sqlite3* ck = nullptr;
  const int ck_rc = sqlite3_open_v2(path.c_str(), &ck, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                                    journal_vfs(options.exclusive));
  checkpointer.reset(ck);
  if (ck_rc != SQLITE_OK) fail(ck, "open the checkpointer on " + path.string());
  exec(ck, "PRAGMA busy_timeout=5000");
  // A connection learns that the file is in WAL mode from its first read; until then SQLite
  // answers its checkpoints as a rollback-journal database's: done, nothing copied (log -1). So
  // it reads the schema once here, or every checkpoint would fall to a leader's inline one.
  exec(ck, "SELECT count(*) FROM sqlite_master");
}

const std::filesystem::path& Journal::path() const noexcept { return impl_->path; }
const BrandedId& Journal::group() const noexcept { return impl_->group; }

}  // namespace echo::engine
