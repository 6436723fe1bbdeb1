// SPDX-License-Identifier: MIT
// The fill guard's memory (a late fill never resurrects a dropped row): per name, the newest
// coherence version the writer has seen, kept at least `keep_ms` (one TTL). A fill or put whose
// version is older than that tombstone read L2 before the drop and would resurrect stale data, so
// the L1 map refuses it. Writer-thread only: a flat open-addressing table, bounded, no reader ever
// sees it.
#pragma once

#include <echo/table/branded_id.h>
#include <echo/table/row_arena.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace echo::table {

using IdBytes = std::array<char, kIdSize>;

// newer(view(a), view(b)) for two ids' bytes, inline: the 11 payload bytes compared as unsigned
// big-endian numbers by two overlapping 8-byte loads (bytes 3..10, then 6..13, whose first five
// the first load found equal), instead of a call into memcmp. The apply path compares twice a
// message (the row's version, the tombstone's): callgrind on BM_L1Map_ApplyDrops.
inline bool newer_id(const IdBytes& a, const IdBytes& b) noexcept {
  static_assert(kIdSize == 14 && kNamespaceSize == 3, "two 8-byte loads cover the payload");
  const auto word = [](const char* p) noexcept {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    if constexpr (std::endian::native == std::endian::little) w = __builtin_bswap64(w);
    return w;
  };
  const std::uint64_t ha = word(a.data() + 3), hb = word(b.data() + 3);
  if (ha != hb) return ha > hb;
  return word(a.data() + 6) > word(b.data() + 6);
}

inline IdBytes id_bytes(const BrandedId& id) noexcept {
  IdBytes b;
  std::memcpy(b.data(), id.view().data(), kIdSize);
  return b;
}
inline std::string_view view(const IdBytes& b) noexcept { return {b.data(), kIdSize}; }

// Hash of a 14-byte name: two overlapping 8-byte loads, multiply-xorshift mixed. Names are
// base62 snowflakes whose low digits vary most, so both halves feed every output bit.
inline std::uint64_t hash_name(const char* p) noexcept {
  std::uint64_t a;
  std::uint64_t b;
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + kIdSize - 8, 8);
  std::uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ b;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

