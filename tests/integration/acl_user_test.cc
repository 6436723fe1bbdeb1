// SPDX-License-Identifier: MIT
// The engine as an ACL user with the least privilege it runs with: docs/operations.md's ACL line,
// read from that page, is given to a user, and every lane runs as that user: one node holding a
// text-key broadcast table that carries its values, a branded broadcast table, a job table and a
// tracking table starts, and fills, puts, publishes (and publish_and_wait's receipts), carried
// values, job deliveries and invalidations all work, with no denial in the server's ACL LOG. A
// user without a command the engine needs is refused at start with no_permission naming it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine_nodes.h"
#include "metric_refs.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::EngineOptions;
using engine::Source;
using table::BrandedId;

// docs/operations.md "Least privilege": the ACL line's rules, read from that page (its one
// source): the words after "ACL SETUSER echostore on >PASSWORD" in its code block.
std::string least_privilege() {
  for (const std::string& line :
       metric_refs::lines_of_file(metric_refs::source_dir() + "/docs/operations.md")) {
    const std::string head = "ACL SETUSER echostore on >PASSWORD ";
    if (line.starts_with(head)) return line.substr(head.size());
  }
  ADD_FAILURE() << "docs/operations.md has no ACL SETUSER line";
  return {};
}

class AclUser : public SingleServerTest {
 protected:
  void SetUp() override {
    SingleServerTest::SetUp();
    command(client(), "ACL DELUSER echo");
    command(client(), "ACL LOG RESET");
    const std::string rules = least_privilege();
    ASSERT_FALSE(rules.empty());
    const std::string line = "ACL SETUSER echo on >s3cret " + rules;
    std::vector<std::string> args;
    std::size_t at = 0;
    while (at < line.size()) {
      const std::size_t space = line.find(' ', at);
      args.push_back(line.substr(at, space - at));
      at = space == std::string::npos ? line.size() : space + 1;
    }
    auto r = command_argv(client(), args);
    ASSERT_EQ(text(r.get()), "OK");
  }
  void TearDown() override { command(client(), "ACL DELUSER echo"); }

  EngineOptions as_echo(unsigned node) const {
    EngineOptions o = node_options(server(), node);
    o.username = "echo";
    o.password = "s3cret";
    return o;
  }
  // Every denial the server logged, as "reason object" lines.
  std::string denials() {
    auto r = command(client(), "ACL LOG");
    std::string out;
    if (!r || r->type != REDIS_REPLY_ARRAY) return "(no log)";
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* entry = r->element[i];
      for (std::size_t j = 0; j + 1 < entry->elements; j += 2) {
        const std::string field(entry->element[j]->str, entry->element[j]->len);
        if (field == "reason" || field == "object" || field == "context") {
          out += text(entry->element[j + 1]) + " ";
        }
      }
      out += "; ";
    }
    return out;
  }
};

TEST_F(AclUser, TheBroadcastLaneRunsWithTheLeastPrivilege) {
  LoaderProbe loader;
  auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("px=1"));
  auto a = start_node(as_echo(51), {spec});
  auto b = start_node(as_echo(52), {spec});
  ASSERT_TRUE(a && b) << denials();
  const BrandedId name = fresh_id("AST");
  auto fill = a->get("quotes", name.view());
  ASSERT_TRUE(fill) << fill.error() << " " << denials();
  EXPECT_EQ(fill->source, Source::kLoader);
  auto v2 = b->publish("quotes", name.view(), "px=2");
  ASSERT_TRUE(v2) << v2.error() << " " << denials();
  ASSERT_TRUE(eventually([&] { return writer_of(*a, "quotes").stats().applied >= 1; }));
  auto refill = a->get("quotes", name.view());
  ASSERT_TRUE(refill) << refill.error();
  EXPECT_EQ(refill->value, "px=2");
  EXPECT_EQ(refill->source, Source::kL2);
  // publish_and_wait's receipts: the ask channel, and the receipt key's INCR, PEXPIRE and GET.
  auto applied = b->publish_and_wait("quotes", name.view(), "px=3", 10s);
  ASSERT_TRUE(applied) << applied.error().message() << " " << denials();
  EXPECT_EQ(*applied, 2u);
  EXPECT_EQ(denials(), "") << "the engine asked for nothing beyond the line";
}

