// SPDX-License-Identifier: MIT
// The table writer's life (construction, its rings, start, stop), what other threads post to
// its inbox (misses, puts, erases, applies, subscription events, syncs, receipt asks) and how
// the loop runs each command, and its stats. The loop itself is table_writer.cc's.
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
namespace {

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
  post(PutCmd{std::string(name), std::move(value), version, std::move(done), guard, {}});
}
void TableWriter::put_lent(std::string_view name, std::string_view value,
                           const table::BrandedId& version, std::function<void()> done,
                           std::uint64_t guard) {
  post(PutCmd{std::string(name), {}, version, std::move(done), guard, value});
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

void TableWriter::erase(std::string_view name, std::function<void()> done,
                        std::optional<table::BrandedId> version) {
  post(EraseCmd{std::string(name), std::move(done), version});
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
          apply_put(c.name, c.lent ? *c.lent : std::string_view(c.value), c.version, c.guard);
          c.done();
        } else if constexpr (std::is_same_v<T, EraseCmd>) {
          const bool held = c.version ? map_->erase(c.name, *c.version) : map_->erase(c.name);
          if (held) tell(c.name, {}, RemovalCause::kInvalidate);
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
