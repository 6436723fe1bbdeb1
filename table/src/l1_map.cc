// SPDX-License-Identifier: MIT
// The L1 map: a fixed-size chained hash index of immutable rows. The writer publishes a row with
// one release store of a pointer and never changes it afterwards; replacing or deleting a row
// unlinks it and hands it to epoch-based reclamation (epoch.h), which frees it once no reader
// section that could have seen it is still open. Which row goes when the map is full (the
// eviction queues, a hit's mark) is l1_eviction.cc's.
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
//   0.17. That is why max_size is capped (2^26, l1_map.h): the whole index is allocated up front.
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

namespace {
// Name bytes equal (sizes already equal). A branded id's 14 bytes compare inline (two 8-byte
// loads each side: perf/ops.cc's l1_hit); longer names through memcmp.
// Up to 16 bytes (the usual text key) compare as two overlapping loads a side, no call.
inline bool same_name(const char* a, const char* b, std::size_t n) noexcept {
  if (n == kIdSize) return std::memcmp(a, b, kIdSize) == 0;
  if (n >= 8 && n <= 16) {
    return ((load64(a) ^ load64(b)) | (load64(a + n - 8) ^ load64(b + n - 8))) == 0;
  }
  if (n >= 4 && n < 8) {
    return ((load32(a) ^ load32(b)) | (load32(a + n - 4) ^ load32(b + n - 4))) == 0;
  }
  return std::memcmp(a, b, n) == 0;
}
}  // namespace

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

std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__extension__ typedef unsigned __int128
    u128;  // GCC/Clang builtin; -Wpedantic knows it as an extension

