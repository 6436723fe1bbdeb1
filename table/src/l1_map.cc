// SPDX-License-Identifier: MIT
// The L1 map: a fixed-size chained hash index of immutable rows. The writer publishes a row with
// one release store of a pointer and never changes it afterwards; replacing or deleting a row
// unlinks it and hands it to epoch-based reclamation (epoch.h), which frees it once no reader
// section that could have seen it is still open. Which row goes when the map is full (the
// eviction queues, a hit's mark) is l1_eviction.cc's. The map's files: this one (its knobs'
// checks, the index, stats), l1_map_read.cc (readers), l1_map_write.cc (the writer: fills, puts,
// coherence applies, retire), l1_map_reclaim.cc (freeing retired rows, clear, expiry sweeps).
//
// Why this technique (bench/l1_map_bench.cc; 2-vCPU VM shared with other builds, so figures
// are same-run ratios, p50 per get, 100k rows of 64 bytes, all hits):
// - Immutable rows behind one pointer make a torn row impossible by construction: version,
//   value and expiry live in one allocation, so a reader sees one whole row or the next. A
//   per-bucket seqlock needs the same reclamation for values that live outside the bucket,
//   copies before it can validate (again on every retry) and cannot hand out a zero-copy view;
//   left-right doubles memory and makes every write wait for readers to drain.
// - A hit costs one load of the global epoch (read-mostly line), one seq_cst exchange on the
//   reader's own slot line, the bucket, the row, and a release store on exit. BM_L1Map_GetHitAt
//   vs BM_FlatHashMap_GetHit (unsynchronised absl, read-only), load ~6: writer idle 98 vs 80 ns
//   (1 reader), 88 vs 97 ns (2); writer churning 125 vs 80 ns (1.56x) and 99 vs 97 ns (1.02x).
//   At load ~11 with the writer at 1.3M drops/s: 317 vs 295 ns (1.07x). The std::shared_mutex
//   baseline under the same churn: p50 377 ns, p99 17-190 us (its readers write the lock line
//   and wait behind the writer); ours stays at p99 < 1.1 us there.
// - Rows come from a 2 MiB huge-page arena (row_arena.h): with malloc'd rows the same hit was
//   246 vs 93 ns, a TLB walk per hit.
// - The clock is the map's (L1Config.clock): steady_clock costs ~110 ns on this VM, more than
//   the rest of a hit (BM_L1Map_GetHit). Even the coarse vDSO clock was ~10 ns of a ~25 ns
//   in-cache typed hit and ~20 ns once the rows outgrew the L2 (50k rows: 62-66 ns a hit with
//   it, 46-49 ns with no clock read; why it grows with the table was not pinned down);
//   ReadClock::kPublished (the engine's default) reads the writer's last tick instead: one load
//   from the readers' line. The typed hit (bench l1_typed_hit_vs_flat_map) went from 1.5-2.0x
//   the flat map to 1.15-1.4x with it.
// - A hit reads the row's header, name and value, which are adjacent; the hash, the retire link
//   and the version sit in the writer's part before the header (Row), so a 32-byte struct under
//   a short name is the row's first 64 bytes, not bytes 8..96 as when the header held them.
//   (They sat in a tail after the value until a drop's two dependent misses, the header to
//   find the tail, then the tail, kept 1M-row drops at ~6M/s: BM_L1Map_ApplyDrops.) Tried and
//   not taken: rows rounded to 64-byte lines (a 96-byte row in 128, one line per hit) measured
//   no better than 16-byte packing; a branch-free pick between a chain's first two rows
//   measured worse than the walk.
// - Buckets are fixed at construction (a power of two >= 2 * max_size), so the index is never
//   resized under readers and never reclaimed; the load factor stays <= 0.5 (up to 1 past
//   max_size 2^25). At load ~0.76 a typed hit mispredicted its chain walk 0.36 times per hit
//   (callgrind --branch-sim, perf/ops.cc's typed_hit), against 0.22 for the flat map; at <= 0.5,
//   0.17. That is why max_size is capped (2^26, l1_config.h): the whole index is allocated
//   up front.
// - Retired rows wait for reclamation on a list threaded through the rows themselves
//   (Row::Links::newer), cut into tagged batches: retiring never allocates, so a coherence apply
//   (the writer's noexcept ring drain) cannot fail on the retire list, however long a stuck
//   reader holds reclamation back. L1Stats::retired_bytes and retired_age_ms show that backlog.
#include <echo/table/l1_map.h>

#include <echo/base/counter.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

