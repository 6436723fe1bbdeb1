// SPDX-License-Identifier: MIT
// The table writer's loop: its rings drained in capped batches and applied newer-wins (in place
// for carried values), the direct path an io thread takes under its token, listeners and the
// absent memory's forgetting. Its life, its inbox and its stats are table_writer_inbox.cc's; a
// miss's flight (the single-flight fill: L2, then the loader) and the absent memory it consults
// and fills are table_writer_flights.cc's.
#include <echo/engine/internal/table_writer.h>

#include <echo/base/clock.h>
#include <echo/base/counter.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>

#include <echo/engine/errc.h>
#include <echo/engine/l2_frame.h>

#include <concurrentqueue/concurrentqueue.h>

#include "thread_name.h"
#include "thread_switches.h"
#include "writer_inbox.h"

namespace echo::engine {

void TableWriter::pin() {
  if (spec_.writer_cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(spec_.writer_cpu, &set);
  // Refused when the CPU is outside this process's cpuset (a container, taskset on a cgroup):
  // the writer then runs where the scheduler puts it, counted and said once.
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    base::solo_add(pin_failures_);
    log(LogLevel::kWarn, "writer",
        "cannot pin the writer to CPU " + std::to_string(spec_.writer_cpu) + " (" +
            std::system_category().message(rc) + "); it runs unpinned");
  }
}

std::size_t TableWriter::take_commands(std::vector<Command>& batch) {
  const std::size_t n = inbox_->q.try_dequeue_bulk(batch.begin(), spec_.max_batch);
  for (std::size_t i = 0; i < n; ++i) {
    handle(batch[i]);
    batch[i] = Command{};  // release what the command held now, not at the next pass
  }
  base::solo_add(commands_, n);
  return n;
}

TableWriter::Due TableWriter::timed_chores(std::int64_t now) {
  if (stale_deadline_ >= 0 && now >= stale_deadline_) {
    stale_deadline_ = -1;
    base::solo_add(disconnect_flushes_);
    suspend(true);
  }
  if (now >= next_sweep_) {
    map_->sweep(now);
    next_sweep_ = now + spec_.sweep_ms;
  }
  Due due;
  // Loader deadlines run on the exact clock whatever the map's (a coarse one could end a
  // flight a tick before its loader_timeout).
  due.exact = load_timers_.empty() ? 0 : table::steady_clock_ms();
  due.load = expire_loads(due.exact);
  due.held = release_held(held_.empty() ? 0 : base::steady_ns());
  due.reclaim = map_->reclaim_due(now);
  return due;
}

void TableWriter::park(std::int64_t now, const Due& due, const std::stop_token& stop) {
  std::int64_t reclaim_at = due.reclaim;
  if (direct_) {
    // Borrowers applied since the last park (under the token, which this writer holds now):
    // more are likely, so park with a reclaim deadline one scan interval out. Their retired
    // rows are then freed by that deadline, and no borrower wakes this writer for them (a
    // futex wake on the io thread, and a woken writer competing for a CPU with the reader the
    // apply just served). A table whose borrowers stopped drops the deadline after one pass.
    const std::uint64_t borrowed = direct_applies_.load(std::memory_order_relaxed);
    if (borrowed != borrowed_seen_ && reclaim_at < 0) {
      reclaim_at = now + table::L1Map::kScanIntervalMs;
    }
    borrowed_seen_ = borrowed;
  }
  const auto deadline = idle_deadline(now, next_sweep_, reclaim_at, due.load, due.exact, due.held);
  // Lent while it waits (deliver() and put_here() may apply meanwhile); the predicate reads
  // only the rings' and the inbox's atomics, never the state the token guards. A borrower's
  // retired rows are freed here, by reclaim_at or once a borrower asks (reclaim_wanted()); a
  // row it adds that expires before this park planned for asks for a pass (expiry_wanted()).
  if (direct_) {
    reclaim_armed_ = reclaim_at >= 0;
    // The deadline above planned for this expiry: a borrower that puts a row expiring earlier
    // (put_here, a carried value) asks for a pass (expiry_wanted()).
    parked_expiry_ = map_->size() != 0 ? map_->next_expiry() : kNoExpiry;
    map_->hold_reclaim(true);
    map_->release_writer();
    token_.lend();
  }
  bell_.wait_until(
      [this]() noexcept {
        for (const auto& r : rings_) {
          if (r->has_work() || r->flush_pending()) return true;  // a refusal rings too
        }
        return inbox_->q.size_approx() != 0 ||
               reclaim_asked_.load(std::memory_order_relaxed);  // notify() orders it
      },
      deadline, stop);
  if (direct_) {
    token_.take_back();  // waits out a borrower's apply (stop() while borrowed too)
    map_->hold_reclaim(false);
    reclaim_asked_.store(false, std::memory_order_relaxed);  // this pass reclaims what is due
  }
}

void TableWriter::run(const std::stop_token& stop) {
  name_this_thread("echo-w:" + spec_.name);
  tid_.store(current_tid(), std::memory_order_relaxed);  // a report: orders nothing
  pin();
  std::vector<Command> batch;
  batch.resize(spec_.max_batch);
  next_sweep_ = now_ms() + spec_.sweep_ms;
  while (!stop.stop_requested()) {
    base::solo_add(passes_);
    const std::size_t work = drain_rings() + take_commands(batch);
    // The map's clock, published as the readers' time under L1Clock::kWriter.
    const std::int64_t now = map_->tick();
    const Due due = timed_chores(now);
    if (work == 0) park(now, due, stop);
  }
  // A stopped table serves nothing: its handles' reads miss, and the engine answers them
  // `stopped` (no listener is told: the rows did not change, the engine stopped).
  map_->clear();
  // Held here; from now on deliver() publishes into the rings (which nothing drains any more),
  // and stop() reads the writer's state after the join.
  token_.close();
}

bool TableWriter::deliver(CoherenceRing& ring, CoherenceItem&& item) noexcept {
  // Only what the drain would apply with no memory, no ack and no listener; a job-lane text item
  // (it carries its key's bytes) and a tracking invalidation stay on the ring.
  const bool plain =
      item.ticket == 0 && (item.kind == ItemKind::kBranded || item.kind == ItemKind::kTextHash);
  if (plain && try_direct(ring, item)) return true;
  ring.publish(CoherenceItem(item));  // refusals counted by the ring; a parked writer is signalled
  return false;
}

bool TableWriter::deliver_carried(CoherenceRing& ring, ring::ByteArena& arena,
                                  CoherenceItem&& item) noexcept {
  if (item.ticket == 0 && try_direct(ring, item)) return true;
  // The ring keeps the item, not the producer's buffer: its bytes go into the arena first (the
  // ring's release publishes them with the item).
  char* bytes = arena.reserve(item.carried_bytes());
  if (bytes == nullptr) return false;
  std::memcpy(bytes, item.key, item.carried_bytes());
  item.key = bytes;
  if (!ring.publish(CoherenceItem(item))) arena.unreserve();  // refused: counted by the ring
  return true;
}

bool TableWriter::try_direct(CoherenceRing& ring, const CoherenceItem& item) noexcept {
  if (!direct_ || !token_.try_borrow()) return false;
  // Empty: every item this producer published before is applied (head_ acquire, pairs with
  // the drain's release; the writer did it while it held the token, so lend() ordered it
  // before this borrow too). Only this thread publishes into `ring`, so it stays empty. No
  // flush pending: a refusal raised after the writer's last pass (this producer's own, so
  // before this call) must reach the writer first, or this item would be applied before the
  // flush that the refused one asks for and then dropped with every other row; through the
  // ring, it is applied after the flush.
  if (ring.free_slots() == ring.capacity() && !ring.flush_pending()) {
    apply_direct(item);
    // The writer parks: the ring's adaptive handshake must hear it, or a ring that went light
    // in a burst would stay light (its items bypass it) and every park would pay a barrier.
    ring.note_consumer_waiting();
    give_back_applied();
    return true;
  }
  map_->release_writer();  // nothing was called: harmless, and keeps the pair obvious
  token_.give_back();
  return false;
}

std::chrono::steady_clock::time_point TableWriter::idle_deadline(
    std::int64_t now, std::int64_t next_sweep, std::int64_t next_reclaim, std::int64_t next_load,
    std::int64_t exact, std::int64_t next_held) const noexcept {
  // Only what needs the clock sets a deadline: an idle writer with none parks until work comes
  // (0 wakes a second), where a fixed tick cost 250 a second per table.
  constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  std::int64_t until = kNever;  // on the map's clock
  if (map_->size() != 0) {
    // A sweep finds a row only once the clock passes the earliest expiry (L1Map::sweep).
    const std::int64_t expiry = map_->next_expiry();
    until = std::max(next_sweep, expiry == kNever ? kNever : expiry + 1);
    // kWriter: readers judge expiry by the time a tick published. Until the earliest expiry,
    // no read's answer depends on it: tick then. Past it, the next expiries are not known
    // until a sweep: tick every clock_tick_ms meanwhile, as a fixed tick did.
    if (spec_.l1_clock == L1Clock::kWriter) {
      until = std::min(until, expiry > now ? expiry : now + spec_.clock_tick_ms);
    }
  }
  // serve_stale: waiting for the sweep alone served stale rows up to sweep_ms past
  // serve_stale_max_ms.
  if (stale_deadline_ >= 0) until = std::min(until, stale_deadline_);
  if (next_reclaim >= 0) until = std::min(until, next_reclaim);
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();
  if (until != kNever) {
    deadline = Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(0, until - now));
  }
  if (next_load >= 0) {
    deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(
                                                     std::max<std::int64_t>(0, next_load - exact)));
  }
  if (next_held >= 0) {
    deadline = std::min(deadline, Clock::time_point(std::chrono::nanoseconds(next_held)));
  }
  return deadline;
}

