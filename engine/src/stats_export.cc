// SPDX-License-Identifier: MIT
// The snapshot's two renderings. One field table per stats struct drives both the JSON writer
// and the Prometheus renderer (which reads the JSON back), so a counter added to a table shows
// in both, with one name, one type and one help line.
#include <echo/engine/stats_export.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace echo::engine {
namespace {

using json = nlohmann::json;

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
    {"size", &table::L1Stats::size, Kind::kGauge, "rows in the map"},
    {"bytes", &table::L1Stats::bytes, Kind::kGauge, "bytes the rows are charged (max_bytes)"},
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
     "retired rows awaiting epoch reclamation"},
    {"retired_bytes", &table::L1Stats::retired_bytes, Kind::kGauge,
     "bytes of retired rows awaiting epoch reclamation"},
    {"retired_age_ms", &table::L1Stats::retired_age_ms, Kind::kGauge,
     "age of the oldest retired row not yet reclaimed (a stuck reader grows it)"},
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
};

template <class S, std::size_t N>
json fields_json(const S& s, const Field<S> (&fields)[N]) {
  json out = json::object();
  for (const auto& f : fields) out[f.key] = s.*(f.member);
  return out;
}

template <std::size_t N>
json array_json(const std::array<std::uint64_t, N>& a) {
  json out = json::array();
  for (auto v : a) out.push_back(v);
  return out;
}

// ---- Prometheus ----

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return {};
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first + "=\"" + escape_label(labels[i].second) + '"';
  }
  return out + '}';
}

// A counter or gauge read back from a snapshot: a non-negative integer, as to_json writes them.
// nlohmann's get<uint64_t> would turn -5 into 2^64 - 5 and 1.5 into 1.
std::uint64_t count_of(const json& v, std::string_view key) {
  if (!v.is_number_unsigned()) {
    throw std::invalid_argument("stats snapshot: '" + std::string(key) + "' is " +
                                v.dump(-1, ' ', false, json::error_handler_t::replace) +
                                ", not a non-negative integer");
  }
  return v.get<std::uint64_t>();
}

// Families in first-seen order, each holding every node's samples (the text format wants one
// family's samples together, under one TYPE line).
class Exposition {
 public:
  void sample(const std::string& name, const char* type, const char* help, const Labels& labels,
              std::uint64_t value) {
    family(name, type, help).push_back(name + render_labels(labels) + ' ' + std::to_string(value));
  }
  // A histogram from per-bucket counts: bucket k's upper bound is upper(k); the last bucket is
  // +Inf. At most `max_buckets` (the format's count: a bound is a power of two, and a snapshot
  // with more would shift past 63 bits), and a cumulative count that fits 64 bits.
  template <class Upper>
  void histogram(const std::string& name, const char* help, const Labels& labels,
                 const json& counts, std::size_t max_buckets, Upper upper) {
    if (!counts.is_array() || counts.empty() || counts.size() > max_buckets) {
      throw std::invalid_argument("stats snapshot: " + name + " wants an array of 1.." +
                                  std::to_string(max_buckets) + " buckets");
    }
    auto& lines = family(name, "histogram", help);
    std::uint64_t cumulative = 0;
    const std::size_t n = counts.size();
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t c = count_of(counts[k], name);
      if (c > UINT64_MAX - cumulative) {
        throw std::invalid_argument("stats snapshot: " + name + " counts more than 2^64");
      }
      cumulative += c;
      Labels with = labels;
      with.emplace_back("le", k + 1 == n ? std::string("+Inf") : upper(k));
      lines.push_back(name + "_bucket" + render_labels(with) + ' ' + std::to_string(cumulative));
    }
    lines.push_back(name + "_count" + render_labels(labels) + ' ' + std::to_string(cumulative));
  }
  std::string text() const {
    std::string out;
    for (const auto& f : families_) {
      out += "# HELP " + f.name + ' ' + f.help + '\n';
      out += "# TYPE " + f.name + ' ' + f.type + '\n';
      for (const auto& l : f.lines) out += l + '\n';
    }
    return out;
  }

 private:
  struct Family {
    std::string name, type, help;
    std::vector<std::string> lines;
  };
  std::vector<std::string>& family(const std::string& name, const char* type, const char* help) {
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back({name, type, help, {}});
    return families_[it->second].lines;
  }
  std::vector<Family> families_;
  std::map<std::string, std::size_t> index_;
};

