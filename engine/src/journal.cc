// SPDX-License-Identifier: MIT
// The journal's SQLite connection, group commit and applied-memory mirror (docs/wire.md,
// "The journal").
//
// Group commit by flat combining: one thread at a time holds the connection. A caller that finds
// it free runs the transaction itself (no thread hand-off: a cross-core wake costs more than the
// commit here), taking every record queued meanwhile in one grab (up to max_group waiters);
// callers arriving while it commits queue and poll their state, yielding the core, then sleep
// on one generation word; the leader answers a whole batch with one futex wake and hands the
// connection to a polling waiter when it can (a sleeping one costs a cross-core wake). Before a
// batch the leader waits a little for the writers it expects (the last batch's, coming back),
// so writers in a loop share commits instead of alternating. Only after the commit are records
// answered, so a recorded intent is durable before its caller may enqueue it. mark and remember
// need no answer: they queue for the flusher thread's transaction every few ms, at most max_group a
// transaction (or a call's, which answers once all queued before it are in: flush() finds them in
// the file), never for a record's commit a caller waits on (a lost mark costs a deduplicated
// replay; a lost remember, a re-apply that newer-wins absorbs; a clean stop drains them). The WAL
// checkpoints run on the flusher's own connection, never inside a caller's commit. journal_bench
// shows the price.
#include <echo/engine/journal.h>

#include <sqlite3.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <echo/base/counter.h>
#include <echo/engine/table_spec.h>
#include <echo/ring/doorbell.h>
#include <echo/table/names.h>

#include "housekeeping.h"

namespace echo::engine {
namespace {

using table::BrandedId;

struct DbCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

[[noreturn]] void fail(sqlite3* db, const std::string& what) {
  throw std::runtime_error("journal: " + what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

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

// SQLITE_STATIC (no copy): every bound buffer outlives the step, and run() clears the bindings.
// Not named bind: a std::string argument would make ADL pick std::bind (an exact match) and bind
// nothing.
void bind_text(sqlite3_stmt* s, int i, std::string_view text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

// Steps a statement that returns no rows (or ignores them) and resets it.
void run(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE) fail(db, what);
}

// Steps `s` to its end, `fn` on each row; throws when SQLite fails before the end, so a read
// error never passes for "no more rows" (an applied memory loaded half, a replay that skips).
template <class Fn>
void each_row(sqlite3* db, sqlite3_stmt* s, const std::string& what, Fn fn) {
  struct Reset {
    sqlite3_stmt* s;
    ~Reset() { sqlite3_reset(s); }
  } reset{s};
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) fn(s);
  if (rc != SQLITE_DONE) fail(db, what);
}

std::string_view column_text(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return {p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i))};
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

// The applied memory's hash: looks a name up by view, so the applier's check allocates nothing.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

// An intent's name: a branded id or a text key (docs/wire.md, "Text keys"; a branded id's 14 bytes
// pass the text key's check too); anything else never reaches the file.
bool intent_name(std::string_view name) noexcept { return table::check_text_key(name).has_value(); }

void check_intent_name(std::string_view name) {
  if (!intent_name(name)) {
    throw std::invalid_argument("journal: intent name '" + std::string(name.substr(0, 64)) +
                                "' is neither a branded id nor a text key (1..200 bytes, no "
                                "braces, spaces or control bytes)");
  }
}
}  // namespace

struct Journal::Impl {
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
    std::function<void()> fn;
    std::exception_ptr error;
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
  std::unordered_map<std::string, BrandedId, StringHash, std::equal_to<>> memory;

  Impl(JournalOptions o, BrandedId g)
      : options(std::move(o)), group(g), housekeeping(options.flusher_cpus) {}

  // Queues work nobody waits for. No wake while the flusher is polling; one when it slept, or
  // when a full group is waiting.
  void submit(Async a) {
    bool wake = false;
    {
      std::lock_guard lock(mu);
      a.seq = ++submitted;
      pending.push_back(std::move(a));
      if (flusher_idle) {
        flusher_idle = false;
        wake = true;
      }
      wake = wake || pending.size() == options.max_group;
    }
    if (wake) flusher_cv.notify_one();
  }

