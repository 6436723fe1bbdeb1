// SPDX-License-Identifier: MIT
// The field tables behind stats_export.cc: one row per counter of each stats struct (its JSON
// key, member, Prometheus type and help line), so the JSON writer and the Prometheus renderer
// share one name, one type and one help per counter. Private to echostore::engine; included by
// stats_export.cc only (the tables live in its anonymous namespace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>

namespace echo::engine::stats_fields {

enum class Kind : std::uint8_t { kCounter, kGauge };

template <class S>
struct Field {
  const char* key;
  std::uint64_t S::*member;
  Kind kind;
  const char* help;
};

constexpr Field<table::L1Stats> kL1Fields[] = {
    {"hits", &table::L1Stats::hits, Kind::kCounter, "L1 reads that found a live row"},
    {"misses", &table::L1Stats::misses, Kind::kCounter, "L1 reads that found no live row"},
    {"coh_applied", &table::L1Stats::coh_applied, Kind::kCounter,
     "coherence drops applied (newer)"},
    {"coh_stale", &table::L1Stats::coh_stale, Kind::kCounter, "coherence drops refused as stale"},
    {"swept", &table::L1Stats::swept, Kind::kCounter, "expired rows removed by sweeps"},
    {"sweeps", &table::L1Stats::sweeps, Kind::kCounter, "expiry sweeps run"},
    {"full_skips", &table::L1Stats::full_skips, Kind::kCounter,
     "inserts skipped: full under eviction skip, or a row larger than max_bytes"},
    {"fill_refused", &table::L1Stats::fill_refused, Kind::kCounter,
     "fills refused by the fill guard"},
    {"put_refused", &table::L1Stats::put_refused, Kind::kCounter,
     "puts refused by a newer tombstone"},
    {"size", &table::L1Stats::size, Kind::kGauge, "memory: rows linked in the map"},
    {"bytes", &table::L1Stats::bytes, Kind::kGauge,
     "memory: bytes the linked rows are charged (keys, values or objects, and a 72-byte row "
     "header, rounded up to 16; the index is not charged)"},
    {"evicted_size", &table::L1Stats::evicted_size, Kind::kCounter,
     "rows evicted to make room under max_size"},
    {"evicted_bytes", &table::L1Stats::evicted_bytes, Kind::kCounter,
     "rows evicted to make room under max_bytes"},
    {"expired", &table::L1Stats::expired, Kind::kCounter,
     "rows removed past their expiry (swept, or found expired by an eviction)"},
    {"invalidated", &table::L1Stats::invalidated, Kind::kCounter,
     "rows removed by a coherence message, the invalidate verb or a flush"},
    {"replaced", &table::L1Stats::replaced, Kind::kCounter,
     "rows replaced by a fill or put of the same key"},
    {"tombstones", &table::L1Stats::tombstones, Kind::kGauge, "tombstones held by the fill guard"},
    {"tombstone_collapses", &table::L1Stats::tombstone_collapses, Kind::kCounter,
     "tombstone sets collapsed to one floor"},
    {"retired_pending", &table::L1Stats::retired_pending, Kind::kGauge,
     "memory: retired rows awaiting epoch reclamation (unlinked, not yet freed)"},
    {"retired_bytes", &table::L1Stats::retired_bytes, Kind::kGauge,
     "bytes of retired rows awaiting epoch reclamation"},
    {"reclaim_scans", &table::L1Stats::reclaim_scans, Kind::kCounter,
     "reclamation's scans of the reader slots (paced: at most one per 10 ms under light load)"},
    {"retired_age_ms", &table::L1Stats::retired_age_ms, Kind::kGauge,
     "age in seconds of the oldest retired row not yet reclaimed (a stuck reader grows it)"},
    {"reader_slot_refusals", &table::L1Stats::reader_slot_refusals, Kind::kCounter,
     "reads answered as misses: the thread got no reader slot"},
    {"decode_errors", &table::L1Stats::decode_errors, Kind::kCounter,
     "values a typed table's codec refused (answered bad_value)"},
};

constexpr Field<WriterStats> kWriterFields[] = {
    {"applied", &WriterStats::applied, Kind::kCounter, "ring items applied (newer)"},
    {"stale", &WriterStats::stale, Kind::kCounter, "ring items refused as stale"},
    {"fills", &WriterStats::fills, Kind::kCounter, "flights started by misses"},
    {"l2_hits", &WriterStats::l2_hits, Kind::kCounter, "flights answered by L2"},
    {"coalesced", &WriterStats::coalesced, Kind::kCounter, "misses that rode another flight"},
    {"load_errors", &WriterStats::load_errors, Kind::kCounter, "loader failures"},
    {"corrupt_frames", &WriterStats::corrupt_frames, Kind::kCounter, "L2 rows refused as corrupt"},
    {"flight_restarts", &WriterStats::flight_restarts, Kind::kCounter,
     "flights re-read after a newer drop overtook them"},
    {"ring_flushes", &WriterStats::ring_flushes, Kind::kCounter,
     "flush policy: table dropped after a ring refusal"},
    {"disconnect_flushes", &WriterStats::disconnect_flushes, Kind::kCounter,
     "flushes after a lost or regained subscription"},
    {"suspended_fills", &WriterStats::suspended_fills, Kind::kCounter,
     "fills answered but not cached while suspended"},
    {"puts", &WriterStats::puts, Kind::kCounter, "puts inserted"},
    {"erases", &WriterStats::erases, Kind::kCounter, "admin invalidations"},
    {"commands", &WriterStats::commands, Kind::kCounter, "inbox commands run"},
    {"passes", &WriterStats::passes, Kind::kCounter, "writer loop passes"},
    {"remembered_stale", &WriterStats::remembered_stale, Kind::kCounter,
     "job items the journal's applied memory answered"},
    {"pin_failures", &WriterStats::pin_failures, Kind::kCounter,
     "writer_cpu pins the kernel refused (the writer runs unpinned)"},
    {"listener_throws", &WriterStats::listener_throws, Kind::kCounter,
     "on_removal, on_message or on_change calls that threw (they must not: caught and counted)"},
    {"loader_timeouts", &WriterStats::loader_timeouts, Kind::kCounter,
     "flights answered loader_timeout"},
    {"loader_late", &WriterStats::loader_late, Kind::kCounter,
     "loader answers that came after their flight's loader_timeout (discarded)"},
    {"forgotten_fills", &WriterStats::forgotten_fills, Kind::kCounter,
     "tracking: fills an invalidation overtook, answered but not cached"},
    {"forgotten_puts", &WriterStats::forgotten_puts, Kind::kCounter,
     "tracking: puts an invalidation overtook, not cached"},
    {"held_fills", &WriterStats::held_fills, Kind::kCounter,
     "fills held by the fill_hold fault injection"},
    {"direct_applies", &WriterStats::direct_applies, Kind::kCounter,
     "broadcast items an io thread applied under the writer's token (no ring, no wake)"},
    {"carried_updates", &WriterStats::carried_updates, Kind::kCounter,
     "rows a carried value replaced in place"},
    {"carried_inserts", &WriterStats::carried_inserts, Kind::kCounter,
     "rows a carried value inserted (carry upsert)"},
    {"carried_drops", &WriterStats::carried_drops, Kind::kCounter,
     "rows dropped because L1 could not hold a carried value"},
    {"schema_mismatches", &WriterStats::schema_mismatches, Kind::kCounter,
     "values of another schema (another release's type): fills sent to the loader, carried "
     "values applied as drops"},
    {"absent_loads", &WriterStats::absent_loads, Kind::kCounter,
     "loader answers of Absent (the key has no value), remembered for absent_ttl_ms"},
    {"absent_hits", &WriterStats::absent_hits, Kind::kCounter,
     "misses answered absent from this node's memory (no L2 read, no loader call)"},
    {"receipts", &WriterStats::receipts, Kind::kCounter,
     "publish_and_wait receipt asks answered: the write was applied here"},
    {"receipts_withheld", &WriterStats::receipts_withheld, Kind::kCounter,
     "receipt asks not answered: an older row stayed (its message was dropped)"},
    {"parks", &WriterStats::parks, Kind::kCounter, "times the writer slept on its doorbell"},
    {"signals", &WriterStats::signals, Kind::kCounter, "futex wakes other threads sent the writer"},
    {"membarriers", &WriterStats::membarriers, Kind::kCounter,
     "membarrier calls the writer made (each an IPI to every CPU running the process)"},
    {"os_wakes", &WriterStats::os_wakes, Kind::kCounter,
     "the writer thread's voluntary context switches (kernel count: one wake per sleep)"},
    {"os_preemptions", &WriterStats::os_preemptions, Kind::kCounter,
     "the writer thread's involuntary context switches (kernel count)"},
};

constexpr Field<ring::RingStats> kRingFields[] = {
    {"capacity", &ring::RingStats::capacity, Kind::kGauge, "ring slots"},
    {"occupancy", &ring::RingStats::occupancy, Kind::kGauge, "items waiting (approximate)"},
    {"published", &ring::RingStats::published, Kind::kCounter, "items accepted"},
    {"applied", &ring::RingStats::applied, Kind::kCounter, "items drained"},
    {"dropped", &ring::RingStats::dropped, Kind::kCounter, "items refused under drop or flush"},
    {"wakes", &ring::RingStats::wakes, Kind::kCounter, "wakes of a parked consumer"},
    {"batches", &ring::RingStats::batches, Kind::kCounter, "non-empty drain passes"},
    {"max_batch", &ring::RingStats::max_batch, Kind::kGauge, "largest drain pass"},
    {"stalls", &ring::RingStats::stalls, Kind::kCounter, "block-policy publishes that waited"},
    {"barrier_fallbacks", &ring::RingStats::barrier_fallbacks, Kind::kCounter,
     "membarrier failures of the consumer's doorbell (then on the seq_cst handshake for good)"},
};

constexpr Field<JobConsumerStats> kConsumerFields[] = {
    {"claimed", &JobConsumerStats::claimed, Kind::kCounter, "jobs claimed"},
    {"handed_off", &JobConsumerStats::handed_off, Kind::kCounter, "jobs taken by hand-off"},
    {"applied", &JobConsumerStats::applied, Kind::kCounter, "jobs applied (newer)"},
    {"stale_applies", &JobConsumerStats::stale_applies, Kind::kCounter, "jobs applied as stale"},
    {"completed", &JobConsumerStats::completed, Kind::kCounter, "jobs completed"},
    {"complete_gone", &JobConsumerStats::complete_gone, Kind::kCounter, "completes of a gone job"},
    {"complete_stale", &JobConsumerStats::complete_stale, Kind::kCounter,
     "completes refused by the fencing token"},
    {"complete_errors", &JobConsumerStats::complete_errors, Kind::kCounter,
     "completes that failed"},
    {"malformed", &JobConsumerStats::malformed, Kind::kCounter, "jobs refused as malformed"},
    {"retried", &JobConsumerStats::retried, Kind::kCounter, "jobs sent back for retry"},
    {"dead", &JobConsumerStats::dead, Kind::kCounter, "jobs declared dead"},
    {"beats", &JobConsumerStats::beats, Kind::kCounter, "membership heartbeats"},
    {"rejoins", &JobConsumerStats::rejoins, Kind::kCounter, "rejoins after a lost membership"},
    {"reaped", &JobConsumerStats::reaped, Kind::kCounter, "expired leases reaped"},
    {"promoted", &JobConsumerStats::promoted, Kind::kCounter, "delayed jobs promoted"},
    {"members_reaped", &JobConsumerStats::members_reaped, Kind::kCounter, "dead members reaped"},
    {"maintenance_errors", &JobConsumerStats::maintenance_errors, Kind::kCounter,
     "reap, promote or member reclaim calls that failed"},
    {"parks", &JobConsumerStats::parks, Kind::kCounter, "parks on an empty queue"},
    {"wakes", &JobConsumerStats::wakes, Kind::kCounter, "parks woken by a job"},
    {"empty_claims", &JobConsumerStats::empty_claims, Kind::kCounter, "claims that found nothing"},
    {"in_flight", &JobConsumerStats::in_flight, Kind::kGauge, "jobs claimed, not yet applied"},
    {"member_conflicts", &JobConsumerStats::member_conflicts, Kind::kCounter,
     "beats that found another process beating as this member"},
};

constexpr Field<io::ConnectionStats> kConnectionFields[] = {
    {"pushes", &io::ConnectionStats::pushes, Kind::kCounter, "RESP3 pushes received"},
    {"pending", &io::ConnectionStats::pending, Kind::kGauge, "commands awaiting a reply"},
    {"overloads", &io::ConnectionStats::overloads, Kind::kCounter, "commands refused as overload"},
    {"commands", &io::ConnectionStats::commands, Kind::kCounter, "commands written"},
    {"pipelines", &io::ConnectionStats::pipelines, Kind::kCounter, "socket sends with commands"},
    {"replies", &io::ConnectionStats::replies, Kind::kCounter, "non-push replies received"},
    {"reconnects", &io::ConnectionStats::reconnects, Kind::kCounter, "boots after a loss"},
    {"script_loads", &io::ConnectionStats::script_loads, Kind::kCounter,
     "SCRIPT LOADs after NOSCRIPT"},
    {"evalsha_calls", &io::ConnectionStats::evalsha_calls, Kind::kCounter, "EVALSHAs written"},
    {"bytes_out", &io::ConnectionStats::bytes_out, Kind::kCounter, "bytes written"},
    {"wire_errors", &io::ConnectionStats::wire_errors, Kind::kCounter,
     "replies with no caller and bytes refused"},
    {"boot_retries", &io::ConnectionStats::boot_retries, Kind::kCounter,
     "boots answered LOADING, BUSY or MASTERDOWN, retried"},
    {"push_refusals", &io::ConnectionStats::push_refusals, Kind::kCounter,
     "subscribe verbs the server refused"},
};

constexpr Field<ClusterCounters> kClusterFields[] = {
    {"moved", &ClusterCounters::moved, Kind::kCounter, "MOVED redirects followed"},
    {"ask", &ClusterCounters::ask, Kind::kCounter, "ASK redirects followed"},
    {"refreshes", &ClusterCounters::refreshes, Kind::kCounter, "slot maps applied"},
    {"held", &ClusterCounters::held, Kind::kCounter,
     "calls held while their master was unreachable"},
    {"held_expired", &ClusterCounters::held_expired, Kind::kCounter,
     "held calls failed with cluster_down"},
    {"redirect_limit", &ClusterCounters::redirect_limit, Kind::kCounter,
     "calls failed with too_many_redirects"},
    {"masters", &ClusterCounters::masters, Kind::kGauge, "masters in the current slot map"},
    {"resubscribes", &ClusterCounters::resubscribes, Kind::kCounter,
     "sharded subscriptions made again after a move or a loss"},
};

constexpr Field<SentinelCounters> kSentinelFields[] = {
    {"switches", &SentinelCounters::switches, Kind::kCounter,
     "master changes followed (+switch-master, or found on a re-ask)"},
    {"reconnects", &SentinelCounters::reconnects, Kind::kCounter,
     "sentinel connection booted again (on the next sentinel)"},
    {"asks", &SentinelCounters::asks, Kind::kCounter,
     "get-master-addr-by-name answered with an address"},
    {"role_refusals", &SentinelCounters::role_refusals, Kind::kCounter,
     "connections that found the named master answering ROLE as a replica"},
};

constexpr Field<EngineStats::IoThread> kIoThreadFields[] = {
    {"pushes", &EngineStats::IoThread::pushes, Kind::kCounter,
     "pushes the io thread's subscriber routed into rings"},
    {"signals", &EngineStats::IoThread::signals, Kind::kCounter,
     "futex wakes the io thread sent writers through its rings"},
    {"direct_applies", &EngineStats::IoThread::direct_applies, Kind::kCounter,
     "items the io thread applied under a parked writer's token"},
    {"os_wakes", &EngineStats::IoThread::os_wakes, Kind::kCounter,
     "the io thread's voluntary context switches (kernel count: one wake per sleep)"},
    {"os_preemptions", &EngineStats::IoThread::os_preemptions, Kind::kCounter,
     "the io thread's involuntary context switches (kernel count)"},
};

constexpr Field<FanOutCounters> kFanOutFields[] = {
    {"enqueues", &FanOutCounters::enqueues, Kind::kCounter, "job-lane enqueue calls"},
    {"admitted", &FanOutCounters::admitted, Kind::kCounter, "member queues that took a new job"},
    {"duplicates", &FanOutCounters::duplicates, Kind::kCounter,
     "member queues that already held the job"},
    {"not_live", &FanOutCounters::not_live, Kind::kCounter, "listed members skipped as not live"},
    {"membership_reads", &FanOutCounters::membership_reads, Kind::kCounter,
     "membership reads (the epoch moved)"},
    {"errors", &FanOutCounters::errors, Kind::kCounter, "enqueue calls that failed"},
    {"leads", &FanOutCounters::leads, Kind::kCounter,
     "lead pushes published before the admissions"},
    {"lead_receivers", &FanOutCounters::lead_receivers, Kind::kCounter,
     "subscribers that heard the lead pushes"},
};

constexpr Field<JournalStats> kJournalFields[] = {
    {"intents", &JournalStats::intents, Kind::kGauge, "intent rows"},
    {"pending_enqueue", &JournalStats::pending_enqueue, Kind::kGauge, "intents not yet enqueued"},
    {"remembered", &JournalStats::remembered, Kind::kGauge, "rows in the applied memory"},
    {"transactions", &JournalStats::transactions, Kind::kCounter, "commits made"},
    {"grouped", &JournalStats::grouped, Kind::kCounter, "requests those commits carried"},
    {"failed", &JournalStats::failed, Kind::kCounter,
     "transactions SQLite refused (marks and upserts queued again)"},
    {"checkpoints", &JournalStats::checkpoints, Kind::kCounter,
     "WAL checkpoints the flusher ran beside the writers"},
    {"inline_checkpoints", &JournalStats::inline_checkpoints, Kind::kCounter,
     "WAL checkpoints a committing caller ran (the WAL past 4,000 frames)"},
    {"flusher_pin_failures", &JournalStats::flusher_pin_failures, Kind::kCounter,
     "the flusher could not be pinned to flusher_cpus (it runs unpinned)"},
};

constexpr Field<MetricsCounters> kMetricsFields[] = {
    {"requests", &MetricsCounters::requests, Kind::kCounter,
     "metrics endpoint: requests answered (any status)"},
    {"ok", &MetricsCounters::ok, Kind::kCounter, "metrics endpoint: requests answered 2xx"},
    {"client_errors", &MetricsCounters::client_errors, Kind::kCounter,
     "metrics endpoint: requests answered 4xx (400 malformed, 404 path, 405 method, 431 size)"},
    {"server_errors", &MetricsCounters::server_errors, Kind::kCounter,
     "metrics endpoint: requests answered 5xx (503: more than 16 clients at once)"},
    {"dropped", &MetricsCounters::dropped, Kind::kCounter,
     "metrics endpoint: clients closed unanswered (2 s deadline, socket error, early close)"},
    {"connected", &MetricsCounters::connected, Kind::kGauge,
     "metrics endpoint: clients connected now"},
};

// Every counter of these structs has a row above: a counter added to a struct without one fails
// to compile here (the rows must cover every 8-byte member before the first that is not one).
static_assert(offsetof(WriterStats, suspended) == sizeof(std::uint64_t) * std::size(kWriterFields),
              "a WriterStats counter has no row in kWriterFields");
static_assert(sizeof(JobConsumerStats) == sizeof(std::uint64_t) * std::size(kConsumerFields),
              "a JobConsumerStats counter has no row in kConsumerFields");
static_assert(sizeof(table::L1Stats) == sizeof(std::uint64_t) * std::size(kL1Fields),
              "an L1Stats counter has no row in kL1Fields");
static_assert(sizeof(FanOutCounters) == sizeof(std::uint64_t) * std::size(kFanOutFields),
              "a FanOutCounters counter has no row in kFanOutFields");
static_assert(sizeof(ClusterCounters) == sizeof(std::uint64_t) * std::size(kClusterFields),
              "a ClusterCounters counter has no row in kClusterFields");
static_assert(sizeof(MetricsCounters) == sizeof(std::uint64_t) * std::size(kMetricsFields),
              "a MetricsCounters counter has no row in kMetricsFields");

}  // namespace echo::engine::stats_fields
