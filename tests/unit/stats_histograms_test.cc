// SPDX-License-Identifier: MIT
// The exposition's histograms as Prometheus wants them (_bucket, _sum in the base unit, _count
// equal to le="+Inf"), the latency recorder's bucket bounds, the metrics endpoint's counters, and
// a snapshot from a node of the previous format (no sums, no latencies) still rendering and
// merging beside a new one.
#include <echo/engine/stats_export.h>
#include <echo/io/latency_histogram.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace echo::engine {
namespace {

StatsSnapshot snapshot_with_histograms() {
  StatsSnapshot s;
  s.node = "7";
  TableStats t;
  t.name = "quotes";
  t.writer.lag_histogram[10] = 3;
  t.writer.lag_sum_ns = 2'500'000'000;  // 2.5 s
  ring::RingStats r;
  r.batch_histogram[0] = 20;  // 20 passes of 1
  r.batch_histogram[3] = 4;   // 4 passes of 8..15
  r.applied = 60;
  t.rings = {r};
  io::LatencyRecorder hit, miss, load;
  for (int i = 0; i < 3; ++i) hit.record(1000);  // bucket 9: [512, 1024)
  miss.record(2'000'000);
  load.record(5'000'000);
  load.record(15'000'000);
  t.get_hit_latency = hit.snapshot();
  t.get_miss_latency = miss.snapshot();
  t.load_latency = load.snapshot();
  s.engine.tables = {t};
  io::ConnectionStats cmd;
  cmd.label = "command";
  io::LatencyRecorder l2;
  l2.record(100'000);
  l2.record(300'000);
  cmd.reply_latency = l2.snapshot();
  s.engine.connections = {cmd};
  s.engine.metrics.requests = 5;
  s.engine.metrics.ok = 3;
  s.engine.metrics.client_errors = 1;
  s.engine.metrics.server_errors = 1;
  s.engine.metrics.dropped = 2;
  s.engine.metrics.connected = 1;
  return s;
}

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(LatencyRecorder, BucketsArePowersOfTwoOfNanoseconds) {
  EXPECT_EQ(io::latency_bucket(-5), 0u);
  EXPECT_EQ(io::latency_bucket(0), 0u);
  EXPECT_EQ(io::latency_bucket(1), 0u);
  EXPECT_EQ(io::latency_bucket(2), 1u);
  EXPECT_EQ(io::latency_bucket(1023), 9u);
  EXPECT_EQ(io::latency_bucket(1024), 10u);
  EXPECT_EQ(io::latency_bucket(INT64_MAX), io::kLatencyBuckets - 1);
  io::LatencyRecorder r;
  r.record(-7);  // a clock that stepped back: counted, adds nothing to the sum
  r.record(1000);
  const io::LatencySnapshot s = r.snapshot();
  EXPECT_EQ(s.buckets[0], 1u);
  EXPECT_EQ(s.buckets[9], 1u);
  EXPECT_EQ(s.sum_ns, 1000u);
}

TEST(StatsHistograms, LagHasASumInSecondsAndBatchSizesSumToApplied) {
  const std::string text = to_prometheus(snapshot_with_histograms());
  EXPECT_TRUE(
      has(text, "echostore_writer_lag_seconds_sum{node=\"7\",table=\"quotes\"} 2.500000000"))
      << text;
  EXPECT_TRUE(has(text, "echostore_writer_lag_seconds_count{node=\"7\",table=\"quotes\"} 3"));
  EXPECT_TRUE(
      has(text, "echostore_ring_batch_size_sum{node=\"7\",table=\"quotes\",ring=\"0\"} 60"));
  EXPECT_TRUE(
      has(text, "echostore_ring_batch_size_count{node=\"7\",table=\"quotes\",ring=\"0\"} 24"));
}

TEST(StatsHistograms, GetLoadAndL2LatenciesHaveBucketsSumAndCount) {
  const std::string text = to_prometheus(snapshot_with_histograms());
  const std::string q = "{node=\"7\",table=\"quotes\"}";
  EXPECT_NE(text.find("# TYPE echostore_get_hit_latency_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("# HELP echostore_get_hit_latency_seconds L1-hit reads, call to answer; "
                      "sampled: 1 in 64"),
            std::string::npos);
  // Bucket 9 ([512, 1024) ns) ends at le 1.024e-06 s.
  EXPECT_TRUE(has(text,
                  "echostore_get_hit_latency_seconds_bucket{node=\"7\",table=\"quotes\","
                  "le=\"1.024e-06\"} 3"));
  EXPECT_TRUE(has(text,
                  "echostore_get_hit_latency_seconds_bucket{node=\"7\",table=\"quotes\","
                  "le=\"+Inf\"} 3"));
  EXPECT_TRUE(has(text, "echostore_get_hit_latency_seconds_sum" + q + " 0.000003000"));
  EXPECT_TRUE(has(text, "echostore_get_hit_latency_seconds_count" + q + " 3"));
  EXPECT_TRUE(has(text, "echostore_get_miss_latency_seconds_sum" + q + " 0.002000000"));
  EXPECT_TRUE(has(text, "echostore_load_latency_seconds_sum" + q + " 0.020000000"));
  EXPECT_TRUE(has(text, "echostore_load_latency_seconds_count" + q + " 2"));
  const std::string c = "{node=\"7\",connection=\"command\"}";
  EXPECT_TRUE(has(text, "echostore_l2_latency_seconds_sum" + c + " 0.000400000"));
  EXPECT_TRUE(has(text, "echostore_l2_latency_seconds_count" + c + " 2"));
}

TEST(StatsHistograms, TheEndpointsCountersShowInBothFormats) {
  const StatsSnapshot s = snapshot_with_histograms();
  const auto j = nlohmann::json::parse(to_json(s));
  EXPECT_EQ(j.at("metrics").at("requests").get<std::uint64_t>(), 5u);
  const std::string text = to_prometheus(s);
  EXPECT_TRUE(has(text, "echostore_metrics_requests_total{node=\"7\"} 5"));
  EXPECT_TRUE(has(text, "echostore_metrics_ok_total{node=\"7\"} 3"));
  EXPECT_TRUE(has(text, "echostore_metrics_client_errors_total{node=\"7\"} 1"));
  EXPECT_TRUE(has(text, "echostore_metrics_server_errors_total{node=\"7\"} 1"));
  EXPECT_TRUE(has(text, "echostore_metrics_dropped_total{node=\"7\"} 2"));
  EXPECT_TRUE(has(text, "echostore_metrics_connected{node=\"7\"} 1"));
}

// A node of the previous format published neither sums nor latencies nor the endpoint's
// counters: its snapshot renders (lag without _sum) and merges beside a new node's.
TEST(StatsHistograms, ASnapshotOfThePreviousFormatStillRendersAndMerges) {
  auto old = nlohmann::json::parse(to_json(snapshot_with_histograms()));
  old["node"] = "3";
  old.erase("metrics");
  for (auto& t : old["tables"]) {
    t["writer"].erase("lag_sum_ns");
    t.erase("get_hit_latency");
    t.erase("get_miss_latency");
    t.erase("load_latency");
  }
  for (auto& c : old["connections"]) c.erase("reply_latency");
  std::string text;
  ASSERT_NO_THROW(text = prometheus_from_json({old.dump(), to_json(snapshot_with_histograms())}));
  EXPECT_TRUE(has(text, "echostore_writer_lag_seconds_count{node=\"3\",table=\"quotes\"} 3"));
  EXPECT_EQ(text.find("echostore_writer_lag_seconds_sum{node=\"3\""), std::string::npos);
  EXPECT_EQ(text.find("echostore_get_hit_latency_seconds_count{node=\"3\""), std::string::npos);
  EXPECT_EQ(text.find("echostore_metrics_requests_total{node=\"3\""), std::string::npos);
  // The new node's families are all there, each under one TYPE line.
  EXPECT_TRUE(
      has(text, "echostore_writer_lag_seconds_sum{node=\"7\",table=\"quotes\"} 2.500000000"));
  EXPECT_TRUE(has(text, "echostore_get_hit_latency_seconds_count{node=\"7\",table=\"quotes\"} 3"));
  std::size_t types = 0;
  for (std::size_t at = 0;
       (at = text.find("# TYPE echostore_writer_lag_seconds ", at)) != std::string::npos; ++at) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
}

TEST(StatsHistograms, ALatencyWithoutItsSumIsRefused) {
  auto j = nlohmann::json::parse(to_json(snapshot_with_histograms()));
  j["tables"][0]["get_hit_latency"].erase("sum_ns");
  EXPECT_THROW(prometheus_from_json({j.dump()}), std::invalid_argument);
}

}  // namespace
}  // namespace echo::engine