bool TableWriter::expiry_wanted() noexcept {
  const std::int64_t expiry = map_->size() != 0 ? map_->next_expiry() : kNoExpiry;
  if (expiry >= parked_expiry_) return false;
  parked_expiry_ = expiry;  // one wake per earlier expiry
  // relaxed: as reclaim_wanted's, the notify() that follows orders it.
  reclaim_asked_.store(true, std::memory_order_relaxed);
  return true;
}

bool TableWriter::reclaim_wanted() noexcept {
  if (reclaim_armed_ || map_->retired_rows() == 0) return false;
  reclaim_armed_ = true;
  // relaxed: the notify() that follows (a seq_cst epoch bump the writer's wait acquires) orders
  // it before the writer's predicate reads it.
  reclaim_asked_.store(true, std::memory_order_relaxed);
  return true;
}

// apply_item, settle_item and commit run once per item on the writer's hottest path: inlined
// into their three callers, as the code they replaced was (writer_bench's instruction counts).
[[gnu::always_inline]] inline TableWriter::ItemVerdict TableWriter::apply_item(
    const CoherenceItem& item) noexcept {
  switch (item.kind) {
    case ItemKind::kForgetKey:
    case ItemKind::kForgetAll:  // the tracking lane: no version, no memory, no ticket
      return {forget(item) ? table::Verdict::kApplied : table::Verdict::kStale, true};
    case ItemKind::kTextHash: {
      const auto verdict = map_->apply_hashed(item.text_hash, item.message.version);
      if (!flights_.empty()) note_drop_hashed(item.text_hash);
      if (!absent_.empty()) {
        unmark_absent(item.text_hash);
        std::erase_if(absent_, [&item](const auto& e) { return e.second.hash == item.text_hash; });
      }
      if (spec_.on_message) {
        hear(Heard{{},
                   item.text_hash,
                   item.message.version.view(),
                   false,
                   verdict == table::Verdict::kApplied});
      }
      return {verdict};
    }
    case ItemKind::kBranded:
    case ItemKind::kTextKey:
    case ItemKind::kCarried:
      break;
  }
  const std::string_view name =
      item.kind == ItemKind::kBranded ? item.message.name.view() : item.text_key();
  if (item.ticket != 0 && memory_.stale) {
    // The job lane with a journal: the applied memory answers first (docs/wire.md).
    const Applied a = apply_with_memory(name, item);
    return {a == Applied::kApplied ? table::Verdict::kApplied : table::Verdict::kStale, true,
            a == Applied::kRememberedStale};
  }
  if (item.kind == ItemKind::kCarried) return {apply_carried(name, item)};
  return {apply_message(name, item.message.version)};
}