TEST_F(AclUser, TheJobLaneRunsWithTheLeastPrivilege) {
  auto spec = table_spec("fills", "AST", CoherenceMode::kJob, answering("qty=1"));
  spec.job_beat_ms = 100;
  auto consumer = start_node(as_echo(53), {spec});
  auto writer = start_node(as_echo(54), {spec});
  ASSERT_TRUE(consumer && writer) << denials();
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(consumer->get("fills", name.view()));
  auto v2 = writer->publish("fills", name.view(), "qty=2");
  ASSERT_TRUE(v2) << v2.error() << " " << denials();
  ASSERT_TRUE(eventually(
      [&] {
        auto got = consumer->get("fills", name.view());
        return got && got->value == "qty=2";
      },
      15s))
      << denials();
  EXPECT_EQ(denials(), "") << "the engine asked for nothing beyond the line";
}

TEST_F(AclUser, TheTrackingLaneRunsWithTheLeastPrivilege) {
  auto spec = table_spec("board", "AST", CoherenceMode::kTracking, answering("px=1"));
  auto a = start_node(as_echo(55), {spec});
  auto b = start_node(as_echo(56), {spec});
  ASSERT_TRUE(a && b) << denials();
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(a->get("board", name.view()));
  ASSERT_TRUE(b->put("board", name.view(), "px=2", fresh_id("AST")));
  ASSERT_TRUE(eventually(
      [&] {
        auto got = a->get("board", name.view());
        return got && got->value == "px=2";
      },
      15s))
      << denials();
  EXPECT_EQ(denials(), "") << "the engine asked for nothing beyond the line";
}

TEST_F(AclUser, ANodeOfEveryLaneAndCarryModeStartsAndRunsWithTheLeastPrivilege) {
  engine::TableSpec carried = engine::text_table("board");  // carries its values by default
  carried.loader = [](const engine::Key&) -> engine::LoadResult {
    return engine::Loaded{"loaded", std::nullopt};
  };
  const std::vector<engine::TableSpec> tables = {
      carried, table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("px=1")),
      table_spec("fills", "AST", CoherenceMode::kJob, answering("qty=1")),
      table_spec("marks", "AST", CoherenceMode::kTracking, answering("m=1"))};
  auto a = start_node(as_echo(58), tables);
  auto b = start_node(as_echo(59), tables);
  ASSERT_TRUE(a && b) << denials();
  // The carried value reaches the other node's row in place.
  ASSERT_TRUE(a->get("board", "AAPL")) << denials();
  auto carried_v = b->publish("board", "AAPL", "px=2");
  ASSERT_TRUE(carried_v) << carried_v.error() << " " << denials();
  ASSERT_TRUE(eventually([&] {
    auto got = a->get("board", "AAPL");
    return got && got->value == "px=2" && got->source == Source::kL1;
  })) << denials();
  const BrandedId name = fresh_id("AST");
  for (const char* t : {"quotes", "fills", "marks"}) {
    ASSERT_TRUE(a->get(t, name.view())) << t << " " << denials();
    auto v = b->publish(t, name.view(), "v2");
    ASSERT_TRUE(v) << t << ": " << v.error() << " " << denials();
    ASSERT_TRUE(eventually(
        [&] {
          auto got = a->get(t, name.view());
          return got && got->value == "v2";
        },
        15s))
        << t << " " << denials();
  }
  EXPECT_EQ(denials(), "") << "the engine asked for nothing beyond the line";
}

TEST_F(AclUser, AUserWithoutACommandTheEngineNeedsIsRefusedAtStartNamingIt) {
  command(client(), "ACL SETUSER echo -evalsha");
  engine::Engine e(as_echo(57),
                   {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("px"))});
  const engine::Error err = e.start();
  EXPECT_TRUE(err) << "EVALSHA is how the node lease is taken";
  EXPECT_NE(err.message().find("NOPERM"), std::string::npos) << err;
}

}  // namespace
}  // namespace echo::test
