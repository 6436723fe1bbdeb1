// SPDX-License-Identifier: MIT
// The engine as an ACL user with the least privilege it runs with: the README's ACL line, kept
// here word for word (kLeastPrivilege), is given to a user, and the broadcast, job and tracking
// lanes run as that user: fills, puts, broadcasts (and publish_and_wait's receipts), job
// deliveries and invalidations all work, and the server's ACL LOG shows no denial. A user without
// a command the engine needs is refused at start with no_permission naming it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::EngineOptions;
using engine::Source;
using table::BrandedId;

// README "Least privilege": every command and key pattern the engine's lanes use (single server;
// a cluster adds +cluster|shards +cluster|slots +asking +ssubscribe), nothing else.
constexpr const char* kLeastPrivilege =
    "resetkeys ~ecc:* ~emq:* ~{ecc}:* ~{emq}:* resetchannels &ecc:* &emq:* -@all "
    "+hello +auth +ping +client|setname +client|id +client|unblock +client|tracking +info "
    "+publish +subscribe +unsubscribe +evalsha +script|load +blpop +blmpop +time "
    "+get +set +del +exists +incr +pexpire +pttl "
    "+hget +hset +hdel +hexists +hgetall +hincrby +hkeys +hmget "
    "+llen +lmove +lpop +lpos +lpush +lrange +lrem +ltrim +rpush "
    "+sadd +scard +sismember +smembers +srem "
    "+zadd +zcard +zpopmin +zrange +zrangebyscore +zrem";

class AclUser : public SingleServerTest {
 protected:
  void SetUp() override {
    SingleServerTest::SetUp();
    command(client(), "ACL DELUSER echo");
    command(client(), "ACL LOG RESET");
    const std::string line = std::string("ACL SETUSER echo on >s3cret ") + kLeastPrivilege;
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