[[gnu::always_inline]] inline void TableWriter::settle_item(const CoherenceItem& item,
                                                            const ItemVerdict& v, std::int64_t now,
                                                            Tally& tally) noexcept {
  count_lag(now - item.decoded_ns);
  const bool dropped = v.verdict == table::Verdict::kApplied;
  if (dropped) tally.dropped_decoded = item.decoded_ns;
  if (v.counted) {
    ++tally.counted;
  } else if (dropped) {
    ++tally.applied;
  }
  if (item.ticket != 0) acks_.push_back(JobAck{item.ticket, v.verdict, v.remembered});
}

[[gnu::always_inline]] inline void TableWriter::commit(const Tally& tally, std::size_t items,
                                                       std::int64_t now) noexcept {
  if (tally.applied != 0) base::solo_add(applied_, tally.applied);
  if (const std::size_t stale = items - tally.applied - tally.counted; stale != 0)
    base::solo_add(stale_, stale);
  // When the pass's rows were gone: what a lane's latency ends on (lanes_bench, drill F6). Only
  // a pass that dropped a row: a job whose lead dropped its row first, applied later as stale,
  // must not move the moment the row went.
  if (tally.dropped_decoded >= 0) {
    last_applied_ns_.store(now < 0 ? base::steady_ns() : now, std::memory_order_relaxed);
    last_decoded_ns_.store(tally.dropped_decoded, std::memory_order_relaxed);
  }
}

