// SPDX-License-Identifier: MIT
// What a table's writer and its job-lane consumer count (TableStats::writer, ::consumer): plain
// values, copied out by Engine::stats() on any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace echo::engine {

// Lag from decode (io thread) to apply (writer), power-of-two buckets of nanoseconds: bucket k
// counts [2^k, 2^(k+1)) ns.
inline constexpr std::size_t kLagBuckets = 40;

struct WriterStats {
  std::uint64_t applied = 0, stale = 0;  // coherence verdicts from the rings
  std::uint64_t fills = 0, l2_hits = 0, coalesced = 0, load_errors = 0, corrupt_frames = 0;
  std::uint64_t flight_restarts = 0;     // flights re-read after a newer drop overtook them
  std::uint64_t ring_flushes = 0;        // flush policy: a ring refused, the table dropped all
  std::uint64_t disconnect_flushes = 0;  // subscription loss / resubscribe flushes
  std::uint64_t suspended_fills = 0;     // fills answered but not cached while suspended
  std::uint64_t puts = 0, erases = 0, commands = 0, passes = 0;
  std::uint64_t remembered_stale = 0;  // job-lane items the applied memory answered
  std::uint64_t loader_timeouts = 0;   // flights answered loader_timeout
  std::uint64_t loader_late = 0;       // loader answers that came after their timeout
                                       // (discarded)
  std::uint64_t pin_failures = 0;      // writer_cpu refused by the kernel: runs unpinned
  std::uint64_t listener_throws = 0;   // on_removal or on_message threw (they must not)
  // The tracking lane's guard (no versions): fills an invalidation overtook, answered to the
  // readers that asked before it and not cached; puts an invalidation overtook, not cached.
  std::uint64_t forgotten_fills = 0, forgotten_puts = 0;
  std::uint64_t held_fills = 0;  // fills held by the fill_hold fault injection
  // Items an io thread applied itself under the writer's token (TableSpec::direct_apply), in
  // applied/stale too; the ring's published/applied do not count them.
  std::uint64_t direct_applies = 0;
  // Carried values (TableSpec::carry), in applied/stale too: rows whose value a message replaced
  // in place, rows it inserted (Carry::kUpsert), and rows it dropped because L1 could not hold
  // the value (no room under max_bytes, a typed table's codec refused the bytes).
  std::uint64_t carried_updates = 0, carried_inserts = 0, carried_drops = 0;
  // A typed table's values written under another schema (schema.h: a node of another release):
  // fills that found one in L2 and asked this node's loader instead (the row stays in L2), and
  // carried values applied as drops. Never an error to a reader.
  std::uint64_t schema_mismatches = 0;
  // Negative caching (TableSpec::absent_ttl_ms): loader answers of Absent, and misses answered
  // absent from this node's memory of one (no L2 read, no loader call).
  std::uint64_t absent_loads = 0, absent_hits = 0;
  // publish_and_wait's receipt asks, broadcast and tracking (docs/wire.md, "Receipts"): answered
  // (the write was applied here), and withheld (a row older than the write's version stayed: the
  // ring dropped its message).
  std::uint64_t receipts = 0, receipts_withheld = 0;
  // What the writer costs its neighbours on the CPUs it shares: parks (the writer slept on its
  // doorbell), signals (futex wakes other threads sent it), membarriers (membarrier calls it
  // made: its doorbell's handshake and reclamation's scans of the reader slots, each an IPI to
  // every CPU running a thread of the process), and the kernel's counts for the writer thread:
  // os_wakes (voluntary context switches: each sleep, whatever its cause, ends in one wake) and
  // os_preemptions (involuntary ones), filled by Engine::add_thread_counts only (0 from stats(),
  // which stays cheap to poll: the /proc reads cost a job-lane bench that polled stats 2x).
  std::uint64_t parks = 0, signals = 0, membarriers = 0, os_wakes = 0, os_preemptions = 0;
  bool suspended = false;
  std::array<std::uint64_t, kLagBuckets> lag_histogram{};
  std::uint64_t lag_sum_ns = 0;  // the sum of every lag lag_histogram counts (negatives as 0)
  // Steady-clock ns (std::chrono::steady_clock) at the end of the last batch from the rings that
  // dropped a row (0: none yet): the moment its rows were gone from L1. A batch of stale items
  // leaves it (a job finding the row its lead dropped).
  std::int64_t last_applied_ns = 0;
  // The decoded_ns of that batch's last item that dropped a row: when the io thread had it (so a
  // lane's latency splits into send -> decoded, the wire and the server, and decoded -> applied,
  // the ring).
  std::int64_t last_decoded_ns = 0;
};

struct JobConsumerStats {
  std::uint64_t claimed = 0, handed_off = 0, applied = 0, stale_applies = 0;
  std::uint64_t completed = 0, complete_gone = 0, complete_stale = 0, complete_errors = 0;
  std::uint64_t malformed = 0, retried = 0, dead = 0;
  std::uint64_t beats = 0, rejoins = 0, reaped = 0, promoted = 0, members_reaped = 0;
  std::uint64_t maintenance_errors = 0;  // reap, promote, member_reap or member_drop failed
  std::uint64_t parks = 0, wakes = 0, empty_claims = 0, in_flight = 0;
  // Beats that found another process beating as this member (the same node id twice: see "Two
  // processes, one node id" in engine/src/job_consumer.cc); while they last, the table caches
  // nothing.
  std::uint64_t member_conflicts = 0;
};

// JobConsumerStats::in_flight from its counters: jobs taken (claimed + handed off) less jobs
// settled (applied, stale, malformed). They are separate relaxed loads against the loop thread,
// so a read can count a job settled and miss its taking: 0 then, never a wrap to 2^64 - 1.
constexpr std::uint64_t in_flight_of(std::uint64_t taken, std::uint64_t settled) noexcept {
  return taken > settled ? taken - settled : 0;
}

}  // namespace echo::engine
