// SPDX-License-Identifier: MIT
// The table writer's loop and its single-flight fill protocol.
//
// A flight is one L2 read (and, on nil, one loader run and conditional L2 write) shared by every
// concurrent miss of a name. The fill guard closes the classic race twice over: the map refuses
// a fill older than a remembered drop (tombstone), and a flight that a newer drop overtook
// re-reads L2 instead of answering (its riders may have asked after the drop, so answering them
// with what the flight read before it would be a stale read).
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

namespace echo::engine {
namespace {

// How often one flight may be overtaken by newer drops before its riders get `contended`.
constexpr int kMaxRestarts = 8;

table::L1Config l1_config(const TableSpec& spec, table::RemovalListener on_removal) {
  table::L1Config c;
  c.ttl_ms = spec.ttl_ms;
  c.jitter = spec.jitter;
  c.max_size = spec.max_size;
  c.max_bytes = spec.max_bytes;
  c.eviction = spec.eviction;
  c.clock =
      spec.l1_clock == L1Clock::kExact ? &table::steady_clock_ms : &table::coarse_monotonic_ms;
  c.read_clock = spec.l1_clock == L1Clock::kWriter  ? table::ReadClock::kPublished
                 : spec.l1_clock == L1Clock::kSweep ? table::ReadClock::kNone
                                                    : table::ReadClock::kCall;
  c.layout = spec.value.layout;
  c.on_removal = on_removal;
  return c;
}

}  // namespace

std::string_view to_string(Applied a) noexcept {
  switch (a) {
    case Applied::kApplied:
      return "applied";
    case Applied::kStale:
      return "stale";
    case Applied::kRememberedStale:
      return "remembered_stale";
  }
  return "?";
}

std::string_view to_string(Source s) noexcept {
  switch (s) {
    case Source::kL1:
      return "l1";
    case Source::kL2:
      return "l2";
    case Source::kLoader:
      return "loader";
  }
  return "?";
}

struct TableWriter::Inbox {
  moodycamel::ConcurrentQueue<Command> q;
};

TableWriter::TableWriter(const TableSpec& spec, WriterPorts ports, unsigned node_id)
    : spec_((validate(spec), spec)),
      ports_(std::move(ports)),
      node_id_(node_id),
      map_(std::make_shared<table::L1Map>(
          l1_config(spec, spec.on_removal ? table::RemovalListener{&TableWriter::removed, this}
                                          : table::RemovalListener{}))),
      bell_(spec.writer_wait),
      inbox_(std::make_unique<Inbox>()),
      suspended_(spec.coherence != CoherenceMode::kNone),
      forget_seq_(spec.coherence == CoherenceMode::kTracking
                      ? std::make_unique<std::atomic<std::uint32_t>[]>(kForgetSlots)
                      : nullptr) {
  suspended_flag_.store(suspended_, std::memory_order_relaxed);
  acks_.reserve(spec_.max_batch);  // the drain lambda is noexcept: it must not allocate
  verdicts_.resize(spec_.max_batch);
  // The listeners are documented to run on the writer thread: a table with one keeps every
  // apply there.
  direct_ = spec_.direct_apply && !spec_.on_message && !spec_.on_removal && !spec_.on_change;
  carry_ = carry_of(spec_);
}

// stop() throws only if the thread cannot be joined (std::system_error): terminating then is right.
TableWriter::~TableWriter() { stop(); }  // NOLINT(bugprone-exception-escape)

CoherenceRing& TableWriter::add_ring(ring::FullPolicy policy, bool carried) {
  ring::RingConfig config;
  config.capacity = spec_.ring_capacity;
  config.full_policy = policy;
  config.consumer_wait = spec_.writer_wait;
  rings_.push_back(std::make_unique<CoherenceRing>(config, bell_));
  arenas_.push_back(carried ? std::make_unique<ring::ByteArena>(spec_.carry_arena_bytes) : nullptr);
  return *rings_.back();
}

ring::ByteArena* TableWriter::arena_of(const CoherenceRing& ring) const noexcept {
  for (std::size_t i = 0; i < rings_.size(); ++i) {
    if (rings_[i].get() == &ring) return arenas_[i].get();
  }
  return nullptr;
}

void TableWriter::start() {
  closed_.store(false, std::memory_order_relaxed);
  thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
  running_.store(true, std::memory_order_release);  // pairs with running()'s acquire
}

void TableWriter::stop() {
  if (!thread_.joinable()) return;
  running_.store(false, std::memory_order_relaxed);  // a caller racing this still gets `stopped`
  thread_.request_stop();
  thread_.join();
  // The loop has ended: this thread is now the only one touching the writer state. A command
  // posted from here on is answered by its poster: post() reads the flag after its enqueue, this
  // drains after the store, and the two fences make one of them see the other's write.
  closed_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  drain_stopped();
  for (auto& [key, flight] : flights_) {
    for (auto& w : flight.waiters) w(GetOutcome{make_error_code(Errc::kStopped)});
  }
  flights_.clear();
  load_timers_.clear();
  held_.clear();
}

void TableWriter::drain_stopped() {
  const std::error_code stopped = make_error_code(Errc::kStopped);
  Command cmd;
  while (inbox_->q.try_dequeue(cmd)) {
    std::visit(
        [&stopped](auto& c) {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, MissCmd>) {
            c.done(GetOutcome{stopped});
          } else if constexpr (std::is_same_v<T, ApplyCmd> || std::is_same_v<T, RememberCmd>) {
            c.done(table::Unexpected{stopped});
          } else if constexpr (requires { c.done; }) {
            c.done();  // puts, erases, syncs: nothing to answer but that it is over
          }
          // The rest (fetched, loaded, lost, confirmed) is the writer's own bookkeeping.
        },
        cmd);
  }
}

