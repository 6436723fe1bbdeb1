// SPDX-License-Identifier: MIT
// The L1 map (docs/wire.md, "Table semantics"): rows of (name, value, version, expires_at) owned by
// ONE writer thread, read by any number of threads without locks. Also the newer-wins apply
// primitive (apply_coherence) and the fill guard (tombstones, fill_guard.h). Reads never block,
// allocate, make a syscall or write a shared cache line; see "Why this technique" in l1_map.cc.
// Its configuration (L1Config, clocks, ValueLayout) is l1_config.h; what its calls answer
// (verdicts, ReadResult, RowView, L1Stats) is l1_results.h: both come with this header.
#pragma once

#include <echo/base/cache_line.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/epoch.h>
#include <echo/table/eviction.h>
#include <echo/table/fill_guard.h>
#include <echo/table/l1_config.h>
#include <echo/table/l1_results.h>
#include <echo/table/row_arena.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace echo::table {

class L1Map {
 public:
  // Bad configuration throws std::invalid_argument naming the knob and its range. Any thread.
  explicit L1Map(const L1Config& config);
  // Frees every row. No reader may be inside a read of this map, and the writer must be done.
  ~L1Map();
  L1Map(const L1Map&) = delete;
  L1Map& operator=(const L1Map&) = delete;

  // ---- Readers: any thread, concurrently with the writer. Lock-free, no syscall (the default
  // clock is the vDSO's CLOCK_MONOTONIC), each hit/miss counted on the caller's own cache line.

  // Copies a live row's value into `value` (allocates only if its capacity is too small) and
  // its version into `*version` if given. False on a miss (absent or expired) and on a thread
  // refused a reader slot (reader_slot_refusals; every read below answers a miss then too).
  bool get(std::string_view name, std::string& value, IdBytes* version = nullptr) const;
  // Copies into `buf`: kHit, kMiss, or kTooSmall (nothing copied; size says what is needed;
  // counted as a hit). No allocation. read_at() judges expiry by `now_ms` (on the map's clock)
  // whatever the read clock; read() by the read clock's time (L1Config::read_clock).
  ReadResult read_at(std::string_view name, std::span<char> buf,
                     std::int64_t now_ms) const noexcept;
  ReadResult read(std::string_view name, std::span<char> buf) const noexcept {
    return read_at(name, buf, read_now());
  }
  // Zero-copy: the live row under `guard`, valid while the guard lives. Counted like get().
  // `guard` must be this thread's (debug builds abort otherwise); nullopt if it is not
  // protecting() (no reader slot).
  std::optional<RowView> find(const ReadGuard& guard, std::string_view name) const noexcept;
  // Zero-copy, in one call: runs fn(value, version) on the live row of `name` inside this
  // thread's read section and answers true, or false on a miss (fn not run). Counted like get().
  // fn runs on the caller's thread while the section holds back the reclamation of every map:
  // it must not block, must not keep the views past its return, and must not call the map's
  // writer side. No allocation, lock or syscall of its own (the map's clock permitting).
  // Inline but for one call (hit()): a typed table's read is this (bench:
  // l1_typed_hit_vs_flat_map).
  template <class Fn>
  bool visit(std::string_view name, Fn&& fn) const {
    const ReadGuard guard;
    if (!guard.protecting()) [[unlikely]]
      return refuse_slot();
    const Row* r = hit(name);
    if (r == nullptr) return false;
    std::forward<Fn>(fn)(std::string_view(r->value(), r->value_size), view(r->version()));
    return true;
  }

  // Any thread: runs fn(RowView) on every live row, and answers how many. The walk goes bucket
  // by bucket, each run of kWalkChunk buckets inside its own read section, so it holds back
  // reclamation for one chunk at a time, never the whole walk. Safe beside the writer: no row is
  // torn or freed under fn; a row the writer replaces or drops while the walk passes may be
  // missed or seen at its value before the change, and no name is seen twice. fn as visit()'s:
  // it must not block, keep the views, call the map's writer side, or read this map (a nested
  // read section). Counts no hit or miss. A thread refused a reader slot walks nothing (0).
  static constexpr std::size_t kWalkChunk = 256;
  template <class Fn>
  std::size_t for_each(Fn&& fn) const {
    return walk_rows(
        [](void* f, const RowView& row) { (*static_cast<std::remove_reference_t<Fn>*>(f))(row); },
        &fn);
  }
  std::size_t walk_rows(void (*each)(void* ctx, const RowView& row), void* ctx) const;