// Uniform integer in [0, range) without modulo bias (Lemire's multiply-and-reject).
std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t range) noexcept {
  u128 m = static_cast<u128>(splitmix64(state)) * range;
  auto low = static_cast<std::uint64_t>(m);
  if (low < range) {
    const std::uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<u128>(splitmix64(state)) * range;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
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

// ---------------------------------------------------------------------------------------------
// Readers

const L1Map::Row* L1Map::lookup(std::string_view name, std::uint64_t hash) const noexcept {
  // seq_cst loads (a plain load on x86, LDAR on ARMv8: the price of acquire) so that each one
  // follows the writer's seq_cst fence in the single total order whenever the writer's scan missed
  // our announcement (epoch.h, enter()). Pairs with the writer's release stores in upsert/unlink:
  // a row reached through a pointer is fully built. (In the asymmetric handshake, epoch.h, the
  // writer's membarrier stands in for that fence and these loads need only be acquire; seq_cst
  // costs nothing more on x86.)
  const Row* r = buckets_[hash & mask_].load(std::memory_order_seq_cst);
  if (name.size() != kIdSize) [[unlikely]]
    return lookup_text(r, name);
  // A branded id: the 14-byte compare inlines (two 8-byte loads a side) and the loop calls
  // nothing, so this path keeps no frame (perf/ops.cc's l1_hit).
  for (; r != nullptr; r = r->next.load(std::memory_order_seq_cst)) {
    if (r->name_size == kIdSize && std::memcmp(r->name(), name.data(), kIdSize) == 0) return r;
  }
  return nullptr;
}

[[gnu::always_inline]] inline const L1Map::Row* L1Map::walk(const Row* r,
                                                            std::string_view name) noexcept {
  for (; r != nullptr; r = r->next.load(std::memory_order_seq_cst)) {  // as lookup()
    if (r->name_size == name.size() && same_name(r->name(), name.data(), name.size())) return r;
  }
  return nullptr;
}

const L1Map::Row* L1Map::lookup_text(const Row* r, std::string_view name) noexcept {
  return walk(r, name);
}

const L1Map::Row* L1Map::live_row(std::string_view name, std::int64_t now) const noexcept {
  if (name.empty() || name.size() > kMaxNameSize) return nullptr;
  const Row* r = lookup(name, hash_key(name));
  return (r != nullptr && !expired(r, now)) ? r : nullptr;
}

[[gnu::always_inline]] inline void L1Map::count(bool hit) const noexcept {
  ReaderShard& s = shards_[epoch::reader_index()];
  std::atomic<std::uint64_t>& c = hit ? s.hits : s.misses;
  base::solo_add(c);
}

bool L1Map::get(std::string_view name, std::string& value, IdBytes* version) const {
  const std::int64_t now = read_now();
  ReadGuard guard;
  if (!guard.protecting()) [[unlikely]] {
    base::shared_add(slot_refusals_);  // a counter: orders nothing
    return false;
  }
  const Row* r = live_row(name, now);
  count(r != nullptr);
  if (r == nullptr) return false;
  mark_hit(r);
  value.assign(r->value(), r->value_size);
  if (version != nullptr) *version = r->version();
  return true;
}

ReadResult L1Map::read_at(std::string_view name, std::span<char> buf,
                          std::int64_t now_ms) const noexcept {
  ReadGuard guard;
  if (!guard.protecting()) [[unlikely]] {
    base::shared_add(slot_refusals_);  // a counter: orders nothing
    return {ReadStatus::kMiss, 0, {}};
  }
  const Row* r = live_row(name, now_ms);
  count(r != nullptr);
  if (r == nullptr) return {ReadStatus::kMiss, 0, {}};
  mark_hit(r);
  if (r->value_size > buf.size()) return {ReadStatus::kTooSmall, r->value_size, r->version()};
  std::memcpy(buf.data(), r->value(), r->value_size);
  return {ReadStatus::kHit, r->value_size, r->version()};
}

const L1Map::Row* L1Map::hit(std::string_view name) const noexcept {
  // live_row() with the walk of every name length inline (lookup() sends a text key out of
  // line) and the count: one call for a typed read, where those calls cost it 30 instructions
  // (perf/ops.cc's typed_hit).
  const std::int64_t now = read_now();
  const Row* r = nullptr;
  if (name.size() - 1 < kMaxNameSize) [[likely]] {  // 1 .. kMaxNameSize (0 wraps)
    const std::uint64_t h = hash_key(name);
    r = walk(buckets_[h & mask_].load(std::memory_order_seq_cst), name);  // as lookup()
    if (r != nullptr) {
      if (expired(r, now)) {
        r = nullptr;
      } else {
        mark_hit(r);
      }
    }
  }
  count(r != nullptr);
  return r;
}

bool L1Map::refuse_slot() const noexcept {
  base::shared_add(slot_refusals_);  // a counter: orders nothing
  return false;
}

std::size_t L1Map::walk_rows(void (*each)(void* ctx, const RowView& row), void* ctx) const {
  std::size_t seen = 0;
  for (std::size_t first = 0; first <= mask_; first += kWalkChunk) {
    const ReadGuard guard;
    if (!guard.protecting()) {
      (void)refuse_slot();
      return seen;
    }
    const std::int64_t now = read_now();
    const std::size_t end = std::min(first + kWalkChunk, mask_ + 1);
    for (std::size_t b = first; b < end; ++b) {
      // As lookup(): an unlinked row keeps its `next` until reclaimed, so the chain goes on.
      for (const Row* r = buckets_[b].load(std::memory_order_seq_cst); r != nullptr;
           r = r->next.load(std::memory_order_seq_cst)) {
        if (expired(r, now)) continue;
        each(ctx, RowView{std::string_view(r->name(), r->name_size),
                          std::string_view(r->value(), r->value_size), view(r->version()),
                          r->expires_at});
        ++seen;
      }
    }
  }
  return seen;
}

std::optional<RowView> L1Map::find(const ReadGuard& guard, std::string_view name) const noexcept {
  // The guard is the proof that the views may be handed out: this thread's, and open.
  guard.check_thread("used by L1Map::find");
  if (!guard.protecting()) [[unlikely]] {
    refuse_slot();
    return std::nullopt;
  }
  const Row* r = hit(name);
  if (r == nullptr) return std::nullopt;
  return RowView{r->name_view(), {r->value(), r->value_size}, view(r->version()), r->expires_at};
}

// ---------------------------------------------------------------------------------------------
// Writer

void L1Map::check_writer([[maybe_unused]] const char* op) const noexcept {
#ifndef NDEBUG
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id expected{};
  // relaxed: an identity check that orders nothing; the first writer call binds the thread.
  if (writer_.compare_exchange_strong(expected, me, std::memory_order_relaxed) || expected == me) {
    return;
  }
  std::fprintf(stderr,
               "echo::table::L1Map::%s called from a second writer thread: an L1 map has exactly "
               "one writer (the table's writer thread)\n",
               op);
  std::abort();
#endif
}

std::int64_t L1Map::draw_expiry(std::int64_t now) noexcept {
  if (jitter_span_ == 0) return now + ttl_ms_;
  const auto range = static_cast<std::uint64_t>(2 * jitter_span_ + 1);
  const auto r = static_cast<std::int64_t>(uniform_below(rng_, range)) - jitter_span_;
  return now + ttl_ms_ + r;
}

std::atomic<L1Map::Row*>* L1Map::find_link(std::string_view name,
                                           std::uint64_t hash) const noexcept {
  // relaxed: only this (writer) thread stores these pointers.
  std::atomic<Row*>* link = &buckets_[hash & mask_];
  if (name.size() != kIdSize) [[unlikely]]
    return find_link_text(link, name);
  // A branded id: the 14-byte compare inlines, as in lookup() (perf/ops.cc's apply_drop).
  for (Row* r = link->load(std::memory_order_relaxed); r != nullptr;
       r = link->load(std::memory_order_relaxed)) {
    if (r->name_size == kIdSize && std::memcmp(r->name(), name.data(), kIdSize) == 0) return link;
    link = &r->next;
  }
  return nullptr;
}

std::atomic<L1Map::Row*>* L1Map::find_link_text(std::atomic<Row*>* link,
                                                std::string_view name) noexcept {
  for (Row* r = link->load(std::memory_order_relaxed); r != nullptr;  // as find_link()
       r = link->load(std::memory_order_relaxed)) {
    if (r->name_size == name.size() && same_name(r->name(), name.data(), name.size())) {
      return link;
    }
    link = &r->next;
  }
  return nullptr;
}

std::size_t L1Map::value_offset(std::size_t name_size) const noexcept {
  const std::size_t align = layout_.bytes() ? 1 : layout_.align;
  return (sizeof(Row) + name_size + align - 1) & ~(align - 1);
}

std::size_t L1Map::row_charge(std::size_t name_size, std::size_t value_size) const noexcept {
  const std::size_t size = layout_.bytes() ? value_size : layout_.size;
  return charge(Row::kPrefix + value_offset(name_size) + size);
}

L1Map::Row* L1Map::make_row(std::string_view name, std::uint64_t hash, std::string_view value,
                            const IdBytes& version, std::int64_t expires_at) {
  if (value.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("L1Map: a value must be smaller than 4 GiB");
  }
  const bool object = !layout_.bytes();
  const std::size_t size = object ? layout_.size : value.size();
  const std::size_t offset = value_offset(name.size());
  const std::size_t bytes = Row::kPrefix + offset + size;
  char* p = static_cast<char*>(arena_.allocate(bytes));
  // Value-initialised: the links start null (no queue yet).
  Row::Prefix* prefix = std::construct_at(reinterpret_cast<Row::Prefix*>(p));
  Row::Meta* tail = &prefix->meta;
  Row* r = new (p + Row::kPrefix) Row;
  r->next.store(nullptr, std::memory_order_relaxed);  // published later by a release store
  r->expires_at = expires_at;
  r->value_size = static_cast<std::uint32_t>(size);
  r->value_offset = static_cast<std::uint16_t>(offset);
  r->name_size = static_cast<std::uint8_t>(name.size());
  std::memcpy(r->name(), name.data(), name.size());
  r->mark.store(0, std::memory_order_relaxed);  // published later by a release store
  tail->hash = hash;
  tail->stamp.store(0, std::memory_order_relaxed);
  tail->version = version;
  tail->queue = kNoQueue;
  if (object) {
    const auto discard = [&]() noexcept {
      r->~Row();
      std::destroy_at(prefix);
      arena_.deallocate(p, bytes);
    };
    bool built;
    try {
      built = layout_.decode(value, r->value(), decode_error_);
    } catch (...) {
      discard();  // a decode that throws has built nothing (ValueLayout::decode)
      throw;
    }
    if (!built) {
      discard();
      return nullptr;
    }
  } else if (!value.empty()) {
    std::memcpy(r->value(), value.data(), value.size());
  }
  value_bytes_ += size;
  return r;
}

void L1Map::free_row(Row* row) noexcept {
  value_bytes_ -= row->value_size;
  const std::size_t n = row_bytes(row);
  Row::Prefix* prefix = &row->prefix();
  if (layout_.destroy != nullptr) layout_.destroy(row->value());
  row->~Row();
  std::destroy_at(prefix);
  arena_.deallocate(prefix, n);
}

void L1Map::unlink(std::atomic<Row*>* link, Row* row) noexcept {
  // release pairs with lookup()'s loads; `row` itself stays intact (and its `next` valid) for
  // readers already standing on it, until reclaim() frees it.
  link->store(row->next.load(std::memory_order_relaxed), std::memory_order_release);
  size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

void L1Map::retire(Row* row) noexcept {
  row->meta().retired_next = nullptr;
  if (untagged_.tail != nullptr) {
    untagged_.tail->meta().retired_next = row;
  } else {
    untagged_.head = row;
    untagged_.since = clock_();  // once per chain: at most once per kReclaimBatch retires
    if (batch_count_ == 0) {
      counters_.retired_since.store(static_cast<std::uint64_t>(untagged_.since),
                                    std::memory_order_relaxed);
    }
  }
  untagged_.tail = row;
  ++retired_rows_;
  retired_bytes_ += row_bytes(row);
  if (++untagged_rows_ >= kReclaimBatch && !reclaim_held_) {
    (void)reclaim_due(clock_());  // publishes
  } else {
    publish_retired();
  }
}

void L1Map::publish_retired() noexcept {
  // relaxed: counters for stats(), they order nothing.
  counters_.retired_pending.store(retired_rows_, std::memory_order_relaxed);
  counters_.retired_bytes.store(retired_bytes_, std::memory_order_relaxed);
}

std::int64_t L1Map::tick() noexcept {
  check_writer("tick");
  const std::int64_t now = clock_();
  // Only kPublished's moves (kNone's stays at kNoTime; kCall's is never read), and only
  // forwards: a store per tick of the clock, not per call, so readers keep the line.
  if (read_clock_ == ReadClock::kPublished &&
      now > published_now_.load(std::memory_order_relaxed)) {
    published_now_.store(now, std::memory_order_relaxed);  // a time: orders nothing
  }
  return now;
}

void L1Map::reclaim() noexcept {
  check_writer("reclaim");
  tag_untagged();
  if (batch_count_ == 0) return publish_retired();
  scan_and_free(clock_());
}

std::int64_t L1Map::reclaim_due(std::int64_t now_ms) noexcept {
  check_writer("reclaim_due");
  tag_untagged();
  if (batch_count_ == 0) {
    publish_retired();
    return -1;
  }
  // The scan's membarrier interrupts every CPU the process runs on (a trading process's pinned
  // threads too): paced, not per retire or per idle pass.
  if (now_ms >= last_scan_ms_ + kScanIntervalMs || retired_rows_ >= kForceScanRows) {
    scan_and_free(now_ms);
    if (batch_count_ == 0) return -1;
  } else {
    publish_retired();
  }
  return last_scan_ms_ + kScanIntervalMs;
}

void L1Map::tag_untagged() noexcept {
  if (untagged_.head != nullptr) {
    // Every row on the untagged chain was unlinked before this advance: tag them with it.
    untagged_.epoch = epoch::advance();
    if (batch_count_ == kRetireBatches) {
      // Join the newest batch under the newer tag: its rows then wait for a later epoch than
      // they needed, which only delays their free.
      RetireChain& newest = batches_[(batch_head_ + batch_count_ - 1) % kRetireBatches];
      newest.tail->meta().retired_next = untagged_.head;
      newest.tail = untagged_.tail;
      newest.epoch = untagged_.epoch;
    } else {
      batches_[(batch_head_ + batch_count_) % kRetireBatches] = untagged_;
      ++batch_count_;
    }
    untagged_ = RetireChain{};
    untagged_rows_ = 0;
  }
}

void L1Map::scan_and_free(std::int64_t now_ms) noexcept {
  last_scan_ms_ = now_ms;
  base::solo_add(counters_.reclaim_scans);
  const std::uint64_t oldest = epoch::min_active();
  // Tags never decrease from the oldest batch to the newest, so the freeable batches come first.
  while (batch_count_ != 0 && batches_[batch_head_].epoch < oldest) {
    // The chain is walked once (each step a dependent load), kFreeAtOnce rows at a time into
    // `rows`; relinking and freeing then read the array. Three walks of the chain (prefetch,
    // relink, free) cost ~25% of a 1M-row drop (BM_L1Map_ApplyDrops; perf: relink_left and
    // reclaim).
    for (Row* r = batches_[batch_head_].head; r != nullptr;) {
      Row* rows[kFreeAtOnce];
      std::size_t n = 0;
      for (; r != nullptr && n < kFreeAtOnce; r = r->meta().retired_next) rows[n++] = r;
      relink_left(std::span<Row* const>(rows, n));
      for (std::size_t k = 0; k < n; ++k) {
        --retired_rows_;
        retired_bytes_ -= row_bytes(rows[k]);
        free_row(rows[k]);
      }
    }
    batches_[batch_head_] = RetireChain{};
    batch_head_ = (batch_head_ + 1) % kRetireBatches;
    --batch_count_;
    if (batch_count_ != 0) {
      counters_.retired_since.store(static_cast<std::uint64_t>(batches_[batch_head_].since),
                                    std::memory_order_relaxed);
    }
  }
  publish_retired();
}

InsertVerdict L1Map::upsert(std::string_view key, std::string_view value, const BrandedId& version,
                            bool is_fill) {
  if (key.empty() || key.size() > kMaxNameSize) {
    throw std::length_error("L1Map: a name must be 1..200 bytes (got " +
                            std::to_string(key.size()) + ")");
  }
  const std::uint64_t h = hash_key(key);
  const IdBytes v = id_bytes(version);
  const std::int64_t now = clock_();
  if (tombstones_.refuses(h, v, now)) {
    base::solo_add(is_fill ? counters_.fill_refused : counters_.put_refused);
    return InsertVerdict::kRefusedTombstone;
  }
  const std::size_t need = row_charge(key.size(), value.size());
  const bool fits = max_bytes_ == 0 || need <= max_bytes_;
  if (eviction_ == Eviction::kLru && heap_.size() == heap_.capacity()) {
    heap_.reserve(2 * heap_.capacity() + 16);  // admit() and put_back() then never allocate
  }
  if (std::atomic<Row*>* link = find_link(key, h)) {
    Row* old = link->load(std::memory_order_relaxed);
    if (is_fill && newer(view(old->version()), view(v))) {
      base::solo_add(counters_.fill_refused);
      return InsertVerdict::kRefusedOlder;
    }
    // The old row leaves its queue first, so that making room cannot pick it; its successor
    // takes its place at the queue's newer end, with its mark (an update is a use).
    const Place place = take_out(old);
    const std::size_t rows = size();
    if (!fits || !make_room(need, /*new_row=*/false, now)) {
      // Not cacheable at this version; the old row is older than it, so it goes too.
      if (size() != rows) link = find_link(key, h);
      unlink(link, old);
      removed(old, {}, RemovalCause::kReplaced);
      retire(old);
      base::solo_add(counters_.full_skips);
      return InsertVerdict::kFullSkip;
    }
    Row* row;
    try {
      row = make_row(key, h, value, v, draw_expiry(now));
    } catch (...) {
      // The old row is still linked: out of its queue it would never be evicted, and its charge
      // would be taken off again when it leaves. Rows make_room() evicted stay evicted (they
      // made room; the bounds still hold with the old row back).
      put_back(old, place);
      throw;
    }
    if (row == nullptr) {
      put_back(old, place);
      return refused_decode();
    }
    if (size() != rows) link = find_link(key, h);  // an eviction may have unlinked its neighbour
    row->next.store(old->next.load(std::memory_order_relaxed), std::memory_order_relaxed);
    // release pairs with lookup()'s loads: the row's bytes are visible before its pointer.
    link->store(row, std::memory_order_release);
    earliest_expiry_ = std::min(earliest_expiry_, row->expires_at);
    put_back(row, place);
    removed(old, {}, RemovalCause::kReplaced);
    retire(old);
    return InsertVerdict::kReplaced;
  }
  if (!fits || !make_room(need, /*new_row=*/true, now)) {
    base::solo_add(counters_.full_skips);
    return InsertVerdict::kFullSkip;
  }
  Row* row = make_row(key, h, value, v, draw_expiry(now));
  if (row == nullptr) return refused_decode();
  std::atomic<Row*>& head = buckets_[h & mask_];
  row->next.store(head.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // release pairs with lookup()'s loads.
  head.store(row, std::memory_order_release);
  size_.store(size() + 1, std::memory_order_relaxed);
  earliest_expiry_ = std::min(earliest_expiry_, row->expires_at);
  admit(row);
  return InsertVerdict::kInserted;
}

InsertVerdict L1Map::refused_decode() noexcept {
  base::solo_add(counters_.decode_errors);
  return InsertVerdict::kRefusedDecode;
}

std::optional<RowView> L1Map::writer_row(std::string_view name) const noexcept {
  const Row* r = live_row(name, clock_());
  if (r == nullptr) return std::nullopt;
  return RowView{std::string_view(r->name(), r->name_size),
                 std::string_view(r->value(), r->value_size), view(r->version()), r->expires_at};
}

std::optional<IdBytes> L1Map::fill_floor(std::string_view name) const noexcept {
  const IdBytes* v = tombstones_.newest_refusing(hash_key(name), clock_());
  return v == nullptr ? std::nullopt : std::optional<IdBytes>(*v);
}

InsertVerdict L1Map::insert_fill(std::string_view name, std::string_view value,
                                 const BrandedId& version) {
  check_writer("insert_fill");
  return upsert(name, value, version, /*is_fill=*/true);
}

InsertVerdict L1Map::put(std::string_view name, std::string_view value, const BrandedId& version) {
  check_writer("put");
  return upsert(name, value, version, /*is_fill=*/false);
}

// Here, not in l1_eviction.cc, so that the coherence apply inlines them (BM_L1Map_ApplyDrops).
inline void L1Map::leave(Row* row) noexcept {
  Row::Meta& t = row->meta();
  if (!relink_late_ || (t.queue != kSmall && t.queue != kMain)) {
    take_out(row);  // LRU's heap, or no queue (skip)
    return;
  }
  const std::size_t charged = charge(row_bytes(row));
  Fifo& q = t.queue == kSmall ? small_ : main_;
  --q.rows;
  q.bytes -= charged;
  t.queue |= kLeft;
  bytes_ -= charged;
  counters_.bytes.store(bytes_, std::memory_order_relaxed);
}

void L1Map::removed(const Row* row, std::string_view version, RemovalCause cause) noexcept {
  switch (cause) {
    case RemovalCause::kMessage:
    case RemovalCause::kInvalidate:
    case RemovalCause::kFlush:
      base::solo_add(counters_.invalidated);
      break;
    case RemovalCause::kExpired:
      base::solo_add(counters_.expired);
      break;
    case RemovalCause::kSize:
      base::solo_add(counters_.evicted_size);
      break;
    case RemovalCause::kBytes:
      base::solo_add(counters_.evicted_bytes);
      break;
    case RemovalCause::kReplaced:
      base::solo_add(counters_.replaced);
      break;
  }
  // After the unlink (a listener that reads the name again must miss it), before the retire
  // (which may free the row once no reader holds it).
  if (on_removal_.fn != nullptr) on_removal_.fn(on_removal_.ctx, row->name_view(), version, cause);
}

Verdict L1Map::apply_one(std::string_view name, std::uint64_t h, const IdBytes& version,
                         std::int64_t now) noexcept {
  tombstones_.remember(h, version, now);  // the caller publishes the guard's counters
  if (std::atomic<Row*>* link = find_link(name, h)) {
    Row* row = link->load(std::memory_order_relaxed);
    if (newer_id(version, row->version())) {
      leave(row);
      unlink(link, row);
      removed(row, view(version), RemovalCause::kMessage);
      retire(row);
      base::solo_add(counters_.coh_applied);
      return Verdict::kApplied;
    }
  }
  base::solo_add(counters_.coh_stale);
  return Verdict::kStale;
}

template <class Drop>
bool L1Map::drop_hashed(std::uint64_t hash, std::string_view told, Drop drop) noexcept {
  bool applied = false;
  std::atomic<Row*>* link = &buckets_[hash & mask_];
  // relaxed: only this (writer) thread stores these pointers.
  for (Row* r = link->load(std::memory_order_relaxed); r != nullptr;
       r = link->load(std::memory_order_relaxed)) {
    if (r->meta().hash == hash && drop(r)) {
      leave(r);
      unlink(link, r);  // link now points past r
      removed(r, told, RemovalCause::kMessage);
      retire(r);
      applied = true;
    } else {
      link = &r->next;
    }
  }
  base::solo_add(applied ? counters_.coh_applied : counters_.coh_stale);
  return applied;
}

Verdict L1Map::apply_hashed(std::uint64_t hash, const BrandedId& version) noexcept {
  check_writer("apply_hashed");
  const IdBytes v = id_bytes(version);
  tombstones_.remember(hash, v, clock_());
  counters_.tombstones.store(tombstones_.size(), std::memory_order_relaxed);
  counters_.tombstone_collapses.store(tombstones_.collapses(), std::memory_order_relaxed);
  const bool applied =
      drop_hashed(hash, view(v), [&v](const Row* r) { return newer(view(v), view(r->version())); });
  return applied ? Verdict::kApplied : Verdict::kStale;
}

Verdict L1Map::forget_hashed(std::uint64_t hash) noexcept {
  check_writer("forget_hashed");
  return drop_hashed(hash, {}, [](const Row*) { return true; }) ? Verdict::kApplied
                                                                : Verdict::kStale;
}

Verdict L1Map::apply_coherence(std::string_view name, const BrandedId& version) noexcept {
  check_writer("apply_coherence");
  if (name.empty() || name.size() > kMaxNameSize) {
    base::solo_add(counters_.coh_stale);
    return Verdict::kStale;
  }
  const Verdict v = apply_one(name, hash_key(name), id_bytes(version), clock_());
  publish_guard();
  return v;
}

UpdateVerdict L1Map::apply_update(std::string_view name, const BrandedId& version,
                                  std::string_view value, bool insert_absent) noexcept {
  check_writer("apply_update");
  if (name.empty() || name.size() > kMaxNameSize) {
    base::solo_add(counters_.coh_stale);
    return UpdateVerdict::kStale;
  }
  const std::uint64_t h = hash_key(name);
  const IdBytes v = id_bytes(version);
  const std::int64_t now = clock_();
  const UpdateVerdict out = update_one(name, h, v, version, value, insert_absent, now);
  base::solo_add(out == UpdateVerdict::kStale ? counters_.coh_stale : counters_.coh_applied);
  publish_guard();
  return out;
}

UpdateVerdict L1Map::update_one(std::string_view name, std::uint64_t h, const IdBytes& v,
                                const BrandedId& version, std::string_view value,
                                bool insert_absent, std::int64_t now) noexcept {
  // A message newer than this one was seen: its drop or value stands.
  if (tombstones_.refuses(h, v, now)) return UpdateVerdict::kStale;
  tombstones_.remember(h, v, now);
  std::atomic<Row*>* link = find_link(name, h);
  if (link != nullptr ? !newer_id(v, link->load(std::memory_order_relaxed)->version())
                      : !insert_absent) {
    return UpdateVerdict::kStale;
  }
  // Newer than the row (or no row): the put's replacement, without its compare (done above) and
  // with no tombstone to refuse it (it is this version's own, and equal passes).
  InsertVerdict stored = InsertVerdict::kRefusedDecode;
  try {
    stored = upsert(name, value, version, /*is_fill=*/false);
  } catch (...) {  // no memory for the row: the older row is put back by upsert, and dropped below
  }
  switch (stored) {
    case InsertVerdict::kInserted:
      return UpdateVerdict::kInserted;
    case InsertVerdict::kReplaced:
      return UpdateVerdict::kUpdated;
    case InsertVerdict::kFullSkip:  // upsert dropped the older row itself
      return UpdateVerdict::kDropped;
    default:
      // Refused (decode, memory): the older row must not outlive a newer version's message.
      drop_older(name, h, v);
      return UpdateVerdict::kDropped;
  }
}

void L1Map::drop_older(std::string_view name, std::uint64_t h, const IdBytes& v) noexcept {
  if (std::atomic<Row*>* link = find_link(name, h)) {
    Row* row = link->load(std::memory_order_relaxed);
    if (newer_id(v, row->version())) {
      leave(row);
      unlink(link, row);
      removed(row, view(v), RemovalCause::kMessage);
      retire(row);
    }
  }
}

std::size_t L1Map::apply_batch(const CoherenceMessage* first, std::size_t count, std::size_t stride,
                               Verdict* verdicts) noexcept {
  check_writer("apply_batch");
  assert(stride >= sizeof(CoherenceMessage) && stride % alignof(CoherenceMessage) == 0 &&
         "apply_batch: the stride spans whole messages");
  // Message i, inside the caller's i-th item (the items are of one type, the message at one
  // offset in each: the pointer is to a CoherenceMessage object that lives there).
  const auto at = [first, stride](std::size_t i) noexcept -> const CoherenceMessage& {
    return *reinterpret_cast<const CoherenceMessage*>(reinterpret_cast<const char*>(first) +
                                                      i * stride);
  };
  // Each message costs up to three dependent cache misses (bucket, then the row the bucket
  // points to: its writer's part, header and name; the tombstone beside them). Two prefetch
  // stages keep several messages' misses in flight: BM_L1Map_ApplyDrops. (A drop leaves its
  // eviction queue's links to reclaim() in a large map: leave().)
  constexpr std::size_t kBucketAhead = 8;
  constexpr std::size_t kRowAhead = 4;
  const std::int64_t now = clock_();
  const std::size_t n = count;
  // Each message's hash, computed once (a branded name: hash_name is hash_key's 14-byte case):
  // message j's at hashes[j % kBucketAhead], from the moment its bucket is prefetched until
  // it is applied.
  std::uint64_t hashes[kBucketAhead];
  const auto ahead = [&](std::size_t j) noexcept {
    const std::uint64_t h = hash_name(at(j).name.view().data());
    hashes[j % kBucketAhead] = h;
    __builtin_prefetch(&buckets_[h & mask_]);
    tombstones_.prefetch(h);
  };
  for (std::size_t j = 0; j < std::min(n, kBucketAhead); ++j) ahead(j);
  std::size_t applied = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // relaxed: the writer's own pointers (only the writer stores buckets).
    if (i + kRowAhead < n) {
      const std::uint64_t h = hashes[(i + kRowAhead) % kBucketAhead];
      if (const Row* head = buckets_[h & mask_].load(std::memory_order_relaxed)) {
        // The writer's part through the name: from 48 bytes before the header to its name's
        // end (kIdSize: a branded name), in at most three lines.
        const char* at_row = reinterpret_cast<const char*>(head);
        __builtin_prefetch(at_row - Row::kPrefix);
        __builtin_prefetch(at_row);
        __builtin_prefetch(at_row + sizeof(Row) + kIdSize - 1);
      }
    }
    const CoherenceMessage& m = at(i);
    const Verdict v = apply_one(m.name.view(), hashes[i % kBucketAhead], m.version.bytes(), now);
    if (verdicts != nullptr) verdicts[i] = v;
    applied += v == Verdict::kApplied;
    if (i + kBucketAhead < n) ahead(i + kBucketAhead);  // into the slot message i just freed
  }
  publish_guard();
  return applied;
}

bool L1Map::erase(std::string_view name) noexcept {
  check_writer("erase");
  std::atomic<Row*>* link = find_link(name, hash_key(name));
  if (link == nullptr) return false;
  Row* row = link->load(std::memory_order_relaxed);
  take_out(row);
  unlink(link, row);
  // Not told: the caller knows (the engine tells kInvalidate).
  base::solo_add(counters_.invalidated);
  retire(row);
  return true;
}

void L1Map::clear() noexcept {
  check_writer("clear");
  // Nothing to drop: skip the walk of every bucket (a flush storm clears an empty map each pass).
  if (size() == 0) return;
  ++index_walks_;
  base::solo_add(counters_.invalidated, size());
  for (std::size_t i = 0; i <= mask_; ++i) {
    Row* r = buckets_[i].load(std::memory_order_relaxed);
    if (r == nullptr) continue;
    // release pairs with lookup()'s loads; the detached chain stays intact for readers on it.
    buckets_[i].store(nullptr, std::memory_order_release);
    while (r != nullptr) {
      Row* next = r->next.load(std::memory_order_relaxed);
      retire(r);
      r = next;
    }
  }
  size_.store(0, std::memory_order_relaxed);
  earliest_expiry_ = std::numeric_limits<std::int64_t>::max();
  // Every queue emptied with the index (not told: the caller knows; the engine tells kFlush),
  // and the rows that left them, still threaded through them, no longer are.
  const auto forget = [](Row* r) noexcept {
    for (; r != nullptr; r = r->meta().retired_next) r->meta().queue = kNoQueue;
  };
  forget(untagged_.head);
  for (std::size_t k = 0; k < batch_count_; ++k) {
    forget(batches_[(batch_head_ + k) % kRetireBatches].head);
  }
  small_ = Fifo{};
  main_ = Fifo{};
  heap_.clear();
  bytes_ = 0;
  counters_.bytes.store(0, std::memory_order_relaxed);
}

std::size_t L1Map::drop_expired(std::int64_t now, bool inclusive) noexcept {
  ++index_walks_;
  std::size_t n = 0;
  std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i <= mask_; ++i) {
    std::atomic<Row*>* link = &buckets_[i];
    for (Row* r = link->load(std::memory_order_relaxed); r != nullptr;
         r = link->load(std::memory_order_relaxed)) {
      const bool expired = inclusive ? r->expires_at <= now : r->expires_at < now;
      if (expired) {
        take_out(r);
        unlink(link, r);
        removed(r, {}, RemovalCause::kExpired);
        retire(r);
        ++n;
      } else {
        earliest = std::min(earliest, r->expires_at);
        link = &r->next;
      }
    }
  }
  earliest_expiry_ = earliest;
  return n;
}

std::size_t L1Map::sweep(std::int64_t now_ms) noexcept {
  check_writer("sweep");
  // earliest_expiry_ bounds every row's expires_at from below: at or before it nothing is
  // expired (the test here is expires_at < now), so skip the walk.
  const std::size_t n =
      size() == 0 || now_ms <= earliest_expiry_ ? 0 : drop_expired(now_ms, /*inclusive=*/false);
  base::solo_add(counters_.swept, n);
  base::solo_add(counters_.sweeps);
  // The swept rows wait for the writer's paced reclaim_due() (a scan per sweep would be one
  // more membarrier per sweep_ms per table).
  publish_retired();
  return n;
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
