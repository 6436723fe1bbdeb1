// SPDX-License-Identifier: MIT
// The docs and the alert rules against a live exposition (metric_refs.h): a node with a table of
// every lane (broadcast, carried values, job with a bound journal, tracking, none) serves its
// /metrics after traffic on each, and every series README.md, docs/ and docs/alerts.yml name is
// in it, every label matcher matches a sample, every rule's `by (...)` labels are on its series,
// and every exported family is documented. The cluster and Sentinel families are checked the
// same way by cluster_engine_test.cc and sentinel_test.cc, where those modes run.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine_nodes.h"
#include "http_client.h"
#include "journal_lane.h"
#include "metric_refs.h"
#include "support/temp_dir.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;

class MetricRefsTest : public SingleServerTest {};

// The references another mode's suite checks (cluster_engine_test.cc, sentinel_test.cc).
bool single_server_scope(const metric_refs::Ref& r) {
  return !r.name.starts_with("echostore_cluster_") && !r.name.starts_with("echostore_sentinel_");
}

TEST_F(MetricRefsTest, EverySeriesTheDocsAndAlertsNameIsExportedAndEveryExportedOneDocumented) {
  TempDir dir;
  engine::Journal journal(journal_options(dir.path(), fresh_id("PRT"), 1));
  const auto tables = [] {
    auto carried = engine::text_table("carried");
    carried.carry = engine::Carry::kUpsert;
    // The job table first: start_node binds a journal to the first table.
    return std::vector<engine::TableSpec>{
        lane_spec("orders"),
        table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("q=1")), carried,
        table_spec("tracked", "TRK", CoherenceMode::kTracking, answering("t=1")),
        table_spec("plain", "AST", CoherenceMode::kNone, answering("p=1"))};
  };
  // Node 1 publishes; node 2, the job lane's other member, serves the scraped endpoint.
  auto e = start_node(server(), 1, tables(), &journal);
  ASSERT_NE(e, nullptr);
  auto o = node_options(server(), 2);
  o.metrics_port = testing::free_loopback_port();
  auto scraped = std::make_unique<Engine>(o, tables());
  scraped->use_journal("orders", journal);
  ASSERT_FALSE(scraped->start()) << "the scraped node did not start";

  // Traffic on every lane: misses that load, hits, a publish each (the job lane's through the
  // journal's group), so every histogram and counter has a sample.
  for (int round = 0; round < 3; ++round) {
    for (const char* t : {"quotes", "orders", "tracked", "plain"}) {
      const auto id = fresh_id(t == std::string("tracked") ? "TRK" : "AST");
      for (int i = 0; i < 70; ++i) (void)scraped->get(t, id.view());
      ASSERT_TRUE(e->publish(t, id.view(), "v=2")) << t;
    }
    ASSERT_TRUE(e->publish("carried", "AAPL", "c=1"));
    (void)scraped->get("carried", "AAPL");
  }

  // The journal's families come from a chore once a second: wait for them.
  std::string text;
  ASSERT_TRUE(eventually(
      [&] {
        text = get(o.metrics_port).body;
        return text.find("echostore_journal_pending_enqueue{") != std::string::npos;
      },
      10s))
      << "no journal family in the exposition:\n"
      << text.substr(0, 2000);

  const auto samples = metric_refs::parse_exposition(text);
  const auto refs = metric_refs::documented();
  const auto rules = metric_refs::alert_rules();
  // The scan found the docs (not an empty directory): the alerts and the family table.
  ASSERT_GE(rules.size(), 20U) << "docs/alerts.yml under " << metric_refs::source_dir();
  ASSERT_GE(refs.size(), 200U);

  const auto missing = metric_refs::missing(samples, refs, single_server_scope);
  EXPECT_TRUE(missing.empty()) << "named in the docs, not exported:"
                               << metric_refs::joined(missing);
  const auto unkept = metric_refs::unkept_labels(samples, rules, single_server_scope);
  EXPECT_TRUE(unkept.empty()) << metric_refs::joined(unkept);
  const auto undocumented = metric_refs::undocumented(samples, refs);
  EXPECT_TRUE(undocumented.empty()) << metric_refs::joined(undocumented);
}

// promtool's own check of the rules' syntax and types (it does not know which series exist: the
// test above does).
TEST(MetricRefs, PromtoolAcceptsTheAlertRules) {
  ASSERT_EQ(::access("/usr/bin/promtool", X_OK), 0)
      << "/usr/bin/promtool is missing: scripts/setup.sh installs it (Debian package prometheus)";
  const std::string cmd =
      "/usr/bin/promtool check rules " + metric_refs::source_dir() + "/docs/alerts.yml 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) said += buf;
  const int rc = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd << ": " << said;
  const std::string rules = std::to_string(metric_refs::alert_rules().size());
  EXPECT_NE(said.find("SUCCESS: " + rules + " rules found"), std::string::npos) << said;
}

// The checker itself: a wrong name, a label value no sample has and an undocumented family are
// each caught (so a pass above means something).
TEST(MetricRefs, TheCheckCatchesAWrongNameALabelValueAndAnUndocumentedFamily) {
  const auto samples = metric_refs::parse_exposition(
      "# TYPE echostore_l1_retired_age_seconds gauge\n"
      "echostore_l1_retired_age_seconds{node=\"1\",table=\"q\"} 0.000\n"
      "echostore_l2_latency_seconds_bucket{node=\"1\",connection=\"cmd\",le=\"+Inf\"} 3\n"
      "echostore_new_family_total{node=\"1\"} 1\n");
  std::vector<metric_refs::Ref> refs;
  metric_refs::scan_line("expr: max(echostore_l1_retired_age_ms) > 60", "a:1", refs);
  metric_refs::scan_line("rate(echostore_l2_latency_seconds_bucket{connection=\"command\"}[5m])",
                         "a:2", refs);
  metric_refs::scan_line("rate(echostore_l2_latency_seconds_bucket{connection=~\"cmd(@.*)?\"})",
                         "a:3", refs);
  metric_refs::scan_line("`echostore_l1_*` and echostore_l1_retired_age_seconds", "a:4", refs);
  const auto all = [](const metric_refs::Ref&) { return true; };
  const auto missing = metric_refs::missing(samples, refs, all);
  ASSERT_EQ(missing.size(), 2U) << metric_refs::joined(missing);
  EXPECT_NE(missing[0].find("echostore_l1_retired_age_ms is not exported"), std::string::npos);
  EXPECT_NE(missing[1].find("connection=\"command\""), std::string::npos);
  const auto undocumented = metric_refs::undocumented(samples, refs);
  ASSERT_EQ(undocumented.size(), 1U) << metric_refs::joined(undocumented);
  EXPECT_NE(undocumented[0].find("echostore_new_family_total"), std::string::npos);
}

}  // namespace
}  // namespace echo::test
