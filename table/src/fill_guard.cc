// SPDX-License-Identifier: MIT
// TombstoneTable: linear probing over a power-of-two array kept at most half full. Deletion
// happens only in bulk (make_room rebuilds), so probing needs no tombstone markers of its own.
#include <echo/table/fill_guard.h>

#include <bit>
#include <cassert>

namespace echo::table {
namespace {

bool same_name(const IdBytes& a, const char* b) noexcept {
  return std::memcmp(a.data(), b, kIdSize) == 0;
}

}  // namespace

TombstoneTable::TombstoneTable(std::size_t capacity, std::int64_t keep_ms)
    : slots_(std::bit_ceil(capacity < 16 ? std::size_t{16} : capacity)),
      mask_(slots_.size() - 1),
      keep_ms_(keep_ms) {
  assert(keep_ms >= 0 && "TombstoneTable: keep_ms must be >= 0");
  for (Slot& s : slots_) s.used = false;
}

std::size_t TombstoneTable::probe(const char* name, std::uint64_t hash) const noexcept {
  std::size_t i = hash & mask_;
  while (slots_[i].used && !same_name(slots_[i].name, name)) i = (i + 1) & mask_;
  return i;
}

const IdBytes* TombstoneTable::find(const char* name, std::uint64_t hash) const noexcept {
  const Slot& s = slots_[probe(name, hash)];
  return s.used ? &s.version : nullptr;
}

bool TombstoneTable::refuses(const char* name, std::uint64_t hash, const IdBytes& version,
                             std::int64_t now) const noexcept {
  if (floor_active_ && now < floor_deadline_ && newer(view(floor_), view(version))) return true;
  const IdBytes* t = find(name, hash);
  // Kept past its deadline until purged: holding a tombstone longer only refuses more.
  return t != nullptr && newer(view(*t), view(version));
}

void TombstoneTable::remember(const char* name, std::uint64_t hash, const IdBytes& version,
                              std::int64_t now) {
  std::size_t i = probe(name, hash);
  if (slots_[i].used) {
    Slot& s = slots_[i];
    if (newer(view(version), view(s.version))) s.version = version;
    s.deadline = now + keep_ms_;
    return;
  }
  if (used_ + 1 > slots_.size() / 2) {
    make_room(now);
    i = probe(name, hash);
  }
  Slot& s = slots_[i];
  std::memcpy(s.name.data(), name, kIdSize);
  s.version = version;
  s.deadline = now + keep_ms_;
  s.used = true;
  ++used_;
}

void TombstoneTable::make_room(std::int64_t now) {
  if (floor_active_ && now >= floor_deadline_) floor_active_ = false;
  std::vector<Slot> live;
  live.reserve(used_);
  for (const Slot& s : slots_) {
    if (s.used && now < s.deadline) live.push_back(s);
  }
  if (live.size() > slots_.size() / 8 * 3) {
    // Purging would free less than a quarter: fold everything into the floor instead, so the
    // next slots_.size() / 2 remembers are O(1) again.
    for (const Slot& s : live) {
      if (!floor_active_ || newer(view(s.version), view(floor_))) floor_ = s.version;
      if (!floor_active_ || s.deadline > floor_deadline_) floor_deadline_ = s.deadline;
      floor_active_ = true;
    }
    live.clear();
    ++collapses_;
  }
  for (Slot& s : slots_) s.used = false;
  used_ = 0;
  for (const Slot& s : live) {
    Slot& d = slots_[probe(s.name.data(), hash_name(s.name.data()))];
    d = s;
    ++used_;
  }
}

void TombstoneTable::clear() noexcept {
  for (Slot& s : slots_) s.used = false;
  used_ = 0;
  floor_active_ = false;
}

}  // namespace echo::table