  // ---- Writer: the map's one writer thread only (debug builds abort on a second thread; the
  // first writer call binds the thread). Never blocks; allocates a row per insert and frees
  // retired rows in batches once readers have moved on. Retiring a row allocates nothing (the
  // retire list runs through the rows), so a coherence apply (apply_coherence, apply_batch)
  // allocates only when the fill guard doubles (at most log2(tombstone_capacity / 1024) times
  // over the map's life), and cannot throw: a doubling that fails collapses into the floor.
  // A fill or put that finds the map full (max_size rows, or max_bytes with its row) evicts by
  // the policy first (L1Config::eviction; each row told to the listener with its cause), so
  // the bounds hold at every moment; kSkip evicts nothing and skips instead (kFullSkip).

  // A fill (docs/wire.md, "Table semantics", the fill guard of fill_guard.h): refused if the
  // current row is newer than `version` (fill_refused++) or if a remembered coherence message is
  // newer (fill_refused++). Equal versions pass both checks: a row at v survives a message v (newer
  // wins), so a fill at v must too, or every update would make the name uncacheable for a TTL.
  // Names are 1..kMaxNameSize bytes (std::length_error otherwise, as for a value of 4 GiB); the
  // BrandedId overloads pass the id's 14 bytes.
  InsertVerdict insert_fill(std::string_view name, std::string_view value,
                            const BrandedId& version);
  InsertVerdict insert_fill(const BrandedId& name, std::string_view value,
                            const BrandedId& version) {
    return insert_fill(name.view(), value, version);
  }
  // Writer: the live row of `name` as the writer just left it (no read section: only the writer
  // frees rows), valid until the writer's next call that changes the map. Counts nothing.
  std::optional<RowView> writer_row(std::string_view name) const noexcept;
  // The newest coherence version the fill guard holds against `name` (its tombstone, or the
  // floor), if any: a fill or put under a version older than it is refused. (The writer mints a
  // loader's version past the name's own tombstone(), never past the floor.) Writer thread; no
  // allocation.
  std::optional<IdBytes> fill_floor(std::string_view name) const noexcept;
  std::optional<IdBytes> fill_floor(const BrandedId& name) const noexcept {
    return fill_floor(name.view());
  }
  // A put (docs/wire.md, "Table semantics"): newer wins, as for a fill: refused when the current
  // row is newer (kRefusedOlder, put_refused++), so a put that reaches the writer after a newer
  // one never replaces it; equal versions replace. A put older than a remembered coherence
  // message is refused too (put_refused++): that message announced newer data in L2, and L1 must
  // not serve older data than L2 holds. A refusal by the guard also drops the current row when
  // it is older than `version` (under the floor, for instance: it is stale whichever refused).
  InsertVerdict put(std::string_view name, std::string_view value, const BrandedId& version);
  InsertVerdict put(const BrandedId& name, std::string_view value, const BrandedId& version) {
    return put(name.view(), value, version);
  }
  // Why the last kRefusedDecode was refused (the layout's decode). Writer thread.
  const std::string& decode_error() const noexcept { return decode_error_; }
  // Newer wins (docs/wire.md, "Table semantics"): row exists and newer(version, row.version) ->
  // delete, kApplied, coh_applied++; else kStale, coh_stale++. Either way the version is remembered
  // for the fill guard. A name outside 1..kMaxNameSize bytes matches no row: kStale, and nothing
  // remembered.
  Verdict apply_coherence(std::string_view name, const BrandedId& version) noexcept;
  Verdict apply_coherence(const BrandedId& name, const BrandedId& version) noexcept {
    return apply_coherence(name.view(), version);
  }
  // A text key's message as the broadcast ring carries it (docs/wire.md, "Text keys"; the ring
  // holds no key bytes): every row whose name hashes to `hash` (hash_key) and is older than
  // `version` goes, and the fill guard remembers the version under that hash, as apply_coherence
  // does. Two names of one 64-bit hash both go: a drop costs a refill, never a stale read. Writer
  // thread.
  Verdict apply_hashed(std::uint64_t hash, const BrandedId& version) noexcept;
  // A message that carries its value (docs/wire.md, "Carried values"): newer wins as for a drop,
  // but the row is replaced by the value instead of dropped, with the same lock-free publication
  // as a fill (a reader sees the old row or the new one, whole). The version is remembered for
  // the fill guard either way, so a fill of an older version in flight is refused. A name that
  // holds no row gets one only when `insert_absent`. Never throws: a value that cannot be held
  // (kDropped) drops the older row instead, and so does a value the guard's floor refuses
  // (fill_guard.h: the floor is no newer message of this name, so the older row must not stay).
  // Writer thread.
  UpdateVerdict apply_update(std::string_view name, const BrandedId& version,
                             std::string_view value, bool insert_absent) noexcept;
  // An unversioned invalidation (the tracking lane, docs/wire.md, "Table semantics"): every row
  // whose name hashes to `hash` goes, whatever its version (told to the listener as kMessage with
  // an empty version); nothing is remembered (no version to guard with: the writer's invalidation
  // sequence guards the fills). kApplied when a row went (coh_applied), else kStale (coh_stale).
  // Writer thread.
  Verdict forget_hashed(std::uint64_t hash) noexcept;
  // The same comparison for a batch (the ring's apply function); returns how many applied.
  // Exactly what apply_coherence on each message in order would do (same verdicts, counters,
  // tombstones, listener calls: duplicates of a name in one batch included), but faster: every
  // message's hash is computed and its bucket and tombstone prefetched ahead of its apply
  // (BM_L1Map_ApplyDrops, batched 1 against 0).
  std::size_t apply_batch(std::span<const CoherenceMessage> messages) noexcept {
    return apply_batch(messages.data(), messages.size(), sizeof(CoherenceMessage));
  }
  // apply_batch over messages kept inside larger items (a ring's slots): `count` messages,
  // message i at `stride` * i bytes past `first` (a positive multiple of
  // alignof(CoherenceMessage)). When `verdicts` is non-null, verdicts[i] gets message i's verdict
  // (room for `count`).
  std::size_t apply_batch(const CoherenceMessage* first, std::size_t count, std::size_t stride,
                          Verdict* verdicts = nullptr) noexcept;
  // Hands the writer role on (debug builds check one writer at a time, not one thread for
  // ever): the current writer calls it after its last writer call, and the next caller of a
  // writer verb becomes the writer. The hand-over itself must order the two (a release the next
  // writer acquires: engine::WriterToken). No-op in release builds.
  void release_writer() const noexcept {
#ifndef NDEBUG
    writer_.store(std::thread::id{}, std::memory_order_relaxed);  // ordered by the hand-over
#endif
  }
  // Deletes the row unconditionally (admin invalidate). True if there was one. Counted in
  // invalidated; the listener is not told (the caller knows).
  bool erase(std::string_view name) noexcept;
  bool erase(const BrandedId& name) noexcept { return erase(name.view()); }
  // erase, then the fill guard remembers `version` for the name as it would a message's: a put
  // or fill older than it (one already under way, an async publish's row posted behind the erase)
  // is refused. Writer thread.
  bool erase(std::string_view name, const BrandedId& version) noexcept;
  // Flush policy: drops every row (tombstones are kept: they are still true). Counted in
  // invalidated; the listener is not told (the caller knows).
  // Walks the whole index unless the map is empty (then it returns at once: a flush storm on
  // an emptied map costs nothing per pass).
  void clear() noexcept;
  // Deletes rows with expires_at < now: swept += n, sweeps++. Returns n. Walks the index only
  // if some row can have expired (size() != 0 and now past the earliest expiry).
  std::size_t sweep(std::int64_t now_ms) noexcept;
  // Frees retired rows no reader can still see, now: a scan of the reader slots, which costs a
  // membarrier (an IPI to every CPU running a thread of the process) in the asymmetric mode
  // (epoch.h). Writer thread. The writer's loop calls reclaim_due() instead; this is for a
  // caller that wants the memory back at once (tests, tools).
  void reclaim() noexcept;
  // Frees retired rows no reader can still see, at most once per kScanIntervalMs (on the map's
  // clock, `now_ms`), or at once when kForceScanRows rows wait (a memory bound for heavy
  // traffic). Returns the time (the map's clock) at which the rows still waiting may be freed
  // (the next scan's due time), or -1 when none waits. A writer calls it on every pass and
  // wakes by that time; retire() calls it itself every kReclaimBatch retires unless
  // hold_reclaim(true). Writer thread; no allocation.
  std::int64_t reclaim_due(std::int64_t now_ms) noexcept;
  // While on, a retire never reclaims: rows only wait, tagged, for the writer's next
  // reclaim_due(). For a writer that lends its role to another thread (engine::WriterToken):
  // the borrower (an io thread) must not scan reader slots or run values' destructors. Writer
  // thread (the hand-over orders the flag for the borrower).
  void hold_reclaim(bool on) noexcept { reclaim_held_ = on; }
  // Any thread: L1Stats::reclaim_scans alone (stats() also sums every reader's shard).
  std::uint64_t reclaim_scans_approx() const noexcept {
    return counters_.reclaim_scans.load(std::memory_order_relaxed);
  }
  // Writer thread: rows unlinked and not yet freed (retired_pending in stats()).
  std::size_t retired_rows() const noexcept { return retired_rows_; }
  // Writer thread: a lower bound of every linked row's expiry (the map's clock), or the largest
  // int64 when no row is linked: nothing expires, by any clock, before it.
  std::int64_t next_expiry() const noexcept { return earliest_expiry_; }
  // Reads the map's clock and publishes it as the readers' time (ReadClock::kPublished; under
  // kCall and kNone it only reads the clock). Returns the time read. Writer thread; no syscall
  // beyond the clock's own, and no store while the time has not moved.
  std::int64_t tick() noexcept;

