// SPDX-License-Identifier: MIT
// Every counter of an engine (each table's L1 map, writer, rings and job consumer; each connection)
// and optionally a journal, as one snapshot rendered as JSON or as Prometheus text exposition, so
// backpressure is visible. The Prometheus text is rendered *from* the JSON, so a snapshot published
// by a node (echostore stats) and a live one print the same families; several nodes' snapshots
// merge into one exposition (label node=).
//
// Names: echostore_<thing>_<counter>, <thing> in l1, writer, ring, consumer, table, connection,
// journal, cluster (cluster mode only), sentinel (sentinel mode only), metrics (the endpoint),
// engine; monotonic counters end in _total (TYPE counter); occupancy, size, capacity, max batch,
// in-flight, masters and flags are gauges (memory: echostore_l1_size rows, echostore_l1_bytes,
// echostore_l1_retired_pending and _retired_bytes). Labels: node=, table=, ring= (the ring's
// index in its table), connection=, journal=. Histograms follow Prometheus: cumulative `le`
// buckets, le="+Inf" equal to _count, and _sum in the base unit. Latencies are in seconds, with
// power-of-two bucket bounds of nanoseconds: echostore_writer_lag_seconds (decode on the io thread
// → apply on the writer), echostore_get_hit_latency_seconds and _get_miss_latency_seconds (1 in
// kGetSampleEvery reads per thread is timed, and the HELP line says so),
// echostore_load_latency_seconds (each loader call) and echostore_l2_latency_seconds (each
// command's round trip, per connection). echostore_ring_batch_size counts items per drain pass;
// its _sum is the ring's applied count (every drained item is in exactly one pass).
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace echo::engine {

struct StatsSnapshot {
  std::string node;          // the node that took it (label node=); empty: no node label
  std::int64_t unix_ms = 0;  // when it was taken (system clock)
  EngineStats engine;
  std::vector<JournalStats> journals;
};

// Takes a snapshot of `engine` now, with the journals it bound (Engine::journal_stats: the last
// second's copy). Any thread; never blocks, but for `journal` when given: it is read now, and
// Journal::stats() counts rows in SQLite, waiting for the journal's connection.
StatsSnapshot take_snapshot(const Engine& engine, std::string node,
                            const Journal* journal = nullptr);

// Publishing (EngineOptions::stats_publish): a running node SETs each table's snapshot into L2
// under ecc:{<table>}:stats:<node_id> with PX three periods, from one publisher thread the engine
// starts in start() and joins in stop(). L2 rather than a local socket because every node of a
// table already reaches that server and no node's port must be reachable: one SCAN on the table's
// hash tag finds every live node's snapshot (one slot on a cluster), and a dead node's key
// expires by itself. The cost is one SET per table per period on the command connection.
std::string stats_key(std::string_view table, std::string_view node);
// `snapshot` with only the table named `table` (connections and journals kept).
StatsSnapshot only_table(StatsSnapshot snapshot, std::string_view table);

// One JSON object: {"format":"echostore-stats/1","node","unix_ms","unrouted_pushes",
// "tables":[{"name","pushes","garbage","l1":{...},"writer":{...,"lag_ns_histogram":[40],
// "lag_sum_ns"},"rings":[{...,"batch_histogram":[32]}],"consumer":{...}|null,
// "get_hit_latency":L,"get_miss_latency":L,"load_latency":L}],"connections":[{...,
// "reply_latency":L}],"cluster":{"moved","ask","refreshes","held","held_expired",
// "redirect_limit","masters","resubscribes"}|null,"sentinel":{"switches","reconnects","asks",
// "role_refusals","master"}|null,"metrics":{"requests","ok","client_errors","server_errors",
// "dropped","connected"},"journals":[{...}]}, where L is {"buckets":[40],"sum_ns"}. Any thread;
// allocates. Throws nothing but bad_alloc:
// a string that is not UTF-8 (a node label, a journal's path) is written with U+FFFD in place of
// each byte that is not.
std::string to_json(const StatsSnapshot& snapshot);

// Prometheus text exposition (version 0.0.4) of one snapshot, rendered from to_json's text (so
// the same U+FFFD for a byte that is not UTF-8). Any thread; allocates; throws nothing but
// bad_alloc.
std::string to_prometheus(const StatsSnapshot& snapshot);

// Prometheus text of several snapshots as to_json wrote them (one per node), each family's
// samples together under one # HELP/# TYPE. Throws std::invalid_argument naming what is wrong
// when a snapshot is not JSON or not in this format: a missing key, a counter that is not a
// non-negative integer, a histogram of more buckets than the format's (40 lag and latency, 32
// batch). The keys added with the sums and latencies ("lag_sum_ns", the four latency objects,
// "metrics") may be absent: a snapshot an older node published renders without them (its lag
// histogram without _sum), so a fleet mid-upgrade still merges into one exposition.
std::string prometheus_from_json(const std::vector<std::string>& snapshots);

}  // namespace echo::engine