void TableWriter::apply_direct(const CoherenceItem& item) noexcept {
  // Flights may be open: apply_item marks those it overtook, under the token like every other
  // piece of the writer's state. A direct item is plain (deliver()): never one the rule counts
  // itself (a forget, a ticket), so its pass of one is counted here, as settle_item and commit
  // would, without their tally.
  const table::Verdict verdict = apply_item(item).verdict;
  const std::int64_t now = base::steady_ns();
  count_lag(now - item.decoded_ns);
  base::solo_add(verdict == table::Verdict::kApplied ? applied_ : stale_);
  base::solo_add(direct_applies_);
  if (verdict == table::Verdict::kApplied) {
    last_applied_ns_.store(now, std::memory_order_relaxed);
    last_decoded_ns_.store(item.decoded_ns, std::memory_order_relaxed);
  }
}

void TableWriter::count_lag(std::int64_t lag) noexcept {
  const std::size_t bucket =
      lag <= 0 ? 0
               : std::min<std::size_t>(std::bit_width(static_cast<std::uint64_t>(lag)) - 1,
                                       kLagBuckets - 1);
  base::solo_add(lag_[bucket]);
  base::solo_add(lag_sum_ns_, lag > 0 ? static_cast<std::uint64_t>(lag) : 0);
}