// The hash of any name (a branded id's 14 bytes or a text key's 1..200): hash_name
// for 14 bytes, so a branded table hashes as it always did. Other lengths read whole words with
// no loop and no call below 17 bytes (symbols, currency pairs): two overlapping 8-, 4- or 1-byte
// loads, as wyhash reads its tail; longer names fold 16 bytes a round. The length is mixed in, so
// "A" and "A\0" differ. Not a keyed hash: names come from the application's own writers, and a
// collision costs a longer bucket chain or a refused fill, never a wrong row.
inline std::uint64_t load64(const char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
inline std::uint64_t load32(const char* p) noexcept {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline std::uint64_t mix64(std::uint64_t a, std::uint64_t b) noexcept {
  __extension__ using u128 = unsigned __int128;  // GCC/Clang builtin
  const u128 m = static_cast<u128>(a ^ 0x9E3779B97F4A7C15ull) * (b ^ 0xD6E8FEB86659FD93ull);
  return static_cast<std::uint64_t>(m) ^ static_cast<std::uint64_t>(m >> 64);
}
inline std::uint64_t hash_key(std::string_view name) noexcept {
  const char* p = name.data();
  const std::size_t n = name.size();
  if (n == kIdSize) return hash_name(p);
  std::uint64_t a, b;
  if (n <= 16) {
    if (n >= 8) {
      a = load64(p);
      b = load64(p + n - 8);
    } else if (n >= 4) {
      a = load32(p);
      b = load32(p + n - 4);
    } else if (n != 0) {
      a = (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
          (std::uint64_t{static_cast<unsigned char>(p[n >> 1])} << 8) |
          static_cast<unsigned char>(p[n - 1]);
      b = 0;
    } else {
      a = b = 0;
    }
    // The length in b's top byte, clear of every byte a and b hold for the shortest names (a
    // length folded into a's low byte made "A9" and "A98" one hash: 'A' '9' '9' ^ 2 equals
    // 'A' '9' '8' ^ 3, so their tombstones and hashed messages were shared).
    return mix64(a, b ^ (std::uint64_t{n} << 56));
  }
  std::uint64_t h = n * 0xC2B2AE3D27D4EB4Full;
  std::size_t i = 0;
  for (; i + 16 < n; i += 16) h = mix64(load64(p + i) ^ h, load64(p + i + 8));
  return mix64(load64(p + n - 16) ^ h, load64(p + n - 8));
}

// Per-name tombstones, bounded. Keyed by the name's 64-bit hash, not its bytes (32-byte slots,
// two per cache line): two names whose hashes collide share one tombstone holding the newer
// version, which can only refuse more fills, never fewer. remember() keeps the newest version per
// name and (re)arms its deadline; an entry lives at least until its deadline (purged lazily when
// the table fills). When purging cannot make room because most entries are younger than keep_ms,
// the table doubles, up to `capacity` slots; only at that bound does it collapse into a *floor*:
// the newest version among the evicted entries, applied to every name until the newest evicted
// deadline. The floor can only refuse more fills (a refill from L2), never fewer, so the guard
// stays safe under any load; `collapses()` counts it.
class TombstoneTable {
 public:
  // capacity: the most slots it may grow to (a power of two >= 16; at most half are used); it
  // starts at min(capacity, kInitialSlots). keep_ms >= 0.
  TombstoneTable(std::size_t capacity, std::int64_t keep_ms);

  // Records that a coherence message `version` for the name hashing to `hash` (hash_name)
  // reached the writer at `now`. Writer thread. Allocates only to double (at most
  // log2(capacity / kInitialSlots) times in the table's life); a doubling the system refuses
  // collapses into the floor instead, so it never throws.
  void remember(std::uint64_t hash, const IdBytes& version, std::int64_t now) noexcept;

  // True iff a tombstone for the name (or the active floor) is newer than `version`: a row at
  // `version` would have been dropped by a message this writer already applied. Writer thread.
  bool refuses(std::uint64_t hash, const IdBytes& version, std::int64_t now) const noexcept;

  // The newest version among the name's tombstone and the active floor, if either is held: a
  // version must be newer than it (or equal) to pass refuses(). Writer thread; no allocation.
  const IdBytes* newest_refusing(std::uint64_t hash, std::int64_t now) const noexcept;

  // The tombstone's version for the name, if one is held. Writer thread (tests, diagnostics).
  const IdBytes* find(std::uint64_t hash) const noexcept;

  // Starts the cache miss of the slot for `hash` (apply_batch runs one message ahead).
  void prefetch(std::uint64_t hash) const noexcept {
    __builtin_prefetch(&slots_[key(hash) & mask_]);
  }

  void clear() noexcept;

  std::size_t size() const noexcept { return used_; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  std::uint64_t collapses() const noexcept { return collapses_; }
  std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(Slot); }

  static constexpr std::size_t kInitialSlots = 1024;

 private:
  struct Slot {
    std::uint64_t key = 0;  // key(hash); 0 = empty
    IdBytes version{};
    std::int64_t deadline = 0;
  };
  static_assert(sizeof(Slot) == 32, "two slots per cache line");

  static std::uint64_t key(std::uint64_t hash) noexcept { return hash == 0 ? 1 : hash; }
  std::size_t probe(std::uint64_t k) const noexcept;
  void make_room(std::int64_t now) noexcept;
  void purge(std::int64_t now) noexcept;
  void erase_at(std::size_t hole) noexcept;
  bool grow() noexcept;
  void collapse() noexcept;

  std::vector<Slot, HugePageAllocator<Slot>> slots_;  // huge pages once 2 MiB (row_arena.h)
  std::size_t mask_;
  std::size_t max_slots_;
  std::size_t used_ = 0;
  std::int64_t keep_ms_;
  bool floor_active_ = false;
  IdBytes floor_{};
  std::int64_t floor_deadline_ = 0;
  std::uint64_t collapses_ = 0;
};

}  // namespace echo::table