namespace echo::table {

static_assert(sizeof(std::atomic<void*>) == sizeof(void*),
              "a bucket is one pointer: the index costs 8 bytes per bucket");

namespace {

constexpr std::int64_t kMaxTtlMs = std::int64_t{1} << 40;
constexpr std::size_t kMaxSize = std::size_t{1} << 26;        // why: L1Config::max_size
constexpr std::size_t kMaxObjectSize = std::size_t{1} << 20;  // ValueLayout::size
constexpr std::size_t kMinBytes = 4096, kMaxBytes = std::size_t{1} << 44;  // L1Config::max_bytes

// How far a hit's mark climbs (L1Map::mark_hit): S3-FIFO's 2-bit count, CLOCK's bit; kLru's
// mark stays 0 below its limit 1, so every hit reaches touch() and takes a ticket.
std::uint8_t mark_limit(Eviction e) noexcept {
  switch (e) {
    case Eviction::kS3Fifo:
      return 3;
    case Eviction::kLru:
    case Eviction::kClock:
      return 1;
    case Eviction::kSkip:
      return 0;
  }
  return 0;
}

const L1Config& validated(const L1Config& c) {
  if (c.ttl_ms < 1 || c.ttl_ms > kMaxTtlMs) {
    throw std::invalid_argument("L1Config.ttl_ms must lie in [1, 2^40] ms (got " +
                                std::to_string(c.ttl_ms) + ")");
  }
  if (!(c.jitter >= 0.0 && c.jitter <= 0.5)) {  // also refuses NaN
    throw std::invalid_argument("L1Config.jitter must lie in [0.0, 0.5] (got " +
                                std::to_string(c.jitter) + ")");
  }
  if (c.max_size < 1 || c.max_size > kMaxSize) {
    throw std::invalid_argument("L1Config.max_size must lie in [1, 2^26] (got " +
                                std::to_string(c.max_size) + ")");
  }
  if (c.max_bytes != 0 && (c.max_bytes < kMinBytes || c.max_bytes > kMaxBytes)) {
    throw std::invalid_argument(
        "L1Config.max_bytes must be 0 (no bound) or lie in [4096, 2^44] (got " +
        std::to_string(c.max_bytes) + ")");
  }
  if (c.eviction > Eviction::kSkip) {
    throw std::invalid_argument("L1Config.eviction must be kS3Fifo, kLru, kClock or kSkip (got " +
                                std::to_string(static_cast<int>(c.eviction)) + ")");
  }
  if (c.clock == nullptr) throw std::invalid_argument("L1Config.clock must not be null");
  if (c.read_clock > ReadClock::kNone) {
    throw std::invalid_argument("L1Config.read_clock must be kCall, kPublished or kNone (got " +
                                std::to_string(static_cast<int>(c.read_clock)) + ")");
  }
  const ValueLayout& l = c.layout;
  if (!l.bytes()) {
    if (l.size > kMaxObjectSize) {
      throw std::invalid_argument("L1Config.layout.size must lie in [0, 2^20] bytes (got " +
                                  std::to_string(l.size) + ")");
    }
    if (l.align == 0 || !std::has_single_bit(l.align) || l.align > RowArena::kGranule) {
      throw std::invalid_argument("L1Config.layout.align must be a power of two in [1, 16] (got " +
                                  std::to_string(l.align) + ")");
    }
    if (l.decode == nullptr) {
      throw std::invalid_argument("L1Config.layout.decode must not be null for an object layout");
    }
  }
  return c;
}

// The index: a power of two >= 2 * max_size buckets (a full map's load factor <= 0.5, so a hit
// finds its row first in its chain ~3 times in 4 and a mispredicted walk is rare), at most 2^26
// (512 MiB; past max_size 2^25 the load factor climbs towards 1). At least 16.
std::size_t index_buckets(std::size_t max_size) {
  return std::min(kMaxSize, std::bit_ceil(std::max<std::size_t>(8, max_size)) * 2);
}

std::size_t tombstone_slots(const L1Config& c) {
  if (c.tombstone_capacity != 0) return c.tombstone_capacity;
  return std::max<std::size_t>(1024, 4 * c.max_size);
}

}  // namespace

L1Map::L1Map(const L1Config& config)
    : buckets_(static_cast<std::atomic<Row*>*>(
          huge_page_alloc(index_buckets(validated(config).max_size) * sizeof(std::atomic<Row*>)))),
      mask_(index_buckets(config.max_size) - 1),
      clock_(config.clock),
      shards_(new ReaderShard[kMaxReaderThreads]),
      read_clock_(config.read_clock),
      eviction_(config.eviction),
      mark_limit_(mark_limit(config.eviction)),
      relink_late_((config.eviction == Eviction::kS3Fifo || config.eviction == Eviction::kClock) &&
                   config.max_size > kRelinkAtOnceRows),
      published_now_(config.read_clock == ReadClock::kPublished ? config.clock() : kNoTime),
      max_size_(config.max_size),
      layout_(config.layout),
      on_removal_(config.on_removal),
      max_bytes_(config.max_bytes),
      ttl_ms_(config.ttl_ms),
      jitter_span_(static_cast<std::int64_t>(static_cast<double>(config.ttl_ms) * config.jitter)),
      rng_(config.seed),
      earliest_expiry_(std::numeric_limits<std::int64_t>::max()),
      tombstones_(tombstone_slots(config), config.ttl_ms + jitter_span_),
      ghost_(config.eviction == Eviction::kS3Fifo ? config.max_size : 0) {
  // The index's atomics begin their lives here (trivially: nullptr is all zero bits).
  for (std::size_t i = 0; i <= mask_; ++i) new (&buckets_[i]) std::atomic<Row*>(nullptr);
}

L1Map::~L1Map() {
  const auto free_chain = [this](Row* r) {
    while (r != nullptr) {
      Row* next = r->meta().retired_next;
      free_row(r);
      r = next;
    }
  };
  free_chain(untagged_.head);
  for (std::size_t k = 0; k < batch_count_; ++k) {
    free_chain(batches_[(batch_head_ + k) % kRetireBatches].head);
  }
  for (std::size_t i = 0; i <= mask_; ++i) {
    Row* r = buckets_[i].load(std::memory_order_relaxed);
    while (r != nullptr) {
      Row* next = r->next.load(std::memory_order_relaxed);
      free_row(r);
      r = next;
    }
  }
}

std::optional<IdBytes> L1Map::tombstone(std::string_view name) const {
  check_writer("tombstone");
  const IdBytes* t = tombstones_.find(hash_key(name));
  if (t == nullptr) return std::nullopt;
  return *t;
}

L1Stats L1Map::stats() const noexcept {
  L1Stats s{};
  const std::uint32_t n = epoch::reader_high_water();
  for (std::uint32_t i = 0; i < n; ++i) {
    s.hits += shards_[i].hits.load(std::memory_order_relaxed);
    s.misses += shards_[i].misses.load(std::memory_order_relaxed);
  }
  const WriterCounters& c = counters_;
  s.coh_applied = c.coh_applied.load(std::memory_order_relaxed);
  s.coh_stale = c.coh_stale.load(std::memory_order_relaxed);
  s.swept = c.swept.load(std::memory_order_relaxed);
  s.sweeps = c.sweeps.load(std::memory_order_relaxed);
  s.full_skips = c.full_skips.load(std::memory_order_relaxed);
  s.fill_refused = c.fill_refused.load(std::memory_order_relaxed);
  s.put_refused = c.put_refused.load(std::memory_order_relaxed);
  s.retired_pending = c.retired_pending.load(std::memory_order_relaxed);
  s.reclaim_scans = c.reclaim_scans.load(std::memory_order_relaxed);
  s.tombstones = c.tombstones.load(std::memory_order_relaxed);
  s.tombstone_collapses = c.tombstone_collapses.load(std::memory_order_relaxed);
  s.retired_bytes = c.retired_bytes.load(std::memory_order_relaxed);
  if (s.retired_pending != 0) {
    // A racy estimate like every field here: the batch may be freed as we read.
    const auto since = static_cast<std::int64_t>(c.retired_since.load(std::memory_order_relaxed));
    s.retired_age_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, clock_() - since));
  }
  s.reader_slot_refusals = slot_refusals_.load(std::memory_order_relaxed);
  s.decode_errors = c.decode_errors.load(std::memory_order_relaxed);
  s.evicted_size = c.evicted_size.load(std::memory_order_relaxed);
  s.evicted_bytes = c.evicted_bytes.load(std::memory_order_relaxed);
  s.expired = c.expired.load(std::memory_order_relaxed);
  s.invalidated = c.invalidated.load(std::memory_order_relaxed);
  s.replaced = c.replaced.load(std::memory_order_relaxed);
  s.bytes = c.bytes.load(std::memory_order_relaxed);
  s.size = size();
  return s;
}

std::size_t L1Map::memory_bytes() const noexcept {
  return (mask_ + 1) * sizeof(std::atomic<Row*>) + arena_.reserved_bytes() +
         tombstones_.memory_bytes() + kMaxReaderThreads * sizeof(ReaderShard) +
         ghost_.memory_bytes() + heap_.capacity() * sizeof(HeapEntry);
}
}  // namespace echo::table
