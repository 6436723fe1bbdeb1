// SPDX-License-Identifier: MIT
// What writes the journal's file (docs/wire.md, "The journal"): the group commit and the verbs
// that enter it, the applied memory's mirror, compaction, the drain at close.
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
//
// Journal::Impl's members here are declared inline (journal_impl.h): a record's path (record,
// wait_turn, lead, commit_batch) and a remember's (submit) inline into one another in this file.
#include "journal_impl.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>

#include <echo/base/counter.h>
#include <echo/ring/doorbell.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace journal_detail;  // sqlite_error, intent_name

// SQLITE_STATIC (no copy): every bound buffer outlives the step, and run() clears the bindings.
// Not named bind: a std::string argument would make ADL pick std::bind (an exact match) and bind
// nothing.
void bind_text(sqlite3_stmt* s, int i, std::string_view text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A name that is neither a branded id nor a text key: Errc::kBadKey, the name (its first 64
// bytes) in the detail.
Error bad_name(std::string_view name) {
  return {Errc::kBadKey, "journal: intent name '" + std::string(name.substr(0, 64)) +
                             "' is neither a branded id nor a text key (1..200 bytes, no "
                             "braces, spaces or control bytes); nothing recorded"};
}

// Steps a statement that returns no rows (or ignores them) and resets it; answers SQLite's error
// (read before the reset, which would replace its message), else an empty one.
Error run(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
  }
  Error error;
  if (rc != SQLITE_DONE) error = sqlite_error(db, what);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return error;
}

}  // namespace

// ---- the waiters ----