  // ---- Any thread: relaxed snapshots (stats() sums the per-reader shards).
  std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  L1Stats stats() const noexcept;
  // Writer thread: bytes held from the system by the index, the row arena (rows, values and free
  // blocks), tombstones, reader shards and the retire list.
  std::size_t memory_bytes() const noexcept;
  // Writer thread: value bytes held (linked and not yet freed rows).
  std::size_t value_bytes() const noexcept { return value_bytes_; }
  std::size_t bucket_count() const noexcept { return mask_ + 1; }
  // What a row of this name and value size is charged against max_bytes (its allocation: the
  // 48-byte writer's part (meta and links), the 24-byte header, the name, the value or object
  // (aligned), rounded up to 16). Any thread.
  std::size_t row_charge(std::size_t name_size, std::size_t value_size) const noexcept;
  // Writer thread: the linked rows' charged bytes (max_bytes's measure).
  std::size_t bytes() const noexcept { return bytes_; }
  std::int64_t now() const noexcept { return clock_(); }
  std::int64_t ttl_ms() const noexcept { return ttl_ms_; }
  std::int64_t jitter_span_ms() const noexcept { return jitter_span_; }

  // The tombstone held for `name`, if any. Writer thread (tests, diagnostics).
  std::optional<IdBytes> tombstone(std::string_view name) const;
  std::optional<IdBytes> tombstone(const BrandedId& name) const { return tombstone(name.view()); }
  // The eviction mark of `name`'s row (S3-FIFO's count, CLOCK's bit), -1 with no row. Writer
  // thread (tests, diagnostics).
  int mark(std::string_view name) const noexcept;
  const ValueLayout& layout() const noexcept { return layout_; }
  // Walks of the whole index so far (clear, sweep, a full map's expiry pass). Writer thread.
  std::uint64_t index_walks() const noexcept { return index_walks_; }

