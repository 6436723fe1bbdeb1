// SPDX-License-Identifier: MIT
// A table's declaration (docs/wire.md, "Table semantics"; docs/configuration.md): every knob with
// its default and checked range. validate() runs at Engine start; a bad knob is a ConfigError
// naming the knob, its allowed range and the value given.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include <echo/ring/ring_config.h>
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>

#include <typeinfo>

namespace echo::engine {

// Bad configuration: names the knob and its range ("table 'quotes': jitter must lie in
// 0.0..0.5, got 0.7").
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class CoherenceMode : std::uint8_t {
  kNone,       // TTL only
  kBroadcast,  // PUBLISH ecc:{t}:coh -> RESP3 push -> ring -> writer (at-most-once)
  kJob,        // a job per message on ecc.coh.<t> (at-least-once); no subscription
  // The server's own invalidation (docs/wire.md, "Table semantics"): CLIENT TRACKING ON BCAST
  // PREFIX ecc:{t}: on the subscriber connection; any change to a key under the prefix (a SET by
  // anyone, an expiry, an eviction) pushes `invalidate`, and the writer drops that row whatever its
  // version; a nil key list (FLUSHALL, FLUSHDB) drops every row. No versions travel, so fills are
  // guarded by a per-key invalidation sequence instead (TableWriter: a fill that an invalidation
  // overtook is served but not cached). The node's own writes invalidate its rows too (NOLOOP would
  // not help: the writes leave on the command connection, the invalidations come on the
  // subscriber's), so a put's row is usually gone a round trip later and the next read refills.
  // Single server only.
  kTracking,
};

// How a table's L2 values are laid out (docs/wire.md, "L2 values").
enum class L2Format : std::uint8_t {
  kFramed,  // version(14) ‖ value: the original's frame, every lane
  kRaw,     // the value bytes alone (kTracking only): a table over keys that programs other than
            // EchoStore write. A row's version is then this node's stamp (minted in the table's
            // kind when the row was read), not a writer's; drop_l2 answers not_versioned.
};

// What a table does after its subscription was down (messages were lost meanwhile).
enum class DisconnectPolicy : std::uint8_t {
  kFlush,       // drop every row on resubscribe: a lost message costs a refill
  kServeStale,  // keep rows up to serve_stale_max_ms after the loss began, then flush
};

// The clock a table's L1 reads to tell a live row from an expired one, on every hit.
enum class L1Clock : std::uint8_t {
  kWriter,  // the writer's coarse clock, published to readers on every writer pass, and while
            // idle at the earliest expiry of a row, then every clock_tick_ms until the
            // next sweep (an empty table sleeps): a hit loads it from a line it already reads, no
            // call. A row may be served up to one kernel tick (4 ms on Debian's kernel) plus
            // clock_tick_ms past its expiry (longer only if the writer's thread is not scheduled)
  kCoarse,  // CLOCK_MONOTONIC_COARSE (vDSO) on every hit: ~10 ns a read in cache, ~20 ns once
            // the rows outgrow the L2 (table/src/l1_map.cc); a row may be served up to one kernel
            // tick past its expiry
  kExact,   // steady_clock: to the millisecond, but a TSC read costs 25-110 ns on a VM, more than
            // the rest of a hit (l1_map_bench: BM_L1Map_GetHit against BM_L1Map_GetHitCoarse)
  kSweep,   // no clock on a hit at all: a row is served until the writer's sweep drops it, up to
            // sweep_ms past its expiry (set sweep_ms to the staleness you accept); the coarse
            // clock's read is ~10 ns of a ~25 ns hit on a table that fits in cache
};

// What a table's keys are (docs/wire.md, "Text keys").
enum class KeyKind : std::uint8_t {
  kBranded,  // 14-byte branded ids of the table's kind (the original's contract; the kind gate)
  kText,     // 1..200 bytes, no '{', '}', space or control byte ("AAPL"), on every lane: the
             // message is key:version (docs/wire.md, "Text keys"); the kind namespaces
             // only the versions
};

// Whether a table's messages carry the value (docs/wire.md, "Carried values"), on the broadcast
// and job lanes: then every node that hears a publish applies the new value in place, newer wins,
// instead of dropping its row and refilling it from L2 on the next read.
enum class Carry : std::uint8_t {
  kAuto,    // kUpdate for text keys; kOff for branded ids, whose tables the original's nodes may
            // share (they read 29-byte messages only)
  kOff,     // the message carries the version only: other nodes drop their older row
  kUpdate,  // values up to carry_max_bytes travel: a node holding an older row gets the value in
            // place; a node without the row remembers the version only (L1 keeps to what the
            // node reads)
  kUpsert,  // as kUpdate, and a node without the row inserts it (L1 holds what is published,
            // under max_size and max_bytes)
};

// What a read (Table<T>::read, get) does on an L1 miss.
enum class OnMiss : std::uint8_t {
  kLoad,    // waits for L2, then the loader (up to get_timeout): the cache-aside read
  kRefill,  // answers Errc::kMiss at once and starts one asynchronous refill of the key, whose
            // row the next read sees: for threads that must never wait on the network
};

// Why a row left L1 (table/eviction.h): kMessage (a coherence message newer than the row, any
// lane), kInvalidate (the invalidate verb), kFlush (the flush policy dropped every row: a full
// ring, a lost subscription; key empty, one call per flush), kExpired (swept, or found expired
// when evicting), kSize and kBytes (evicted to make room under max_size, max_bytes), kReplaced
// (a fill or put of the same key replaced it).
using table::RemovalCause;
// Which row goes when the table is full: kS3Fifo (default), kLru, kClock, kSkip (the original's:
// evict nothing, skip the insert). table/eviction.h says how each works and what a hit costs.
using table::Eviction;

// Runs on the table's writer thread for every row that leaves L1, with the row's key, the
// message's version for kMessage (14 bytes; empty otherwise) and the cause. It holds up every
// row, message and miss of the table while it runs: it must not block, must not call the
// engine's waiting verbs (get, put, publish, ...), and should hand anything slow to another
// thread. A throw is caught and counted (WriterStats::listener_throws).
using RemovalListener =
    std::function<void(std::string_view key, std::string_view version, RemovalCause cause)>;

// Runs on the table's writer thread each time a value enters this node's L1: a fill (L2 or the
// loader), a put or publish of this node, a carried value that updated or inserted a row. `key`,
// the row's 14-byte version and its value: the bytes for a std::string table, the object's bytes
// for a typed one (on_change_of<T>() in codec.h hands it over as const T&), valid only during the
// call. A row that leaves is on_removal's. It holds up every row, message and miss of the table
// while it runs: it must not block, must not call the engine's waiting verbs, and should hand
// anything slow to another thread. A throw is caught and counted (WriterStats::listener_throws).
// Declaring it keeps every apply on the writer thread (no direct apply: direct_apply).
using ChangeListener =
    std::function<void(std::string_view key, std::string_view version, std::string_view value)>;

// A coherence message as the writer applied it (MessageProbe): the key (empty when the ring
// carried only its hash: a text-key broadcast message, a tracking invalidation), table::hash_key
// of the key (always), the message's version (14 bytes; empty for a tracking invalidation) and
// `all` for a tracking flush (FLUSHALL: every row dropped; key empty, key_hash 0).
struct Heard {
  std::string_view key;
  std::uint64_t key_hash = 0;
  std::string_view version;
  bool all = false;
  bool dropped = false;  // a row went (for `all`: the table held rows)
};
// Runs on the table's writer thread after each coherence message it applied, any lane, any
// verdict: from then on no read of this node returns a row older than the message (the referee's
// "message reached the node"). Diagnostics and tests; must not block; a throw is counted as
// on_removal's (WriterStats::listener_throws).
using MessageProbe = std::function<void(const Heard& heard)>;

// The value type of a typed table: set by typed<T>() (codec.h), read by Engine::table<T>() to
// refuse a handle of another type. Empty (type == nullptr): bytes, as every untyped table.
struct ValueType {
  const std::type_info* type = nullptr;
  table::ValueLayout layout{};  // how L1 rows hold it (bytes for std::string)
  // The schema header every value of the type starts with in L2 (schema.h; empty for bytes): a
  // row without it is another schema's, taken as a miss for the loader.
  std::string schema;
};

// A name as a loader sees it: a branded id (keys = branded), or a text key.
class Key {
 public:
  explicit Key(const table::BrandedId& id) : text_(id.view()), id_(id) {}
  explicit Key(std::string_view text) : text_(text) {}
  std::string_view view() const noexcept { return text_; }
  std::string str() const { return std::string(text_); }
  bool branded() const noexcept { return id_.has_value(); }
  // The branded id: throws std::logic_error for a text key.
  const table::BrandedId& id() const;
  // So that loaders written for branded tables, `(const BrandedId&)`, still bind.
  operator const table::BrandedId&() const { return id(); }  // NOLINT: implicit on purpose