void TableWriter::post(Command&& cmd) {
  inbox_->q.enqueue(std::move(cmd));
  // A post racing stop() (a read that passed the engine's running check just before it) must
  // not wait for a loop that has ended: see stop().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (closed_.load(std::memory_order_relaxed)) return drain_stopped();
  bell_.notify();  // after the enqueue's release: pairs with the writer's has_work re-check
}

void TableWriter::miss(std::string_view name, GetCallback done) {
  post(MissCmd{std::string(name), std::move(done)});
}
void TableWriter::put(std::string_view name, std::string value, const table::BrandedId& version,
                      std::function<void()> done, std::uint64_t guard) {
  post(PutCmd{std::string(name), std::move(value), version, std::move(done), guard});
}
bool TableWriter::put_here(std::string_view name, std::string_view value,
                           const table::BrandedId& version, std::uint64_t guard) {
  if (!direct_ || !token_.try_borrow()) return false;
  // The writer waits with nothing to do: this thread is the map's one mutator until it gives the
  // token back. What the writer's loop would do for a PutCmd, done here; a throw (no memory for
  // the row) gives the token back and the caller posts the put instead.
  try {
    apply_put(name, value, version, guard);
  } catch (...) {
    map_->release_writer();
    token_.give_back();
    return false;
  }
  give_back_applied();
  return true;
}

void TableWriter::give_back_applied() noexcept {
  // Rows the apply retired are freed by the writer, never here (reclamation scans reader slots
  // with a membarrier and runs the values' destructors): wake it once, if its park has no reclaim
  // deadline yet; and a row that expires before the writer planned to wake gets its pass (the
  // readers' clock under L1Clock::kWriter, the sweep).
  const bool reclaim = reclaim_wanted();  // both asked: each arms its own reason
  const bool wake = expiry_wanted() || reclaim;
  map_->release_writer();
  token_.give_back();
  if (wake) bell_.notify();
}