std::size_t TableWriter::apply_plain(std::span<CoherenceItem> items) noexcept {
  static_assert(offsetof(CoherenceItem, message) == 0 &&
                    alignof(CoherenceItem) >= alignof(table::CoherenceMessage),
                "apply_batch strides over the items' messages");
  return map_->apply_batch(&items[0].message, items.size(), sizeof(CoherenceItem),
                           verdicts_.data());
}

std::size_t TableWriter::drain_rings() {
  std::size_t total = 0;
  for (std::size_t i = 0; i < rings_.size(); ++i) {
    CoherenceRing* r = rings_[i].get();
    ring::ByteArena* arena = arenas_[i].get();
    const std::int64_t t = base::steady_ns();
    // noexcept (the ring requires it: a throw mid-batch would leave slots half applied). What it
    // runs cannot throw, with one chosen exception:
    // - the map's apply allocates nothing but a rare bounded fill-guard doubling and throws
    //   nothing (retired rows chain through themselves; a refused doubling collapses the guard
    //   into its floor): the static_assert below holds it to that;
    // - acks_ is reserved to max_batch in the constructor and a drain hands at most max_batch;
    // - apply_message's tombstone lookup allocates nothing; its flight lookup (only while
    //   flights are in flight) builds a std::string of the name: a 14-byte id stays in the
    //   small buffer, a job-lane text key past 15 bytes allocates (a bad_alloc terminates, as
    //   the memory's below); a broadcast text message walks the flights by hash;
    // - on_removal (removed()) and on_message (hear()) are the user's, documented not to throw,
    //   and caught anyway;
    // - the journal's applied memory (memory_, job lane with a journal only) takes its locks and
    //   allocates (a new name's entry, the flusher's queue). A bad_alloc there calls
    //   std::terminate, by choice: the item's verdict cannot be recorded, and answering it
    //   anyway (or skipping it) would ack a job whose apply the journal never remembered, the
    //   one thing replay must be able to trust. The process dies; replay redoes it.
    total += r->drain(spec_.max_batch, [this, t, arena](std::span<CoherenceItem> items) noexcept {
      apply_drained(items, t);
      if (arena != nullptr) release_carried(*arena, items);
    });
    if (!acks_.empty()) {
      if (ack_sink_) ack_sink_(acks_);
      acks_.clear();
    }
    if (r->take_flush_pending()) {
      // A refused message cost a refill, never a stale read: drop every row, and read again what
      // is in flight (as on a resubscription): a read may have fetched the version the refused
      // message replaces, and no tombstone of that message guards its fill.
      flush();
      for (auto& [key, flight] : flights_) flight.overtaken = true;
      base::solo_add(ring_flushes_);
    }
  }
  return total;
}

// The batch's carried bytes, freed in one store: the arena frees every reservation up to the last
// one (they were laid out in the items' order).
void TableWriter::release_carried(ring::ByteArena& arena,
                                  std::span<const CoherenceItem> items) noexcept {
  for (std::size_t i = items.size(); i-- > 0;) {
    if (items[i].kind == ItemKind::kCarried) {
      arena.release(items[i].key, items[i].carried_bytes());
      return;
    }
  }
}

void TableWriter::apply_drained(std::span<CoherenceItem> items, std::int64_t t) noexcept {
  static_assert(noexcept(map_->apply_coherence(items[0].message.name, items[0].message.version)),
                "the drain must not throw: the map's apply is noexcept");
  Tally tally;
  // A batch of branded items with no memory to ask, no flight to mark and nobody to tell:
  // apply_item is the map's apply_coherence for each, so the map's batched apply (hashes and
  // prefetches ahead: BM_L1Map_ApplyDrops batched:1) gives every verdict, in order.
  bool batch = flights_.empty() && !spec_.on_message && absent_.empty();
  for (std::size_t i = 0; batch && i < items.size(); ++i) {
    batch = items[i].kind == ItemKind::kBranded && (items[i].ticket == 0 || !memory_.stale);
  }
  if (batch) {
    apply_plain(items);
    for (std::size_t i = 0; i < items.size(); ++i) settle_item(items[i], {verdicts_[i]}, t, tally);
  } else {
    for (const CoherenceItem& item : items) settle_item(item, apply_item(item), t, tally);
  }
  commit(tally, items.size(), -1);
}

