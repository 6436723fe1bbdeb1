// SPDX-License-Identifier: MIT
// The table writer: the one thread that owns a table's L1 map.
// It drains the table's SPSC coherence rings (one per producer thread) and one MPSC inbox of
// commands (misses, fills, puts, admin) in capped batches, applies newer-wins, runs the
// single-flight fill protocol with the fill guard, sweeps expired rows, and reacts to the flush
// policy and to subscription loss. Readers call map().get() on their own threads.
//
// Thread contract: the constructor, add_ring() and start() run on the owner before any traffic;
// post() from any thread; ring producers publish (or deliver()) from their one thread each;
// stats() anywhere; stop() from the owner. Callbacks (GetCallback, done functions) run on the
// writer thread. deliver() may apply a message on its caller's thread under the writer's token
// (TableSpec::direct_apply): the map then has one mutator at a time, not one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include <echo/engine/answers.h>
#include <echo/engine/error.h>
#include <echo/engine/internal/writer_token.h>
#include <echo/engine/log.h>
#include <echo/engine/stats.h>
#include <echo/engine/table_spec.h>
#include <echo/ring/byte_arena.h>
#include <echo/ring/doorbell.h>
#include <echo/ring/spsc_ring.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/l1_map.h>

namespace echo::engine {

// What one coherence item asks of its table's writer (TableWriter::apply_item is the one rule).
enum class ItemKind : std::uint8_t {
  kBranded,    // drop message.name's row iff message.version is newer (every lane)
  kTextHash,   // the same for a text key, by its hash (text_hash): the broadcast lane
  kTextKey,    // the same for a text key, by its bytes (key, key_size): the job lane
  kForgetKey,  // a tracking invalidation: drop every row of text_hash, whatever its version
  kForgetAll,  // a tracking invalidation of every row (FLUSHALL, FLUSHDB)
  kCarried,    // a carried value (docs/wire.md, "Carried values"): key_size bytes of key at `key`,
               // then '}', the version's 14 bytes and value_size bytes of value (value())
};

// One coherence message in flight from an io thread to a table writer.
struct CoherenceItem {
  table::CoherenceMessage message;  // a text or forget item's name repeats the version (unused)
  std::int64_t decoded_ns = 0;      // steady-clock ns when the io thread decoded it (lag histogram)
  std::uint64_t ticket = 0;         // job lane: the claim to acknowledge; 0 for the other lanes
  // kTextHash and kForgetKey carry the key's hash (L1Map::apply_hashed). kTextKey and kCarried
  // carry the key's bytes at `key`: inside the consumer's in-flight job on the job lane, which
  // lives until this item's ack has drained (the writer reads them before it acks, never after;
  // the consumer outlives the writer's last drain: Engine::stop); inside the ring's ByteArena on
  // the broadcast lane, freed once the item is applied. One or the other: the item stays 64
  // bytes.
  union {
    std::uint64_t text_hash = 0;
    const char* key;
  };
  std::uint8_t key_size = 0;  // kTextKey, kCarried: 1..200
  ItemKind kind = ItemKind::kBranded;
  std::uint32_t value_size = 0;  // kCarried: 0..65,536
  std::string_view text_key() const noexcept { return {key, key_size}; }
  // kCarried: the value, after the key, '}' and the version.
  std::string_view value() const noexcept { return {key + key_size + 1 + 14, value_size}; }
  // kCarried: every byte the item points at (what a ByteArena holds for it).
  std::size_t carried_bytes() const noexcept { return key_size + 1 + 14 + value_size; }
};
static_assert(sizeof(CoherenceItem) == 64, "a ring slot: one cache line");
using CoherenceRing = ring::SpscRing<CoherenceItem>;

// The writer's word on a job-lane item: the job behind `ticket` was applied (or found stale),
// so its consumer may complete it (complete-after-apply).
struct JobAck {
  std::uint64_t ticket;
  table::Verdict verdict;
  bool remembered = false;  // answered remembered_stale by the applied memory: table untouched
};

// The journal's applied memory as the writer consults it on the job lane (docs/wire.md,
// "The journal", its applier): `stale` is checked before the table (true: remembered_stale, nothing
// touched); after a table verdict, `remember` upserts newer-only — even when the verdict was stale.
struct MemoryHooks {
  std::function<bool(std::string_view name, const table::BrandedId& version)> stale;
  std::function<void(std::string_view name, const table::BrandedId& version)> remember;
};

// Called on the writer thread once per drained batch that carried tickets; must not block.
using AckSink = std::function<void(std::span<const JobAck>)>;

// A command's answer: its value, or the error that kept the writer from running it (`stopped`).
template <class T>
using WriterAnswer = Result<T>;

struct GetOutcome {
  Error ec;  // the code, and a message where the code is not all (a loader's reason)
  std::string value;
  std::optional<table::BrandedId> version;
  Source source = Source::kL1;
};
using GetCallback = std::function<void(GetOutcome&&)>;

// What the writer needs from L2, supplied by the engine (the io thread does the work). Both are
// called on the writer thread and must not block; their `done` may run on any thread (it posts
// back into the writer's inbox).
struct L2Fetch {
  std::error_code ec;
  std::optional<std::string> stored;  // nullopt: the key does not exist (GET answered nil)
};
struct LoadOutcome {
  Error ec;  // loader failure (with its reason) or L2 write failure
  std::string value;
  std::optional<table::BrandedId> version;
  bool stored = false;  // put_l2 stored it (false: L2 already held a newer row)
};
// Who answers one loader call when the table has a loader_timeout: the loader thread with the
// loader's answer, or the writer at the deadline, whichever claims it first; the other side's
// answer is discarded. The claim is one compare-exchange on one byte and carries no data (the
// answer reaches the writer through its inbox, which orders it), so relaxed suffices.
class LoadClaim {
 public:
  // Loader thread, once the loader returned and before anything is written to L2: true when the
  // answer is still wanted; from then on the writer waits for it, however long L2 takes.
  bool claim_answer() noexcept { return claim(kAnswered); }
  // Writer thread, at the deadline: true when the loader has not answered: the flight times out
  // and the loader's answer, when it comes, is discarded.
  bool claim_timeout() noexcept { return claim(kTimedOut); }

