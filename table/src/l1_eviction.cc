// SPDX-License-Identifier: MIT
// The L1 map's eviction (eviction.h): the queues a policy keeps its rows in, the victim it picks
// when an insert finds the map full, and a hit's mark. Everything here but touch() runs on the
// writer thread; the queues and the heap are the writer's alone, threaded through the rows'
// links, which no reader reads. A reader's only part is the mark (S3-FIFO, CLOCK) or the
// stamp (LRU) of a row it hits, stored relaxed: the writer reads them as hints, and a row it
// evicts is unlinked and retired like any other, so a reader standing on it still reads a whole
// row until its section ends.
//
// Why FIFOs threaded through the rows: taking a row out is O(1) and allocates nothing, as
// retiring does. A row's links sit just before its header, so the writer reaches a neighbour's
// in one miss. In a map of more than 32k rows a coherence drop (the writer's hot path) leaves
// even that for later (L1Map::leave): the row leaves its queue's counts at once but stays
// threaded through the links, marked kLeft, until reclaim() frees it with its batch; there the
// batch's neighbours are prefetched together and relinked (relink_left), before any row of it
// is freed, so no queue ever points at freed memory. BM_L1Map_ApplyDrops, S3-FIFO against skip
// at 1M rows: relinking at the drop (even with the neighbours prefetched two messages ahead)
// measured 0.71-0.82x, interleaved; late, a median of 0.96x.
#include <echo/table/l1_map.h>

#include <algorithm>
#include <bit>
#include <cassert>