  // Blocks until `s` is committed (or run): as the leader when nobody holds the connection —
  // the uncontended path wakes no thread — else until the leader answers or hands over.
  void wait_turn(Sync& s) {
    // Which batch this thread's previous record rode (the gathering leader's hint).
    struct Last {
      const Impl* journal = nullptr;
      std::uint64_t batch = 0;
    };
    thread_local Last last;
    if (s.rows != nullptr && last.journal == this) s.prev_batch = last.batch;
    std::unique_lock lock(mu);
    wait_turn(lock, s);
    if (s.error) std::rethrow_exception(s.error);
    if (s.rows != nullptr) last = Last{this, s.batch};
  }
  // The same with mu held (`lock`) on entry; on return `lock` may or may not hold mu (an answered
  // waiter does not take it again). The error is left in `s`.
  void wait_turn(std::unique_lock<std::mutex>& lock, Sync& s) {
    if (s.fn) s.want = submitted;
    waiting.push_back(&s);
    queued.store(waiting.size(), std::memory_order_relaxed);
    if (!leading) {
      leading = true;
      lead(lock, &s, false);
      return;
    }
    lock.unlock();
    if (await(s) == kLead) {
      s.state.store(kWaiting, std::memory_order_relaxed);  // only this thread answers it now
      lock.lock();
      lead(lock, &s, false);
    }
  }

  // Waits, without mu, until `s` is answered (kDone) or handed the connection (kLead): polls
  // first, yielding the core between polls (with more writers than cores a pause-spin would
  // take the leader's core), then sleeps on the generation word.
  std::uint32_t await(Sync& s) {
    std::uint32_t st = kWaiting;
    s.spinning.store(true, std::memory_order_relaxed);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (unsigned i = 1;; ++i) {
      st = s.state.load(std::memory_order_acquire);
      if (st != kWaiting) break;
      std::this_thread::yield();
      if ((i & 7) == 0 && std::chrono::steady_clock::now() >= until) break;
    }
    s.spinning.store(false, std::memory_order_relaxed);
    if (st != kWaiting) return st;
    // Dekker with wake(): sleepers++ then read the word and the state here; the state stores,
    // the word's bump, then the sleepers read there (all seq_cst). A missed wake is impossible:
    // either the leader sees this sleeper, or this read sees the new word (and the state).
    for (;;) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t gen = generation.load(std::memory_order_seq_cst);
      st = s.state.load(std::memory_order_seq_cst);
      if (st == kWaiting)
        ring::detail::futex_wait(generation, gen, std::chrono::steady_clock::time_point::max());
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (st != kWaiting) return st;
      st = s.state.load(std::memory_order_acquire);
      if (st != kWaiting) return st;
    }
  }