 private:
  std::string_view text_;
  std::optional<table::BrandedId> id_;
};

std::string_view to_string(CoherenceMode m) noexcept;
std::string_view to_string(DisconnectPolicy p) noexcept;
std::string_view to_string(L2Format f) noexcept;

// A loader's answer for a name missing from L1 and L2 (docs/wire.md, "Table semantics"): a value
// (its version minted by the engine in the table's kind at flight start), a value with its own
// version, or an error (never cached; every waiter gets Errc::kLoaderFailed with the message
// "loader failed: <reason>").
struct Loaded {
  std::string value;
  std::optional<table::BrandedId> version;
};
struct LoadError {
  std::string reason;
};
// The key has no value at its source (an unpriced symbol): readers get Errc::kAbsent, and this
// node remembers it for the table's absent_ttl_ms (negative caching), so the next reads ask
// neither L2 nor the loader; a write of the key that reaches the node (a publish, a put, a
// message newer than the moment it loaded) forgets it at once. Nothing is written to L2.
struct Absent {};
using LoadResult = std::variant<Loaded, LoadError, Absent>;
// Runs on one of its table's own loader threads (TableSpec::loader_threads; no other table's
// loader runs there, so a slow loader delays only its own table's misses), never on a writer or
// io thread, for one name per call; with loader_threads > 1 calls for different names run
// concurrently, so the loader must then be safe to call from several threads at once. It may
// block (that is what the threads are for) but should answer within the table's loader_timeout,
// past which its waiters get loader_timeout and its answer is thrown away. It must not call back
// into the engine that runs it: a get that misses could wait for this same thread. A throw is
// taken as a LoadError whose reason is the exception's what() ("loader threw" for a throw of
// something not derived from std::exception).
using Loader = std::function<LoadResult(const Key& name)>;

// The namespace of the versions a text-key table mints when it declares no kind.
inline constexpr std::string_view kTextKind = "TXT";

struct TableSpec {
  std::string name;  // names the L2 keys, channel and queue (no braces, spaces)
  std::string kind;  // exactly 3 bytes A-Z: the ids this table caches (keys =
                     // branded) and the namespace of the versions it mints; with text keys
                     // optional (empty: kTextKind)
  // Optional: without one, a key L2 does not hold answers absent (Errc::kAbsent, remembered
  // for absent_ttl_ms), as a loader's Absent does: a table that only publish fills.
  Loader loader;
  KeyKind keys = KeyKind::kBranded;
  ValueType value{};           // typed<T>() sets it; empty: bytes
  RemovalListener on_removal;  // optional (see RemovalListener)
  ChangeListener on_change;    // optional (see ChangeListener)
  // How long this node remembers a loader's Absent (negative caching): 0 = not at all (each miss
  // asks L2 and the loader again), else 1..2^40 ms. At most max_size keys are remembered (the
  // oldest forgotten first).
  std::int64_t absent_ttl_ms = 1000;
  // The table's own loader threads, started with the engine: 1..64. More than one lets misses of
  // different names load concurrently (the loader must then be thread-safe); one flight per name
  // still calls the loader once however many readers wait for it.
  int loader_threads = 1;
  // How long a flight waits for its loader: 0 = the engine's get_timeout, else 1..3,600,000 ms.
  // Past it, every waiter of the flight gets Errc::kLoaderTimeout and nothing is cached; the
  // loader's late answer is discarded (neither L2 nor L1 sees it; WriterStats::loader_late counts
  // it). The loader's thread cannot be cancelled: it stays busy until the loader returns, so a
  // loader that hangs takes one of loader_threads out of service until it does, and stop() waits
  // for it.
  std::chrono::milliseconds loader_timeout{0};
  std::int64_t ttl_ms = 5000;     // 1 .. 2^40
  double jitter = 0.1;            // 0.0 .. 0.5
  std::size_t max_size = 100000;  // 1 .. 2^26 (the L1 index is allocated whole: table_spec.cc)
  // 0: no byte bound; else 4096 .. 2^44: the most bytes L1's rows may hold, each charged its
  // allocation (72 bytes of meta, links and header, the key, the value or decoded object,
  // rounded up to 16: table::L1Map::row_charge). Either bound, or both, makes an insert evict.
  std::size_t max_bytes = 0;
  Eviction eviction = Eviction::kS3Fifo;  // who goes when L1 is full (see Eviction)
  std::int64_t sweep_ms = 1000;           // 1 .. 3,600,000
  L1Clock l1_clock = L1Clock::kWriter;    // a hit's expiry check (loader_timeout keeps exact time)
  // kWriter only: once a row's expiry has passed and until the sweep removes it, the longest an
  // idle writer waits before it publishes the time again, 1..1000 ms. Each wake costs the
  // writer's thread a few microseconds (250 a second at 4 ms). Before the first expiry, and in
  // an empty table, an idle writer does not tick at all.
  std::int64_t clock_tick_ms = 4;
  CoherenceMode coherence = CoherenceMode::kNone;
  L2Format l2_format = L2Format::kFramed;  // kRaw only with coherence kTracking
  MessageProbe on_message;                 // optional (see MessageProbe)
  // Fault injection (the referee, chaos tests; 0 = off, else 1..10,000,000 us): every fill's L2
  // answer waits this long before the writer inserts it, while the writer applies messages
  // meanwhile: the classic fill race, staged on purpose.
  std::chrono::microseconds fill_hold{0};
  std::size_t ring_capacity = 4096;  // power of two, 2 .. 2^30
  std::size_t max_batch = 256;       // 1 .. ring_capacity: items applied per drain pass
  ring::FullPolicy full_policy = ring::FullPolicy::kFlush;  // broadcast lane on a full ring
  // How the writer waits for work. No spin by default: on a machine where the writer shares its
  // core, spinning delays the io thread that would hand it the work (drill F3 measured 1.1x the
  // floor at spin 0 against up to 4.4x at 2048); raise spin_budget when the writer owns a core.
  // The park handshake is adaptive (WaitConfig::adaptive_barrier): it adds no spin, and a writer
  // that parks per message keeps its rings on the seq_cst handshake (no membarrier, no IPI);
  // only while it keeps up with continuous traffic do its io threads publish without the fence.
  ring::WaitConfig writer_wait{ring::WaitStrategy::kPark, 0};
  DisconnectPolicy disconnect = DisconnectPolicy::kFlush;
  std::int64_t serve_stale_max_ms = 0;  // kServeStale only: 1 .. 86,400,000
  int writer_cpu = -1;                  // -1: unpinned; else a CPU index
  // Broadcast lane, and the job lane's leads: while the writer waits for work (any writer_wait
  // strategy), the io thread that decoded a message applies it itself under the writer's token
  // (writer_token.h) instead of handing it through the ring and waking the writer; only when its
  // ring is empty (the order is kept), and only on a table with no on_message, on_removal or
  // on_change (those run on the writer thread). The writer still runs on writer_cpu and still
  // does everything else (fills, puts, sweeps, the clock, reclamation). Saves a thread wake per
  // message when the writer is parked (lanes_bench: BM_BroadcastLane_PublishToDrop against
  // BM_Hiredis_PublishToMessage; for a lead, `echostore bench`'s job_vs_broadcast). Job
  // deliveries (they carry a ticket to ack) always go through the writer. Default true; false:
  // every message goes through the ring and the writer, as before.
  bool direct_apply = true;
  // Carried values (see Carry): kAuto resolves by `keys` (carry_of()).
  Carry carry = Carry::kAuto;
  // The largest value a message carries, 1 .. 65,536 bytes: a larger one travels as the version
  // only, and the nodes that hear it refill as with kOff.
  std::size_t carry_max_bytes = 4096;
  // Broadcast lane with carried values: the bytes beside each io thread's ring that hold the
  // values in flight to the writer, 2 * (carry_max_bytes + 216) .. 2^30. A message that finds it
  // full is applied as a drop instead (TableStats::carry_degraded), never lost.
  std::size_t carry_arena_bytes = std::size_t{1} << 20;
  // What read and get do on an L1 miss (see OnMiss). try_read and try_get never wait whatever it
  // says; try_refill says whether their miss starts a refill.
  OnMiss on_miss = OnMiss::kLoad;
  bool try_refill = true;