 private:
  static constexpr std::uint8_t kOpen = 0, kAnswered = 1, kTimedOut = 2;
  bool claim(std::uint8_t to) noexcept {
    std::uint8_t open = kOpen;
    return state_.compare_exchange_strong(open, to, std::memory_order_relaxed);
  }
  std::atomic<std::uint8_t> state_{kOpen};
};

struct WriterPorts {
  std::function<void(std::string_view name, std::function<void(L2Fetch)> done)> fetch;
  // Run the loader for `name` (on a loader thread), write its value to L2 conditionally under
  // the loader's version or `minted` (not at all when `write_l2` is false: L2 holds another
  // schema's row, which that schema's nodes still read), and report. `claim` is non-null when the
  // table has a loader_timeout: once the loader returned, the port calls claim->claim_answer() and,
  // when it answers false (the writer timed the flight out), writes nothing and reports anything
  // (the writer discards it and counts it loader_late). `done` runs exactly once either way.
  std::function<void(std::string_view name, const table::BrandedId& minted, bool write_l2,
                     std::shared_ptr<LoadClaim> claim, std::function<void(LoadOutcome)> done)>
      load;
  // The node this process may mint under now, or -1 while it holds no lease (the engine's node
  // lease: loader versions are then refused with no_node_lease). Unset: the constructor's node.
  // Called on the writer thread; must not block.
  std::function<int()> node;
  // Told when the table stops caching (true: its subscription was lost under the flush policy)
  // and when it caches again (false: the subscription confirmed, L1 flushed). Writer thread;
  // must not block. Unset: nobody is told.
  std::function<void(bool suspended)> on_suspend;
  // Where the writer's (and its job consumer's) few lines go (log.h); empty: stderr.
  LogSink log;
  // A receipt ask this node answers (the write it names is applied here): INCR and PEXPIRE its
  // receipt key in L2 (docs/wire.md, "Receipts"), without an answer. Writer thread; must not
  // block. Unset: no ask is answered.
  std::function<void(std::string_view receipt)> acknowledge;
};

class TableWriter {
 public:
  // Validates `spec` (ConfigError) and builds the map. Owner thread. spec.loader_timeout 0 means
  // no timeout here: the Engine resolves 0 to its get_timeout before it builds the writer.
  TableWriter(const TableSpec& spec, WriterPorts ports, unsigned node_id);
  ~TableWriter();  // stop()  NOLINT(bugprone-exception-escape): see table_writer.cc
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  // A new ring for one producer thread, policy `policy`, with a ByteArena of
  // spec.carry_arena_bytes beside it when `carried` (its producer delivers carried values:
  // deliver_carried). Owner thread, before start().
  CoherenceRing& add_ring(ring::FullPolicy policy, bool carried = false);
  // The arena beside `ring`, or nullptr. Owner thread.
  ring::ByteArena* arena_of(const CoherenceRing& ring) const noexcept;
  // One decoded coherence item from `ring`'s producer thread (the io thread that owns `ring`, a
  // ring add_ring() made): applied on the calling thread when the table allows it
  // (TableSpec::direct_apply, no on_message, no on_removal), the item is a plain versioned one
  // (no ticket, not a tracking invalidation), `ring` is empty (every earlier item of this
  // producer applied: the order is kept) and the writer is waiting and lends its token; else
  // published into `ring` as ring.publish would (refusals counted by the ring). True when it
  // was applied here. Never waits but as the ring's block policy does; no allocation; no
  // syscall but the clock.
  bool deliver(CoherenceRing& ring, CoherenceItem&& item) noexcept;
  // deliver() for a kCarried item whose bytes (CoherenceItem::key) lie in the producer's own
  // buffer: applied here as deliver() would, else its bytes are copied into `arena` (ring's:
  // arena_of) and the item published pointing there. False, with nothing published, when the
  // arena has no room: the caller delivers the message as a drop instead.
  bool deliver_carried(CoherenceRing& ring, ring::ByteArena& arena, CoherenceItem&& item) noexcept;