  // After state stores: one bump of the word, one futex call if anyone sleeps.
  void wake() {
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0)
      ring::detail::futex_wake(generation, 1 << 30);
  }

  // Holds the connection (leading, `lock` held on entry and on return): commits batches until
  // `mine` is done, or one batch for the flusher, or everything queued when `drain`; then hands
  // the connection to a waiting caller (one spinning if any, else the oldest), or releases it.
  void lead(std::unique_lock<std::mutex>& lock, Sync* mine, bool drain) {
    bool mine_done = false;
    for (;;) {
      std::size_t target = 0;
      if (mine != nullptr && mine->rows != nullptr && last_callers > 0) {
        // The writers expected in this batch: the last batch's (answered, coming back) and the
        // waiting writers that were not in it (and the waiting calls). A lone writer expects
        // itself only.
        target = last_callers;
        for (const Sync* s : waiting) target += s->rows == nullptr || s->prev_batch != batch_no;
        target = std::min(target, options.max_group);
      }
      if (target > 1 && waiting.size() < target) {
        // Wait without mu while the expected writers queue, yielding the core to them (they may
        // be waking on this one); never longer than kGather.
        lock.unlock();
        const auto until = std::chrono::steady_clock::now() + kGather;
        while (queued.load(std::memory_order_relaxed) < target &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::yield();
        }
        lock.lock();
      }
      if (waiting.size() <= options.max_group) {
        batch_syncs.swap(waiting);  // every queued request in one grab
      } else {
        const auto cut = waiting.begin() + static_cast<std::ptrdiff_t>(options.max_group);
        batch_syncs.assign(waiting.begin(), cut);
        waiting.erase(waiting.begin(), cut);
      }
      queued.store(waiting.size(), std::memory_order_relaxed);
      ++batch_no;
      // Writers only: a lone writer whose record rode with the flusher's call must not then wait
      // kGather for a second writer that does not exist.
      last_callers = 0;
      for (const Sync* s : batch_syncs) last_callers += s->rows != nullptr;
      // The flusher's or a drain's batch, or one a call rides; and any under synchronous=FULL,
      // where a transaction of their own would cost an fsync, more than their rows in a record's.
      bool asyncs = mine == nullptr || options.synchronous_full;
      for (const Sync* s : batch_syncs) asyncs = asyncs || s->rows == nullptr;
      if (asyncs) {
        const std::size_t n = std::min(pending.size(), options.max_group);
        const auto cut = pending.begin() + static_cast<std::ptrdiff_t>(n);
        batch_asyncs.insert(batch_asyncs.end(), std::make_move_iterator(pending.begin()),
                            std::make_move_iterator(cut));
        pending.erase(pending.begin(), cut);
        batch_through = pending.empty() ? submitted : batch_asyncs.back().seq;
      }
      lock.unlock();
      const std::exception_ptr error = commit_batch();
      if (!error && asyncs) committed_through = batch_through;
      for (Sync*& s : batch_syncs) {
        if (error) {
          s->error = error;
        } else if (s->fn) {
          if (s->want > committed_through) {  // more queued before it than this batch took
            deferred.push_back(s);
            s = nullptr;
            continue;
          }
          s->fn();  // after the commit, in autocommit: a flush sees everything before it durable
        }
      }
      if (error) {
        // Nobody waits for marks and upserts, so nobody would see them lost: they go back to
        // the front of the queue for the next transaction (a record's caller gets the error).
        ++failed;
        lock.lock();
        pending.insert(pending.begin(), std::make_move_iterator(batch_asyncs.begin()),
                       std::make_move_iterator(batch_asyncs.end()));
        lock.unlock();
      }
      batch_asyncs.clear();
      // The answers: after its kDone a waiter may return and free its Sync, so nothing here
      // touches one after its store (the wake below reads only the journal's own words).
      for (Sync* s : batch_syncs) {
        if (s == nullptr) continue;
        mine_done = mine_done || s == mine;
        s->batch = batch_no;
        s->state.store(kDone, std::memory_order_seq_cst);
      }
      batch_syncs.clear();
      lock.lock();
      if (!deferred.empty()) {  // first in the next batch, which takes the next asyncs
        waiting.insert(waiting.begin(), deferred.begin(), deferred.end());
        queued.store(waiting.size(), std::memory_order_relaxed);
        deferred.clear();
      }
      // A drain (the destructor's) stops at a failed transaction: what it re-queued would fail
      // again, for ever.
      const bool more =
          mine != nullptr ? !mine_done : drain && !error && (!waiting.empty() || !pending.empty());
      if (!more) break;
      wake();
    }
    if (!waiting.empty()) {
      Sync* next = waiting.front();
      for (Sync* s : waiting) {
        if (s->spinning.load(std::memory_order_relaxed)) {
          next = s;
          break;
        }
      }
      next->state.store(kLead, std::memory_order_seq_cst);
    } else {
      leading = false;
    }
    wake();
    const bool due = !pending.empty() || checkpoint_due();
    if (due && flusher_idle) {
      flusher_idle = false;
      flusher_cv.notify_one();
    }
  }

  // A PASSIVE checkpoint on the flusher's connection, outside mu, beside any writer. Flusher only.
  void checkpoint() {
    int log = 0, done = 0;
    const int rc = sqlite3_wal_checkpoint_v2(checkpointer.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                             &log, &done);
    if (rc == SQLITE_OK && done > 0) {
      backfilled.store(done, std::memory_order_relaxed);
      base::shared_add(checkpoints);
    }
    // Due again only after the next commit reports the WAL's size (so an incomplete pass, a
    // writer having appended meanwhile, is retried once per commit at most, as SQLite does).
    wal_pages.store(0, std::memory_order_relaxed);
  }

  // One BEGIN IMMEDIATE ... COMMIT over the batch: the marks and upserts it took, then the
  // records. A batch of calls alone writes nothing and opens no transaction. Leader only.
  std::exception_ptr commit_batch() {
    bool writes = !batch_asyncs.empty();
    for (const Sync* s : batch_syncs) writes = writes || s->rows != nullptr;
    if (!writes) return {};
    try {
      run(db.get(), begin.get(), "begin");
      // Marks (as few UPDATE ... IN statements as the widths allow), then upserts in order.
      batch_marks.clear();
      for (const Async& a : batch_asyncs) {
        if (!a.upsert) batch_marks.push_back(a.a);
      }
      for (std::size_t next = 0; next < batch_marks.size();) {
        std::size_t w = 0;
        while (kMarkWidths[w] > batch_marks.size() - next) ++w;
        sqlite3_stmt* st = mark[w].get();
        for (std::size_t k = 0; k < kMarkWidths[w]; ++k)
          bind_text(st, static_cast<int>(k + 1), batch_marks[next + k]);
        run(db.get(), st, "mark");
        next += kMarkWidths[w];
      }
      for (const Async& a : batch_asyncs) {
        if (!a.upsert) continue;
        bind_text(upsert.get(), 1, a.a);
        bind_text(upsert.get(), 2, a.b.view());
        run(db.get(), upsert.get(), "upsert");
      }
      // The ids are minted in the callers' own storage (record_many reserved its vector), then
      // the rows go in as few multi-row INSERTs as the widths allow, in order.
      batch_rows.clear();
      for (Sync* s : batch_syncs) {
        if (s->rows == nullptr) continue;
        const std::int64_t at = wall_ms();  // one shared timestamp per record_many
        for (std::size_t i = 0; i < s->n_rows; ++i) {
          const BrandedId job = table::process_minter().mint("JOB", options.node_id).value();
          const BrandedId* kept;
          if (s->jobs != nullptr) {
            kept = &s->jobs->emplace_back(job);
          } else {
            kept = &s->job.emplace(job);
          }
          batch_rows.push_back(RowRef{kept, s->rows[i].name, &s->rows[i].version, at});
        }
      }
      for (std::size_t next = 0; next < batch_rows.size();) {
        std::size_t w = 0;  // the widest statement that fits what is left
        while (kInsertWidths[w] > batch_rows.size() - next) ++w;
        sqlite3_stmt* st = insert[w].get();
        for (std::size_t k = 0; k < kInsertWidths[w]; ++k) {
          const RowRef& r = batch_rows[next + k];
          const int col = static_cast<int>(4 * k);
          bind_text(st, col + 1, r.job->view());
          bind_text(st, col + 2, r.name);
          bind_text(st, col + 3, r.version->view());
          sqlite3_bind_int64(st, col + 4, r.at);
        }
        run(db.get(), st, "record");
        next += kInsertWidths[w];
      }
      run(db.get(), commit.get(), "commit");
      if (wal_pages.load(std::memory_order_relaxed) >= kInlineCheckpointPages) {
        // SQLITE_BUSY while a flusher pass begun below the threshold runs: the next commit
        // tries again (the flusher begins no other).
        if (sqlite3_wal_checkpoint_v2(db.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr,
                                      nullptr) == SQLITE_OK) {
          ++inline_checkpoints;
        }
      }
      ++transactions;
      grouped += batch_asyncs.size();
      for (const Sync* s : batch_syncs) grouped += s->rows != nullptr;
      return {};
    } catch (...) {
      if (!sqlite3_get_autocommit(db.get())) {
        sqlite3_step(rollback.get());
        sqlite3_reset(rollback.get());
      }
      for (Sync* s : batch_syncs) {
        if (s->jobs != nullptr) s->jobs->clear();
        s->job.reset();
      }
      return std::current_exception();
    }
  }

  // Commits queued marks and upserts nobody else commits: polls every kLinger while work keeps
  // coming (no caller pays a wake), sleeps after kQuietTicks empty ticks until the next submit.
  // And checkpoints when the WAL passed kCheckpointPages.
  void flush_loop() {
    housekeeping.enter("echo-jrnl");
    std::unique_lock lock(mu);
    int quiet = 0;
    while (!stopping) {
      if (checkpoint_due()) {
        lock.unlock();
        checkpoint();
        lock.lock();
        continue;
      }
      if (pending.empty()) {
        if (++quiet > kQuietTicks) {
          flusher_idle = true;
          flusher_cv.wait(lock, [this] { return stopping || !flusher_idle; });
          flusher_idle = false;
          quiet = 0;
        } else {
          flusher_cv.wait_for(lock, kLinger);
        }
        continue;
      }
      quiet = 0;
      // Let more join (under FULL, let a writer's batch take them instead).
      flusher_cv.wait_for(lock, kLinger,
                          [this] { return stopping || pending.size() >= options.max_group; });
      if (pending.empty()) continue;
      if (!leading) {
        leading = true;
        lead(lock, nullptr, false);
      } else if (!options.synchronous_full) {
        // Queue behind the writers as a call with no work of its own: its batch takes the marks
        // and upserts, which records never carry, so a stream of writers cannot postpone them.
        Sync s;
        wait_turn(lock, s);
        if (!lock.owns_lock()) lock.lock();
      } else {
        // Under FULL the holder's batches take them: wait for it, releasing mu (the wait above
        // returns at once, mu held, when max_group are queued: looping on it would spin with mu
        // held and the leader could never take mu back to answer its batch).
        flusher_cv.wait_for(lock, kLinger, [this] { return stopping || !leading; });
      }
    }
  }

  // Runs `fn` with the connection, after the commit of everything queued before it, and waits.
  template <class Fn>
  auto call(Fn fn) {
    using R = decltype(fn());
    Sync s;
    if constexpr (std::is_void_v<R>) {
      s.fn = [&s, &fn] {
        try {
          fn();
        } catch (...) {
          s.error = std::current_exception();
        }
      };
      wait_turn(s);
    } else {
      std::optional<R> out;
      s.fn = [&s, &fn, &out] {
        try {
          out.emplace(fn());
        } catch (...) {
          s.error = std::current_exception();
        }
      };
      wait_turn(s);
      return std::move(*out);
    }
  }

  std::uint64_t count(sqlite3_stmt* s) {
    std::uint64_t n = 0;
    each_row(db.get(), s, "count", [&n](sqlite3_stmt* row) {
      n = static_cast<std::uint64_t>(sqlite3_column_int64(row, 0));
    });
    return n;
  }
};