const json& need(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end())
    throw std::invalid_argument(std::string("stats snapshot: missing '") + key + "'");
  return *it;
}

template <class S, std::size_t N>
void render_fields(Exposition& e, const std::string& thing, const json& j, const Labels& labels,
                   const Field<S> (&fields)[N]) {
  for (const auto& f : fields) {
    const bool counter = f.kind == Kind::kCounter;
    e.sample("echostore_" + thing + '_' + f.key + (counter ? "_total" : ""),
             counter ? "counter" : "gauge", f.help, labels, count_of(need(j, f.key), f.key));
  }
}

std::string seconds_bound(std::size_t k) {  // bucket k is [2^k, 2^(k+1)) ns
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", std::ldexp(1.0, static_cast<int>(k) + 1) * 1e-9);
  return buf;
}

std::string batch_bound(std::size_t k) {  // bucket k is [2^k, 2^(k+1)) items
  return std::to_string((std::uint64_t{1} << (k + 1)) - 1);
}

// The engine-wide counters beside unrouted_pushes (absent from an older snapshot: 0).
struct EngineCounter {
  const char* key;
  const char* help;
  std::uint64_t EngineStats::*field;
};
constexpr EngineCounter kEngineCounters[] = {
    {"tracking_sends", "CLIENT TRACKING commands sent (start, each reconnect)",
     &EngineStats::tracking_sends},
    {"tracking_refusals",
     "CLIENT TRACKING commands refused or lost (the tracking tables stay suspended)",
     &EngineStats::tracking_refusals},
    {"relay_claimed", "shared-queue jobs the relay claimed", &EngineStats::relay_claimed},
    {"relay_relayed", "shared-queue jobs fanned out to the member queues and completed",
     &EngineStats::relay_relayed},
    {"relay_malformed", "shared-queue jobs that were no message of their table (retried)",
     &EngineStats::relay_malformed},
    {"relay_errors",
     "relay claims, fan-outs or completions that failed (the lease returns the job)",
     &EngineStats::relay_errors},
    {"node_renewals", "node lease renewals the server confirmed", &EngineStats::node_renewals},
    {"node_lapses", "times the node lease stopped counting as held (minting stopped)",
     &EngineStats::node_lapses},
    {"node_taken", "node lease renewals that found another process on the node",
     &EngineStats::node_taken},
};

