// SPDX-License-Identifier: MIT
// How an L1 map (l1_map.h) is configured: its clocks, the longest name, how rows hold their
// values (ValueLayout), how a read judges expiry (ReadClock), and L1Config, the knobs L1Map's
// constructor checks.
#pragma once

#include <echo/table/eviction.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace echo::table {

// Monotonic milliseconds (the rows' clock, docs/wire.md, "Table semantics"). Must be callable from
// any thread, noexcept.
using MonotonicClock = std::int64_t (*)() noexcept;
// std::chrono::steady_clock in ms: exact, but a TSC read costs ~50-110 ns on a VM like the
// benchmark host (BM_L1Map_GetHit vs BM_L1Map_GetHitAt), more than the rest of a hit.
std::int64_t steady_clock_ms() noexcept;
// CLOCK_MONOTONIC_COARSE (Linux; steady_clock elsewhere): the same clock at kernel-tick
// resolution, ~10 ns. A row may then be served up to one tick (1-10 ms) past expires_at; choose
// it where that is acceptable (BM_L1Map_GetHitCoarse).
std::int64_t coarse_monotonic_ms() noexcept;

// The longest name a row may have: a text key (1..200 bytes, docs/wire.md, "Text keys"); a branded
// id is 14.
inline constexpr std::size_t kMaxNameSize = 200;

// How rows hold their values. Bytes (size 0, the default): the value's bytes as the writer gave
// them. An object: the writer decodes the given bytes once, when the row enters the map, into an
// object of `size` bytes aligned to `align` inside the row, so a reader uses it in place (find():
// RowView::value spans the object) without decoding or copying it. The engine's typed tables
// build these from a codec (echo/engine/codec.h).
struct ValueLayout {
  std::size_t size = 0;   // 0: bytes; else the object's size, 1 .. 2^20
  std::size_t align = 1;  // a power of two, 1 .. 16 (the row arena's alignment)
  // Builds the object at `at` (size bytes, aligned) from `bytes`: true, or false with nothing
  // built and `why` saying what was wrong. Writer thread; may allocate. If it throws (nothing
  // built), the insert throws that, and the map keeps the row it had for the name, in its
  // place; rows evicted to make room stay evicted.
  bool (*decode)(std::string_view bytes, void* at, std::string& why) = nullptr;
  // Ends the object's life before its row is freed (on the writer thread); null when trivially
  // destructible.
  void (*destroy)(void* at) noexcept = nullptr;
  bool bytes() const noexcept { return size == 0; }
};

// How a read tells a live row from an expired one (the writer always keeps `clock`).
enum class ReadClock : std::uint8_t {
  // Every read calls the map's clock: exact to the clock's resolution. A vDSO call per hit: on
  // the benchmark host a coarse one was ~10 ns of a ~25 ns in-cache hit, and ~20 ns once the
  // rows outgrew the L2 (l1_map.cc).
  kCall,
  // Every read loads the time the writer last published with tick(): one load from a line
  // every read already reads, no call. The writer must tick (the engine's writer does every
  // pass, and while idle by each row's expiry: TableSpec::clock_tick_ms); a row may be served
  // up to the gap between two ticks past expires_at, never before it.
  kPublished,
  // No check: a read serves a row until the writer drops it (sweep(), or an insert into a full
  // map), up to the writer's sweep period past expires_at.
  kNone,
};

struct L1Config {
  std::int64_t ttl_ms = 5000;  // 1 .. 2^40
  double jitter = 0.1;         // 0.0 .. 0.5
  // 1 .. 2^26. The index is a power of two >= 2 * max_size buckets of 8 bytes (at most 2^26),
  // allocated and zeroed at construction and walked whole by sweep() and a non-empty clear():
  // 2^26 buckets are 512 MiB of index (and >= 4 GiB of rows when full); 2^30 rows asked for
  // 8 GiB before the first row.
  std::size_t max_size = 100000;
  // 0: no byte bound; else 4096 .. 2^44: the most bytes the linked rows may hold, each row
  // charged what the arena gave it (row_charge(): 72 bytes of meta, links and header, the
  // name, the value or object, rounded up to 16). The index (16 bytes per max_size row) and the
  // ghost (S3-FIFO: 8 bytes per max_size row) are sized by max_size and not charged. A row larger
  // than the whole bound is not cached (kFullSkip).
  std::size_t max_bytes = 0;
  // Who goes when an insert finds the map full (eviction.h). kSkip is the original's.
  Eviction eviction = Eviction::kS3Fifo;
  std::uint64_t seed = 0x5EEDull;  // jitter PRNG seed (tests pin it)
  MonotonicClock clock = &steady_clock_ms;
  ReadClock read_clock = ReadClock::kCall;
  // The most tombstone slots (32 bytes; at most half used) the fill guard may grow to before it
  // collapses into a floor (fill_guard.h); it starts at 1024. 0 = 4 * max_size, at least 1024.
  std::size_t tombstone_capacity = 0;
  ValueLayout layout{};  // bytes unless set (checked: size, align, decode present)
  RemovalListener on_removal{};
};

}  // namespace echo::table