Journal::Journal(const JournalOptions& options) {
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
  impl_ = std::make_unique<Impl>(options, *group);
  auto& d = *impl_;
  std::filesystem::create_directories(options.dir);
  d.path = table::journal_file(options.dir, options.group).value();
  // The connection passes between threads (one at a time, ordered by the hand-off under mu):
  // SQLite's multi-thread mode, which a single-thread build of the library cannot give.
  if (sqlite3_threadsafe() == 0)
    throw std::runtime_error("journal: SQLite was built single-threaded");
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(d.path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 journal_vfs(options.exclusive));
  d.db.reset(raw);
  if (rc != SQLITE_OK) fail(raw, "open " + d.path.string());
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
      throw std::runtime_error("journal: " + d.path.string() +
                               " is open in another process (one owner per file: its lock is "
                               "held until that process closes the journal or exits)");
    }
    fail(raw, "PRAGMA journal_mode=WAL");
  }
  exec(raw, options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  exec(raw, "PRAGMA busy_timeout=5000");
  exec(raw, kSchema);
  for (std::size_t w = 0; w < Impl::kInsertWidths.size(); ++w) {
    std::string sql =
        "INSERT INTO intents(job_id, name_id, version, recorded_at) VALUES(?, ?, ?, ?)";
    for (std::size_t k = 1; k < Impl::kInsertWidths[w]; ++k) sql += ", (?, ?, ?, ?)";
    d.insert[w] = prepare(raw, sql.c_str());
  }
  for (std::size_t w = 0; w < Impl::kMarkWidths.size(); ++w) {
    std::string sql = "UPDATE intents SET enqueued = 1 WHERE job_id IN (?";
    for (std::size_t k = 1; k < Impl::kMarkWidths[w]; ++k) sql += ", ?";
    d.mark[w] = prepare(raw, (sql + ")").c_str());
  }
  d.upsert =
      prepare(raw,
              "INSERT INTO applied(name_id, version, seq) VALUES(?, ?, 0) ON CONFLICT(name_id) "
              "DO UPDATE SET version = excluded.version WHERE substr(excluded.version, 4) > "
              "substr(applied.version, 4)");
  d.uncovered = prepare(raw, kUncovered);
  d.compact = prepare(raw, kCompact);
  d.count_intents = prepare(raw, "SELECT count(*) FROM intents");
  d.count_pending = prepare(raw, "SELECT count(*) FROM intents WHERE enqueued = 0");
  d.count_applied = prepare(raw, "SELECT count(*) FROM applied");
  d.begin = prepare(raw, "BEGIN IMMEDIATE");
  d.commit = prepare(raw, "COMMIT");
  d.rollback = prepare(raw, "ROLLBACK");
  {
    // The applied memory's mirror: read once here, kept current by remember().
    Stmt all = prepare(raw, "SELECT name_id, version FROM applied");
    each_row(raw, all.get(), "load the applied memory from " + d.path.string(),
             [&d](sqlite3_stmt* row) {
               // A branded id, or a text-key table's key (docs/wire.md, "Text keys").
               const std::string_view name = column_text(row, 0);
               auto version = BrandedId::parse(column_text(row, 1));
               if (version && intent_name(name)) {
                 d.memory.insert_or_assign(std::string(name), *version);
               }
             });
  }
  // Checkpoints leave the committing thread: the hook (which replaces SQLite's autocheckpoint)
  // only notes the WAL's size, and the flusher checkpoints on its own connection.
  sqlite3_wal_hook(
      raw,
      [](void* impl, sqlite3*, const char*, int pages) {
        auto& j = *static_cast<Impl*>(impl);
        if (pages < j.hook_pages) j.backfilled.store(0, std::memory_order_relaxed);  // restarted
        j.hook_pages = pages;
        j.wal_pages.store(pages, std::memory_order_relaxed);
        return SQLITE_OK;
      },
      &d);
  sqlite3* ck = nullptr;
  const int ck_rc =
      sqlite3_open_v2(d.path.c_str(), &ck, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      journal_vfs(options.exclusive));
  d.checkpointer.reset(ck);
  if (ck_rc != SQLITE_OK) fail(ck, "open the checkpointer on " + d.path.string());
  exec(ck, "PRAGMA busy_timeout=5000");
  // A connection learns that the file is in WAL mode from its first read; until then SQLite
  // answers its checkpoints as a rollback-journal database's: done, nothing copied (log -1). So
  // it reads the schema once here, or every checkpoint would fall to a leader's inline one.
  exec(ck, "SELECT count(*) FROM sqlite_master");
  d.flusher = std::thread([&d] { d.flush_loop(); });
}