namespace echo::table {

std::string_view to_string(RemovalCause c) noexcept {
  switch (c) {
    case RemovalCause::kMessage:
      return "message";
    case RemovalCause::kInvalidate:
      return "invalidate";
    case RemovalCause::kFlush:
      return "flush";
    case RemovalCause::kExpired:
      return "expired";
    case RemovalCause::kSize:
      return "size";
    case RemovalCause::kBytes:
      return "bytes";
    case RemovalCause::kReplaced:
      return "replaced";
  }
  return "?";
}

std::string_view to_string(Eviction e) noexcept {
  switch (e) {
    case Eviction::kS3Fifo:
      return "s3fifo";
    case Eviction::kLru:
      return "lru";
    case Eviction::kClock:
      return "clock";
    case Eviction::kSkip:
      return "skip";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// The ghost

namespace {
constexpr std::uint64_t kSeqMask = 0xFFFF'FFFFull;
// A slot: the name's fingerprint (the hash's high half, never 0, so an empty slot matches no
// name) above the add's sequence number.
std::uint64_t fingerprint(std::uint64_t hash) noexcept { return (hash >> 32) | 1; }
}  // namespace

std::size_t GhostFilter::slots(std::size_t capacity) noexcept {
  return capacity == 0 ? 0 : std::bit_ceil(std::max<std::size_t>(16, capacity));
}

GhostFilter::GhostFilter(std::size_t capacity) {
  const std::size_t n = slots(capacity);
  if (n == 0) return;
  slots_ = std::make_unique<std::uint64_t[]>(n);  // zeroed: every slot empty
  mask_ = n / 2 - 1;
}

void GhostFilter::add(std::uint64_t hash) noexcept {
  if (!slots_) return;
  std::uint64_t* b = &slots_[2 * (hash & mask_)];
  const std::uint64_t fp = fingerprint(hash);
  // The name's own slot if it is there, else the older of the two (an empty slot is oldest:
  // sequence 0 with fingerprint 0 never matches and loses every age comparison but a wrap's).
  std::uint64_t* at = b;
  if ((b[1] >> 32) == fp) {
    at = b + 1;
  } else if ((b[0] >> 32) != fp) {
    const auto age = [this](std::uint64_t e) noexcept {
      return e == 0 ? kSeqMask + 1 : ((seq_ - e) & kSeqMask);
    };
    if (age(b[1]) > age(b[0])) at = b + 1;
  }
  ++seq_;
  *at = (fp << 32) | seq_;
}

bool GhostFilter::take(std::uint64_t hash, std::size_t window) noexcept {
  if (!slots_) return false;
  std::uint64_t* b = &slots_[2 * (hash & mask_)];
  const std::uint64_t fp = fingerprint(hash);
  for (std::uint64_t* e = b; e != b + 2; ++e) {
    if ((*e >> 32) == fp && ((seq_ - *e) & kSeqMask) < window) {
      *e = 0;
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// A hit's mark (readers)

void L1Map::touch(const Row* r) const noexcept {
  if (eviction_ == Eviction::kLru) {
    // relaxed: the tickets' order is the order kept; the stamp guards no data. A larger stamp
    // stored by a racing hit of the same row is kept: the two hits overlapped in time.
    const std::uint64_t t = lru_clock_.fetch_add(1, std::memory_order_relaxed) + 1;
    std::atomic<std::uint64_t>& stamp = r->meta().stamp;
    if (stamp.load(std::memory_order_relaxed) < t) stamp.store(t, std::memory_order_relaxed);
    return;
  }
  // A racing hit or the writer's lowering may be lost: the mark is a hint (Row::mark).
  const std::uint8_t m = r->mark.load(std::memory_order_relaxed);
  if (m < mark_limit_) r->mark.store(static_cast<std::uint8_t>(m + 1), std::memory_order_relaxed);
}

int L1Map::mark(std::string_view name) const noexcept {
  check_writer("mark");
  std::atomic<Row*>* link = find_link(name, hash_key(name));
  if (link == nullptr) return -1;
  return link->load(std::memory_order_relaxed)->mark.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Queues (writer)

void L1Map::push(Fifo& q, Queue which, Row* row, std::size_t charged) noexcept {
  row->meta().queue = which;
  Row::Links& l = row->links();
  l.newer = nullptr;
  l.older = q.newest;
  if (q.newest != nullptr) {
    q.newest->links().newer = row;
  } else {
    q.oldest = row;
  }
  q.newest = row;
  ++q.rows;
  q.bytes += charged;
}

void L1Map::drop(Fifo& q, Row* row, std::size_t charged) noexcept {
  Row::Links& l = row->links();
  Row* older = l.older;
  Row* newer = l.newer;
  (older != nullptr ? older->links().newer : q.oldest) = newer;
  (newer != nullptr ? newer->links().older : q.newest) = older;
  l.newer = nullptr;
  l.older = nullptr;
  --q.rows;
  q.bytes -= charged;
}

void L1Map::heap_place(std::size_t slot, HeapEntry e) noexcept {
  heap_[slot] = e;
  e.row->links().heap_slot = slot;
}

void L1Map::heap_sift_up(std::size_t slot) noexcept {
  const HeapEntry e = heap_[slot];
  while (slot > 0) {
    const std::size_t parent = (slot - 1) / 2;
    if (heap_[parent].stamp <= e.stamp) break;
    heap_place(slot, heap_[parent]);
    slot = parent;
  }
  heap_place(slot, e);
}

void L1Map::heap_sift_down(std::size_t slot) noexcept {
  const HeapEntry e = heap_[slot];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t c = 2 * slot + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_[c + 1].stamp < heap_[c].stamp) ++c;
    if (e.stamp <= heap_[c].stamp) break;
    heap_place(slot, heap_[c]);
    slot = c;
  }
  heap_place(slot, e);
}

void L1Map::heap_push(Row* row, std::uint64_t stamp) {
  row->meta().queue = kHeap;
  row->meta().stamp.store(stamp, std::memory_order_relaxed);  // readers only raise it
  heap_.push_back(HeapEntry{stamp, row});
  heap_sift_up(heap_.size() - 1);
}

void L1Map::heap_remove(std::size_t slot) noexcept {
  const HeapEntry last = heap_.back();
  heap_.pop_back();
  if (slot == heap_.size()) return;
  heap_place(slot, last);
  if (slot > 0 && heap_[(slot - 1) / 2].stamp > last.stamp) {
    heap_sift_up(slot);
  } else {
    heap_sift_down(slot);
  }
}

void L1Map::admit(Row* row) noexcept {
  const std::size_t charged = charge(row_bytes(row));
  switch (eviction_) {
    case Eviction::kS3Fifo: {
      // The ghost remembers about as many names as main holds (the paper's 90% of the map).
      const std::size_t window = std::max<std::size_t>(1, size() * 9 / 10);
      if (ghost_.take(row->meta().hash, window)) {
        push(main_, kMain, row, charged);
      } else {
        push(small_, kSmall, row, charged);
      }
      break;
    }
    case Eviction::kClock:
      push(main_, kMain, row, charged);
      break;
    // upsert() reserved the heap's room: no allocation here.
    case Eviction::kLru:
      heap_push(row, lru_clock_.fetch_add(1, std::memory_order_relaxed) + 1);
      break;
    case Eviction::kSkip:
      break;
  }
  bytes_ += charged;
  counters_.bytes.store(bytes_, std::memory_order_relaxed);
}

L1Map::Place L1Map::take_out(Row* row) noexcept {
  Row::Meta& t = row->meta();
  const Place p{static_cast<Queue>(t.queue), row->mark.load(std::memory_order_relaxed)};
  const std::size_t charged = charge(row_bytes(row));
  switch (p.queue) {
    case kSmall:
      drop(small_, row, charged);
      break;
    case kMain:
      drop(main_, row, charged);
      break;
    case kHeap:
      heap_remove(row->links().heap_slot);
      break;
    case kNoQueue:
      break;
  }
  t.queue = kNoQueue;
  bytes_ -= charged;
  counters_.bytes.store(bytes_, std::memory_order_relaxed);
  return p;
}

void L1Map::relink_left(std::span<Row* const> rows) noexcept {
  // Two passes: the neighbours' lines of the whole batch requested together, then relinked.
  bool any = false;
  for (Row* r : rows) {
    if ((r->meta().queue & kLeft) == 0) continue;
    any = true;
    const Row::Links& l = r->links();
    if (l.older != nullptr) __builtin_prefetch(&l.older->links(), 1);
    if (l.newer != nullptr) __builtin_prefetch(&l.newer->links(), 1);
  }
  if (!any) return;
  for (Row* r : rows) {
    Row::Meta& t = r->meta();
    if ((t.queue & kLeft) == 0) continue;
    Fifo& q = (t.queue & ~kLeft) == kSmall ? small_ : main_;
    Row::Links& l = r->links();
    (l.older != nullptr ? l.older->links().newer : q.oldest) = l.newer;
    (l.newer != nullptr ? l.newer->links().older : q.newest) = l.older;
    t.queue = kNoQueue;
  }
}

L1Map::Row* L1Map::oldest(Fifo& q) noexcept {
  for (Row* r = q.oldest; r != nullptr; r = q.oldest) {
    Row::Meta& t = r->meta();
    if ((t.queue & kLeft) == 0) return r;
    // Left by a drop, not yet freed: relinked here instead of in reclaim().
    Row::Links& l = r->links();
    q.oldest = l.newer;
    (l.newer != nullptr ? l.newer->links().older : q.newest) = nullptr;
    t.queue = kNoQueue;
  }
  return nullptr;
}

void L1Map::put_back(Row* row, Place place) noexcept {
  const std::size_t charged = charge(row_bytes(row));
  switch (place.queue) {
    case kSmall:
    case kMain:
      row->mark.store(place.mark, std::memory_order_relaxed);
      push(place.queue == kSmall ? small_ : main_, place.queue, row, charged);
      break;
    // The heap lost an entry in take_out() and regains one: no allocation.
    case kHeap:
      heap_push(row, lru_clock_.fetch_add(1, std::memory_order_relaxed) + 1);
      break;
    case kNoQueue:
      break;
  }
  bytes_ += charged;
  counters_.bytes.store(bytes_, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Eviction (writer)

L1Map::Row* L1Map::victim(std::int64_t now) noexcept {
  // Readers can raise a mark or a stamp as fast as this lowers it: past this many second
  // chances the oldest row goes anyway (a full trip round every queue, a mark at a time).
  const std::size_t chances = 4 * size() + 16;
  for (std::size_t tries = 0;; ++tries) {
    const bool last_chance = tries >= chances;
    if (eviction_ == Eviction::kLru) {
      if (heap_.empty()) return nullptr;
      HeapEntry& top = heap_.front();
      const std::uint64_t stamp = top.row->meta().stamp.load(std::memory_order_relaxed);
      if (stamp == top.stamp || last_chance || expired(top.row, now)) return top.row;
      top.stamp = stamp;  // hit since the writer last looked: back in its place by that hit
      heap_sift_down(0);
      continue;
    }
    // S3-FIFO's small queue while it holds its share (10%) or main is empty: a row hit there
    // moves to main, unmarked; any other goes (and its name to the ghost, in evict()). One hit,
    // not the paper's two (libCacheSim's move-to-main-threshold 1, its pre-2023 default): two
    // measured lower or equal on every hit_ratio_* trace (by up to 1.7 points, bench --quick).
    const bool small_share =
        max_bytes_ != 0 ? small_.bytes * 10 >= bytes_ : small_.rows * 10 >= size();
    if (small_.rows != 0 && (main_.rows == 0 || small_share)) {
      Row* t = oldest(small_);  // not null: small holds rows
      if (t->mark.load(std::memory_order_relaxed) == 0 || last_chance || expired(t, now)) {
        return t;
      }
      const std::size_t charged = charge(row_bytes(t));
      drop(small_, t, charged);
      t->mark.store(0, std::memory_order_relaxed);
      push(main_, kMain, t, charged);
      continue;
    }
    // Main (and CLOCK's one queue): a marked row goes round again, one mark less.
    Row* t = oldest(main_);
    if (t == nullptr) return nullptr;
    const std::uint8_t m = t->mark.load(std::memory_order_relaxed);
    if (m == 0 || last_chance || expired(t, now)) return t;
    t->mark.store(static_cast<std::uint8_t>(m - 1), std::memory_order_relaxed);
    const std::size_t charged = charge(row_bytes(t));
    drop(main_, t, charged);
    push(main_, kMain, t, charged);
  }
}

bool L1Map::make_room(std::size_t need, bool new_row, std::int64_t now) noexcept {
  const auto over = [&]() noexcept {
    return (new_row && size() >= max_size_) || (max_bytes_ != 0 && bytes_ + need > max_bytes_);
  };
  if (!over()) return true;
  if (eviction_ == Eviction::kSkip) {
    // The original's skip (docs/wire.md, "Table semantics"): reclaim expired rows, then insert if
    // that made room. Not for a replacement: the walk could take the row being replaced (upsert()
    // then drops it instead).
    if (!new_row) return false;
    if (now >= earliest_expiry_) drop_expired(now, /*inclusive=*/true);
    return !over();
  }
  do {
    Row* v = victim(now);
    if (v == nullptr) return false;
    const RemovalCause cause = expired(v, now)                  ? RemovalCause::kExpired
                               : new_row && size() >= max_size_ ? RemovalCause::kSize
                                                                : RemovalCause::kBytes;
    evict(v, cause);
  } while (over());
  return true;
}

void L1Map::evict(Row* row, RemovalCause cause) noexcept {
  const Row::Meta& t = row->meta();
  std::atomic<Row*>* link = find_link(row->name_view(), t.hash);
  assert(link != nullptr && link->load(std::memory_order_relaxed) == row);
  const bool from_small = t.queue == kSmall;
  take_out(row);
  unlink(link, row);
  if (from_small && cause != RemovalCause::kExpired) ghost_.add(t.hash);
  removed(row, {}, cause);
  retire(row);
}

}  // namespace echo::table
