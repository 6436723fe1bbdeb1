// SPDX-License-Identifier: MIT
// TombstoneTable: linear probing over a power-of-two array kept at most half full. Deletion
// happens only in bulk (make_room rebuilds), so probing needs no tombstone markers of its own.
#include <echo/table/fill_guard.h>

#include <algorithm>
#include <bit>
#include <cassert>

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

const IdBytes* TombstoneTable::newest_refusing(std::uint64_t hash, std::int64_t now) const noexcept {
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

void TombstoneTable::remember(std::uint64_t hash, const IdBytes& version, std::int64_t now) {
  const std::uint64_t k = key(hash);
  std::size_t i = probe(k);
  if (slots_[i].key != 0) {
    Slot& s = slots_[i];
    if (newer(view(version), view(s.version))) s.version = version;
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

void TombstoneTable::make_room(std::int64_t now) {
  if (floor_active_ && now >= floor_deadline_) floor_active_ = false;
  std::vector<Slot> live;
  live.reserve(used_);
  for (const Slot& s : slots_) {
    if (s.key != 0 && now < s.deadline) live.push_back(s);
  }
  if (live.size() > slots_.size() / 8 * 3) {
    if (slots_.size() < max_slots_) {
      // Purging would free less than a quarter: grow (a burst of drops within one TTL).
      slots_.assign(slots_.size() * 2, Slot{});
      mask_ = slots_.size() - 1;
    } else {
      // At the bound: fold everything into the floor, so the next slots_.size() / 2 remembers
      // are O(1) again. Safe, but it refuses older fills of every name until the floor lapses.
      for (const Slot& s : live) {
        if (!floor_active_ || newer(view(s.version), view(floor_))) floor_ = s.version;
        if (!floor_active_ || s.deadline > floor_deadline_) floor_deadline_ = s.deadline;
        floor_active_ = true;
      }
      live.clear();
      ++collapses_;
    }
  }
  for (Slot& s : slots_) s.key = 0;
  used_ = 0;
  for (const Slot& s : live) {
    slots_[probe(s.key)] = s;
    ++used_;
  }
}

void TombstoneTable::clear() noexcept {
  for (Slot& s : slots_) s.key = 0;
  used_ = 0;
  floor_active_ = false;
}

}  // namespace echo::table