Journal::~Journal() {
  if (!impl_) return;
  auto& d = *impl_;
  {
    std::lock_guard lock(d.mu);
    d.stopping = true;
    d.flusher_idle = false;
  }
  d.flusher_cv.notify_all();
  d.flusher.join();
  // What is still queued goes into the file (nobody else may use the journal by now).
  std::unique_lock lock(d.mu);
  if (!d.leading && (!d.pending.empty() || !d.waiting.empty())) {
    d.leading = true;
    d.lead(lock, nullptr, true);
  }
}

std::vector<BrandedId> Journal::record_many(std::span<const IntentRow> rows) {
  std::vector<BrandedId> jobs;
  if (rows.empty()) return jobs;
  for (const IntentRow& r : rows) check_intent_name(r.name);
  jobs.reserve(rows.size());  // never reallocated: the leader binds the ids it mints in place
  Impl::Sync s;
  s.rows = rows.data();
  s.n_rows = rows.size();
  s.jobs = &jobs;
  impl_->wait_turn(s);  // rethrows a failed commit
  return jobs;
}

std::vector<BrandedId> Journal::record_many(
    const std::vector<std::pair<BrandedId, BrandedId>>& rows) {
  std::vector<IntentRow> views;
  views.reserve(rows.size());
  for (const auto& [name, version] : rows) views.push_back(IntentRow{name.view(), version});
  return record_many(std::span<const IntentRow>(views));
}

