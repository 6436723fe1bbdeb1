// SPDX-License-Identifier: MIT
// The journal's private state (Journal::Impl) and its SQLite helpers, shared by its three files:
//   journal.cc         opening the file: the options' checks, the connection, the schema and the
//                      statements, the applied memory's mirror, the checkpointer's connection
//   journal_commit.cc  what writes the file: the group commit (the waiters, the leader's batches,
//                      the flusher and its checkpoints) and the verbs that enter it, the applied
//                      memory, compact, the drain at close
//   journal_replay.cc  the calls that read it, once everything queued before them is in the file:
//                      replay, flush, stats
// The group commit's members are declared inline and defined in journal_commit.cc, beside every
// caller on a record's path, so they inline there as they did when this class held their bodies;
// the other files reach them through wait_call() and start_flusher().
#pragma once

#include <sqlite3.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <echo/engine/error.h>
#include <echo/engine/journal.h>
#include <echo/table/names.h>

#include "housekeeping.h"

namespace echo::engine {
namespace journal_detail {

struct DbCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// SQLite's last failure on `db` as the verbs answer it (journal.cc): Errc::kJournalIo, its detail
// "journal: <what>: <SQLite's words> (SQLITE_FULL)", the primary code's name last (and the
// extended code when it says more), so a full disk reads as one. Read it before the statement is
// reset or another one runs: they replace SQLite's message.
Error sqlite_error(sqlite3* db, std::string_view what);

// Throws std::runtime_error with sqlite_error's words (journal.cc): the constructor's way, the one
// place the journal throws.
[[noreturn]] void fail(sqlite3* db, const std::string& what);

// Steps `s` to its end, `fn` on each row; answers SQLite's error when it fails before the end, so
// a read error never passes for "no more rows" (an applied memory loaded half, a replay that
// skips). Empty when every row was read.
template <class Fn>
[[nodiscard]] Error each_row(sqlite3* db, sqlite3_stmt* s, std::string_view what, Fn fn) {
  struct Reset {
    sqlite3_stmt* s;
    ~Reset() { sqlite3_reset(s); }
  } reset{s};
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) fn(s);
  if (rc != SQLITE_DONE) return sqlite_error(db, what);  // before the reset replaces the message
  return {};
}

inline std::string_view column_text(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return {p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i))};
}

// The applied memory's hash: looks a name up by view, so the applier's check allocates nothing.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

// An intent's name: a branded id or a text key (docs/wire.md, "Text keys"; a branded id's 14 bytes
// pass the text key's check too); anything else never reaches the file.
inline bool intent_name(std::string_view name) noexcept {
  return table::check_text_key(name).has_value();
}

}  // namespace journal_detail

struct Journal::Impl {
  using BrandedId = table::BrandedId;
  using Db = journal_detail::Db;
  using Stmt = journal_detail::Stmt;

  // A caller that waits for the connection: a record (rows) or a call (fn, run after the commit
  // its batch rode). Lives on the caller's stack; the leader touches it until its kDone store,
  // never after.
  //
  // `state` moves kWaiting -> kDone (answered: the leader touches the Sync no more), or
  // kWaiting -> kLead (handed the connection) -> kWaiting -> kDone. A waiter spins on it briefly,
  // then sleeps on the journal's generation word, which the leader bumps once per batch: one
  // futex wake for every waiter a commit answers, not one condvar notify each.
  struct Sync {
    const IntentRow* rows = nullptr;  // a record: rows[0 .. n_rows)
    std::size_t n_rows = 0;
    std::vector<BrandedId>* jobs = nullptr;  // record_many's ids, in order; else `job`
    std::optional<BrandedId> job;            // record()'s id: no vector for a single row
    // A call's: run once its batch committed, or with the error of the commit that failed.
    std::function<void(const Error& commit_error)> fn;
    Error error;  // a record's (or a call's with no fn): the failed commit's, else empty
    std::atomic<std::uint32_t> state{kWaiting};
    std::atomic<bool> spinning{false};  // a hint for the hand-off: this waiter is on a core now
    // The batch its thread's previous record rode in this journal (0: none), and the one this
    // request rode (set by the leader before kDone).
    std::uint64_t prev_batch = 0, batch = 0;
    // A call's: the marks and upserts queued before it (their last seq), which must be in the
    // file before its fn runs.
    std::uint64_t want = 0;
  };
  static constexpr std::uint32_t kWaiting = 0, kDone = 1, kLead = 2;
  // Work nobody waits for, folded into the next transaction: a mark (a = the job's id) or an
  // applied upsert (a = the name, a branded id or a text key; b = the version). `a` fits
  // std::string's small buffer for a branded id: no allocation on the original's names.
  struct Async {
    bool upsert;
    std::string a;
    BrandedId b;
    std::uint64_t seq = 0;  // 1, 2, ... in the order submitted
  };