// Queues work nobody waits for. No wake while the flusher is polling; one when it slept, or
// when a full group is waiting.
void Journal::Impl::submit(Async a) {
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
void Journal::Impl::wait_turn(Sync& s) {
  // Which batch this thread's previous record rode (the gathering leader's hint).
  struct Last {
    const Impl* journal = nullptr;
    std::uint64_t batch = 0;
  };
  thread_local Last last;
  if (s.rows != nullptr && last.journal == this) s.prev_batch = last.batch;
  std::unique_lock lock(mu);
  wait_turn(lock, s);  // a failed commit's error is left in `s` (a call's fn had it)
  if (s.rows != nullptr) last = Last{this, s.batch};
}

// The same with mu held (`lock`) on entry; on return `lock` may or may not hold mu (an answered
// waiter does not take it again). A failed commit's error is left in `s`.
void Journal::Impl::wait_turn(std::unique_lock<std::mutex>& lock, Sync& s) {
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
std::uint32_t Journal::Impl::await(Sync& s) {
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
void Journal::Impl::wake() {
  generation.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) ring::detail::futex_wake(generation, 1 << 30);
}

// ---- the leader ----

// Holds the connection (leading, `lock` held on entry and on return): commits batches until
// `mine` is done, or one batch for the flusher, or everything queued when `drain`; then hands
// the connection to a waiting caller (one spinning if any, else the oldest), or releases it.
void Journal::Impl::lead(std::unique_lock<std::mutex>& lock, Sync* mine, bool drain) {
  bool mine_done = false;
  for (;;) {
    gather(lock, mine);
    const bool asyncs = take_batch(mine);
    lock.unlock();
    const Error error = commit_batch();
    if (!error && asyncs) committed_through = batch_through;
    settle_calls(error);
    if (error) {
      // Nobody waits for marks and upserts, so nobody would see them lost: they go back to
      // the front of the queue for the next transaction (each record's caller got the error,
      // none of its rows in the file, and may record again).
      ++failed;
      lock.lock();
      pending.insert(pending.begin(), std::make_move_iterator(batch_asyncs.begin()),
                     std::make_move_iterator(batch_asyncs.end()));
      lock.unlock();
    }
    batch_asyncs.clear();
    if (answer(mine)) mine_done = true;
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
  hand_off();
}

// gather, take_batch, settle_calls, answer and hand_off are lead's steps, as write_asyncs and
// write_records are commit_batch's: once per batch, each inlined into its one caller, as the code
// it replaced was.

// Before a batch for a record (`lock` held on entry and on return): the writers expected in it,
// and a wait without mu while they queue.
[[gnu::always_inline]] inline void Journal::Impl::gather(std::unique_lock<std::mutex>& lock,
                                                         const Sync* mine) {
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
}

// Takes the next batch (mu held): the waiting requests, up to max_group, and the queued marks and
// upserts when the batch may carry them. True when it may.
[[gnu::always_inline]] inline bool Journal::Impl::take_batch(const Sync* mine) {
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
  return asyncs;
}

// After the commit, without mu: a failed commit's error to every record of the batch, and to each
// call whose marks and upserts it failed to put in the file (its fn runs with it: replay, compact
// and flush answer it, stats goes on; a call that needed nothing from it runs as after a commit);
// else each call's fn, or, for a call whose marks and upserts are not all in yet, a place in the
// next batch (its entry here nulled).
[[gnu::always_inline]] inline void Journal::Impl::settle_calls(const Error& error) {
  for (Sync*& s : batch_syncs) {
    if (error) {
      if (s->fn) {
        s->fn(s->want > committed_through ? error : Error{});  // after the rollback, in autocommit
      } else {
        s->error = error;
      }
    } else if (s->fn) {
      if (s->want > committed_through) {  // more queued before it than this batch took
        deferred.push_back(s);
        s = nullptr;
        continue;
      }
      s->fn(Error{});  // after the commit, in autocommit: a flush sees everything before it durable
    }
  }
}

// The answers, without mu: after its kDone a waiter may return and free its Sync, so nothing
// here touches one after its store (the leader's wake() reads only the journal's own words).
// True when `mine` was among them.
[[gnu::always_inline]] inline bool Journal::Impl::answer(const Sync* mine) {
  bool mine_done = false;
  for (Sync* s : batch_syncs) {
    if (s == nullptr) continue;
    mine_done = mine_done || s == mine;
    s->batch = batch_no;
    s->state.store(kDone, std::memory_order_seq_cst);
  }
  batch_syncs.clear();
  return mine_done;
}

// The leader's last step (mu held): the connection to a waiting caller (one spinning if any, else
// the oldest), or released; the wake; the flusher's when work is due.
[[gnu::always_inline]] inline void Journal::Impl::hand_off() {
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

// ---- the transaction ----

// One BEGIN IMMEDIATE ... COMMIT over the batch: the marks and upserts it took, then the
// records. A batch of calls alone writes nothing and opens no transaction. Leader only. Answers
// the first step SQLite refused (kJournalIo, its cause in the detail; the transaction rolled
// back, no id kept), else an empty error. Throws nothing.
Error Journal::Impl::commit_batch() {
  bool writes = !batch_asyncs.empty();
  for (const Sync* s : batch_syncs) writes = writes || s->rows != nullptr;
  if (!writes) return {};
  Error error = run(db.get(), begin.get(), "begin");
  if (!error) error = write_asyncs();
  if (!error) error = write_records();
  if (!error) error = run(db.get(), commit.get(), "commit");
  if (error) {
    // A COMMIT refused (SQLITE_BUSY, SQLITE_FULL) leaves the transaction open: roll it back.
    if (!sqlite3_get_autocommit(db.get())) {
      sqlite3_step(rollback.get());
      sqlite3_reset(rollback.get());
    }
    for (Sync* s : batch_syncs) {
      if (s->jobs != nullptr) s->jobs->clear();
      s->job.reset();
    }
    return error;
  }
  if (wal_pages.load(std::memory_order_relaxed) >= kInlineCheckpointPages) {
    // SQLITE_BUSY while a flusher pass begun below the threshold runs: the next commit
    // tries again (the flusher begins no other).
    if (sqlite3_wal_checkpoint_v2(db.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr) ==
        SQLITE_OK) {
      ++inline_checkpoints;
    }
  }
  ++transactions;
  grouped += batch_asyncs.size();
  for (const Sync* s : batch_syncs) grouped += s->rows != nullptr;
  return {};
}

// Marks (as few UPDATE ... IN statements as the widths allow), then upserts in order. Answers
// the first statement SQLite refused.
[[gnu::always_inline]] inline Error Journal::Impl::write_asyncs() {
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
    if (Error e = run(db.get(), st, "mark")) return e;
    next += kMarkWidths[w];
  }
  for (const Async& a : batch_asyncs) {
    if (!a.upsert) continue;
    bind_text(upsert.get(), 1, a.a);
    bind_text(upsert.get(), 2, a.b.view());
    if (Error e = run(db.get(), upsert.get(), "upsert")) return e;
  }
  return {};
}

// The ids are minted in the callers' own storage (record_many reserved its vector), then the rows
// go in as few multi-row INSERTs as the widths allow, in order. Answers the first statement SQLite
// refused (or a minter that could not mint: its clock past the ids' range).
[[gnu::always_inline]] inline Error Journal::Impl::write_records() {
  batch_rows.clear();
  for (Sync* s : batch_syncs) {
    if (s->rows == nullptr) continue;
    const std::int64_t at = wall_ms();  // one shared timestamp per record_many
    for (std::size_t i = 0; i < s->n_rows; ++i) {
      auto minted = table::process_minter().mint("JOB", options.node_id);
      if (!minted) {
        return {Errc::kJournalIo,
                "journal: record: mint a job id: " + std::string(table::to_string(minted.error()))};
      }
      const BrandedId job = *minted;
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
    if (Error e = run(db.get(), st, "record")) return e;
    next += kInsertWidths[w];
  }
  return {};
}

// ---- the flusher ----

// A PASSIVE checkpoint on the flusher's connection, outside mu, beside any writer. Flusher only.
void Journal::Impl::checkpoint() {
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

// Commits queued marks and upserts nobody else commits: polls every kLinger while work keeps
// coming (no caller pays a wake), sleeps after kQuietTicks empty ticks until the next submit.
// And checkpoints when the WAL passed kCheckpointPages.
void Journal::Impl::flush_loop() {
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

void Journal::Impl::start_flusher() {
  flusher = std::thread([this] { flush_loop(); });
}

void Journal::Impl::wait_call(Sync& s) { wait_turn(s); }

// ---- the verbs ----

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

Result<std::vector<BrandedId>> Journal::record_many(std::span<const IntentRow> rows) {
  std::vector<BrandedId> jobs;
  if (rows.empty()) return jobs;
  for (const IntentRow& r : rows) {
    if (!intent_name(r.name)) return table::Unexpected{bad_name(r.name)};
  }
  jobs.reserve(rows.size());  // never reallocated: the leader binds the ids it mints in place
  Impl::Sync s;
  s.rows = rows.data();
  s.n_rows = rows.size();
  s.jobs = &jobs;
  impl_->wait_turn(s);
  if (s.error) return table::Unexpected{std::move(s.error)};  // none of the rows is in the file
  return jobs;
}

Result<std::vector<BrandedId>> Journal::record_many(
    const std::vector<std::pair<BrandedId, BrandedId>>& rows) {
  std::vector<IntentRow> views;
  views.reserve(rows.size());
  for (const auto& [name, version] : rows) views.push_back(IntentRow{name.view(), version});
  return record_many(std::span<const IntentRow>(views));
}

Result<BrandedId> Journal::record(std::string_view name, const BrandedId& version) {
  if (!intent_name(name)) return table::Unexpected{bad_name(name)};
  const IntentRow row{name, version};
  Impl::Sync s;
  s.rows = &row;
  s.n_rows = 1;
  impl_->wait_turn(s);
  if (s.error) return table::Unexpected{std::move(s.error)};  // the row is not in the file
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
  auto recorded = record(name, version);  // durable before anything reaches the bus
  if (!recorded) return table::Unexpected{recorded.error()};  // a bad name, or SQLite's refusal
  const BrandedId job = *recorded;
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

std::optional<BrandedId> Journal::last_applied(std::string_view name) const {
  std::shared_lock lock(impl_->memory_mu);
  auto it = impl_->memory.find(name);
  if (it == impl_->memory.end()) return std::nullopt;
  return it->second;
}

Result<std::uint64_t> Journal::compact() {
  auto& d = *impl_;
  return d.call([&d](const Error& commit_error) -> Result<std::uint64_t> {
    if (commit_error)
      return table::Unexpected{commit_error};  // the marks and upserts before it: not in
    if (Error e = run(d.db.get(), d.compact.get(), "compact")) {
      ++d.failed;  // a transaction of its own (autocommit), refused
      return table::Unexpected{std::move(e)};
    }
    return static_cast<std::uint64_t>(sqlite3_changes(d.db.get()));
  });
}

}  // namespace echo::engine
