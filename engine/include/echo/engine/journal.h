// SPDX-License-Identifier: MIT
// The journal (docs/wire.md, "The journal"): one SQLite file per group beside the bus, so the job
// lane survives the bus losing its queue. An outbox of intents at the writer's edge (record →
// enqueue under the recorded job id → mark), the last applied version per name at the applier's
// edge (consulted before the cache: `remembered_stale`), replay of uncovered intents, and
// compaction by coverage.
//
// Threads: one thread at a time holds the SQLite connection (statements prepared once). A caller
// that finds it free commits on its own thread and group-commits whatever queued meanwhile (flat
// combining: the uncontended path wakes no thread; waiters poll, then sleep on one word the
// leader wakes once per batch); marks and upserts ride a flusher thread's
// transaction every few ms, not a record's commit (under FULL they ride it: an fsync costs more).
// The applied memory is mirrored in RAM, so the applier's check never reads SQLite and its
// upsert never waits on it.
//
// Errors: the verbs answer Result (error.h), as the engine's data verbs do, and throw nothing. A
// name that is neither a branded id nor a text key answers Errc::kBadKey (the name in the detail;
// nothing written); a step SQLite refuses answers Errc::kJournalIo, the detail naming the step and
// SQLite's cause ("journal: record: database or disk is full (SQLITE_FULL)"), and is counted
// (JournalStats::failed). Only the constructor throws: ConfigError for a bad option,
// std::runtime_error naming the SQLite failure that kept the file from opening.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <echo/engine/errc.h>
#include <echo/engine/error.h>
#include <echo/table/branded_id.h>
#include <echo/table/expected.h>

namespace echo::engine {

class Engine;

// The page size a new journal file gets (an existing file keeps its own). Baselines that compare
// a plain SQLite commit against the journal's (journal_bench, the drill's H6) use it too.
inline constexpr int kJournalPageSize = 1024;

// The SQLite VFS the journal's connections go through: SQLite's "unix-excl" (`exclusive`; the
// process holds the file's lock while any of its connections has it open, and the wal-index is
// in the process's heap: no fcntl() per transaction) or "unix" (its default locking), except
// that a WAL transaction's frames reach the file in one write() rather than two per frame
// (engine/src/wal_vfs.cc; same files and format). Registered on the first call; any thread. The
// baselines that compare against the journal (harness::PlainWal) can open through it too.
const char* journal_vfs(bool exclusive = true);

struct JournalOptions {
  std::filesystem::path dir;      // created if missing (mkdir -p)
  std::string group;              // a valid branded id, else ConfigError; names the file and lane
  bool synchronous_full = false;  // synchronous=FULL instead of NORMAL
  std::size_t max_group = 256;    // 1 .. 65,536: requests folded into one transaction at most
                                  // (waiting records and calls; and queued marks and upserts)
  unsigned node_id = 0;           // 0 .. 1023: mints the intents' JOB ids
  // true: this process holds the file's lock from open to close (the contract's one owner per
  // file, enforced): another process opening the file (a second writer, `echostore journal`,
  // the sqlite3 shell) is refused at once, and a transaction makes no fcntl() call (~1.5 us of
  // a record's ~7 us here). false: SQLite's default locking: other processes may open the live
  // file (to read it; a second writer breaks the contract all the same).
  bool exclusive = true;
  // The CPUs the flusher thread (echo-jrnl) runs on, like the engine's housekeeping_cpus. Empty
  // (the default): wherever the scheduler puts it. Each 0..1023, else ConfigError; a CPU outside
  // the process's cpuset is counted (JournalStats::flusher_pin_failures) and it runs unpinned.
  std::vector<int> flusher_cpus;
};

struct ReplayResult {
  std::uint64_t replayed = 0;      // re-enqueued (enqueued or handed off for some member)
  std::uint64_t deduplicated = 0;  // the bus already held the job under its recorded id
  std::uint64_t malformed = 0;     // uncovered rows whose ids are not branded ids: not sent
};

struct JournalStats {
  std::uint64_t intents = 0;          // rows in intents
  std::uint64_t pending_enqueue = 0;  // intents with enqueued = 0
  std::uint64_t remembered = 0;       // rows in applied
  std::filesystem::path path;
  std::uint64_t transactions = 0;        // commits made (each one BEGIN IMMEDIATE ... COMMIT)
  std::uint64_t grouped = 0;             // records, marks and upserts those commits carried
  std::uint64_t failed = 0;              // transactions SQLite refused (their marks and upserts
                                         // are queued again; their records' callers got the error)
  std::uint64_t checkpoints = 0;         // WAL checkpoints the flusher ran on its own connection
  std::uint64_t inline_checkpoints = 0;  // those a committing leader ran itself (the WAL had
                                         // grown past 4,000 frames: a writer that never pauses)
  std::uint64_t flusher_pin_failures = 0;  // 1 when flusher_cpus could not be applied
};

// Where the writer's edge sends a recorded intent: enqueue `job` (its recorded id) carrying
// name:version; returns true when some queue newly admitted it, false for a duplicate
// (Engine::enqueue_job fits it as it is). `name` is a branded id's 14 bytes or a text-key
// table's key (docs/wire.md, "Text keys"), valid for the call.
using EnqueueFn = std::function<Result<bool>(const table::BrandedId& job, std::string_view name,
                                             const table::BrandedId& version)>;

// An intent as record_many takes it: a branded id's 14 bytes or a text-key table's key (1..200
// bytes, docs/wire.md, "Text keys"), viewed for the length of the call, and its version.
struct IntentRow {
  std::string_view name;
  table::BrandedId version;
};

class Journal {
 public:
  // Opens (creating) <dir>/journal-<group>.db: WAL, synchronous NORMAL (or FULL),
  // busy_timeout 5000, the schema of docs/wire.md, "The journal", statements prepared once, the
  // applied memory loaded. The journal's one throwing call: ConfigError (a bad group or knob) or
  // std::runtime_error naming the SQLite failure (the file's directory, its lock, its schema).
  explicit Journal(const JournalOptions& options);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // ---- the writer's edge (any thread; blocks for one group commit, run on the caller's thread
  // when the connection is free, else by the thread holding it) ----
  // Records intents (one transaction; one shared recorded_at); answers their job ids (minted
  // JOB ids) in order. Nothing is enqueued before this returns: the intent is durable first.
  // A name that is neither a branded id nor a text key answers Errc::kBadKey naming it, before
  // anything is written. A commit SQLite refuses (a full disk: SQLITE_FULL) answers
  // Errc::kJournalIo to every record that rode it, none of their rows in the file; it is counted
  // (JournalStats::failed), and a later record may succeed once the cause is gone.
  Result<std::vector<table::BrandedId>> record_many(std::span<const IntentRow> intents);
  Result<std::vector<table::BrandedId>> record_many(
      const std::vector<std::pair<table::BrandedId, table::BrandedId>>& name_versions);
  Result<table::BrandedId> record(std::string_view name, const table::BrandedId& version);
  Result<table::BrandedId> record(const table::BrandedId& name, const table::BrandedId& version) {
    return record(name.view(), version);
  }
  // Marks an intent enqueued; never blocks: rides the flusher's next transaction, within a few ms
  // (replay ignores the flag).
  void mark_enqueued(const table::BrandedId& job);
  // record → enqueue (under the recorded job id) → mark. Seam A is between record and enqueue,
  // seam B between enqueue and mark; replay closes both. Answers the job id; record's error
  // (kBadKey, kJournalIo: nothing recorded, nothing enqueued) or the enqueue's.
  Result<table::BrandedId> intend_and_enqueue(std::string_view name,
                                              const table::BrandedId& version,
                                              const EnqueueFn& enqueue);
  Result<table::BrandedId> intend_and_enqueue(const table::BrandedId& name,
                                              const table::BrandedId& version,
                                              const EnqueueFn& enqueue) {
    return intend_and_enqueue(name.view(), version, enqueue);
  }