table::Verdict TableWriter::apply_message(std::string_view name, const table::BrandedId& version) {
  // A message no newer than the drop the guard remembers for the name tells its flights nothing:
  // that drop already restarted every flight begun before it, and every later one read L2 after
  // it (a job behind its own lead, a replay). Restarting them again would only spend their
  // restart budget (kMaxRestarts, then `contended`) on a hot name. (A name whose tombstone went
  // into the guard's floor has none here: its flights are restarted, as before.)
  std::optional<table::IdBytes> known;
  if (!flights_.empty()) known = map_->tombstone(name);
  if (!absent_.empty()) forget_absent(name, &version);
  const auto verdict = map_->apply_coherence(name, version);
  if (!flights_.empty() && (!known || table::newer(version.view(), table::view(*known)))) {
    note_drop(name);
  }
  if (spec_.on_message) {
    hear(Heard{name, table::hash_key(name), version.view(), false,
               verdict == table::Verdict::kApplied});
  }
  return verdict;
}

Applied TableWriter::apply_with_memory(std::string_view name, const table::BrandedId& version) {
  CoherenceItem item{table::CoherenceMessage{version, version}};
  return apply_with_memory(name, item);
}

Applied TableWriter::apply_with_memory(std::string_view name, const CoherenceItem& item) {
  const table::BrandedId& version = item.message.version;
  if (memory_.stale && memory_.stale(name, version)) {
    base::solo_add(remembered_stale_);  // no lookup, no counters, no row
    if (spec_.on_message) hear(Heard{name, table::hash_key(name), version.view(), false, false});
    return Applied::kRememberedStale;
  }
  const auto verdict =
      item.kind == ItemKind::kCarried ? apply_carried(name, item) : apply_message(name, version);
  base::solo_add(verdict == table::Verdict::kApplied ? applied_ : stale_);
  // Even when stale (docs/wire.md, "The journal").
  if (memory_.remember) memory_.remember(name, version);
  return verdict == table::Verdict::kApplied ? Applied::kApplied : Applied::kStale;
}

table::Verdict TableWriter::apply_carried(std::string_view name,
                                          const CoherenceItem& item) noexcept {
  const table::BrandedId& version = item.message.version;
  if (!spec_.value.schema.empty() && !item.value().starts_with(spec_.value.schema)) {
    // Another schema's value (a node of another release published it): applied as the drop it
    // also is, so this node's readers refill through their own loader.
    base::solo_add(schema_mismatches_);
    return apply_message(name, version);
  }
  // As apply_message: a flight that read L2 before this version was written holds an older value.
  // The guard refuses to cache it, but a reader that joins the flight after this message must not
  // be answered with it: the flight reads again. Whatever the verdict (a row this node does not
  // hold is not inserted under kUpdate, and its flight is exactly the one at risk), unless the
  // guard already knew a version as new (that drop restarted the flight already).
  std::optional<table::IdBytes> known;
  if (!flights_.empty()) known = map_->tombstone(name);
  if (!absent_.empty()) forget_absent(name, &version);
  const auto u = map_->apply_update(name, version, item.value(), carry_ == Carry::kUpsert);
  const bool applied = u != table::UpdateVerdict::kStale;
  if (!flights_.empty() && (!known || table::newer(version.view(), table::view(*known)))) {
    note_drop(name);
  }
  switch (u) {
    case table::UpdateVerdict::kUpdated:
      base::solo_add(carried_updates_);
      changed(name);
      break;
    case table::UpdateVerdict::kInserted:
      base::solo_add(carried_inserts_);
      changed(name);
      break;
    case table::UpdateVerdict::kDropped:
      base::solo_add(carried_drops_);
      break;
    case table::UpdateVerdict::kStale:
      break;
  }
  if (spec_.on_message) hear(Heard{name, table::hash_key(name), version.view(), false, applied});
  return applied ? table::Verdict::kApplied : table::Verdict::kStale;
}