  // Where acknowledgements of ticketed items go. Owner thread, before start().
  void set_ack_sink(AckSink sink) { ack_sink_ = std::move(sink); }
  // The applied memory for ticketed (job-lane) items and apply_and_remember. Owner, before start().
  void set_memory(MemoryHooks hooks) { memory_ = std::move(hooks); }

  // Starts the writer thread (pinned when spec.writer_cpu >= 0). Owner thread.
  void start();
  // One line through the ports' log sink as component "<what>:<table>" (log.h). Any thread.
  void log(LogLevel level, std::string_view what, std::string_view message) const {
    log_line(ports_.log, level, std::string(what) + ":" + spec_.name, message);
  }
  // Stops and joins; waiters of unfinished flights get `stopped`. Owner thread; idempotent.
  void stop();

  // ---- any thread: commands. Never block (an MPSC enqueue may allocate a block). ----
  // A miss: answer from L1 if the row went live meanwhile, else join or start a flight.
  void miss(std::string_view name, GetCallback done);
  void miss(const table::BrandedId& name, GetCallback done) { miss(name.view(), std::move(done)); }
  // A put that L2 already stored: insert into L1, newer wins (L1Map::put: a row newer than
  // `version` stays, and the fill guard's tombstones refuse an older put), then done(). `guard`: a
  // tracking table's forget_token(name), taken before the L2 write was sent: when an invalidation
  // of the name (or a flush) was applied since, the row is not cached (an invalidation of a later
  // write may be among them); kNoGuard on every other lane.
  static constexpr std::uint64_t kNoGuard = ~std::uint64_t{0};
  void put(std::string_view name, std::string value, const table::BrandedId& version,
           std::function<void()> done, std::uint64_t guard = kNoGuard);
  void put(const table::BrandedId& name, std::string value, const table::BrandedId& version,
           std::function<void()> done) {
    put(name.view(), std::move(value), version, std::move(done));
  }
  // put() without the hop: when the writer waits with nothing to do and the table allows direct
  // applies (TableSpec::direct_apply, no listener), the put is applied on the calling thread under
  // the writer's token, exactly as the writer would, and this answers true (the row is in place);
  // else false, nothing done, and the caller posts put(). Any thread; never waits.
  bool put_here(std::string_view name, std::string_view value, const table::BrandedId& version,
                std::uint64_t guard = kNoGuard);
  // put() whose value the caller keeps: `value` must stay valid until done() has run (the
  // caller's own storage, handed to done's owner if the caller stops waiting). Nothing copied.
  void put_lent(std::string_view name, std::string_view value, const table::BrandedId& version,
                std::function<void()> done, std::uint64_t guard = kNoGuard);
  // Admin invalidate: delete the row unconditionally, then done(). With `version`, the fill
  // guard remembers it for the name (L1Map::erase): a put minted before it that reaches the
  // writer later (an async publish's row, posted by the io thread) is refused.
  void erase(std::string_view name, std::function<void()> done,
             std::optional<table::BrandedId> version = std::nullopt);
  void erase(const table::BrandedId& name, std::function<void()> done) {
    erase(name.view(), std::move(done));
  }
  // Apply one coherence message through the inbox (job lane handler, tests): done(verdict), or
  // done(`stopped`) when the writer stopped before it ran.
  // `name`: a branded id or, on a text-key table, its key (docs/wire.md, "Text keys").
  void apply(std::string_view name, const table::BrandedId& version,
             std::function<void(WriterAnswer<table::Verdict>)> done);
  void apply(const table::CoherenceMessage& message,
             std::function<void(WriterAnswer<table::Verdict>)> done) {
    apply(message.name.view(), message.version, std::move(done));
  }
  // apply with the applied memory (docs/wire.md, "The journal"): done(verdict), or `stopped`.
  void apply_and_remember(std::string_view name, const table::BrandedId& version,
                          std::function<void(WriterAnswer<Applied>)> done);
  void apply_and_remember(const table::CoherenceMessage& message,
                          std::function<void(WriterAnswer<Applied>)> done) {
    apply_and_remember(message.name.view(), message.version, std::move(done));
  }
  // Subscription lost: under flush, drop every row and stop caching now; under serve_stale, do
  // so once spec.serve_stale_max_ms has passed without a resubscribe.
  void subscription_lost();
  // Subscription confirmed: drop every row (messages were lost) and cache again.
  void subscription_confirmed();
  // Runs `done` on the writer thread after every command the calling thread posted before it.
  // The inbox keeps each posting thread's order, not an order across threads: a command another
  // thread posted a moment earlier may run after this one. (Puts are newer-wins and an erase
  // leaves a tombstone, so no cross-thread order is needed for the rows to end right.)
  void sync(std::function<void()> done);
  // A receipt ask (docs/wire.md, "Receipts") from the io thread whose ring carried the write's
  // message ahead of it: the writer first applies every item its rings hold, then acknowledges
  // (WriterPorts::acknowledge) when L1 holds no row of `name` older than `version` (none, or one
  // as new or newer), and withholds it otherwise (the ring dropped the message). Any thread.
  void ask(std::string_view name, const table::BrandedId& version, std::string receipt);
  // True when this writer remembers that `hash`'s name has no value (its loader answered Absent,
  // within absent_ttl_ms, and no write of it came since), so a reader that must not wait
  // (try_read's refill) can answer the miss without posting anything: without it each miss of
  // such a key posted a refill the writer answered at once, millions a second from one hot loop.
  // A mark is per slot of kAbsentMarks, so two absent names may share one: the later wins, the
  // other's misses post again (the writer still answers them from its memory). Any thread;
  // lock-free, no allocation. `now_ms`: table::steady_clock_ms().
  bool known_absent(std::uint64_t hash, std::int64_t now_ms) const noexcept;
  // The tracking lane's invalidation sequence for `name` (any thread; a relaxed read): changes
  // whenever the writer applies an invalidation of a name that shares its slot, or any flush.
  // The version-less twin of the fill guard: put() compares it to the one taken before L2 was
  // written.
  std::uint64_t forget_token(std::string_view name) const noexcept;

