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
#include <optional>
#include <stdexcept>

#include "stats_fields.h"

namespace echo::engine {
namespace {

using json = nlohmann::json;

using namespace stats_fields;  // Kind, Field and the k*Fields tables

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

json latency_json(const io::LatencySnapshot& l) {
  return json{{"buckets", array_json(l.buckets)}, {"sum_ns", l.sum_ns}};
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
  void sample_text(const std::string& name, const char* type, const char* help,
                   const Labels& labels, const std::string& value) {
    family(name, type, help).push_back(name + render_labels(labels) + ' ' + value);
  }
  // A histogram from per-bucket counts: bucket k's upper bound is upper(k); the last bucket is
  // +Inf. At most `max_buckets` (the format's count: a bound is a power of two, and a snapshot
  // with more would shift past 63 bits), and a cumulative count that fits 64 bits.
  // `sum` (already in the family's base unit) is written as _sum; absent (a snapshot from before
  // the sums) writes none.
  template <class Upper>
  void histogram(const std::string& name, const char* help, const Labels& labels,
                 const json& counts, std::size_t max_buckets, Upper upper,
                 const std::optional<std::string>& sum = std::nullopt) {
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
    if (sum) lines.push_back(name + "_sum" + render_labels(labels) + ' ' + *sum);
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
    const std::string_view key = f.key;
    // A counter this format has and the snapshot lacks comes from a node of an older release
    // (a fleet mid-upgrade): its sample is left out, the rest still merge.
    if (!j.contains(f.key)) continue;
    if (f.kind == Kind::kGauge && key.ends_with("_ms")) {
      // Prometheus wants base units (promtool: "metric names should not contain abbreviated
      // units"): a millisecond gauge of the snapshot is exposed in seconds.
      char value[40];
      std::snprintf(value, sizeof value, "%.3f",
                    static_cast<double>(count_of(need(j, f.key), f.key)) / 1000.0);
      e.sample_text(
          "echostore_" + thing + '_' + std::string(key.substr(0, key.size() - 3)) + "_seconds",
          "gauge", f.help, labels, value);
      continue;
    }
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

// A sum of nanoseconds as seconds, the base unit Prometheus wants.
std::string seconds_of(std::uint64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9f", static_cast<double>(ns) * 1e-9);
  return buf;
}

// The _sum of a histogram whose sum sits beside it in the snapshot under `key` (absent from an
// older snapshot: no _sum).
std::optional<std::string> seconds_sum(const json& parent, const char* key) {
  const auto it = parent.find(key);
  if (it == parent.end()) return std::nullopt;
  return seconds_of(count_of(*it, key));
}

// A latency histogram written by latency_json, under `key` of `parent` (absent from an older
// snapshot: no samples).
void latency(Exposition& e, const std::string& name, const char* help, const Labels& labels,
             const json& parent, const char* key) {
  const auto it = parent.find(key);
  if (it == parent.end()) return;
  e.histogram(name, help, labels, need(*it, "buckets"), io::kLatencyBuckets, seconds_bound,
              seconds_of(count_of(need(*it, "sum_ns"), "sum_ns")));
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
    {"housekeeping_pin_failures",
     "housekeeping threads the kernel refused to pin to housekeeping_cpus (they run unpinned)",
     &EngineStats::housekeeping_pin_failures},
    {"caller_link_opens", "connections application threads dialled for their own publishes",
     &EngineStats::caller_link_opens},
    {"caller_link_calls", "publishes written and answered on the calling thread's own link",
     &EngineStats::caller_link_calls},
    {"caller_link_fallbacks",
     "publishes sent through io thread 0 after the caller's link failed them",
     &EngineStats::caller_link_fallbacks},
};

// The engine-wide samples: unrouted pushes, the engine counters, the io backend.
void render_engine(Exposition& e, const json& s, const Labels& base) {
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
}

// One table's samples: its pushes, L1, writer, latencies, rings and consumer.
void render_table(Exposition& e, const json& t, const Labels& base) {
  Labels tl = base;
  tl.emplace_back("table", need(t, "name").get<std::string>());
  e.sample("echostore_table_pushes_total", "counter", "broadcast pushes routed to the table", tl,
           count_of(need(t, "pushes"), "pushes"));
  e.sample("echostore_table_garbage_total", "counter", "broadcast frames refused", tl,
           count_of(need(t, "garbage"), "garbage"));
  // Absent from a snapshot of a version before carried values: 0.
  e.sample("echostore_table_carry_degraded_total", "counter",
           "carried messages applied as drops (their ring's arena was full)", tl,
           t.value("carry_degraded", std::uint64_t{0}));
  render_fields(e, "l1", need(t, "l1"), tl, kL1Fields);
  const json& w = need(t, "writer");
  render_fields(e, "writer", w, tl, kWriterFields);
  e.sample("echostore_writer_suspended", "gauge", "1 while the table does not cache", tl,
           need(w, "suspended").get<bool>() ? 1 : 0);
  e.histogram("echostore_writer_lag_seconds", "time from decode (io thread) to apply (writer)", tl,
              need(w, "lag_ns_histogram"), kLagBuckets, seconds_bound,
              seconds_sum(w, "lag_sum_ns"));
  latency(e, "echostore_get_hit_latency_seconds",
          "L1-hit reads, call to answer; sampled: 1 in 64 reads per thread is timed", tl, t,
          "get_hit_latency");
  latency(e, "echostore_get_miss_latency_seconds",
          "reads L1 did not answer (L2, the loader, or an error), call to answer; sampled: 1 in "
          "64 reads per thread is timed",
          tl, t, "get_miss_latency");
  latency(e, "echostore_load_latency_seconds",
          "loader calls, call to return, on the table's loader threads; every call", tl, t,
          "load_latency");
  std::size_t index = 0;
  for (const json& r : need(t, "rings")) {
    Labels rl = tl;
    rl.emplace_back("ring", std::to_string(index++));
    render_fields(e, "ring", r, rl, kRingFields);
    e.sample("echostore_ring_flush_pending", "gauge", "1 while a flush refusal awaits the writer",
             rl, need(r, "flush_pending").get<bool>() ? 1 : 0);
    // Every drained item is in exactly one pass: the sum of the batch sizes is `applied`.
    e.histogram("echostore_ring_batch_size", "items per non-empty drain pass", rl,
                need(r, "batch_histogram"), ring::kHistogramBuckets, batch_bound,
                std::to_string(count_of(need(r, "applied"), "applied")));
  }
  const json& c = need(t, "consumer");
  if (!c.is_null()) render_fields(e, "consumer", c, tl, kConsumerFields);
}

// One connection's samples.
void render_connection(Exposition& e, const json& c, const Labels& base) {
  Labels cl = base;
  cl.emplace_back("connection", need(c, "label").get<std::string>());
  render_fields(e, "connection", c, cl, kConnectionFields);
  e.sample("echostore_connection_ready", "gauge", "1 while the connection is booted and ready", cl,
           need(c, "status").get<std::string>() == "ready" ? 1 : 0);
  e.sample("echostore_connection_protocol", "gauge", "RESP protocol once booted (0 before)", cl,
           count_of(need(c, "protocol"), "protocol"));
  latency(e, "echostore_l2_latency_seconds",
          "L2 round trips: a command queued for the socket (io thread) to its reply decoded; "
          "every reply",
          cl, c, "reply_latency");
}

// The sections a node has only in some modes or versions: cluster, sentinel, io threads, the
// fan-out, the metrics endpoint, journals.
void render_optional(Exposition& e, const json& s, const Labels& base) {
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
  if (auto it = s.find("io_threads"); it != s.end()) {  // older nodes: none
    for (const json& t : *it) {
      Labels tl = base;
      tl.emplace_back("io_thread", std::to_string(need(t, "index").get<int>()));
      render_fields(e, "io_thread", t, tl, kIoThreadFields);
    }
  }
  if (auto it = s.find("fan_out"); it != s.end() && !it->is_null()) {  // older nodes: none
    render_fields(e, "fan_out", *it, base, kFanOutFields);
  }
  if (auto it = s.find("metrics"); it != s.end() && !it->is_null()) {  // older nodes: none
    render_fields(e, "metrics", *it, base, kMetricsFields);
  }
  if (auto it = s.find("journals"); it != s.end()) {
    for (const json& j : *it) {
      Labels jl = base;
      jl.emplace_back("journal", need(j, "path").get<std::string>());
      render_fields(e, "journal", j, jl, kJournalFields);
    }
  }
}

// One node's snapshot. The steps' order is the text's: a family sits where it is first seen.
void render_snapshot(Exposition& e, const json& s) {
  if (!s.is_object() || s.value("format", "") != "echostore-stats/1") {
    throw std::invalid_argument("stats snapshot: not an echostore-stats/1 object");
  }
  Labels base;
  const std::string node = s.value("node", "");
  if (!node.empty()) base.emplace_back("node", node);
  render_engine(e, s, base);
  for (const json& t : need(s, "tables")) render_table(e, t, base);
  for (const json& c : need(s, "connections")) render_connection(e, c, base);
  render_optional(e, s, base);
}

}  // namespace

StatsSnapshot take_snapshot(const Engine& engine, std::string node, const Journal* journal) {
  StatsSnapshot s;
  s.node = std::move(node);
  s.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.engine = engine.stats();
  engine.add_thread_counts(s.engine);
  s.journals = engine.journal_stats();
  if (journal != nullptr) {  // read now, in place of the chore's copy of the same file
    JournalStats now = journal->stats();
    std::erase_if(s.journals, [&now](const JournalStats& j) { return j.path == now.path; });
    s.journals.push_back(std::move(now));
  }
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
    jt["carry_degraded"] = t.carry_degraded;
    jt["l1"] = fields_json(t.l1, kL1Fields);
    json w = fields_json(t.writer, kWriterFields);
    w["suspended"] = t.writer.suspended;
    w["lag_ns_histogram"] = array_json(t.writer.lag_histogram);
    w["lag_sum_ns"] = t.writer.lag_sum_ns;
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
    jt["get_hit_latency"] = latency_json(t.get_hit_latency);
    jt["get_miss_latency"] = latency_json(t.get_miss_latency);
    jt["load_latency"] = latency_json(t.load_latency);
    tables.push_back(std::move(jt));
  }
  out["tables"] = std::move(tables);
  json connections = json::array();
  for (const auto& c : snapshot.engine.connections) {
    json jc = fields_json(c, kConnectionFields);
    jc["label"] = c.label;
    jc["status"] = std::string(io::to_string(c.status));
    jc["protocol"] = c.protocol;
    jc["reply_latency"] = latency_json(c.reply_latency);
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
  json io_threads = json::array();
  for (std::size_t k = 0; k < snapshot.engine.io_threads.size(); ++k) {
    const auto& t = snapshot.engine.io_threads[k];
    json jt = fields_json(t, kIoThreadFields);
    jt["index"] = k;
    jt["tables"] = t.tables;
    io_threads.push_back(std::move(jt));
  }
  out["io_threads"] = std::move(io_threads);
  out["fan_out"] = fields_json(snapshot.engine.fan_out, kFanOutFields);
  out["metrics"] = fields_json(snapshot.engine.metrics, kMetricsFields);
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
