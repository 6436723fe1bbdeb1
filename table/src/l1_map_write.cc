// SPDX-License-Identifier: MIT
// The L1 map's writer (l1_map.cc says how the map works): rows made and linked, fills and
// puts, coherence applies one by one and in batches, carried updates, erase, and a removed
// row's retire. The writer thread only. The apply path's helpers live in this one file so that
// it inlines them (perf/ops.cc's apply_drop, BM_L1Map_ApplyDrops).
#include <echo/table/l1_map.h>

#include <echo/base/counter.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include "l1_map_names.h"

namespace echo::table {

using detail::same_name;

namespace {

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
}  // namespace

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
    // Refused, and a row older than `version` goes too: L2 holds this version or a newer one, so
    // that row is stale whatever refused the newer one. (The name's own tombstone already dropped
    // every row older than it; the floor, which refuses for every name at once, did not.)
    drop_older(key, h, v);
    return InsertVerdict::kRefusedTombstone;
  }
  const std::size_t need = row_charge(key.size(), value.size());
  const bool fits = max_bytes_ == 0 || need <= max_bytes_;
  if (eviction_ == Eviction::kLru && heap_.size() == heap_.capacity()) {
    heap_.reserve(2 * heap_.capacity() + 16);  // admit() and put_back() then never allocate
  }
  if (std::atomic<Row*>* link = find_link(key, h)) {
    Row* old = link->load(std::memory_order_relaxed);
    if (newer_id(old->version(), v)) {
      // Newer wins for puts as for fills: a put that reaches the writer after a newer one (an
      // async publish's row posted by the io thread behind a later put applied in place) must
      // not replace it.
      base::solo_add(is_fill ? counters_.fill_refused : counters_.put_refused);
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
  // A message newer than this one was seen: its drop or value stands. The floor (one version for
  // every name, fill_guard.h) refuses values newer than a row too: that row goes instead of
  // staying, since this message says L2 holds a newer version than it.
  if (tombstones_.refuses(h, v, now)) {
    return drop_older(name, h, v) ? UpdateVerdict::kDropped : UpdateVerdict::kStale;
  }
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

bool L1Map::drop_older(std::string_view name, std::uint64_t h, const IdBytes& v) noexcept {
  if (std::atomic<Row*>* link = find_link(name, h)) {
    Row* row = link->load(std::memory_order_relaxed);
    if (newer_id(v, row->version())) {
      leave(row);
      unlink(link, row);
      removed(row, view(v), RemovalCause::kMessage);
      retire(row);
      return true;
    }
  }
  return false;
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

bool L1Map::erase(std::string_view name, const BrandedId& version) noexcept {
  const bool held = erase(name);
  if (name.empty() || name.size() > kMaxNameSize) return held;
  tombstones_.remember(hash_key(name), id_bytes(version), clock_());
  publish_guard();
  return held;
}

}  // namespace echo::table