void TableWriter::apply_put(std::string_view name, std::string_view value,
                            const table::BrandedId& version, std::uint64_t guard) {
  // Not caching (suspended), an invalidation after L2 was written (tracking: maybe of a later
  // write), or L2 holds what the table's codec refuses: no row, and no older row survives either.
  const bool forgotten = !suspended_ && guard != kNoGuard && guard != forget_token(name);
  if (!absent_.empty()) forget_absent(name, nullptr);
  if (forgotten) base::solo_add(forgotten_puts_);
  const auto put = suspended_ || forgotten ? table::InsertVerdict::kRefusedDecode
                                           : map_->put(name, value, version);
  if (put == table::InsertVerdict::kRefusedDecode) {
    map_->erase(name);
  } else if (table::stored(put)) {
    changed(name);
  }
  base::solo_add(puts_);
  if (!flights_.empty()) note_drop(name);  // a flight may have read the older value
}

void TableWriter::erase(std::string_view name, std::function<void()> done) {
  post(EraseCmd{std::string(name), std::move(done)});
}
void TableWriter::apply(std::string_view name, const table::BrandedId& version,
                        std::function<void(WriterAnswer<table::Verdict>)> done) {
  post(ApplyCmd{std::string(name), version, std::move(done)});
}
void TableWriter::apply_and_remember(std::string_view name, const table::BrandedId& version,
                                     std::function<void(WriterAnswer<Applied>)> done) {
  post(RememberCmd{std::string(name), version, std::move(done)});
}
void TableWriter::subscription_lost() { post(LostCmd{now_ms()}); }
void TableWriter::subscription_confirmed() { post(ConfirmedCmd{}); }
void TableWriter::sync(std::function<void()> done) { post(SyncCmd{std::move(done)}); }
void TableWriter::ask(std::string_view name, const table::BrandedId& version, std::string receipt) {
  post(AskCmd{std::string(name), version, std::move(receipt)});
}

std::uint64_t TableWriter::forget_token(std::string_view name) const noexcept {
  if (!forget_seq_) return 0;
  // Relaxed: the writer alone moves these, only ever forward, and it compares a token with its
  // own latest values. A token read before an invalidation's bump can only differ from them
  // later (the guard refuses), and a token that missed an earlier bump refuses too (a refill).
  const std::uint64_t epoch = forget_epoch_.load(std::memory_order_relaxed);
  return epoch << 32 | forget_slot(table::hash_key(name)).load(std::memory_order_relaxed);
}

std::int64_t TableWriter::now_ms() const noexcept { return map_->now(); }