BrandedId Journal::record(std::string_view name, const BrandedId& version) {
  check_intent_name(name);
  const IntentRow row{name, version};
  Impl::Sync s;
  s.rows = &row;
  s.n_rows = 1;
  impl_->wait_turn(s);  // rethrows a failed commit
  return *s.job;
}

// Asynchronous: the mark rides the flusher's next transaction (or a call's). That is safe
// because the flag only feeds `pending_enqueue`: replay ignores it and re-enqueues every uncovered
// intent under its recorded job id, so a mark lost to a crash costs one deduplicated enqueue
// (seam B), never a lost or doubled apply. And the mark never precedes its row: it is queued
// only after record() returned, i.e. after the row's commit.
void Journal::mark_enqueued(const BrandedId& job) {
  impl_->submit(Impl::Async{false, job.str(), job});
}

Result<BrandedId> Journal::intend_and_enqueue(std::string_view name, const BrandedId& version,
                                              const EnqueueFn& enqueue) {
  if (!intent_name(name)) return table::Unexpected{make_error_code(Errc::kBadKey)};
  const BrandedId job = record(name, version);  // durable before anything reaches the bus
  auto admitted = enqueue(job, name, version);  // seam A is before this line, seam B after
  if (!admitted) return table::Unexpected{admitted.error()};
  mark_enqueued(job);
  return job;
}

