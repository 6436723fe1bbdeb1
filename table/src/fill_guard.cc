// SPDX-License-Identifier: MIT
// TombstoneTable: linear probing over a power-of-two array kept at most half full. Deletion
// happens only in bulk (make_room rebuilds), so probing needs no tombstone markers of its own.
#include <echo/table/fill_guard.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <new>

namespace echo::table {

TombstoneTable::TombstoneTable(std::size_t capacity, std::int64_t keep_ms)
    : slots_(std::min(kInitialSlots, std::bit_ceil(std::max(capacity, std::size_t{16})))),
      mask_(slots_.size() - 1),
      max_slots_(std::bit_ceil(std::max(capacity, std::size_t{16}))),
      keep_ms_(keep_ms) {
  assert(keep_ms >= 0 && "TombstoneTable: keep_ms must be >= 0");
  for (Slot& s : slots_) s.key = 0;
}

std::size_t TombstoneTable::probe(std::uint64_t k) const noexcept {
  std::size_t i = k & mask_;
  while (slots_[i].key != 0 && slots_[i].key != k) i = (i + 1) & mask_;
  return i;
}

const IdBytes* TombstoneTable::find(std::uint64_t hash) const noexcept {
  const Slot& s = slots_[probe(key(hash))];
  return s.key != 0 ? &s.version : nullptr;
}

const IdBytes* TombstoneTable::newest_refusing(std::uint64_t hash,
                                               std::int64_t now) const noexcept {
  const IdBytes* t = find(hash);
  if (floor_active_ && now < floor_deadline_ && (t == nullptr || newer(view(floor_), view(*t)))) {
    return &floor_;
  }
  return t;
}

bool TombstoneTable::refuses(std::uint64_t hash, const IdBytes& version,
                             std::int64_t now) const noexcept {
  if (floor_active_ && now < floor_deadline_ && newer(view(floor_), view(version))) return true;
  const IdBytes* t = find(hash);
  // Kept past its deadline until purged: holding a tombstone longer only refuses more.
  return t != nullptr && newer(view(*t), view(version));
}

void TombstoneTable::remember(std::uint64_t hash, const IdBytes& version,
                              std::int64_t now) noexcept {
  const std::uint64_t k = key(hash);
  std::size_t i = probe(k);
  if (slots_[i].key != 0) {
    Slot& s = slots_[i];
    if (newer_id(version, s.version)) s.version = version;
    s.deadline = now + keep_ms_;
    return;
  }
  if (used_ + 1 > slots_.size() / 2) {
    make_room(now);
    i = probe(k);
  }
  Slot& s = slots_[i];
  s.key = k;
  s.version = version;
  s.deadline = now + keep_ms_;
  ++used_;
}

void TombstoneTable::make_room(std::int64_t now) noexcept {
  if (floor_active_ && now >= floor_deadline_) floor_active_ = false;
  purge(now);
  if (used_ <= slots_.size() / 8 * 3) return;  // purging freed at least a quarter
  // Purging freed less than a quarter (a burst of drops within one TTL): grow, and at the bound
  // (or when the system refuses the memory) fold everything into the floor, so the next
  // slots_.size() / 2 remembers are O(1) again. Safe, but it refuses older fills of every name
  // until the floor lapses.
  if (slots_.size() < max_slots_ && grow()) return;
  collapse();
}

void TombstoneTable::purge(std::int64_t now) noexcept {
  // In place (no allocation): delete each lapsed entry with a backward shift. A slot refilled by
  // a shift is examined again; entries only move back toward a hole, so none is skipped (one
  // that wraps from the front was examined already, and kept).
  for (std::size_t i = 0; i < slots_.size();) {
    if (slots_[i].key != 0 && now >= slots_[i].deadline) {
      erase_at(i);
      --used_;
    } else {
      ++i;
    }
  }
}

void TombstoneTable::erase_at(std::size_t hole) noexcept {
  // Knuth 6.4 Algorithm R: linear probing without tombstone markers. An entry after the hole
  // may move into it unless its home slot lies cyclically in (hole, its slot].
  std::size_t j = hole;
  for (;;) {
    slots_[hole].key = 0;
    for (;;) {
      j = (j + 1) & mask_;
      if (slots_[j].key == 0) return;
      const std::size_t home = slots_[j].key & mask_;
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) break;
    }
    slots_[hole] = slots_[j];
    hole = j;
  }
}

bool TombstoneTable::grow() noexcept {
  std::vector<Slot, HugePageAllocator<Slot>> bigger;
  try {
    // assign, not resize: the same zeroed slots, but a fill loop where resize's memset is a
    // `rep stosb` that callgrind counts per byte (perf/check_ops.sh's apply_drop).
    bigger.assign(slots_.size() * 2, Slot{});
  } catch (const std::bad_alloc&) {
    return false;  // the caller collapses instead: safe, and needs no memory
  }
  bigger.swap(slots_);
  mask_ = slots_.size() - 1;
  for (const Slot& s : bigger) {
    if (s.key != 0) slots_[probe(s.key)] = s;
  }
  return true;
}

void TombstoneTable::collapse() noexcept {
  for (Slot& s : slots_) {
    if (s.key == 0) continue;
    if (!floor_active_ || newer(view(s.version), view(floor_))) floor_ = s.version;
    if (!floor_active_ || s.deadline > floor_deadline_) floor_deadline_ = s.deadline;
    floor_active_ = true;
    s.key = 0;
  }
  used_ = 0;
  ++collapses_;
}

void TombstoneTable::clear() noexcept {
  for (Slot& s : slots_) s.key = 0;
  used_ = 0;
  floor_active_ = false;
}

}  // namespace echo::table