  // ---- any thread ----
  const table::L1Map& map() const noexcept { return *map_; }
  // The map, shared: a Table<T> handle keeps it (cleared at stop) after the engine is gone.
  std::shared_ptr<const table::L1Map> shared_map() const noexcept { return map_; }
  const TableSpec& spec() const noexcept { return spec_; }
  WriterStats stats() const;
  std::vector<ring::RingStats> ring_stats() const;
  // Between start() and the beginning of stop(). acquire: pairs with start()'s release store. A
  // caller that saw true may still post after stop() began: drain_stopped answers it `stopped`.
  bool running() const noexcept { return running_.load(std::memory_order_acquire); }

 private:
  struct MissCmd {
    std::string name;
    GetCallback done;
  };
  struct FetchedCmd {
    std::string name;
    std::uint64_t flight;
    L2Fetch fetch;
    bool held = false;
  };
  struct LoadedCmd {
    std::string name;
    std::uint64_t flight;
    LoadOutcome load;
  };
  struct PutCmd {
    std::string name;
    std::string value;
    table::BrandedId version;
    std::function<void()> done;
    std::uint64_t guard;
    std::optional<std::string_view> lent;  // put_lent: the value, the caller's until done()
  };
  struct EraseCmd {
    std::string name;
    std::function<void()> done;
    std::optional<table::BrandedId> version;  // remembered by the guard when given
  };
  // name: a branded id's 14 bytes or a text key (in std::string's small buffer up to 15 bytes).
  struct ApplyCmd {
    std::string name;
    table::BrandedId version;
    std::function<void(WriterAnswer<table::Verdict>)> done;
  };
  struct RememberCmd {
    std::string name;
    table::BrandedId version;
    std::function<void(WriterAnswer<Applied>)> done;
  };
  struct LostCmd {
    std::int64_t at_ms;
  };
  struct ConfirmedCmd {};
  struct SyncCmd {
    std::function<void()> done;
  };
  struct AskCmd {
    std::string name;
    table::BrandedId version;
    std::string receipt;
  };
  // monostate first: a slot of a bulk dequeue needs a default state.
  using Command = std::variant<std::monostate, MissCmd, FetchedCmd, LoadedCmd, PutCmd, EraseCmd,
                               ApplyCmd, RememberCmd, LostCmd, ConfirmedCmd, SyncCmd, AskCmd>;