bool Journal::remembered_stale(std::string_view name, const BrandedId& version) const {
  std::shared_lock lock(impl_->memory_mu);
  auto it = impl_->memory.find(name);  // heterogeneous: no key string built
  return it != impl_->memory.end() && !table::newer(version, it->second);
}

void Journal::remember(std::string_view name, const BrandedId& version) {
  // The upsert is queued before the memory lock is released: whoever reads the new version from
  // the memory (last_applied, remembered_stale) and then replays or compacts finds the upsert
  // queued, and call() commits it before its query. Released first, a replay in that window read
  // the file without it and re-sent an intent the memory already covered (the soak under load:
  // cluster_job_lane_test's second replay sent 1). memory_mu then mu, never the other way.
  std::unique_lock lock(impl_->memory_mu);
  auto [it, fresh] = impl_->memory.try_emplace(std::string(name), version);
  if (!fresh) {
    if (!table::newer(version, it->second)) return;  // newer only: nothing to write
    it->second = version;
  }
  impl_->submit(Impl::Async{true, std::string(name), version});
}

void Journal::flush() {
  impl_->call([] {});
}

std::optional<BrandedId> Journal::last_applied(std::string_view name) const {
  std::shared_lock lock(impl_->memory_mu);
  auto it = impl_->memory.find(name);
  if (it == impl_->memory.end()) return std::nullopt;
  return it->second;
}

Result<ReplayResult> Journal::replay(const EnqueueFn& enqueue) {
  auto& d = *impl_;
  struct Row {
    BrandedId job;
    std::string name;  // a branded id or a text key
    BrandedId version;
  };
  ReplayResult result;
  const std::vector<Row> rows = d.call([&d, &result] {
    std::vector<Row> out;
    each_row(d.db.get(), d.uncovered.get(), "replay: read the uncovered intents",
             [&](sqlite3_stmt* row) {
               auto job = BrandedId::parse(column_text(row, 0)),
                    version = BrandedId::parse(column_text(row, 2));
               const std::string_view name = column_text(row, 1);
               if (job && version && intent_name(name)) {
                 out.push_back(Row{*job, std::string(name), *version});
               } else {
                 ++result.malformed;
               }
             });
    return out;
  });
  for (const Row& row : rows) {
    auto admitted = enqueue(row.job, row.name, row.version);
    if (!admitted) return table::Unexpected{admitted.error()};
    if (*admitted) {
      mark_enqueued(row.job);
      ++result.replayed;
    } else {
      ++result.deduplicated;
    }
  }
  return result;
}

std::uint64_t Journal::compact() {
  auto& d = *impl_;
  return d.call([&d] {
    run(d.db.get(), d.compact.get(), "compact");
    return static_cast<std::uint64_t>(sqlite3_changes(d.db.get()));
  });
}

JournalStats Journal::stats() const {
  auto& d = *impl_;
  JournalStats s = d.call([&d] {
    JournalStats out;
    out.intents = d.count(d.count_intents.get());
    out.pending_enqueue = d.count(d.count_pending.get());
    out.remembered = d.count(d.count_applied.get());
    out.transactions = d.transactions;
    out.grouped = d.grouped;
    out.failed = d.failed;
    out.checkpoints = d.checkpoints.load(std::memory_order_relaxed);
    out.inline_checkpoints = d.inline_checkpoints;
    out.flusher_pin_failures = d.housekeeping.pin_failures();
    return out;
  });
  s.path = d.path;
  return s;
}

const std::filesystem::path& Journal::path() const noexcept { return impl_->path; }
const BrandedId& Journal::group() const noexcept { return impl_->group; }

}  // namespace echo::engine