  // The job lane (coherence kJob): this node's consumer of its member queue.
  std::int64_t job_lease_ms = 30000;       // 10 .. 3,600,000: a claim's lease
  std::int64_t job_beat_ms = 1000;         // 10 .. 60,000: park timeout, heartbeat, reap period
  std::int64_t job_retry_delay_ms = 1000;  // 0 .. 3,600,000: a malformed job's retry delay
  int job_max_attempts = 3;                // 1 .. 1000: then the job is dead
  std::size_t job_credits = 1024;          // 1 .. ring_capacity: claimed, not yet applied
  bool job_shared_queue = false;           // enqueue also feeds ecc.coh.<t> (original consumers)
  // The relay (docs/wire.md, "The job lane's member queues"): this member also consumes the shared
  // queue ecc.coh.<t> as the original's consumers do, admits each job it claims into every live
  // member queue (under the job's own id) and then completes it there. On by default: without it a
  // job an original writer admits (genqueue) reaches no EchoStore node, and each serves the old row
  // until its TTL. It costs a thread and a parked connection per engine (for all its relaying
  // tables) and one empty claim per wake another consumer won. Off where no original writer shares
  // the server and nothing else feeds the shared queue.
  bool job_relay = true;
  // The lead: this node listens on the table's lead channel (JobLaneKeys::lead) and applies what
  // arrives there at once, and its enqueue PUBLISHes the message there one round trip before it
  // admits the job. The job still comes (at-least-once); its apply then finds the row gone. Off:
  // the row goes only when the job is applied (one script and the hand-off later).
  bool job_lead = true;
};

// A table by its name and lane, with text keys and every other knob at its default (no loader,
// no kind needed): set the rest by assignment, in any order.
//   TableSpec quotes = text_table("quotes");                  // the broadcast lane
//   quotes.ttl_ms = 60000;
//   quotes.loader = loader_of<Quote>(price_from_the_feed);
//   Engine node(options, {typed<Quote>(quotes)});
TableSpec text_table(std::string name, CoherenceMode lane = CoherenceMode::kBroadcast);

// Throws ConfigError for the first knob out of range. Any thread.
void validate(const TableSpec& spec);
// The table's carry with kAuto resolved: kUpdate for text keys on the broadcast and job lanes;
// kOff for branded keys and for the other lanes. An explicit carry stands on every lane (a node
// that declares a job-lane table as coherence none still publishes to it with its group).
Carry carry_of(const TableSpec& spec) noexcept;
std::string_view to_string(Carry c) noexcept;

}  // namespace echo::engine