  struct Flight {
    std::uint64_t id;
    std::uint64_t hash;  // hash_key(name): a text key's message finds its flight by it
    // The version a plain loader value gets (minted at flight start, again at each restart;
    // empty while the process held no node lease then: minted when the loader is asked)
    std::optional<table::BrandedId> minted;
    std::vector<GetCallback> waiters;
    bool overtaken = false;  // a newer drop for this name was applied while in flight
    int restarts = 0;
    std::shared_ptr<LoadClaim> load;  // the loader call under way (loader_timeout only)
    bool foreign = false;  // L2 held another schema's row: the loader's value stays out of L2
    // Tracking: how many waiters had asked when the first invalidation of the name (or a flush)
    // overtook this flight; kNotForgotten while none did. Those get its answer, uncached; the
    // rest asked after the invalidation reached this node, and the flight reads again for them.
    static constexpr std::size_t kNotForgotten = ~std::size_t{0};
    std::size_t forgotten_at = kNotForgotten;
  };
  // A loader call's deadline. Every one is its start plus the table's one loader_timeout, so a
  // FIFO holds them in deadline order.
  struct LoadTimer {
    std::int64_t deadline_ms;  // on table::steady_clock_ms, not the map's clock
    std::string name;
    std::uint64_t flight;
    std::shared_ptr<LoadClaim> claim;
  };

