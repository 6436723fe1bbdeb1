// SPDX-License-Identifier: MIT
// The L1 map's readers (l1_map.cc says how the map works): the chain walk, a hit counted on
// the reader's own line, the copying and in-place reads, the walk over every row. Any thread,
// inside a read section (epoch.h).
#include <echo/table/l1_map.h>

#include <echo/base/counter.h>

#include <cstring>
#include <optional>
#include <string>

#include "l1_map_names.h"

namespace echo::table {

using detail::same_name;

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

std::optional<RowView> L1Map::writer_row(std::string_view name) const noexcept {
  const Row* r = live_row(name, clock_());
  if (r == nullptr) return std::nullopt;
  return RowView{std::string_view(r->name(), r->name_size),
                 std::string_view(r->value(), r->value_size), view(r->version()), r->expires_at};
}

}  // namespace echo::table
