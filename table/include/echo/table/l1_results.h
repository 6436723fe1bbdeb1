// SPDX-License-Identifier: MIT
// What an L1 map's (l1_map.h) calls answer: the verdicts of newer wins, of an insert and of a
// carried value; a read's result and a zero-copy row view; the map's stats (L1Stats).
#pragma once

#include <echo/table/fill_guard.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace echo::table {

// The verdicts of newer wins (docs/wire.md, "Table semantics").
enum class Verdict : std::uint8_t { kApplied, kStale };

// What an insert did. Anything but kInserted/kReplaced stored nothing; kRefusedTombstone may
// have dropped the name's row when it was older than the refused version.
enum class InsertVerdict : std::uint8_t {
  kInserted,          // a new row
  kReplaced,          // replaced the row for that name (its old version was not newer)
  kRefusedOlder,      // the current row is newer (fill_refused++ or put_refused++)
  kRefusedTombstone,  // a coherence message newer than this version was already seen
  kFullSkip,          // kSkip: the map was full and nothing had expired; any policy: the row
                      // alone is larger than max_bytes (full_skips++)
  kRefusedDecode,     // an object layout's decode refused the bytes (decode_errors++;
                      // decode_error() says why)
};

// True when the insert left the row in the map (a new row, or one that replaced its name's).
constexpr bool stored(InsertVerdict v) noexcept {
  return v == InsertVerdict::kInserted || v == InsertVerdict::kReplaced;
}

// What a carried value did (L1Map::apply_update).
enum class UpdateVerdict : std::uint8_t {
  kUpdated,   // the row held an older version: readers now see this value (coh_applied)
  kInserted,  // no row, and the caller asked to insert: a new row (coh_applied)
  kStale,     // the row or a remembered message is as new or newer, or there was no row and
              // the caller asked not to insert: nothing changed but the guard (coh_stale)
  kDropped,   // the value could not be held (no room under max_bytes, an object layout's decode
              // refused it, no memory): the older row went, as a drop would (coh_applied)
};

enum class ReadStatus : std::uint8_t { kHit, kMiss, kTooSmall };

struct ReadResult {
  ReadStatus status;
  std::size_t size;  // the value's size on kHit and kTooSmall
  IdBytes version;   // the row's version on kHit and kTooSmall
};

// A row seen through a ReadGuard: the views stay valid until that guard is destroyed. With an
// object layout, value spans the object (value.data() is its address, aligned).
struct RowView {
  std::string_view name;
  std::string_view value;
  std::string_view version;
  std::int64_t expires_at;
};

struct L1Stats {
  std::uint64_t hits = 0, misses = 0, coh_applied = 0, coh_stale = 0, swept = 0, sweeps = 0,
                full_skips = 0, fill_refused = 0, put_refused = 0, size = 0, tombstones = 0,
                tombstone_collapses = 0, retired_pending = 0;
  // Scans of the reader slots that reclamation ran (each a membarrier in the asymmetric mode:
  // epoch::asymmetric()); reclaim_due() paces them (kScanIntervalMs).
  std::uint64_t reclaim_scans = 0;
  // Reclamation's backlog. One reader section that never ends (a leaked ReadGuard, a reader
  // thread stopped inside one) holds back every map's reclamation: these grow, and the age
  // says for how long. retired_bytes: rows unlinked, not yet freed (headers and values).
  // retired_age_ms: how long ago the oldest of them was retired (0: none), on the map's clock.
  std::uint64_t retired_bytes = 0, retired_age_ms = 0;
  // Reads refused because the thread could get no reader slot (kMaxReaderThreads): answered
  // as misses without looking (the caller falls back to its miss path).
  std::uint64_t reader_slot_refusals = 0;
  // Values an object layout's decode refused (the put or fill was answered with the error).
  std::uint64_t decode_errors = 0;
  // Rows that left, by cause (RemovalCause): evicted under max_size, under max_bytes; expired
  // (swept, or found expired by an eviction or a full kSkip map); invalidated (a message, erase,
  // clear); replaced by a fill or put of the same name. swept and coh_applied keep the
  // original's names (a part of expired, of invalidated).
  std::uint64_t evicted_size = 0, evicted_bytes = 0, expired = 0, invalidated = 0, replaced = 0;
  // The linked rows' charged bytes (L1Config::max_bytes; row_charge()).
  std::uint64_t bytes = 0;
};

}  // namespace echo::table