  void post(Command&& cmd);
  // Answers every queued command as a stopped writer would (stop(), or a post() that meets
  // closed_): reads and applies `stopped`, puts, erases and syncs done; every command that carries
  // a `done` is answered (a new one that takes arguments fails to compile until it is). Any thread
  // once the loop has ended.
  void drain_stopped();
  // The loop: each pass drains the rings and the inbox, ticks the map's clock, runs the timed
  // chores, and parks when it found no work.
  void run(const std::stop_token& stop);
  void pin();  // to writer_cpu, when one is given (a refusal counted and said once)
  std::size_t take_commands(std::vector<Command>& batch);  // up to max_batch inbox commands run
  // When the timed chores next fall due (each -1 or 0 for none, as idle_deadline takes them);
  // `exact` is the exact clock the loader deadlines were judged on.
  struct Due {
    std::int64_t exact = 0, load = -1, held = -1, reclaim = -1;
  };
  // A serve_stale deadline, the sweep, loader deadlines, held fills, reclamation: what is due now.
  Due timed_chores(std::int64_t now);
  // The idle wait until work, a chore's deadline or stop, the token lent meanwhile.
  void park(std::int64_t now, const Due& due, const std::stop_token& stop);
  std::size_t drain_rings();
  // The apply rule, one item of any kind: the map's verdict, the flights it overtook marked, the
  // applied memory asked first (a ticketed item on a table with a journal), on_message told.
  // Every path applies through it: deliver()'s direct apply, and the drain item by item; the
  // drain's batched apply (apply_plain) is its kBranded case for a batch with no flight, no
  // memory and no listener. Token holder; noexcept (see drain_rings).
  struct ItemVerdict {
    table::Verdict verdict = table::Verdict::kStale;
    bool counted = false;     // applied_/stale_ already counted (the memory's, a forget's)
    bool remembered = false;  // the applied memory answered stale (no lookup)
  };
  ItemVerdict apply_item(const CoherenceItem& item) noexcept;
  // What a pass's items add up to; one item's share (its lag, its ack, the drop's stamp) and the
  // pass's counters at its end.
  struct Tally {
    std::uint64_t applied = 0, counted = 0;
    std::int64_t dropped_decoded = -1;  // the decode stamp of the last item that dropped a row
  };
  void settle_item(const CoherenceItem& item, const ItemVerdict& v, std::int64_t now,
                   Tally& tally) noexcept;
  void commit(const Tally& tally, std::size_t items, std::int64_t now) noexcept;
  // deliver()'s apply, under the borrowed token: apply_item, counted as a pass of one.
  void apply_direct(const CoherenceItem& item) noexcept;
  // deliver()'s and deliver_carried()'s try: applied here (true) when the writer lends its token
  // and `ring` is empty with no flush pending.
  bool try_direct(CoherenceRing& ring, const CoherenceItem& item) noexcept;
  // A kCarried item: the map's apply_update (insert when the table upserts), the flights it
  // overtook marked, on_message told, the carried counters moved. The caller counts the verdict.
  table::Verdict apply_carried(std::string_view name, const CoherenceItem& item) noexcept;
  // One drained batch of one ring (drain_rings).
  void apply_drained(std::span<CoherenceItem> items, std::int64_t t) noexcept;
  static void release_carried(ring::ByteArena& arena,
                              std::span<const CoherenceItem> items) noexcept;
  // The idle wait's end: the earliest of what needs the clock (a sweep once a row can have
  // expired, the readers' time under L1Clock::kWriter, a serve_stale deadline, reclamation, a
  // loader's deadline, a held fill); time_point::max() when nothing does. Writer thread.
  std::chrono::steady_clock::time_point idle_deadline(std::int64_t now, std::int64_t next_sweep,
                                                      std::int64_t next_reclaim,
                                                      std::int64_t next_load, std::int64_t exact,
                                                      std::int64_t next_held) const noexcept;
  // The borrower of the token, after a direct apply: true when it must wake the writer to free
  // the rows it retired (some wait and the writer parked with no reclaim deadline); then the
  // writer's predicate sees reclaim_asked_. Token holder.
  bool reclaim_wanted() noexcept;
  // The borrower, after an apply that may have added a row (put_here, a carried value): true when
  // a row now expires before the writer's park planned for (parked_expiry_), so the writer must
  // wake for a pass (its idle deadline is planned again there); then the predicate sees
  // reclaim_asked_ (a pass asked for, whatever for). Token holder.
  bool expiry_wanted() noexcept;
  // A borrower's end after its apply: the writer's wake asked for when reclaim_wanted() or
  // expiry_wanted() says so, then the token given back.
  void give_back_applied() noexcept;
  // The drain's apply of a batch of plain branded items (no text, no forget, no ticket with a
  // memory) while no flight is open and nobody listens: the map's prefetching apply_batch.
  // Fills verdicts_ for items.size() items; returns how many applied.
  std::size_t apply_plain(std::span<CoherenceItem> items) noexcept;
  // The lag histogram's bucket for one item, `lag` ns from decode to apply.
  void count_lag(std::int64_t lag) noexcept;
  void handle(Command& cmd);
  // An AskCmd's work: the rings drained, then the answer (ask()).
  void on_ask(const AskCmd& cmd);
  // A put L2 already holds, into the map (the PutCmd's work): token holder.
  void apply_put(std::string_view name, std::string_view value, const table::BrandedId& version,
                 std::uint64_t guard);
  void on_miss(MissCmd& cmd);
  void on_fetched(FetchedCmd& cmd);
  void on_loaded(LoadedCmd& cmd);
  void load(const std::string& name, Flight& flight, std::uint64_t id);
  // Tells on_change of the row `name` now holds (a value just stored). Writer thread.
  void changed(std::string_view name) noexcept;
  // Negative caching (absent_): a live remembered absence (an expired one is forgotten here);
  // remember one; forget one for a write of the name (version: a message's, newer wins; null:
  // a put, unconditional).
  bool remembered_absent(std::string_view name);
  void evict_absent();    // the soonest-expiring remembered absence goes (absent_ full)
  void compact_absent();  // absent_order_ keeps only the entries that still name their absence
  void forget_all_absent() noexcept;
  void remember_absent(std::string_view name, const table::BrandedId& version);
  void forget_absent(std::string_view name, const table::BrandedId* version) noexcept;
  // Times out the loader calls whose deadline passed (claim_timeout won); returns the next
  // deadline still pending, or -1. `now` on table::steady_clock_ms.
  std::int64_t expire_loads(std::int64_t now);
  void start_fetch(std::string_view name, Flight& flight);
  bool restart_if_overtaken(std::string_view name, Flight& flight);
  // Reads L2 again under a newly minted loader version, or answers `contended` past kMaxRestarts.
  void restart(std::string_view name, Flight& flight);
  // A loader version for `name`: minted now, and past the fill guard's floor for it; empty while
  // the process holds no node lease (WriterPorts::node).
  std::optional<table::BrandedId> mint_version(std::string_view name) const;
  void finish(std::string_view name, GetOutcome outcome);
  // A tracking flight an invalidation overtook: answers its first forgotten_at waiters with
  // `outcome`, caches nothing, and reads again for the rest (if any).
  void serve_forgotten(std::string_view name, Flight& flight, const GetOutcome& outcome);
  // A tracking invalidation (one name by hash, or all): drops the rows, moves the guard, marks
  // the flights it overtook, counts its verdict. True when a row went.
  bool forget(const CoherenceItem& item) noexcept;
  void forget_flights(std::uint64_t hash, bool all) noexcept;
  std::atomic<std::uint32_t>& forget_slot(std::uint64_t hash) const noexcept {
    return forget_seq_[hash & (kForgetSlots - 1)];
  }
  // on_message, if set (a throw counted in listener_throws_).
  void hear(const Heard& heard) noexcept;
  // fill_hold: L2 answers waiting to be applied, in deadline order (one fixed hold).
  struct HeldFetch {
    std::int64_t due_ns;
    FetchedCmd cmd;
  };
  std::int64_t release_held(std::int64_t now_ns);  // next due, or -1
  void note_drop(std::string_view name);
  void note_drop_hashed(std::uint64_t hash) noexcept;
  // The map's RemovalListener: on_removal for each row leaving L1 (messages, expiry, eviction,
  // replacement).
  static void removed(void* self, std::string_view name, std::string_view version,
                      RemovalCause cause) noexcept;
  // on_removal, if set; a throw is counted in listener_throws_.
  void tell(std::string_view name, std::string_view version, RemovalCause cause) noexcept;
  // Drops every row (the flush policy), telling on_removal once.
  void flush() noexcept;
  // One versioned message on `name` (a branded id, or a text key's bytes): the map's verdict,
  // the flights it overtook marked, on_message told. The caller counts it.
  table::Verdict apply_message(std::string_view name, const table::BrandedId& version);
  Applied apply_with_memory(std::string_view name, const table::BrandedId& version);
  Applied apply_with_memory(std::string_view name, const CoherenceItem& item);
  void suspend(bool on);
  Flight* find_flight(std::string_view name, std::uint64_t id);
  std::int64_t now_ms() const noexcept;