  static constexpr std::size_t kReclaimBatch = 256;
  // reclaim_due()'s pace: at most one scan of the reader slots (one membarrier) per this many
  // ms, unless kForceScanRows retired rows wait.
  static constexpr std::int64_t kScanIntervalMs = 10;
  static constexpr std::size_t kForceScanRows = 16 * kReclaimBatch;
  // Tagged batches of retired rows kept apart; past this, a new batch joins the newest one
  // under the newer tag (it frees later, never sooner: still safe). Only a stuck reader makes
  // batches pile up.
  static constexpr std::size_t kRetireBatches = 32;

 private:
  // One allocation: the writer's part first (Meta, then Links: 48 bytes at fixed places just
  // before the row's address), then this header (what a hit reads first), the name's
  // name_size bytes, then (at value_offset, aligned for an object layout) value_size bytes of
  // value or the decoded object. A hit reads the header, the name and the value, which are
  // adjacent: a 32-byte struct under a name of up to 8 bytes fills the row's first 64 bytes. A
  // coherence drop reads the writer's part, the header and the name, which are adjacent too (86
  // bytes for a branded name: two lines, sometimes three), all at addresses the bucket's pointer
  // gives without reading the row first, so apply_batch prefetches them in one stage; a queue
  // neighbour's links are one (prefetchable) miss. Everything but `next`, `mark`, the links,
  // Meta::queue and Meta::stamp is immutable once published. Here, not in l1_map.cc, so visit()
  // inlines.
  struct Row {
    std::atomic<Row*> next;  // writer stores (release), readers load (seq_cst, see lookup())
    std::int64_t expires_at;
    std::uint32_t value_size;
    std::uint16_t value_offset;  // from the row's first byte
    std::uint8_t name_size;      // 1 .. kMaxNameSize
    // The eviction mark in the line a hit already reads: S3-FIFO's 2-bit count, CLOCK's bit.
    // A hit stores count + 1 only while the count is below the policy's limit (mark_limit_),
    // and the writer lowers it as the row goes round; both relaxed: a racing pair loses a
    // count, never a row (the writer alone decides, and frees nothing a reader can reach).
    mutable std::atomic<std::uint8_t> mark;

