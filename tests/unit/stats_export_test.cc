// SPDX-License-Identifier: MIT
// The stats export's formats: every Prometheus line parses, each family has one TYPE, histogram
// buckets are cumulative and end in +Inf equal to _count, the JSON round-trips, and a snapshot
// from two nodes merges into one exposition.
#include <echo/engine/stats_export.h>
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace echo::engine {
namespace {

StatsSnapshot sample_snapshot(std::string node) {
  StatsSnapshot s;
  s.node = std::move(node);
  s.unix_ms = 1764460800000;
  TableStats quotes;
  quotes.name = "quotes";
  quotes.l1.hits = 1000;
  quotes.l1.size = 42;
  quotes.writer.applied = 17;
  quotes.writer.lag_histogram[10] = 3;  // ~1 us
  quotes.writer.lag_histogram[14] = 5;  // ~16 us
  quotes.writer.lag_histogram[kLagBuckets - 1] = 1;
  ring::RingStats r;
  r.capacity = 4096;
  r.occupancy = 7;
  r.published = 100;
  r.barrier_fallbacks = 1;
  r.batch_histogram[0] = 20;
  r.batch_histogram[3] = 4;
  quotes.rings = {r, r};
  quotes.pushes = 100;
  TableStats limits;
  limits.name = "lim\"its";  // a label value that needs escaping
  limits.consumer = JobConsumerStats{};
  limits.consumer->claimed = 9;
  limits.consumer->in_flight = 2;
  s.engine.tables = {quotes, limits};
  io::ConnectionStats cmd;
  cmd.label = "cmd";
  cmd.status = io::ConnStatus::kReady;
  cmd.protocol = 3;
  cmd.commands = 55;
  s.engine.connections = {cmd};
  s.engine.unrouted_pushes = 1;
  JournalStats j;
  j.path = "/tmp/journal-GRP0KHTOWnGLuC.db";
  j.intents = 4;
  j.transactions = 2;
  s.journals = {j};
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Hand-written parsers (std::regex trips g++ 12's -Wmaybe-uninitialized under ASan).
bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}
// Consumes a metric or label name at `i`; false if there is none.
bool take_name(const std::string& l, std::size_t& i) {
  if (i >= l.size() || !name_char(l[i], true)) return false;
  while (i < l.size() && name_char(l[i], false)) ++i;
  return true;
}
bool take_digits(const std::string& l, std::size_t i) {
  if (i >= l.size()) return false;
  for (; i < l.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(l[i]))) return false;
  }
  return true;
}
// name{label="value",...} digits
bool is_sample(const std::string& l) {
  std::size_t i = 0;
  if (!take_name(l, i)) return false;
  if (i < l.size() && l[i] == '{') {
    ++i;
    while (true) {
      if (!take_name(l, i) || i + 1 >= l.size() || l[i] != '=' || l[i + 1] != '"') return false;
      i += 2;
      while (i < l.size() && l[i] != '"') i += l[i] == '\\' ? 2 : 1;
      if (i >= l.size()) return false;
      ++i;
      if (i < l.size() && l[i] == ',') {
        ++i;
        continue;
      }
      if (i < l.size() && l[i] == '}') {
        ++i;
        break;
      }
      return false;
    }
  }
  if (i >= l.size() || l[i] != ' ') return false;
  // An integer, or a histogram's _sum in seconds (digits '.' digits).
  const std::size_t dot = l.find('.', i + 1);
  if (dot == std::string::npos) return take_digits(l, i + 1);
  return take_digits(l.substr(0, dot), i + 1) && take_digits(l, dot + 1);
}
// "# HELP name text" or "# TYPE name counter|gauge|histogram"; `type_of` gets the TYPE's name.
bool is_help(const std::string& l) {
  if (l.rfind("# HELP ", 0) != 0) return false;
  std::size_t i = 7;
  return take_name(l, i) && i + 1 < l.size() && l[i] == ' ';
}
bool is_type(const std::string& l, std::string& name) {
  if (l.rfind("# TYPE ", 0) != 0) return false;
  std::size_t i = 7;
  if (!take_name(l, i) || i >= l.size() || l[i] != ' ') return false;
  name = l.substr(7, i - 7);
  const std::string t = l.substr(i + 1);
  return t == "counter" || t == "gauge" || t == "histogram";
}

TEST(StatsExport, EveryPrometheusLineIsASampleOrHelpOrType) {
  const std::string text = to_prometheus(sample_snapshot("7"));
  const auto lines = lines_of(text);
  ASSERT_GT(lines.size(), 100u);
  std::map<std::string, int> types;
  for (const auto& line : lines) {
    std::string type_name;
    if (is_type(line, type_name)) {
      ++types[type_name];
      continue;
    }
    EXPECT_TRUE(is_sample(line) || is_help(line)) << line;
  }
  for (const auto& [name, n] : types) EXPECT_EQ(n, 1) << name << " has more than one TYPE";
  EXPECT_NE(text.find("echostore_l1_hits_total{node=\"7\",table=\"quotes\"} 1000\n"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_l1_size{node=\"7\",table=\"quotes\"} 42\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE echostore_l1_size gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE echostore_ring_occupancy gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE echostore_ring_published_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("echostore_ring_occupancy{node=\"7\",table=\"quotes\",ring=\"1\"} 7\n"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_ring_barrier_fallbacks_total{node=\"7\",table=\"quotes\","
                      "ring=\"1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_consumer_claimed_total{node=\"7\",table=\"lim\\\"its\"} 9\n"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_connection_commands_total{node=\"7\",connection=\"cmd\"} 55\n"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_connection_ready{node=\"7\",connection=\"cmd\"} 1\n"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          "echostore_journal_intents{node=\"7\",journal=\"/tmp/journal-GRP0KHTOWnGLuC.db\"} 4\n"),
      std::string::npos);
  // A table without a consumer exports no consumer samples.
  EXPECT_EQ(text.find("echostore_consumer_claimed_total{node=\"7\",table=\"quotes\"}"),
            std::string::npos);
}

// Checks one histogram series: buckets non-decreasing, bounds increasing, last le=+Inf, equal
// to _count, and equal to the sum of the raw bucket counts.
void expect_cumulative(const std::string& text, const std::string& series_prefix,
                       const std::string& count_line_prefix, std::uint64_t total,
                       std::size_t buckets) {
  std::uint64_t last = 0;
  double last_bound = -1;
  std::size_t seen = 0;
  bool inf = false;
  for (const auto& line : lines_of(text)) {
    if (line.rfind(series_prefix, 0) != 0) continue;
    const auto le = line.rfind(",le=\"") + 1;  // "table=" also ends in le="
    const auto close = line.find("\"} ", le == std::string::npos ? 0 : le + 4);
    ASSERT_TRUE(le != 0 && close != std::string::npos) << line;
    const std::string bound = line.substr(le + 4, close - le - 4);
    const std::string count = line.substr(close + 3);
    const std::uint64_t v = std::stoull(count);
    EXPECT_GE(v, last) << line;
    last = v;
    ++seen;
    if (bound == "+Inf") {
      inf = true;
    } else {
      ASSERT_FALSE(inf) << "a bound after +Inf: " << line;
      const double b = std::stod(bound);
      EXPECT_GT(b, last_bound) << line;
      last_bound = b;
    }
  }
  EXPECT_EQ(seen, buckets);
  EXPECT_TRUE(inf);
  EXPECT_EQ(last, total);
  EXPECT_NE(text.find(count_line_prefix + ' ' + std::to_string(total) + '\n'), std::string::npos);
}

TEST(StatsExport, HistogramBucketsAreCumulativeAndEndAtCount) {
  const std::string text = to_prometheus(sample_snapshot("7"));
  EXPECT_NE(text.find("# TYPE echostore_writer_lag_seconds histogram\n"), std::string::npos);
  expect_cumulative(text, "echostore_writer_lag_seconds_bucket{node=\"7\",table=\"quotes\",",
                    "echostore_writer_lag_seconds_count{node=\"7\",table=\"quotes\"}", 9,
                    kLagBuckets);
  expect_cumulative(text,
                    "echostore_ring_batch_size_bucket{node=\"7\",table=\"quotes\",ring=\"0\",",
                    "echostore_ring_batch_size_count{node=\"7\",table=\"quotes\",ring=\"0\"}", 24,
                    ring::kHistogramBuckets);
  // Bucket 10 ([1024, 2048) ns) ends at le 2.048e-06 s and holds the 3 samples of bucket 10.
  EXPECT_NE(text.find("le=\"2.048e-06\"} 3\n"), std::string::npos);
  // Batch bucket 0 is batches of exactly 1: le="1".
  EXPECT_NE(text.find("ring=\"0\",le=\"1\"} 20\n"), std::string::npos);
}

TEST(StatsExport, JsonRoundTripsThroughTheParser) {
  const StatsSnapshot s = sample_snapshot("7");
  const std::string text = to_json(s);
  const auto j = nlohmann::json::parse(text);  // throws on invalid JSON
  EXPECT_EQ(j.at("format"), "echostore-stats/1");
  EXPECT_EQ(j.at("node"), "7");
  EXPECT_EQ(j.at("unix_ms").get<std::int64_t>(), s.unix_ms);
  ASSERT_EQ(j.at("tables").size(), 2u);
  EXPECT_EQ(j.at("tables")[0].at("l1").at("hits").get<std::uint64_t>(), 1000u);
  EXPECT_EQ(j.at("tables")[0].at("writer").at("lag_ns_histogram").size(), kLagBuckets);
  EXPECT_EQ(j.at("tables")[0].at("rings")[1].at("batch_histogram").size(), ring::kHistogramBuckets);
  EXPECT_TRUE(j.at("tables")[0].at("consumer").is_null());
  EXPECT_EQ(j.at("tables")[1].at("name"), "lim\"its");
  EXPECT_EQ(j.at("tables")[1].at("consumer").at("in_flight").get<std::uint64_t>(), 2u);
  EXPECT_EQ(j.at("connections")[0].at("status"), "ready");
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
  // The Prometheus text rendered from the published JSON equals the live rendering.
  EXPECT_EQ(prometheus_from_json({text}), to_prometheus(s));
}

TEST(StatsExport, ClusterCountersShowInBothFormatsOnlyInClusterMode) {
  StatsSnapshot s = sample_snapshot("7");
  // Single server: "cluster" is null and no cluster family is rendered.
  const auto single = nlohmann::json::parse(to_json(s));
  EXPECT_TRUE(single.at("cluster").is_null());
  EXPECT_EQ(to_prometheus(s).find("echostore_cluster_"), std::string::npos);
  ClusterCounters c;
  c.moved = 3;
  c.ask = 2;
  c.refreshes = 11;
  c.held = 5;
  c.held_expired = 1;
  c.redirect_limit = 4;
  c.masters = 3;
  c.resubscribes = 6;
  s.engine.cluster = c;
  const std::string text = to_json(s);
  const auto j = nlohmann::json::parse(text).at("cluster");
  const std::pair<const char*, std::uint64_t> expected[] = {
      {"moved", 3},          {"ask", 2},     {"refreshes", 11},  {"held", 5}, {"held_expired", 1},
      {"redirect_limit", 4}, {"masters", 3}, {"resubscribes", 6}};
  const std::string prom = to_prometheus(s);
  for (const auto& [key, value] : expected) {
    EXPECT_EQ(j.at(key).get<std::uint64_t>(), value) << key;
    const bool gauge = std::string(key) == "masters";
    const std::string name = "echostore_cluster_" + std::string(key) + (gauge ? "" : "_total");
    EXPECT_NE(prom.find("# TYPE " + name + (gauge ? " gauge\n" : " counter\n")), std::string::npos)
        << name;
    EXPECT_NE(prom.find(name + "{node=\"7\"} " + std::to_string(value) + "\n"), std::string::npos)
        << name;
  }
  EXPECT_EQ(prometheus_from_json({text}), prom);
  // A snapshot published before the key existed still renders, without cluster samples.
  auto older = nlohmann::json::parse(text);
  older.erase("cluster");
  EXPECT_EQ(prometheus_from_json({older.dump()}).find("echostore_cluster_"), std::string::npos);
}

TEST(StatsExport, SentinelCountersShowInBothFormatsOnlyInSentinelMode) {
  StatsSnapshot s = sample_snapshot("7");
  EXPECT_TRUE(nlohmann::json::parse(to_json(s)).at("sentinel").is_null());
  EXPECT_EQ(to_prometheus(s).find("echostore_sentinel_"), std::string::npos);
  s.engine.sentinel = SentinelCounters{"127.0.0.1:6380", 2, 1, 5, 3};
  const std::string text = to_json(s);
  const auto j = nlohmann::json::parse(text).at("sentinel");
  EXPECT_EQ(j.at("master"), "127.0.0.1:6380");
  const std::pair<const char*, std::uint64_t> expected[] = {
      {"switches", 2}, {"reconnects", 1}, {"asks", 5}, {"role_refusals", 3}};
  const std::string prom = to_prometheus(s);
  for (const auto& [key, value] : expected) {
    EXPECT_EQ(j.at(key).get<std::uint64_t>(), value) << key;
    const std::string name = "echostore_sentinel_" + std::string(key) + "_total";
    EXPECT_NE(prom.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    EXPECT_NE(prom.find(name + "{node=\"7\"} " + std::to_string(value) + "\n"), std::string::npos)
        << name;
  }
  EXPECT_NE(prom.find("echostore_sentinel_master{node=\"7\",master=\"127.0.0.1:6380\"} 1\n"),
            std::string::npos)
      << prom;
  EXPECT_EQ(prometheus_from_json({text}), prom);
}

TEST(StatsExport, TheJobLanesFanOutCountersShowInBothFormats) {
  StatsSnapshot s = sample_snapshot("7");
  s.engine.fan_out = FanOutCounters{9, 7, 2, 1, 3, 4};
  const std::string text = to_json(s);
  const auto j = nlohmann::json::parse(text).at("fan_out");
  const std::pair<const char*, std::uint64_t> expected[] = {
      {"enqueues", 9}, {"admitted", 7},         {"duplicates", 2},
      {"not_live", 1}, {"membership_reads", 3}, {"errors", 4}};
  const std::string prom = to_prometheus(s);
  for (const auto& [key, value] : expected) {
    EXPECT_EQ(j.at(key).get<std::uint64_t>(), value) << key;
    const std::string name = "echostore_fan_out_" + std::string(key) + "_total";
    EXPECT_NE(prom.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    EXPECT_NE(prom.find(name + "{node=\"7\"} " + std::to_string(value) + "\n"), std::string::npos)
        << name;
  }
  EXPECT_EQ(prometheus_from_json({text}), prom);
  // A snapshot published before the key existed still renders, without fan-out samples.
  auto older = nlohmann::json::parse(text);
  older.erase("fan_out");
  EXPECT_EQ(prometheus_from_json({older.dump()}).find("echostore_fan_out_"), std::string::npos);
}

TEST(StatsExport, TheIoBackendAndItsFallbackShowInBothFormats) {
  StatsSnapshot s = sample_snapshot("7");
  s.engine.io_backend = io::Backend::kEpoll;
  s.engine.io_fallback_reason = "io_uring refused (Operation not permitted)";
  const std::string text = to_json(s);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("io_backend"), "epoll");
  EXPECT_EQ(j.at("io_fallback_reason"), "io_uring refused (Operation not permitted)");
  const std::string prom = to_prometheus(s);
  EXPECT_NE(prom.find("echostore_engine_io_backend{node=\"7\",backend=\"epoll\"} 1\n"),
            std::string::npos);
  EXPECT_NE(prom.find("echostore_engine_io_fallback{node=\"7\"} 1\n"), std::string::npos);
  EXPECT_EQ(prometheus_from_json({text}), prom);
  // io_uring as asked: no fallback.
  s.engine.io_backend = io::Backend::kUring;
  s.engine.io_fallback_reason.clear();
  const std::string uring = to_prometheus(s);
  EXPECT_NE(uring.find("echostore_engine_io_backend{node=\"7\",backend=\"uring\"} 1\n"),
            std::string::npos);
  EXPECT_NE(uring.find("echostore_engine_io_fallback{node=\"7\"} 0\n"), std::string::npos);
  // A snapshot published before the keys existed still renders, without the samples.
  auto older = j;
  older.erase("io_backend");
  older.erase("io_fallback_reason");
  EXPECT_EQ(prometheus_from_json({older.dump()}).find("echostore_engine_io_"), std::string::npos);
}

TEST(StatsExport, TwoNodesMergeIntoOneFamilyEach) {
  const std::string text =
      prometheus_from_json({to_json(sample_snapshot("1")), to_json(sample_snapshot("2"))});
  std::size_t types = 0, pos = 0;
  while ((pos = text.find("# TYPE echostore_l1_hits_total ", pos)) != std::string::npos) {
    ++types;
    ++pos;
  }
  EXPECT_EQ(types, 1u);
  const auto a = text.find("echostore_l1_hits_total{node=\"1\",table=\"quotes\"} 1000");
  const auto b = text.find("echostore_l1_hits_total{node=\"2\",table=\"quotes\"} 1000");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  // Nothing of another family between the two nodes' samples.
  EXPECT_EQ(text.substr(a, b - a).find("# TYPE"), std::string::npos);
}

TEST(StatsExport, RefusesWhatIsNotASnapshot) {
  EXPECT_THROW(prometheus_from_json({"not json"}), std::invalid_argument);
  EXPECT_THROW(prometheus_from_json({R"({"format":"other"})"}), std::invalid_argument);
  EXPECT_THROW(prometheus_from_json({R"({"format":"echostore-stats/1"})"}), std::invalid_argument);
}

TEST(StatsExport, ASnapshotOfAnOlderReleaseMergesWithoutTheCountersItLacks) {
  // A fleet mid-upgrade: the older node's writer has no listener_throws or absent_loads yet.
  auto old = nlohmann::json::parse(to_json(sample_snapshot("7")));
  old["tables"][0]["writer"].erase("listener_throws");
  old["tables"][0]["writer"].erase("absent_loads");
  const std::string text = prometheus_from_json({old.dump(), to_json(sample_snapshot("8"))});
  EXPECT_NE(text.find("echostore_writer_applied_total{node=\"7\",table=\"quotes\"} 17"),
            std::string::npos);
  EXPECT_EQ(text.find("echostore_writer_listener_throws_total{node=\"7\",table=\"quotes\"}"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_writer_listener_throws_total{node=\"8\",table=\"quotes\"} 0"),
            std::string::npos);
}

TEST(StatsExport, RefusesAHistogramOfMoreBucketsThanTheFormat) {
  // A bucket's bound is a power of two: 65 buckets would shift a 64-bit one by 64 (UB).
  auto j = nlohmann::json::parse(to_json(sample_snapshot("7")));
  j["tables"][0]["rings"][0]["batch_histogram"] = std::vector<std::uint64_t>(65, 1);
  EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument);
  j = nlohmann::json::parse(to_json(sample_snapshot("7")));
  j["tables"][0]["writer"]["lag_ns_histogram"] = std::vector<std::uint64_t>(kLagBuckets + 1, 1);
  EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument);
  j = nlohmann::json::parse(to_json(sample_snapshot("7")));
  j["tables"][0]["rings"][0]["batch_histogram"] = {UINT64_MAX, 1};  // the cumulative would wrap
  EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument);
}

TEST(StatsExport, RefusesACounterThatIsNotANonNegativeInteger) {
  // get<uint64_t> would print -5 as 18446744073709551611 and 1.5 as 1.
  for (const nlohmann::json& bad : {nlohmann::json(-5), nlohmann::json(1.5), nlohmann::json("7")}) {
    auto j = nlohmann::json::parse(to_json(sample_snapshot("7")));
    j["tables"][0]["l1"]["hits"] = bad;
    EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument) << bad;
    j = nlohmann::json::parse(to_json(sample_snapshot("7")));
    j["unrouted_pushes"] = bad;
    EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument) << bad;
    j = nlohmann::json::parse(to_json(sample_snapshot("7")));
    j["tables"][0]["writer"]["lag_ns_histogram"][3] = bad;
    EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument) << bad;
  }
}

TEST(StatsExport, BytesThatAreNotUtf8AreReplacedNotThrown) {
  // A node label and a journal path are caller strings: JSON holds text only, and a throw here
  // would end the publisher's thread (std::terminate).
  StatsSnapshot s = sample_snapshot("node\xFF");
  s.journals.front().path = "/tmp/\xC3(/journal-GRP0KHTOWnGLuC.db";
  std::string text;
  ASSERT_NO_THROW(text = to_json(s));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["node"], "node\xEF\xBF\xBD");
  EXPECT_EQ(j["journals"][0]["path"], "/tmp/\xEF\xBF\xBD(/journal-GRP0KHTOWnGLuC.db");
  std::string prom;
  ASSERT_NO_THROW(prom = to_prometheus(s));
  EXPECT_NE(prom.find("node=\"node\xEF\xBF\xBD\""), std::string::npos);
}

}  // namespace
}  // namespace echo::engine