void render_snapshot(Exposition& e, const json& s) {
  if (!s.is_object() || s.value("format", "") != "echostore-stats/1") {
    throw std::invalid_argument("stats snapshot: not an echostore-stats/1 object");
  }
  Labels base;
  const std::string node = s.value("node", "");
  if (!node.empty()) base.emplace_back("node", node);
  e.sample("echostore_engine_unrouted_pushes_total", "counter",
           "pushes for no declared table, or not messages", base,
           count_of(need(s, "unrouted_pushes"), "unrouted_pushes"));
  for (const EngineCounter& c : kEngineCounters) {
    e.sample(std::string("echostore_engine_") + c.key + "_total", "counter", c.help, base,
             count_of(s.value(c.key, json(0)), c.key));
  }
  // The io loop's backend (absent from an older snapshot: no sample).
  if (const auto it = s.find("io_backend"); it != s.end()) {
    if (!it->is_string()) throw std::invalid_argument("stats snapshot: 'io_backend' is no string");
    Labels bl = base;
    bl.emplace_back("backend", it->get<std::string>());
    e.sample("echostore_engine_io_backend", "gauge", "1 for the kernel interface the io loop runs",
             bl, 1);
    const json& reason = s.value("io_fallback_reason", json(""));
    if (!reason.is_string()) {
      throw std::invalid_argument("stats snapshot: 'io_fallback_reason' is no string");
    }
    e.sample("echostore_engine_io_fallback", "gauge",
             "1 when the io loop fell back from io_uring to epoll (the kernel refused io_uring)",
             base, reason.get<std::string>().empty() ? 0 : 1);
  }
  for (const json& t : need(s, "tables")) {
    Labels tl = base;
    tl.emplace_back("table", need(t, "name").get<std::string>());
    e.sample("echostore_table_pushes_total", "counter", "broadcast pushes routed to the table", tl,
             count_of(need(t, "pushes"), "pushes"));
    e.sample("echostore_table_garbage_total", "counter", "broadcast frames refused", tl,
             count_of(need(t, "garbage"), "garbage"));
    render_fields(e, "l1", need(t, "l1"), tl, kL1Fields);
    const json& w = need(t, "writer");
    render_fields(e, "writer", w, tl, kWriterFields);
    e.sample("echostore_writer_suspended", "gauge", "1 while the table does not cache", tl,
             need(w, "suspended").get<bool>() ? 1 : 0);
    e.histogram("echostore_writer_lag_seconds", "time from decode (io thread) to apply (writer)",
                tl, need(w, "lag_ns_histogram"), kLagBuckets, seconds_bound);
    std::size_t index = 0;
    for (const json& r : need(t, "rings")) {
      Labels rl = tl;
      rl.emplace_back("ring", std::to_string(index++));
      render_fields(e, "ring", r, rl, kRingFields);
      e.sample("echostore_ring_flush_pending", "gauge", "1 while a flush refusal awaits the writer",
               rl, need(r, "flush_pending").get<bool>() ? 1 : 0);
      e.histogram("echostore_ring_batch_size", "items per non-empty drain pass", rl,
                  need(r, "batch_histogram"), ring::kHistogramBuckets, batch_bound);
    }
    const json& c = need(t, "consumer");
    if (!c.is_null()) render_fields(e, "consumer", c, tl, kConsumerFields);
  }
  for (const json& c : need(s, "connections")) {
    Labels cl = base;
    cl.emplace_back("connection", need(c, "label").get<std::string>());
    render_fields(e, "connection", c, cl, kConnectionFields);
    e.sample("echostore_connection_ready", "gauge", "1 while the connection is booted and ready",
             cl, need(c, "status").get<std::string>() == "ready" ? 1 : 0);
    e.sample("echostore_connection_protocol", "gauge", "RESP protocol once booted (0 before)", cl,
             count_of(need(c, "protocol"), "protocol"));
  }
  // Cluster mode only; a snapshot without the key (single server, or an older node) has none.
  if (auto it = s.find("cluster"); it != s.end() && !it->is_null()) {
    render_fields(e, "cluster", *it, base, kClusterFields);
  }
  // Sentinel mode only, as the cluster's; the master the node dials is a label of an info gauge.
  if (auto it = s.find("sentinel"); it != s.end() && !it->is_null()) {
    render_fields(e, "sentinel", *it, base, kSentinelFields);
    Labels ml = base;
    ml.emplace_back("master", need(*it, "master").get<std::string>());
    e.sample("echostore_sentinel_master", "gauge",
             "1, labelled with the master (host:port) the sentinels name now", ml, 1);
  }
  if (auto it = s.find("fan_out"); it != s.end() && !it->is_null()) {  // older nodes: none
    render_fields(e, "fan_out", *it, base, kFanOutFields);
  }
  if (auto it = s.find("journals"); it != s.end()) {
    for (const json& j : *it) {
      Labels jl = base;
      jl.emplace_back("journal", need(j, "path").get<std::string>());
      render_fields(e, "journal", j, jl, kJournalFields);
    }
  }
}

}  // namespace

StatsSnapshot take_snapshot(const Engine& engine, std::string node, const Journal* journal) {
  StatsSnapshot s;
  s.node = std::move(node);
  s.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.engine = engine.stats();
  if (journal != nullptr) s.journals.push_back(journal->stats());
  return s;
}