void TableWriter::run(const std::stop_token& stop) {
  name_this_thread("echo-w:" + spec_.name);
  tid_.store(current_tid(), std::memory_order_relaxed);  // a report: orders nothing
  if (spec_.writer_cpu >= 0) {
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
  std::vector<Command> batch;
  batch.resize(spec_.max_batch);
  std::int64_t next_sweep = now_ms() + spec_.sweep_ms;
  while (!stop.stop_requested()) {
    base::solo_add(passes_);
    std::size_t work = drain_rings();
    const std::size_t n = inbox_->q.try_dequeue_bulk(batch.begin(), spec_.max_batch);
    for (std::size_t i = 0; i < n; ++i) {
      handle(batch[i]);
      batch[i] = Command{};  // release what the command held now, not at the next pass
    }
    base::solo_add(commands_, n);
    work += n;
    // The map's clock, published as the readers' time under L1Clock::kWriter.
    const std::int64_t now = map_->tick();
    if (stale_deadline_ >= 0 && now >= stale_deadline_) {
      stale_deadline_ = -1;
      base::solo_add(disconnect_flushes_);
      suspend(true);
    }
    if (now >= next_sweep) {
      map_->sweep(now);
      next_sweep = now + spec_.sweep_ms;
    }
    // Loader deadlines run on the exact clock whatever the map's (a coarse one could end a
    // flight a tick before its loader_timeout).
    const std::int64_t exact = load_timers_.empty() ? 0 : table::steady_clock_ms();
    const std::int64_t next_load = expire_loads(exact);
    const std::int64_t held_now = held_.empty() ? 0 : base::steady_ns();
    const std::int64_t next_held = release_held(held_now);
    const std::int64_t next_reclaim = map_->reclaim_due(now);
    if (work != 0) continue;
    std::int64_t reclaim_at = next_reclaim;
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
    const auto deadline = idle_deadline(now, next_sweep, reclaim_at, next_load, exact, next_held);
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
      if (!absent_.empty())
        std::erase_if(absent_, [&item](const auto& e) { return e.second.hash == item.text_hash; });
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

bool TableWriter::remembered_absent(std::string_view name) {
  const auto it = absent_.find(name);
  if (it == absent_.end()) return false;
  if (table::steady_clock_ms() < it->second.expires_ms) return true;
  absent_.erase(it);
  return false;
}

void TableWriter::remember_absent(std::string_view name, const table::BrandedId& version) {
  if (absent_.size() >= spec_.max_size) {
    // Full: the expired go first, else the one that expires soonest (a linear pass, only when
    // the bound is reached).
    const std::int64_t now = table::steady_clock_ms();
    std::erase_if(absent_, [now](const auto& e) { return e.second.expires_ms <= now; });
    if (absent_.size() >= spec_.max_size) {
      absent_.erase(std::min_element(
          absent_.begin(), absent_.end(),
          [](const auto& a, const auto& b) { return a.second.expires_ms < b.second.expires_ms; }));
    }
  }
  absent_.insert_or_assign(std::string(name),
                           AbsentKey{version.bytes(), table::hash_key(name),
                                     table::steady_clock_ms() + spec_.absent_ttl_ms});
}

void TableWriter::forget_absent(std::string_view name, const table::BrandedId* version) noexcept {
  const auto it = absent_.find(name);
  if (it == absent_.end()) return;
  // Newer wins, as for rows: a message no newer than the load says nothing of what it found.
  if (version != nullptr && !table::newer(version->view(), table::view(it->second.version))) return;
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
  absent_.clear();
  // Tracking: a put or fill begun before the flush may hold what an invalidation lost meanwhile
  // would have dropped (the writer alone stores it: load and store).
  if (forget_seq_) {
    base::solo_add(forget_epoch_);
    forget_flights(0, true);
  }
}

bool TableWriter::forget(const CoherenceItem& item) noexcept {
  absent_.clear();  // the tracking lane names no version: every remembered absence may be old
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

void TableWriter::handle(Command& cmd) {
  std::visit(
      [this](auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, MissCmd>) {
          on_miss(c);
        } else if constexpr (std::is_same_v<T, FetchedCmd>) {
          on_fetched(c);
        } else if constexpr (std::is_same_v<T, LoadedCmd>) {
          on_loaded(c);
        } else if constexpr (std::is_same_v<T, PutCmd>) {
          apply_put(c.name, c.value, c.version, c.guard);
          c.done();
        } else if constexpr (std::is_same_v<T, EraseCmd>) {
          if (map_->erase(c.name)) tell(c.name, {}, RemovalCause::kInvalidate);
          base::solo_add(erases_);
          if (!flights_.empty()) note_drop(c.name);
          c.done();
        } else if constexpr (std::is_same_v<T, ApplyCmd>) {
          const auto verdict = apply_message(c.name, c.version);
          base::solo_add(verdict == table::Verdict::kApplied ? applied_ : stale_);
          c.done(verdict);
        } else if constexpr (std::is_same_v<T, RememberCmd>) {
          c.done(apply_with_memory(c.name, c.version));
        } else if constexpr (std::is_same_v<T, LostCmd>) {
          if (spec_.disconnect == DisconnectPolicy::kFlush) {
            base::solo_add(disconnect_flushes_);
            suspend(true);
          } else if (!suspended_ && stale_deadline_ < 0) {
            stale_deadline_ = c.at_ms + spec_.serve_stale_max_ms;
          }
        } else if constexpr (std::is_same_v<T, ConfirmedCmd>) {
          // Messages sent while we were not subscribed are lost: what L1 holds may be stale.
          stale_deadline_ = -1;
          if (map_->size() != 0) base::solo_add(disconnect_flushes_);
          flush();
          for (auto& [key, flight] : flights_) flight.overtaken = true;
          suspend(false);
        } else if constexpr (std::is_same_v<T, SyncCmd>) {
          c.done();
        } else if constexpr (std::is_same_v<T, AskCmd>) {
          on_ask(c);
        }
      },
      cmd);
}

void TableWriter::on_ask(const AskCmd& cmd) {
  // The write's message entered a ring before the ask was posted (one io thread, in the order its
  // connection delivered them), but this pass's capped drain may not have reached it. A ring holds
  // at most its capacity, and each drain takes up to max_batch of every ring: this many drains
  // reach every item published before the ask (the loop ends early once the rings are empty).
  std::size_t most = 0;
  for (const auto& r : rings_) most = std::max(most, r->capacity());
  for (std::size_t i = 0; i <= most / spec_.max_batch + 1; ++i) {
    if (drain_rings() == 0) break;
  }
  // Applied: no row, or one as new as the write (or newer). A ring that dropped the message
  // under the flush policy flushed the table above, so only the drop policy keeps an older row.
  const auto row = map_->writer_row(cmd.name);
  if (row && table::newer(cmd.version.view(), row->version)) {
    base::solo_add(receipts_withheld_);
    return;
  }
  base::solo_add(receipts_);
  if (ports_.acknowledge) ports_.acknowledge(cmd.receipt);
}

void TableWriter::suspend(bool on) {
  if (on) flush();
  if (on != suspended_ && ports_.on_suspend) ports_.on_suspend(on);
  suspended_ = on;
  suspended_flag_.store(on, std::memory_order_relaxed);
}

void TableWriter::on_miss(MissCmd& cmd) {
  // A typed table's rows hold objects, not the bytes a waiter decodes: the flight reads L2.
  if (!suspended_ && map_->layout().bytes()) {
    GetOutcome hit;
    table::IdBytes version;
    if (map_->get(cmd.name, hit.value, &version)) {
      hit.version = table::BrandedId::parse(table::view(version)).value();
      hit.source = Source::kL1;
      cmd.done(std::move(hit));
      return;
    }
  }
  if (!absent_.empty() && remembered_absent(cmd.name)) {
    base::solo_add(absent_hits_);
    cmd.done(GetOutcome{make_error_code(Errc::kAbsent)});
    return;
  }
  if (auto it = flights_.find(cmd.name); it != flights_.end()) {
    it->second.waiters.push_back(std::move(cmd.done));
    base::solo_add(coalesced_);
    return;
  }
  // A plain loader value takes a table-kind version minted at flight start (docs/wire.md,
  // "Table semantics").
  Flight& flight =
      flights_
          .emplace(cmd.name,
                   Flight{next_flight_++, table::hash_key(cmd.name), mint_version(cmd.name), {}})
          .first->second;
  flight.waiters.push_back(std::move(cmd.done));
  start_fetch(cmd.name, flight);
}

void TableWriter::start_fetch(std::string_view name, Flight& flight) {
  // A read sent from here on follows every drop and invalidation applied so far.
  flight.overtaken = false;
  flight.foreign = false;
  flight.forgotten_at = Flight::kNotForgotten;
  ports_.fetch(name, [this, key = std::string(name), id = flight.id](L2Fetch fetch) {
    post(FetchedCmd{key, id, std::move(fetch)});
  });
}

TableWriter::Flight* TableWriter::find_flight(std::string_view name, std::uint64_t id) {
  auto it = flights_.find(std::string(name));
  return it == flights_.end() || it->second.id != id ? nullptr : &it->second;
}

bool TableWriter::restart_if_overtaken(std::string_view name, Flight& flight) {
  if (!flight.overtaken) return false;
  restart(name, flight);
  return true;
}

void TableWriter::restart(std::string_view name, Flight& flight) {
  if (++flight.restarts > kMaxRestarts) {
    finish(name, GetOutcome{make_error_code(Errc::kContended)});
    return;
  }
  base::solo_add(flight_restarts_);
  // A fresh version for the loader: the one minted at flight start predates whatever drop made
  // the flight restart, so a loader value stored under it would sit in L2 as post-drop data under
  // a pre-drop version, and that drop's tombstone would refuse it here (the name uncached on this
  // node for about a TTL).
  flight.minted = mint_version(name);
  start_fetch(name, flight);
}

std::optional<table::BrandedId> TableWriter::mint_version(std::string_view name) const {
  const int leased = ports_.node ? ports_.node() : static_cast<int>(node_id_);
  if (leased < 0) return std::nullopt;  // no node lease: nothing may be minted now
  const auto node = static_cast<unsigned>(leased);
  // Past the fill guard's floor for the name: a drop minted elsewhere in this same millisecond
  // under a higher node id is newer than a plain mint here, and its tombstone would refuse the
  // loader's value. (The kind is validated at construction, the node at the engine's: no error.)
  if (const auto floor = map_->fill_floor(name)) {
    if (const auto parsed = table::BrandedId::parse(table::view(*floor))) {
      return table::process_minter().mint_after(spec_.kind, node, *parsed).value();
    }
  }
  return table::process_minter().mint(spec_.kind, node).value();
}

void TableWriter::on_fetched(FetchedCmd& cmd) {
  Flight* flight = find_flight(cmd.name, cmd.flight);
  if (flight == nullptr) return;
  if (spec_.fill_hold.count() > 0 && !cmd.held && cmd.fetch.stored) {
    // Fault injection: the answer waits while messages keep coming (release_held).
    cmd.held = true;
    base::solo_add(held_fills_);
    held_.push_back(HeldFetch{base::steady_ns() + std::chrono::nanoseconds(spec_.fill_hold).count(),
                              std::move(cmd)});
    return;
  }
  if (restart_if_overtaken(cmd.name, *flight)) return;
  if (cmd.fetch.ec) {
    finish(cmd.name, GetOutcome{cmd.fetch.ec});
    return;
  }
  if (!cmd.fetch.stored) return load(cmd.name, *flight, cmd.flight);
  GetOutcome out;
  out.source = Source::kL2;
  if (spec_.l2_format == L2Format::kRaw) {
    // No version in L2: the row carries this node's stamp, minted when the flight began (or
    // now; without a node lease, none: the value is answered and not cached).
    if (!flight->minted) flight->minted = mint_version(cmd.name);
    out.value = std::move(*cmd.fetch.stored);
    out.version = flight->minted;
  } else {
    auto row = split_l2_frame(*cmd.fetch.stored);
    if (!row) {
      base::solo_add(corrupt_frames_);
      finish(cmd.name, GetOutcome{make_error_code(Errc::kCorruptL2Frame)});
      return;
    }
    out.value = std::string(row->value);
    out.version = row->version;
  }
  if (!spec_.value.schema.empty() && !out.value.starts_with(spec_.value.schema)) {
    // Another schema's row (a node of an older or newer release wrote it): this node's loader
    // answers instead, and the row stays in L2 for the nodes that read it.
    base::solo_add(schema_mismatches_);
    flight->foreign = true;
    return load(cmd.name, *flight, cmd.flight);
  }
  base::solo_add(l2_hits_);
  finish(cmd.name, std::move(out));
}

void TableWriter::load(const std::string& name, Flight& flight, std::uint64_t id) {
  // L2 nil (or another schema's row): the loader runs once for the whole flight, within the
  // table's loader_timeout.
  if (!flight.minted) flight.minted = mint_version(name);
  if (!flight.minted) {
    finish(name, GetOutcome{make_error_code(Errc::kNoNodeLease)});
    return;
  }
  std::shared_ptr<LoadClaim> claim;
  if (spec_.loader_timeout.count() > 0) {
    claim = std::make_shared<LoadClaim>();
    flight.load = claim;
    load_timers_.push_back(
        LoadTimer{table::steady_clock_ms() + spec_.loader_timeout.count(), name, id, claim});
  }
  ports_.load(name, *flight.minted, !flight.foreign, std::move(claim),
              [this, name, id](LoadOutcome load) {
                post(LoadedCmd{name, id, std::move(load)});
              });
}

std::int64_t TableWriter::release_held(std::int64_t now_ns) {
  while (!held_.empty() && held_.front().due_ns <= now_ns) {
    FetchedCmd cmd = std::move(held_.front().cmd);
    held_.pop_front();
    on_fetched(cmd);
  }
  return held_.empty() ? -1 : held_.front().due_ns;
}

void TableWriter::on_loaded(LoadedCmd& cmd) {
  Flight* flight = find_flight(cmd.name, cmd.flight);
  // A flight waiting for its loader ends only here or in expire_loads (stop() aside): an answer
  // for a flight that is gone came after its timeout, and the port wrote nothing for it.
  if (flight == nullptr) {
    base::solo_add(loader_late_);
    return;
  }
  flight->load.reset();
  if (restart_if_overtaken(cmd.name, *flight)) return;
  if (cmd.load.ec == make_error_code(Errc::kAbsent)) {
    // No value at the source, as of the flight's version: remembered until a newer write of the
    // name reaches this node, or absent_ttl_ms.
    base::solo_add(absent_loads_);
    if (spec_.absent_ttl_ms > 0 && flight->minted) remember_absent(cmd.name, *flight->minted);
    finish(cmd.name, GetOutcome{cmd.load.ec});
    return;
  }
  if (cmd.load.ec) {
    base::solo_add(load_errors_);
    finish(cmd.name, GetOutcome{cmd.load.ec});
    return;
  }
  if (!cmd.load.stored) {
    // L2 already held a newer row than the loader's: read that instead (bounded like every
    // restart: a row that keeps appearing and vanishing must not spin the flight for ever).
    restart(cmd.name, *flight);
    return;
  }
  GetOutcome out;
  out.value = std::move(cmd.load.value);
  out.version = cmd.load.version;
  out.source = Source::kLoader;
  base::solo_add(fills_);
  finish(cmd.name, std::move(out));
}

std::int64_t TableWriter::expire_loads(std::int64_t now) {
  while (!load_timers_.empty() && load_timers_.front().deadline_ms <= now) {
    LoadTimer t = std::move(load_timers_.front());
    load_timers_.pop_front();
    Flight* flight = find_flight(t.name, t.flight);
    // Skipped: a flight already answered (its loader beat the deadline), or one whose loader
    // claimed the answer first (its L2 write is under way and answers the flight).
    if (flight == nullptr || flight->load != t.claim || !t.claim->claim_timeout()) continue;
    base::solo_add(loader_timeouts_);
    finish(t.name, GetOutcome{Error{Errc::kLoaderTimeout,
                                    "loader_timeout: table '" + spec_.name +
                                        "': the loader did not answer within " +
                                        std::to_string(spec_.loader_timeout.count()) + " ms"}});
  }
  return load_timers_.empty() ? -1 : load_timers_.front().deadline_ms;
}

void TableWriter::finish(std::string_view name, GetOutcome outcome) {
  auto it = flights_.find(std::string(name));
  if (it == flights_.end()) return;
  if (it->second.forgotten_at != Flight::kNotForgotten && !outcome.ec) {
    return serve_forgotten(name, it->second, outcome);
  }
  std::vector<GetCallback> waiters = std::move(it->second.waiters);
  flights_.erase(it);
  if (!outcome.ec && outcome.version) {
    if (suspended_) {
      base::solo_add(suspended_fills_);
    } else {
      const auto inserted = map_->insert_fill(name, outcome.value, *outcome.version);
      if (inserted == table::InsertVerdict::kRefusedDecode) {
        // The table's codec refuses what L2 or the loader gave: every waiter gets the error.
        outcome = GetOutcome{make_error_code(Errc::kBadValue)};
        outcome.value = map_->decode_error();
      } else if (table::stored(inserted)) {
        changed(name);
      }
    }
  }
  for (std::size_t i = 0; i + 1 < waiters.size(); ++i) {
    GetOutcome copy = outcome;
    waiters[i](std::move(copy));
  }
  if (!waiters.empty()) waiters.back()(std::move(outcome));
}

void TableWriter::serve_forgotten(std::string_view name, Flight& flight,
                                  const GetOutcome& outcome) {
  // The read may predate the write the invalidation announced: those who asked before the
  // invalidation reached this node may have it (their read began before), nobody may keep it.
  base::solo_add(forgotten_fills_);
  const std::size_t early = std::min(flight.forgotten_at, flight.waiters.size());
  std::vector<GetCallback> served(
      std::make_move_iterator(flight.waiters.begin()),
      std::make_move_iterator(flight.waiters.begin() + static_cast<std::ptrdiff_t>(early)));
  flight.waiters.erase(flight.waiters.begin(),
                       flight.waiters.begin() + static_cast<std::ptrdiff_t>(early));
  flight.forgotten_at = Flight::kNotForgotten;
  if (flight.waiters.empty()) {
    flights_.erase(std::string(name));
  } else {
    // The rest asked after it: a fresh read (no restart budget: each round answers someone).
    flight.minted = mint_version(name);
    start_fetch(name, flight);
  }
  for (auto& w : served) {
    GetOutcome copy = outcome;
    w(std::move(copy));
  }
}

WriterStats TableWriter::stats() const {
  WriterStats s;
  auto ld = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  s.applied = ld(applied_);
  s.stale = ld(stale_);
  s.fills = ld(fills_);
  s.l2_hits = ld(l2_hits_);
  s.coalesced = ld(coalesced_);
  s.load_errors = ld(load_errors_);
  s.corrupt_frames = ld(corrupt_frames_);
  s.flight_restarts = ld(flight_restarts_);
  s.ring_flushes = ld(ring_flushes_);
  s.disconnect_flushes = ld(disconnect_flushes_);
  s.suspended_fills = ld(suspended_fills_);
  s.puts = ld(puts_);
  s.erases = ld(erases_);
  s.commands = ld(commands_);
  s.passes = ld(passes_);
  s.remembered_stale = ld(remembered_stale_);
  s.pin_failures = ld(pin_failures_);
  s.listener_throws = ld(listener_throws_);
  s.loader_timeouts = ld(loader_timeouts_);
  s.loader_late = ld(loader_late_);
  s.forgotten_fills = ld(forgotten_fills_);
  s.forgotten_puts = ld(forgotten_puts_);
  s.held_fills = ld(held_fills_);
  s.direct_applies = ld(direct_applies_);
  s.carried_updates = ld(carried_updates_);
  s.carried_inserts = ld(carried_inserts_);
  s.carried_drops = ld(carried_drops_);
  s.schema_mismatches = ld(schema_mismatches_);
  s.absent_loads = ld(absent_loads_);
  s.absent_hits = ld(absent_hits_);
  s.receipts = ld(receipts_);
  s.receipts_withheld = ld(receipts_withheld_);
  s.parks = bell_.parks_count();
  s.signals = bell_.signals_count();
  // Every scan of the map's reclamation runs on this writer (never on a borrower: hold_reclaim).
  s.membarriers =
      bell_.barriers_count() + (table::epoch::asymmetric() ? map_->reclaim_scans_approx() : 0);
  // os_wakes and os_preemptions read /proc (three syscalls a thread): Engine::add_thread_counts
  // fills them, never this or Engine::stats(), which callers poll.
  s.suspended = suspended_flag_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kLagBuckets; ++i) s.lag_histogram[i] = ld(lag_[i]);
  s.lag_sum_ns = ld(lag_sum_ns_);
  s.last_applied_ns = last_applied_ns_.load(std::memory_order_relaxed);
  s.last_decoded_ns = last_decoded_ns_.load(std::memory_order_relaxed);
  return s;
}

std::vector<ring::RingStats> TableWriter::ring_stats() const {
  std::vector<ring::RingStats> out;
  for (const auto& r : rings_) out.push_back(r->stats());
  return out;
}

}  // namespace echo::engine
