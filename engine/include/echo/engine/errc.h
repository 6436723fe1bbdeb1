// SPDX-License-Identifier: MIT
// The engine's typed errors: one enum, one std::error_category. Connection failures pass through
// as echo::io errors (disconnected, overloaded, ...); these are the engine's own.
#pragma once

#include <string_view>
#include <system_error>

namespace echo::engine {

enum class Errc : int {
  kNoSuchCache = 1,  // the table was never declared
  kKind,             // the id is not a valid branded id of the table's kind (nothing on the wire)
  kCorruptL2Frame,   // L2 held 0..13 bytes or an unversioned frame (nothing cached or deleted)
  kLoaderFailed,     // the loader answered an error or threw (never cached)
  kTimeout,          // the writer did not answer within get_timeout
  kStopped,          // the engine is not running
  kContended,        // a flight was overtaken by newer drops more times than it retries
  kUnexpectedReply,  // the server answered something the verb cannot mean (counted)
  kNoLiveMember,     // a job-lane enqueue found no live member (and no shared queue): no queue
                     // holds the job, so nothing will apply it (not a duplicate)
  kWrongMode,        // EngineOptions::mode is single but the server is a cluster node
  kMemberConflict,   // start(): another process beats as this node in a job-lane table's
                     // membership (a node id used twice; job_consumer.h)
  kHostUnresolved,   // start(): EngineOptions::host (or a seed) did not resolve
  kBadValue,         // a typed table's codec refused the bytes (L2's, the loader's or a put's)
  kBadKey,           // a text key outside 1..200 bytes or with '{', '}', a space or a control
                     // byte (docs/wire.md, "Text keys"; nothing on the wire)
  kWrongType,        // a typed handle asked for a table of another value type
  kLoaderTimeout,    // the table's loader did not answer within its loader_timeout (never
                     // cached; its late answer is discarded)
  kTrackingRefused,  // start(): CLIENT TRACKING ON BCAST PREFIX ... was answered other than +OK
                     // (a tracking table's lane; the reply's text is logged)
  kNotVersioned,     // a verb that orders versions (drop_l2) on a table whose L2 values carry
                     // none (l2_format raw)
  kNoFreeNode,       // start(): node_id auto, and every node 0..1023 is leased ({ecc}:node:<n>)
  kNodeTaken,        // start(): the explicit node_id is leased by another process
  kNoNodeLease,      // this engine holds no node lease now (not started, or the lease lapsed:
                     // partitioned past node_lease, or taken): it mints nothing until it holds
                     // one again (docs/wire.md, "Node leases")
  kSentinelUnknownMaster,  // start(), ServerMode::kSentinel: the first sentinel that answered
                           // does not monitor EngineOptions::sentinel_master (the name is logged)
  kNoSentinel,     // start(), ServerMode::kSentinel: every sentinel listed was tried and none
                   // answered the master's address
  kNotMaster,      // start(), ServerMode::kSentinel: the address the sentinels give answered
                   // ROLE as a replica until start's deadline (a failover under way)
  kMetricsListen,  // start(): the metrics endpoint could not listen on metrics_bind:
                   // metrics_port (the detail names the address and errno's words)
  kMiss,           // a read on a table with on_miss refill found no row in L1: it answered at
                   // once and started one refill of the key (TableSpec::on_miss)
  kMixedFrames,    // start(): a table that carries values (TableSpec::carry) has subscribers
                   // that read only the 29-byte message (the original's nodes, an older
                   // EchoStore): the detail names the table and how many
  // A read from a thread that could get no L1 reader slot (table::kMaxReaderThreads threads hold
  // them): every read of that thread would miss, so the read answers this instead of loading.
  kNoReaderSlot,
  // publish_and_wait on a table whose lane acknowledges no apply (none):
  // nothing written; the detail names the lane.
  kNoReceipts,
  // The table's loader answered Absent: the key has no value (remembered for the table's
  // absent_ttl_ms, until a write of the key reaches this node).
  kAbsent,
  kJournalIo,  // the journal's SQLite file refused a read or a write (a full disk,
               // SQLITE_FULL; an I/O error, a lock, a read-only file): the detail names the
               // step and SQLite's words and code; a refused record wrote none of its rows
};

const std::error_category& engine_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), engine_category()};
}

// "no_such_cache", "kind", "corrupt_l2_frame", ..., "no_live_member", ..., "loader_timeout"
std::string_view to_string(Errc e) noexcept;

}  // namespace echo::engine

template <>
struct std::is_error_code_enum<echo::engine::Errc> : std::true_type {};