std::string stats_key(std::string_view table, std::string_view node) {
  return "ecc:{" + std::string(table) + "}:stats:" + std::string(node);
}

StatsSnapshot only_table(StatsSnapshot snapshot, std::string_view table) {
  std::erase_if(snapshot.engine.tables, [table](const TableStats& t) { return t.name != table; });
  return snapshot;
}

std::string to_json(const StatsSnapshot& snapshot) {
  json out;
  out["format"] = "echostore-stats/1";
  out["node"] = snapshot.node;
  out["unix_ms"] = snapshot.unix_ms;
  out["unrouted_pushes"] = snapshot.engine.unrouted_pushes;
  for (const EngineCounter& c : kEngineCounters) out[c.key] = snapshot.engine.*c.field;
  out["io_backend"] = std::string(io::to_string(snapshot.engine.io_backend));
  out["io_fallback_reason"] = snapshot.engine.io_fallback_reason;
  json tables = json::array();
  for (const auto& t : snapshot.engine.tables) {
    json jt;
    jt["name"] = t.name;
    jt["pushes"] = t.pushes;
    jt["garbage"] = t.garbage;
    jt["l1"] = fields_json(t.l1, kL1Fields);
    json w = fields_json(t.writer, kWriterFields);
    w["suspended"] = t.writer.suspended;
    w["lag_ns_histogram"] = array_json(t.writer.lag_histogram);
    jt["writer"] = std::move(w);
    json rings = json::array();
    for (const auto& r : t.rings) {
      json jr = fields_json(r, kRingFields);
      jr["flush_pending"] = r.flush_pending;
      jr["batch_histogram"] = array_json(r.batch_histogram);
      rings.push_back(std::move(jr));
    }
    jt["rings"] = std::move(rings);
    jt["consumer"] = t.consumer ? fields_json(*t.consumer, kConsumerFields) : json(nullptr);
    tables.push_back(std::move(jt));
  }
  out["tables"] = std::move(tables);
  json connections = json::array();
  for (const auto& c : snapshot.engine.connections) {
    json jc = fields_json(c, kConnectionFields);
    jc["label"] = c.label;
    jc["status"] = std::string(io::to_string(c.status));
    jc["protocol"] = c.protocol;
    connections.push_back(std::move(jc));
  }
  out["connections"] = std::move(connections);
  const auto& cluster = snapshot.engine.cluster;
  out["cluster"] = cluster ? fields_json(*cluster, kClusterFields) : json(nullptr);
  if (const auto& sentinel = snapshot.engine.sentinel) {
    json js = fields_json(*sentinel, kSentinelFields);
    js["master"] = sentinel->master;
    out["sentinel"] = std::move(js);
  } else {
    out["sentinel"] = json(nullptr);
  }
  out["fan_out"] = fields_json(snapshot.engine.fan_out, kFanOutFields);
  json journals = json::array();
  for (const auto& j : snapshot.journals) {
    json jj = fields_json(j, kJournalFields);
    jj["path"] = j.path.string();
    journals.push_back(std::move(jj));
  }
  out["journals"] = std::move(journals);
  // Table names are UTF-8 (validate), but a node label or a journal's path need not be: a byte
  // that is not UTF-8 becomes U+FFFD rather than a type_error thrown into a publisher thread.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string prometheus_from_json(const std::vector<std::string>& snapshots) {
  Exposition e;
  for (const auto& text : snapshots) {
    json s = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (s.is_discarded()) throw std::invalid_argument("stats snapshot: not JSON");
    try {
      render_snapshot(e, s);
    } catch (const json::exception& ex) {
      throw std::invalid_argument(std::string("stats snapshot: ") + ex.what());
    }
  }
  return e.text();
}

std::string to_prometheus(const StatsSnapshot& snapshot) {
  return prometheus_from_json({to_json(snapshot)});
}

}  // namespace echo::engine