  // How long queued marks and upserts wait for a leader before the flusher commits them itself,
  // and how many empty ticks it polls before it sleeps until woken.
  static constexpr std::chrono::milliseconds kLinger{2};
  static constexpr int kQuietTicks = 50;
  // The next leader waits at most this long (yielding its core) for the writers it expects in its
  // batch: the last batch's, which its commit just answered and which come straight back in a
  // loop, and the waiting ones that were not in it. Without it, writers alternate and every
  // commit carries one record. A lone writer expects only itself and never waits.
  static constexpr std::chrono::microseconds kGather{30};
  // A waiter polls its state this long, yielding its core between polls, before it sleeps on
  // the generation word: a batch's commit lasts ~10-40 us here, and a futex sleep plus a wake
  // costs the leader a syscall and the waiter ~20 us when it is woken across cores.
  static constexpr std::chrono::microseconds kSpin{50};

  JournalOptions options;
  BrandedId group;
  std::filesystem::path path;
  Db db;
  // One multi-row INSERT per width (rows per statement), widest first: a batch's rows take as
  // few statements as the widths allow, and AUTOINCREMENT's sqlite_sequence row is written once
  // per statement, not once per row.
  static constexpr std::array<std::size_t, 5> kInsertWidths{16, 8, 4, 2, 1};
  std::array<Stmt, kInsertWidths.size()> insert;
  // The same for marks: UPDATE ... WHERE job_id IN (one parameter per mark).
  static constexpr std::array<std::size_t, 4> kMarkWidths{64, 16, 4, 1};
  std::array<Stmt, kMarkWidths.size()> mark;
  Stmt upsert, uncovered, compact, count_intents, count_pending, count_applied;
  Stmt begin, commit, rollback;  // the group commit's own statements, parsed once too
  // The flusher's own connection, for checkpoints only: a PASSIVE checkpoint runs beside the
  // writers (WAL), so no caller's commit pays the checkpoint's fsyncs. Closed before `db`.
  Db checkpointer;
  // The WAL's frames after the last commit (the WAL hook, on the leader; the flusher zeroes it
  // after a checkpoint, so the next one is due only after a commit reports again) and how many of
  // them the flusher's last checkpoint copied into the database file (zeroed when the hook sees
  // the WAL shrink: the first commit after a complete checkpoint writes from the WAL's start). A
  // checkpoint is due past kCheckpointPages frames not yet copied, SQLite's own autocheckpoint
  // threshold, which the hook replaces.
  static constexpr int kCheckpointPages = 1000;
  // A writer that never pauses keeps appending while the flusher's checkpoint runs, so the WAL
  // may be fully copied back only between two commits, and restart only then: past this, the
  // leader checkpoints inline, as SQLite itself would, which bounds the file. The flusher has
  // copied all but the last few hundred frames by then, so it costs that leader little. The
  // flusher starts no pass past it (a pass of its own would hold the checkpoint lock and turn
  // the leader's away, SQLITE_BUSY, commit after commit: a soak under load saw the WAL at 8,500
  // frames with 4 inline passes counted), so the WAL ends at most one flusher pass past it.
  static constexpr int kInlineCheckpointPages = 4 * kCheckpointPages;
  std::atomic<int> wal_pages{0};
  std::atomic<int> backfilled{0};
  int hook_pages = 0;  // the hook's last report (leader only)
  bool checkpoint_due() const {
    const int pages = wal_pages.load(std::memory_order_relaxed);
    const int done = backfilled.load(std::memory_order_relaxed);
    return (pages >= done ? pages - done : pages) >= kCheckpointPages &&
           pages < kInlineCheckpointPages;  // past it, the leader's
  }