  // ---- the applier's edge (any thread; no SQLite on the check). `name` is a branded id, or a
  // text-key table's key (docs/wire.md, "Text keys": name_id is TEXT in both tables). ----
  // True iff the memory holds r for `name` and `version` is not newer than r.
  bool remembered_stale(std::string_view name, const table::BrandedId& version) const;
  bool remembered_stale(const table::BrandedId& name, const table::BrandedId& version) const {
    return remembered_stale(name.view(), version);
  }
  // Upserts newer-only (memory now; the file with the flusher's next transaction, within a few
  // ms). Never waits on SQLite; wakes no thread while the journal is busy. A text key of more
  // than 15 bytes allocates its memory entry and its queued upsert.
  void remember(std::string_view name, const table::BrandedId& version);
  void remember(const table::BrandedId& name, const table::BrandedId& version) {
    remember(name.view(), version);
  }
  // Waits until every remember() and mark_enqueued() so far is in the file; answers true. A
  // transaction that carried them and failed answers its error (kJournalIo; counted in
  // JournalStats::failed): they stay queued, in order, for the next transaction.
  Result<bool> flush();
  std::optional<table::BrandedId> last_applied(std::string_view name) const;
  std::optional<table::BrandedId> last_applied(const table::BrandedId& name) const {
    return last_applied(name.view());
  }

  // ---- recovery (any thread; idempotent; safe on a schedule; a SQLite failure answers
  // Errc::kJournalIo naming it, as record does: never a partial answer) ----
  // Re-enqueues, in seq order under their recorded ids, the intents no applied row covers
  // (applied.version >= intent.version for its name); marks each enqueued. An enqueue's error
  // stops it and is answered (the intents before it went out).
  Result<ReplayResult> replay(const EnqueueFn& enqueue);
  // Deletes the covered intents; answers how many. The applied memory stays. A delete SQLite
  // refuses is counted in JournalStats::failed too.
  Result<std::uint64_t> compact();

  // The counts (a count SQLite could not read reads 0) and the counters; never fails.
  JournalStats stats() const;
  const std::filesystem::path& path() const noexcept;
  const table::BrandedId& group() const noexcept;

 private:
  struct Impl;
  friend struct JournalTestAccess;  // journal_impl.h: a unit test's SQLite limit on the connection
  std::unique_ptr<Impl> impl_;
};

}  // namespace echo::engine
