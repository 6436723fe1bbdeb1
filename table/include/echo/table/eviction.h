// SPDX-License-Identifier: MIT
// What an L1 map does when it is full (L1Config::eviction), why a row leaves it (RemovalCause,
// told to a RemovalListener), and S3-FIFO's ghost: the names lately evicted from the small
// queue, remembered by fingerprint so that a name back soon goes straight to the main queue.
// The queues themselves run through the rows (l1_map.h, table/src/l1_eviction.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace echo::table {

// Which row goes when an insert finds the map at max_size rows or max_bytes bytes. All run on
// the writer thread; a reader's hit only marks its row (below), and only while the mark can
// still change.
enum class Eviction : std::uint8_t {
  // S3-FIFO (Yang et al., SOSP 2023): a new row enters a small FIFO (10% of the map); a row hit
  // there moves to the main FIFO when it reaches the small queue's end, else it goes and its
  // name enters the ghost; a name found in the ghost enters main directly. Main is a CLOCK
  // with a 2-bit count: a row hit since it was last at the end goes round again, one count
  // less. A hit writes its row's count byte only while the count is below 3: a row read a
  // million times writes its line at most three times per trip round main.
  kS3Fifo,
  // Exact least-recently-used: the row whose last hit (or insert) is oldest goes. Every hit
  // takes a ticket from the map's access counter (one line all readers write: the price of a
  // total order) and stamps its row; the writer keeps a min-heap of stamps, refreshed lazily.
  kLru,
  // CLOCK (second chance): one FIFO, a 1-bit mark; a row hit since it was last at the end goes
  // round again with its mark cleared. A hit writes the mark once per trip.
  kClock,
  // The original's (docs/wire.md, "Table semantics"): a full map drops its expired rows and skips
  // the insert if none went (full_skips); no row is evicted and a hit writes nothing.
  kSkip,
};

// Why a row left an L1 map. The map tells its RemovalListener kMessage, kExpired, kSize,
// kBytes and kReplaced per row; kInvalidate and kFlush are told by the engine (the invalidate
// verb; the flush policy, once per flush).
enum class RemovalCause : std::uint8_t {
  kMessage,     // a coherence message newer than the row (any lane)
  kInvalidate,  // the invalidate verb (admin: L2 and L1 deleted)
  kFlush,       // the flush policy dropped every row (a full ring, a lost subscription)
  kExpired,     // past its expiry: the sweep, or an eviction that found it expired
  kSize,        // evicted to make room under max_size
  kBytes,       // evicted to make room under max_bytes
  kReplaced,    // a fill or put for the same name replaced it
};
std::string_view to_string(RemovalCause c) noexcept;
std::string_view to_string(Eviction e) noexcept;

// Told of each row leaving the map, once it is unlinked (a read of the name from then on
// misses): its name, the message's version for kMessage (14 bytes; empty otherwise), and why.
// Writer thread, inside the insert, apply or sweep that removed it: it must not block, throw or
// call the map.
struct RemovalListener {
  void (*fn)(void* ctx, std::string_view name, std::string_view version,
             RemovalCause cause) noexcept = nullptr;
  void* ctx = nullptr;
};

// S3-FIFO's ghost queue without a queue (the paper's own suggestion): a table of 2-way buckets
// of (32-bit fingerprint, the add's sequence number). A name is "in the ghost" while fewer than
// `window` adds have happened since its own. A bucket keeps its two newest adds, so a crowded
// bucket forgets early: the ghost errs towards admitting a name to the small queue, never
// towards a wrong row. Writer thread only; 8 bytes per slot, allocated once.
class GhostFilter {
 public:
  // Slots for at least `capacity` names (a power of two, >= 16); 0: an empty filter that
  // remembers nothing (the other policies).
  explicit GhostFilter(std::size_t capacity);
  void add(std::uint64_t hash) noexcept;
  // True if `hash` was added within the last `window` adds; forgets it then.
  bool take(std::uint64_t hash, std::size_t window) noexcept;
  std::size_t memory_bytes() const noexcept {
    return slots_ ? (mask_ + 1) * 2 * sizeof(std::uint64_t) : 0;
  }

 private:
  // Slots for `capacity` names: a power of two >= 16, or 0 for capacity 0.
  static std::size_t slots(std::size_t capacity) noexcept;
  std::unique_ptr<std::uint64_t[]> slots_;  // bucket b: slots_[2b], slots_[2b + 1]
  std::size_t mask_ = 0;                    // buckets - 1
  std::uint32_t seq_ = 0;                   // adds so far (wraps; ages are differences)
};

}  // namespace echo::table