    // Writer only, never read by a reader (so readers still standing on the row race with
    // nothing).
    struct Links {
      Row* newer;  // the newer neighbour in the row's eviction queue while it is in one
      union {
        Row* older;             // kS3Fifo, kClock: the older neighbour in its queue
        std::size_t heap_slot;  // kLru: its place in the writer's heap
      };
    };

    // The writer's part of the row (with Links): never read by a reader but for `version`
    // (visit, find) and, under kLru, `stamp`.
    struct Meta {
      union {
        // hash_key(name) while the row is linked: the writer's (apply_hashed, the ghost,
        // evict), no reader's.
        std::uint64_t hash;
        // Once it is unlinked: the retire list's link (nothing reads a retired row's hash).
        Row* retired_next;
      };
      // kLru: the ticket of its last hit (readers store, relaxed) or of its insert.
      mutable std::atomic<std::uint64_t> stamp;
      IdBytes version;
      // The Queue holding it (writer only), with kLeft once a message dropped it: still
      // threaded through its queue's links until reclaim() frees it (see leave()).
      std::uint8_t queue;
    };
    // The writer's part: the allocation's first kPrefix bytes, just before the header.
    struct Prefix {
      Meta meta;
      Links links;
    };
    static constexpr std::size_t kPrefix = 48;
    // Well-defined: make_row constructs the Prefix at the first byte of the row's one arena
    // block and this header kPrefix bytes on (both live until free_row), so stepping back from
    // the header's first byte stays inside that block's storage and lands on the Prefix's first
    // byte; std::launder then gives a pointer to the Prefix object living there (a cast alone
    // would still be a pointer derived from the header).
    const Prefix& prefix() const noexcept {
      return *std::launder(
          reinterpret_cast<const Prefix*>(reinterpret_cast<const char*>(this) - kPrefix));
    }
    Prefix& prefix() noexcept { return const_cast<Prefix&>(std::as_const(*this).prefix()); }
    const Meta& meta() const noexcept { return prefix().meta; }
    Meta& meta() noexcept { return prefix().meta; }
    Links& links() noexcept { return prefix().links; }
    const IdBytes& version() const noexcept { return meta().version; }

    const char* name() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    char* name() noexcept { return reinterpret_cast<char*>(this + 1); }
    std::string_view name_view() const noexcept { return {name(), name_size}; }
    const char* value() const noexcept {
      return reinterpret_cast<const char*>(this) + value_offset;
    }
    char* value() noexcept { return reinterpret_cast<char*>(this) + value_offset; }
  };
  static_assert(sizeof(Row) == 24, "a hit's header: 24 bytes, the name right after it");
  static_assert(sizeof(std::atomic<std::uint8_t>) == 1, "the mark fills the header's last byte");
  static_assert(sizeof(Row::Links) == 16 && sizeof(Row::Meta) == 32 &&
                    Row::kPrefix == sizeof(Row::Meta) + sizeof(Row::Links) &&
                    sizeof(Row::Prefix) == Row::kPrefix,
                "the writer's part keeps the header at the arena's 16 alignment");
  static_assert(alignof(Row::Prefix) <= RowArena::kGranule && alignof(Row) <= RowArena::kGranule,
                "an arena block's start suits the Prefix, and kPrefix bytes on, the header");
  static_assert(kMaxNameSize <= 255, "Row::name_size is one byte");
  struct alignas(base::kCacheLine) ReaderShard {
    // Written only by the thread owning this shard index (base::solo_add); read by
    // stats() with relaxed loads: counters, not synchronisation.
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
  };
  // Retired rows chained through Row::Meta::retired_next (writer-only; readers never read it).
  struct RetireChain {
    Row* head = nullptr;
    Row* tail = nullptr;
    std::uint64_t epoch = kEpochIdle;  // tagged by reclaim(): free once epoch < min_active()
    std::int64_t since = 0;            // the map's clock at the chain's first retire
  };
  // Writer-written counters: one line, away from the readers' read-mostly line.
  struct alignas(base::kCacheLine) WriterCounters {
    std::atomic<std::uint64_t> coh_applied{0}, coh_stale{0}, swept{0}, sweeps{0}, full_skips{0},
        fill_refused{0}, put_refused{0}, retired_pending{0}, tombstones{0}, tombstone_collapses{0},
        retired_bytes{0}, retired_since{0},  // retired_since: `since` of the oldest chain
        decode_errors{0}, evicted_size{0}, evicted_bytes{0}, expired{0}, invalidated{0},
        replaced{0}, bytes{0}, reclaim_scans{0};
  };