  std::mutex mu;
  std::vector<Sync*> waiting;          // under mu
  std::atomic<std::size_t> queued{0};  // waiting.size(), for a gathering leader that holds no mu
  // The wake of waiters: the leader bumps `generation` after it answered a batch (and handed the
  // connection on) and wakes its sleepers with one futex call when `sleepers` says there are any.
  std::atomic<std::uint32_t> generation{0};
  std::atomic<int> sleepers{0};
  // Queued marks and upserts, under mu, oldest first (a refused transaction's go back to the
  // front). They ride only a transaction nobody waits on for a record: the flusher's, a drain's
  // or one that answers a call. A record's commit carries its rows alone (under NORMAL): in the
  // remembered lane its caller runs cold, and there a mark's index lookup and an upsert's two
  // B-trees cost it more than the record itself. One transaction takes at most max_group of them,
  // so a flood of remembers never makes a record (or, under FULL, a record's own batch) wait
  // behind one unbounded transaction; a call's fn runs only once everything queued before it is
  // in the file (flush() finds them there), over as many transactions as that takes.
  std::deque<Async> pending;
  std::uint64_t submitted = 0;   // under mu: the last seq given
  bool leading = false;          // under mu: some thread holds the connection
  bool stopping = false;         // under mu
  bool flusher_idle = false;     // under mu: the flusher sleeps until notified
  std::size_t last_callers = 0;  // under mu: writers the last batch carried
  std::uint64_t batch_no = 0;    // under mu: batches taken so far (the last one's number)
  std::condition_variable flusher_cv;
  Housekeeping housekeeping;  // JournalOptions::flusher_cpus: names and pins the flusher
  std::thread flusher;
  // The leader's (whoever holds the connection; the hand-off under mu orders them).
  std::vector<Sync*> batch_syncs;
  std::vector<Sync*> deferred;  // calls of the batch whose marks and upserts are not all in yet
  std::deque<Async> batch_asyncs;
  std::uint64_t batch_through = 0;      // every async up to this seq is in the batch or before
  std::uint64_t committed_through = 0;  // every async up to this seq is in the file
  struct RowRef {
    const BrandedId* job;
    std::string_view name;
    const BrandedId* version;
    std::int64_t at;
  };
  std::vector<RowRef> batch_rows;             // the batch's records, in order
  std::vector<std::string_view> batch_marks;  // views of batch_asyncs' job ids
  std::uint64_t transactions = 0, grouped = 0, failed = 0, inline_checkpoints = 0;
  std::atomic<std::uint64_t> checkpoints{0};  // the flusher's that ran on a WAL

  mutable std::shared_mutex memory_mu;
  std::unordered_map<std::string, BrandedId, journal_detail::StringHash, std::equal_to<>> memory;

  Impl(JournalOptions o, BrandedId g)
      : options(std::move(o)), group(g), housekeeping(options.flusher_cpus) {}

  // ---- opening the file (journal.cc), in this order ----
  void open_connection();
  void prepare_statements();
  void load_memory();
  void watch_wal();
  void open_checkpointer();

  // ---- the group commit (journal_commit.cc) ----
  inline void submit(Async a);
  inline void wait_turn(Sync& s);
  inline void wait_turn(std::unique_lock<std::mutex>& lock, Sync& s);
  inline std::uint32_t await(Sync& s);
  inline void wake();
  inline void lead(std::unique_lock<std::mutex>& lock, Sync* mine, bool drain);
  inline void gather(std::unique_lock<std::mutex>& lock, const Sync* mine);
  inline bool take_batch(const Sync* mine);
  inline void settle_calls(const Error& error);
  inline bool answer(const Sync* mine);
  inline void hand_off();
  inline void checkpoint();
  inline Error commit_batch();
  inline Error write_asyncs();
  inline Error write_records();
  inline void flush_loop();
  // Out of line, for the other files: wait_turn(s) for a call, and the flusher's start.
  void wait_call(Sync& s);
  void start_flusher();

  // Runs `fn` with the connection once everything queued before it is in the file, and waits;
  // answers what fn returns. fn takes the error of a commit that failed to put them there (empty
  // when none did) and decides: replay and compact answer it, flush and stats go on. fn runs
  // exactly once, on the thread holding the connection; SQLite's failures are Errors, so only
  // an allocation can throw in it, and that goes back to this caller's thread, never unwinding
  // the leader's.
  template <class Fn>
  auto call(Fn fn) {
    using R = decltype(fn(std::declval<const Error&>()));
    std::optional<R> out;
    std::exception_ptr thrown;
    Sync s;
    s.fn = [&fn, &out, &thrown](const Error& commit_error) {
      try {
        out.emplace(fn(commit_error));
      } catch (...) {
        thrown = std::current_exception();
      }
    };
    wait_call(s);
    if (thrown) std::rethrow_exception(thrown);
    return std::move(*out);
  }

  std::uint64_t count(sqlite3_stmt* s);  // journal_replay.cc
};

// The unit tests' way to the journal's own connection (tests/unit/journal_test.cc): a real SQLite
// limit set on it, never a fake error.
struct JournalTestAccess {
  // PRAGMA max_page_count=`pages` on the journal's connection, run as a call (the connection
  // held): a transaction that would grow the file past the limit then fails SQLITE_FULL, as on a
  // full disk. SQLite never sets it below the file's current size. Answers the limit now in
  // force (-1: SQLite refused the pragma).
  static std::int64_t max_page_count(Journal& journal, std::int64_t pages) {
    Journal::Impl& d = *journal.impl_;
    return d.call([&d, pages](const Error&) {
      const std::string sql = "PRAGMA max_page_count=" + std::to_string(pages);
      sqlite3_stmt* s = nullptr;
      std::int64_t now = -1;
      if (sqlite3_prepare_v2(d.db.get(), sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
          sqlite3_step(s) == SQLITE_ROW) {
        now = sqlite3_column_int64(s, 0);
      }
      sqlite3_finalize(s);
      return now;
    });
  }
};

}  // namespace echo::engine