  TableSpec spec_;
  WriterPorts ports_;
  unsigned node_id_;                   // mints through table::process_minter() under this node
  std::shared_ptr<table::L1Map> map_;  // shared with the handles' TableLife (outlives the writer)
  ring::Doorbell bell_;
  std::vector<std::unique_ptr<CoherenceRing>> rings_;
  std::vector<std::unique_ptr<ring::ByteArena>> arenas_;  // rings_[i]'s, or null
  // Commands from any thread, drained by the writer (a lock-free MPMC queue, private to the
  // .cc so no third-party header reaches this one).
  struct Inbox;
  std::unique_ptr<Inbox> inbox_;
  AckSink ack_sink_;
  MemoryHooks memory_;
  std::jthread thread_;
  // The right to mutate the map and the writer's state (writer_token.h): the writer thread holds
  // it but while it waits; deliver() borrows it then. direct_ caches spec.direct_apply and the
  // listener conditions.
  WriterToken token_;
  bool direct_ = false;
  Carry carry_ = Carry::kOff;  // carry_of(spec_)
  // Token holder: the writer parked with a reclaim deadline, or a borrower already asked it to
  // wake for one (reclaim_wanted()). Set by the borrower, read by the writer's wait predicate.
  bool reclaim_armed_ = false;
  std::uint64_t borrowed_seen_ = 0;  // direct_applies_ at the last park (writer only)
  std::atomic<bool> reclaim_asked_{false};
  // Token holder: the map's earliest expiry when the writer parked (kNoExpiry: empty).
  static constexpr std::int64_t kNoExpiry = std::numeric_limits<std::int64_t>::max();
  std::int64_t parked_expiry_ = kNoExpiry;
  // Set by stop() once its thread has ended: a command posted later is answered by its poster
  // (the loop that would have answered it is gone). Cleared by start().
  std::atomic<bool> closed_{false};
  std::atomic<int> tid_{0};  // the writer thread's kernel id once it runs (os_wakes)