  const Row* lookup(std::string_view name, std::uint64_t hash) const noexcept;
  // lookup()'s walk for a name that is not 14 bytes (a text key), out of line.
  [[gnu::noinline]] static const Row* lookup_text(const Row* r, std::string_view name) noexcept;
  // The chain walk from `r` for a name of any length (lookup_text's and hit()'s, inline). It
  // compares lengths and names, not hashes: the hash lives in the row's meta, before its header.
  static const Row* walk(const Row* r, std::string_view name) noexcept;
  // The time a read judges expiry by: the clock's (kCall) or the writer's last tick()
  // (kPublished; kNone publishes the earliest time there is, so nothing has expired by it).
  std::int64_t read_now() const noexcept {
    return read_clock_ == ReadClock::kCall ? clock_()
                                           : published_now_.load(std::memory_order_relaxed);
  }
  // A row past its expiry as a read judges it.
  static bool expired(const Row* r, std::int64_t now) noexcept { return now >= r->expires_at; }
  const Row* live_row(std::string_view name, std::int64_t now) const noexcept;
  // The live row of `name` on the map's clock now, counted as a hit or a miss; nullptr on a miss.
  // Inside a section this thread opened. visit()'s one call: the clock, the hash, the walk and
  // the count inline in it.
  const Row* hit(std::string_view name) const noexcept;
  // A read by a thread refused a reader slot: counted, answered as a miss (false).
  bool refuse_slot() const noexcept;
  void count(bool hit) const noexcept;

  std::atomic<Row*>* find_link(std::string_view name, std::uint64_t hash) const noexcept;
  // find_link()'s walk for a name that is not 14 bytes, out of line.
  [[gnu::noinline]] static std::atomic<Row*>* find_link_text(std::atomic<Row*>* link,
                                                             std::string_view name) noexcept;
  InsertVerdict upsert(std::string_view name, std::string_view value, const BrandedId& version,
                       bool is_fill);
  UpdateVerdict update_one(std::string_view name, std::uint64_t h, const IdBytes& v,
                           const BrandedId& version, std::string_view value, bool insert_absent,
                           std::int64_t now) noexcept;
  // Drops `name`'s row when `v` is newer than it; true if it did.
  bool drop_older(std::string_view name, std::uint64_t h, const IdBytes& v) noexcept;
  // nullptr when the layout's decode refused `value` (decode_error_ says why).
  Row* make_row(std::string_view name, std::uint64_t hash, std::string_view value,
                const IdBytes& version, std::int64_t expires_at);
  // The row's allocation: meta, links, header, name, value (inline: every retire, free and
  // queue move asks).
  static std::size_t row_bytes(const Row* row) noexcept {
    return Row::kPrefix + std::size_t{row->value_offset} + row->value_size;
  }
  std::size_t value_offset(std::size_t name_size) const noexcept;
  void unlink(std::atomic<Row*>* link, Row* row) noexcept;
  void retire(Row* row) noexcept;
  // reclaim()'s and reclaim_due()'s parts: tag the untagged chain with a new epoch (a batch of
  // its own, or joined to the newest); scan the reader slots and free every batch no reader can
  // see (batch_count_ != 0), noting `now_ms` as the last scan.
  void tag_untagged() noexcept;
  void scan_and_free(std::int64_t now_ms) noexcept;
  void publish_retired() noexcept;
  void free_row(Row* row) noexcept;
  // `h` is hash_key(name). Leaves the fill guard's counters to publish_guard() (once a batch).
  Verdict apply_one(std::string_view name, std::uint64_t h, const IdBytes& version,
                    std::int64_t now) noexcept;
  // The fill guard's size and collapses into counters_ for stats() (relaxed: counters).
  void publish_guard() noexcept {
    counters_.tombstones.store(tombstones_.size(), std::memory_order_relaxed);
    counters_.tombstone_collapses.store(tombstones_.collapses(), std::memory_order_relaxed);
  }
  std::size_t drop_expired(std::int64_t now, bool inclusive) noexcept;
  std::int64_t draw_expiry(std::int64_t now) noexcept;
  void check_writer(const char* op) const noexcept;
  InsertVerdict refused_decode() noexcept;