namespace echo::engine {
namespace {

TEST(StatsExport, PublishPeriodOutsideItsRangeIsAConfigError) {
  EngineOptions o;
  o.port = 6390;  // never connected: construction only validates
  o.stats_publish = std::chrono::milliseconds(50);
  EXPECT_THROW(Engine(o, {}), ConfigError);
  o.stats_publish = std::chrono::milliseconds(3600001);
  EXPECT_THROW(Engine(o, {}), ConfigError);
  o.stats_publish = std::chrono::milliseconds(100);
  EXPECT_NO_THROW(Engine(o, {}));
  o.stats_publish = std::chrono::milliseconds(0);
  EXPECT_NO_THROW(Engine(o, {}));
}

TEST(StatsExport, KeyAndOneTableView) {
  EXPECT_EQ(stats_key("quotes", "7"), "ecc:{quotes}:stats:7");
  StatsSnapshot s;
  s.engine.tables.resize(2);
  s.engine.tables[0].name = "quotes";
  s.engine.tables[1].name = "limits";
  s.engine.connections.resize(1);
  const StatsSnapshot q = only_table(s, "limits");
  ASSERT_EQ(q.engine.tables.size(), 1u);
  EXPECT_EQ(q.engine.tables[0].name, "limits");
  EXPECT_EQ(q.engine.connections.size(), 1u);
}

TEST(StatsExport, TheReclamationBacklogAndSlotRefusalsShowInBothFormats) {
  StatsSnapshot s = sample_snapshot("7");
  s.engine.tables[0].l1.retired_pending = 300;
  s.engine.tables[0].l1.retired_bytes = 38400;
  s.engine.tables[0].l1.retired_age_ms = 90000;
  s.engine.tables[0].l1.reader_slot_refusals = 5;
  const std::string text = to_json(s);
  const auto l1 = nlohmann::json::parse(text).at("tables")[0].at("l1");
  EXPECT_EQ(l1.at("retired_bytes").get<std::uint64_t>(), 38400u);
  EXPECT_EQ(l1.at("retired_age_ms").get<std::uint64_t>(), 90000u);
  EXPECT_EQ(l1.at("reader_slot_refusals").get<std::uint64_t>(), 5u);
  const std::string prom = to_prometheus(s);
  const std::string labels = "{node=\"7\",table=\"quotes\"} ";
  EXPECT_NE(prom.find("# TYPE echostore_l1_retired_bytes gauge\n"), std::string::npos);
  EXPECT_NE(prom.find("echostore_l1_retired_bytes" + labels + "38400\n"), std::string::npos);
  // Exposed in seconds (Prometheus' base unit; promtool refuses "_ms" in a name).
  EXPECT_NE(prom.find("# TYPE echostore_l1_retired_age_seconds gauge\n"), std::string::npos);
  EXPECT_NE(prom.find("echostore_l1_retired_age_seconds" + labels + "90.000\n"), std::string::npos);
  EXPECT_EQ(prom.find("retired_age_ms"), std::string::npos);
  EXPECT_NE(prom.find("# TYPE echostore_l1_reader_slot_refusals_total counter\n"),
            std::string::npos);
  EXPECT_NE(prom.find("echostore_l1_reader_slot_refusals_total" + labels + "5\n"),
            std::string::npos);
  EXPECT_EQ(prometheus_from_json({text}), prom);
}

}  // namespace
}  // namespace echo::engine