 public:
  // The writer thread's kernel id (0 before it runs): Engine::stats() reads its /proc counts.
  int thread_id() const noexcept { return tid_.load(std::memory_order_relaxed); }

 private:
  // running(): set by start(), cleared first thing by stop(). thread_.joinable() was read by other
  // threads while stop()'s join() wrote the thread object: a data race.
  std::atomic<bool> running_{false};

  // Writer-thread state.
  std::vector<JobAck> acks_;
  std::vector<table::Verdict> verdicts_;  // apply_plain's, reserved to max_batch
  std::unordered_map<std::string, Flight> flights_;
  // Negative caching (TableSpec::absent_ttl_ms): the names whose loader answered Absent, each
  // with the flight's version (a newer message forgets it) and its hash (a hashed message's).
  struct AbsentKey {
    table::IdBytes version;
    std::uint64_t hash;
    std::int64_t expires_ms;  // table::steady_clock_ms
  };
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, AbsentKey, NameHash, std::equal_to<>> absent_;
  // The names remembered, oldest first, each with the expiry it was remembered with: every name
  // takes the same absent_ttl_ms, so the front is the one that expires soonest. An entry whose
  // name was forgotten or remembered again since (another expiry) is passed over when it
  // reaches the front; compact_absent() drops those once they outnumber the live ones.
  struct AbsentOrder {
    std::string name;
    std::int64_t expires_ms;
  };
  std::deque<AbsentOrder> absent_order_;
  std::uint64_t next_flight_ = 1;
  bool suspended_ = true;        // a broadcast or job table caches once its lane confirms delivery
  std::int64_t next_sweep_ = 0;  // when the next sweep is due (writer thread)
  std::int64_t stale_deadline_ = -1;   // serve_stale: when to suspend if still not resubscribed
  std::deque<LoadTimer> load_timers_;  // loader_timeout > 0 only
  std::deque<HeldFetch> held_;         // fill_hold > 0 only
  // The tracking lane's invalidation sequence: one counter per slot of names (by hash), plus an
  // epoch every flush moves. Written by the writer only; read by put() callers anywhere.
  static constexpr std::size_t kForgetSlots = 4096;
  // known_absent()'s marks: the writer stores, any thread loads. `until` is 0 while the slot is
  // being changed (stored first, and last once the hash is in), so a reader that reads the same
  // nonzero `until` on both sides of the hash saw one mark whole.
  struct AbsentMark {
    std::atomic<std::uint64_t> hash{0};
    std::atomic<std::int64_t> until{0};
  };
  static constexpr std::size_t kAbsentMarks = 1024;
  std::unique_ptr<AbsentMark[]> absent_marks_ = std::make_unique<AbsentMark[]>(kAbsentMarks);
  std::size_t absent_marked_ = 0;  // writer: marks set since the last clear (0: nothing to clear)
  void mark_absent(std::uint64_t hash, std::int64_t until) noexcept;
  void unmark_absent(std::uint64_t hash) noexcept;
  std::unique_ptr<std::atomic<std::uint32_t>[]> forget_seq_;
  std::atomic<std::uint32_t> forget_epoch_{0};

  // Counters: written by the token's holder (relaxed load+store: the token's hand-overs order
  // every holder's writes, so none is lost), read anywhere.
  std::atomic<std::uint64_t> applied_{0}, stale_{0}, fills_{0}, l2_hits_{0}, coalesced_{0},
      load_errors_{0}, corrupt_frames_{0}, flight_restarts_{0}, ring_flushes_{0},
      disconnect_flushes_{0}, suspended_fills_{0}, puts_{0}, erases_{0}, commands_{0}, passes_{0},
      remembered_stale_{0}, pin_failures_{0}, listener_throws_{0}, loader_timeouts_{0},
      loader_late_{0}, forgotten_fills_{0}, forgotten_puts_{0}, held_fills_{0}, direct_applies_{0},
      carried_updates_{0}, carried_inserts_{0}, carried_drops_{0}, schema_mismatches_{0},
      absent_loads_{0}, absent_hits_{0}, receipts_{0}, receipts_withheld_{0};
  std::atomic<bool> suspended_flag_{false};
  std::array<std::atomic<std::uint64_t>, kLagBuckets> lag_{};
  std::atomic<std::uint64_t> lag_sum_ns_{0};  // count_lag's sum: beside the bucket it bumps
  std::atomic<std::int64_t> last_applied_ns_{0}, last_decoded_ns_{0};
};

}  // namespace echo::engine