  // ---- Eviction (l1_eviction.cc): writer thread, but for touch().
  enum Queue : std::uint8_t { kNoQueue, kSmall, kMain, kHeap };
  static constexpr std::uint8_t kLeft = 0x80;  // Meta::queue: left its queue, not yet relinked
  // A FIFO threaded through its rows' links (newer, older), oldest first.
  struct Fifo {
    Row* oldest = nullptr;
    Row* newest = nullptr;
    std::size_t rows = 0, bytes = 0;
  };
  struct HeapEntry {
    std::uint64_t stamp;  // the row's stamp when the writer last looked (<= its stamp now)
    Row* row;
  };
  // Where a row was, for a replacement to take its place (take_out, put_back).
  struct Place {
    Queue queue;
    std::uint8_t mark;
  };
  // A hit's mark: any reader, on a live row it is returning, inside its section. One load and
  // one compare on a line the hit already reads; the store (touch) only while the mark is
  // below the policy's limit, so a hot row's hit writes nothing (kSkip's limit is 0).
  void mark_hit(const Row* r) const noexcept {
    if (r->mark.load(std::memory_order_relaxed) < mark_limit_) [[unlikely]]
      touch(r);
  }
  [[gnu::noinline]] void touch(const Row* r) const noexcept;
  // The bytes a row is charged against max_bytes: its allocation, as the arena rounds it.
  static std::size_t charge(std::size_t row_bytes) noexcept {
    return (row_bytes + RowArena::kGranule - 1) & ~(RowArena::kGranule - 1);
  }
  // A linked row enters the policy's queue (a new name: S3-FIFO's ghost picks the queue).
  void admit(Row* row) noexcept;  // kLru: upsert() reserved the heap's room
  // A row leaves its queue (it is being unlinked, or replaced: put_back puts its successor
  // where it was, at the newer end, with its mark).
  Place take_out(Row* row) noexcept;
  // A row a message dropped leaves its queue. In a map of more than kRelinkAtOnceRows rows
  // (relink_late_), it leaves the queue's counts at once and its place in the queue's links only
  // when reclaim() frees it, in a batch whose neighbours' lines are prefetched together: the
  // drop itself then touches no other row. victim() steps over such rows; clear() forgets them.
  // In a smaller map the neighbours are in cache and take_out() relinks at once, which costs
  // fewer instructions. BM_L1Map_ApplyDrops, S3-FIFO against skip, interleaved pairs: 1M rows
  // 0.71-0.82x relinking at once, median 0.96x (10 pairs) late; 10k rows median 0.86x late,
  // 0.94x (10 pairs) at once.
  void leave(Row* row) noexcept;
  static constexpr std::size_t kRelinkAtOnceRows = 32768;
  // Relinks those of `rows` (a part of a retire batch) that left a queue (reclaim(), before
  // freeing them).
  void relink_left(std::span<Row* const> rows) noexcept;
  // reclaim() frees a batch this many rows at a time (an array on its stack).
  static constexpr std::size_t kFreeAtOnce = 256;
  // The oldest row of `q` still in it (rows that left are relinked on the way).
  Row* oldest(Fifo& q) noexcept;
  void put_back(Row* row, Place place) noexcept;
  // Evicts until one more row (new_row) and `need` more bytes fit: true, or false (kSkip with
  // nothing expired, or nothing left to evict).
  bool make_room(std::size_t need, bool new_row, std::int64_t now) noexcept;
  // The next row the policy lets go (still linked and queued), or nullptr if none is queued.
  Row* victim(std::int64_t now) noexcept;
  // Unlinks, dequeues, counts, tells and retires a linked row.
  void evict(Row* row, RemovalCause cause) noexcept;
  // Counts a removal and tells the listener (after the unlink, before the retire).
  void removed(const Row* row, std::string_view version, RemovalCause cause) noexcept;
  // apply_hashed's and forget_hashed's walk: every row of `hash` that drop(row) accepts goes (told
  // as kMessage with `told`); counts coh_applied or coh_stale; true when a row went.
  template <class Drop>
  bool drop_hashed(std::uint64_t hash, std::string_view told, Drop drop) noexcept;
  // `charged`: the row's charge() (the queue's bytes).
  void push(Fifo& q, Queue which, Row* row, std::size_t charged) noexcept;
  void drop(Fifo& q, Row* row, std::size_t charged) noexcept;
  void heap_push(Row* row, std::uint64_t stamp);
  void heap_remove(std::size_t slot) noexcept;
  void heap_place(std::size_t slot, HeapEntry e) noexcept;
  void heap_sift_down(std::size_t slot) noexcept;
  void heap_sift_up(std::size_t slot) noexcept;