void TableWriter::note_drop(std::string_view name) {
  auto it = flights_.find(std::string(name));
  if (it != flights_.end()) it->second.overtaken = true;
}

void TableWriter::note_drop_hashed(std::uint64_t hash) noexcept {
  for (auto& [key, flight] : flights_) {
    if (flight.hash == hash) flight.overtaken = true;
  }
}

void TableWriter::forget_absent(std::string_view name, const table::BrandedId* version) noexcept {
  const auto it = absent_.find(name);
  if (it == absent_.end()) return;
  // Newer wins, as for rows: a message no newer than the load says nothing of what it found.
  if (version != nullptr && !table::newer(version->view(), table::view(it->second.version))) return;
  unmark_absent(it->second.hash);
  absent_.erase(it);
}

void TableWriter::changed(std::string_view name) noexcept {
  if (!spec_.on_change) return;
  // The row just stored, as readers see it (this thread is the map's writer: nothing replaces it
  // meanwhile).
  const auto row = map_->writer_row(name);
  if (!row) return;
  try {
    spec_.on_change(name, row->version, row->value);
  } catch (...) {
    base::solo_add(listener_throws_);  // documented must-not-throw: counted
  }
}

void TableWriter::removed(void* self, std::string_view name, std::string_view version,
                          RemovalCause cause) noexcept {
  static_cast<TableWriter*>(self)->tell(name, version, cause);
}

void TableWriter::tell(std::string_view name, std::string_view version,
                       RemovalCause cause) noexcept {
  if (!spec_.on_removal) return;
  try {
    spec_.on_removal(name, version, cause);
  } catch (...) {
    base::solo_add(
        listener_throws_);  // documented must-not-throw: counted, never let through the drain
  }
}

void TableWriter::flush() noexcept {
  if (map_->size() != 0) tell({}, {}, RemovalCause::kFlush);
  map_->clear();
  forget_all_absent();
  // Tracking: a put or fill begun before the flush may hold what an invalidation lost meanwhile
  // would have dropped (the writer alone stores it: load and store).
  if (forget_seq_) {
    base::solo_add(forget_epoch_);
    forget_flights(0, true);
  }
}

bool TableWriter::forget(const CoherenceItem& item) noexcept {
  forget_all_absent();  // the tracking lane names no version: every remembered absence may be old
  if (item.kind == ItemKind::kForgetAll) {
    const bool held = map_->size() != 0;
    flush();
    base::solo_add(held ? applied_ : stale_);  // after the effect, as every verdict is counted
    hear(Heard{{}, 0, {}, true, held});
    return held;
  }
  const bool dropped = map_->forget_hashed(item.text_hash) == table::Verdict::kApplied;
  base::solo_add(dropped ? applied_ : stale_);
  std::atomic<std::uint32_t>& seq = forget_slot(item.text_hash);
  base::solo_add(seq);
  forget_flights(item.text_hash, false);
  hear(Heard{{}, item.text_hash, {}, false, dropped});
  return dropped;
}

void TableWriter::forget_flights(std::uint64_t hash, bool all) noexcept {
  for (auto& [key, flight] : flights_) {
    if ((all || flight.hash == hash) && flight.forgotten_at == Flight::kNotForgotten) {
      flight.forgotten_at = flight.waiters.size();
    }
  }
}

void TableWriter::hear(const Heard& heard) noexcept {
  if (!spec_.on_message) return;
  try {
    spec_.on_message(heard);
  } catch (...) {
    base::solo_add(
        listener_throws_);  // documented must-not-throw: counted, never let through the drain
  }
}

}  // namespace echo::engine