  // Readers' read-mostly line: set in the constructor; only published_now_ is written after.
  // The index: huge_page_alloc'd (row_arena.h), freed with huge_page_free.
  struct IndexFree {
    void operator()(std::atomic<Row*>* p) const noexcept { huge_page_free(p); }
  };
  alignas(base::kCacheLine) std::unique_ptr<std::atomic<Row*>[], IndexFree> buckets_;
  std::size_t mask_;
  MonotonicClock clock_;
  std::unique_ptr<ReaderShard[]> shards_;
  ReadClock read_clock_;
  Eviction eviction_;
  std::uint8_t mark_limit_;  // a hit marks its row while row.mark < this (touch())
  bool relink_late_;         // leave()
  // kNone's published time, never moved: no row has expired by it.
  static constexpr std::int64_t kNoTime = std::numeric_limits<std::int64_t>::min();
  // The readers' time under kPublished: written by tick() only when it moved (at most once per
  // tick of the clock), so this line stays in the readers' caches between ticks. relaxed: a
  // time, guarding no data; it only ever grows, and is never ahead of the clock.
  std::atomic<std::int64_t> published_now_;
  // kLru: the access counter every hit and insert takes a ticket from (fetch_add, relaxed: the
  // tickets' own total order is the order kept; they guard no data). Its own line: readers
  // write it.
  alignas(base::kCacheLine) mutable std::atomic<std::uint64_t> lru_clock_{0};

  // Writer state.
  alignas(base::kCacheLine) std::atomic<std::size_t> size_{0};
  std::size_t max_size_;
  ValueLayout layout_;
  RemovalListener on_removal_;
  std::size_t max_bytes_;  // 0: none
  std::size_t bytes_ = 0;  // the linked rows' charge()
  std::string decode_error_;
  std::int64_t ttl_ms_;
  std::int64_t jitter_span_;
  std::uint64_t rng_;
  std::int64_t earliest_expiry_;  // lower bound of every row's expires_at (skips futile scans)
  std::size_t value_bytes_ = 0;   // value bytes of linked and retired-not-freed rows
  RowArena arena_;
  RetireChain untagged_;                          // retired since the last reclaim(), untagged
  RetireChain batches_[kRetireBatches];           // tagged, oldest first from batch_head_
  std::size_t batch_head_ = 0, batch_count_ = 0;  // a ring over batches_
  std::size_t untagged_rows_ = 0, retired_rows_ = 0, retired_bytes_ = 0;
  std::int64_t last_scan_ms_ = std::numeric_limits<std::int64_t>::min();  // reclaim_due's pace
  bool reclaim_held_ = false;                                             // hold_reclaim()
  std::uint64_t index_walks_ = 0;
  TombstoneTable tombstones_;
  Fifo small_, main_;            // kS3Fifo: both; kClock: main_
  std::vector<HeapEntry> heap_;  // kLru: a min-heap of stamps
  GhostFilter ghost_;            // kS3Fifo
  WriterCounters counters_;
  // Bumped (relaxed fetch_add) by reader threads refused a slot: its own line, so that rare
  // path never writes the readers' or the writer's lines.
  alignas(base::kCacheLine) mutable std::atomic<std::uint64_t> slot_refusals_{0};
  mutable std::atomic<std::thread::id> writer_{};  // debug builds' one-writer check only
};

}  // namespace echo::table
