// SPDX-License-Identifier: MIT
// publish_and_wait on the broadcast lane (docs/wire.md, "Receipts"), against a real redis-server
// with three nodes: answered once every node that subscribes the table applied the write (a node
// that holds no row of the key counts as applied; the typed face and the string face alike); a
// node whose writer is held makes the call miss its deadline, named "2 of 3 nodes", and counts
// itself once it applied the write; an ask that names a write a node's ring dropped (the drop
// policy) is withheld; a pattern subscriber of the ask channel (a monitor) is not counted. The
// tracking lane alike: the ask follows the server's invalidations.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Errc;
using engine::Table;
using table::BrandedId;

struct Quote {
  double bid, ask;
};

// Text keys on the broadcast lane (values carried); the loader answers bid 100.
engine::TableSpec quotes() {
  engine::TableSpec s = engine::text_table("quotes");
  s.kind = "QTE";
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<Quote>([](const engine::Key&) -> std::optional<Quote> {
    return Quote{100, 101};
  });
  return engine::typed<Quote>(s);
}

// The version of `key`'s row in `t`'s L1, or empty when it holds none.
std::string row_version(const Table<Quote>& t, std::string_view key) {
  std::string version;
  t.l1().visit(key, [&](std::string_view, std::string_view v) { version = std::string(v); });
  return version;
}

bool holds_key(const Table<Quote>& t, std::string_view key) {
  return t.l1().visit(key, [](std::string_view, std::string_view) {});
}

class BroadcastReceipts : public SingleServerTest {};

TEST_F(BroadcastReceipts, AnsweredOnceEveryNodeAppliedIt) {
  // The publisher has the highest node: its version is newer than the others' fills even within
  // one millisecond (versions of one millisecond order by node).
  auto n1 = node(3, {quotes()});
  auto n2 = node(1, {quotes()});
  auto n3 = node(2, {quotes()});
  ASSERT_TRUE(n1 && n2 && n3);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  auto t3 = n3->table<Quote>("quotes");
  ASSERT_TRUE(t2.get("AAPL"));
  ASSERT_TRUE(t3.get("AAPL"));
  auto applied = t1.publish_and_wait("AAPL", Quote{42, 43}, 10s);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, 3u) << "every node, the publisher too";
  // Applied means read: no node holds an older row, and each holder reads the value at once.
  const std::string v = row_version(t1, "AAPL");
  ASSERT_EQ(v.size(), table::kIdSize);
  for (const auto* t : {&t1, &t2, &t3}) {
    const std::string held = row_version(*t, "AAPL");
    EXPECT_TRUE(held.empty() || !table::newer(v, held)) << held;
    double bid = 0;
    if (t->try_read("AAPL", [&bid](const Quote& q) { bid = q.bid; })) {
      EXPECT_EQ(bid, 42);
    }
  }

  // A key no other node holds: each of them applied it (nothing older is there to serve).
  ASSERT_FALSE(holds_key(t2, "MSFT"));
  auto fresh = t1.publish_and_wait("MSFT", Quote{7, 8}, 10s);
  ASSERT_TRUE(fresh) << fresh.error().message();
  EXPECT_EQ(*fresh, 3u);
  EXPECT_FALSE(holds_key(t2, "MSFT"));
  for (const auto* n : {&n1, &n2, &n3}) {
    EXPECT_EQ((*n)->stats().tables[0].writer.receipts, 2u);
    EXPECT_EQ((*n)->stats().tables[0].writer.receipts_withheld, 0u);
  }
  // A receipt key counts the nodes and outlives the call by its PEXPIRE only.
  RedisReply keys = command(client(), "KEYS %s", "ecc:rcpt:{quotes}:*");
  ASSERT_TRUE(keys && keys->type == REDIS_REPLY_ARRAY);
  ASSERT_EQ(keys->elements, 2u);
  for (std::size_t i = 0; i < keys->elements; ++i) {
    const std::string key(keys->element[i]->str, keys->element[i]->len);
    EXPECT_EQ(l2_raw(client(), key), "3");
    EXPECT_GT(pttl(client(), key), 0);
    EXPECT_LE(pttl(client(), key), 60000);
  }
}

TEST_F(BroadcastReceipts, APatternSubscriberHearsTheAskButIsNotCounted) {
  auto n1 = node(2, {quotes()});
  auto n2 = node(1, {quotes()});
  ASSERT_TRUE(n1 && n2);
  // A monitoring tool on every ecc channel: it hears the ask and never answers it.
  RedisClient monitor = connect_client(server());
  ASSERT_TRUE(command(monitor.get(), "PSUBSCRIBE %s", "ecc:*"));
  auto t1 = n1->table<Quote>("quotes");
  auto applied = t1.publish_and_wait("AAPL", Quote{1, 2}, 5s);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, 2u) << "the two nodes, not the pattern subscriber";
}

TEST_F(BroadcastReceipts, AHeldWriterMakesTheCallMissItsDeadlineAndCountsOnceItApplied) {
  // Node 3's writer stops in its message listener (after the apply) while `hold` is set: the ask
  // behind the message waits.
  auto hold = std::make_shared<std::atomic<bool>>(false);
  auto held_spec = quotes();
  held_spec.on_message = [hold](const engine::Heard&) {
    while (hold->load()) std::this_thread::sleep_for(1ms);
  };
  auto n1 = node(3, {quotes()});
  auto n2 = node(1, {quotes()});
  auto n3 = node(2, {held_spec});
  ASSERT_TRUE(n1 && n2 && n3);
  auto t1 = n1->table<Quote>("quotes");
  auto t3 = n3->table<Quote>("quotes");
  ASSERT_TRUE(t3.get("AAPL"));
  hold->store(true);
  auto late = t1.publish_and_wait("AAPL", Quote{44, 45}, 1s);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), make_error_code(Errc::kTimeout));
  EXPECT_NE(late.error().message().find("2 of 3 nodes applied it"), std::string::npos)
      << late.error().message();
  hold->store(false);
  // The write stands; node 3 applies it and then answers the ask it heard.
  EXPECT_TRUE(eventually(
      [&] {
        double bid = 0;
        return t3.try_read("AAPL", [&bid](const Quote& q) { bid = q.bid; }) && bid == 44;
      },
      10s));
  EXPECT_TRUE(eventually([&] { return n3->stats().tables[0].writer.receipts == 1; }, 10s));
  // The next call is answered by all three.
  auto next = t1.publish_and_wait("AAPL", Quote{46, 47}, 10s);
  ASSERT_TRUE(next) << next.error().message();
  EXPECT_EQ(*next, 3u);
}

TEST_F(BroadcastReceipts, TheStringFaceOnABrandedTable) {
  LoaderProbe probe;
  auto spec = table_spec("users", "USR", CoherenceMode::kBroadcast, probe.answer("alice"));
  auto n1 = node(3, {spec});
  auto n2 = node(1, {spec});
  ASSERT_TRUE(n1 && n2);
  const BrandedId id = fresh_id("USR");
  ASSERT_TRUE(n2->get("users", id.view()));
  auto applied = n1->publish_and_wait("users", id.view(), "bob", 10s);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, 2u);
  // The branded table carries no value: node 2's older row is gone, its next read is L2's.
  auto got = n2->get("users", id.view());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, "bob");
  // A refusal is the publish's: nothing written, nothing asked.
  auto bad = n1->publish_and_wait("users", "ORD0KHTOWnGLuC", "x", 1s);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), make_error_code(Errc::kKind));
  EXPECT_EQ(count_keys(client(), "ecc:rcpt:{users}:*"), 1u);
}

TEST_F(BroadcastReceipts, AnAskForAWriteTheRingDroppedIsWithheld) {
  // The ask alone, as a publisher that lost nothing would send it after a message this node
  // never applied: its row stays older, so it withholds its receipt.
  auto n = node(1, {quotes()});
  ASSERT_TRUE(n);
  auto t = n->table<Quote>("quotes");
  ASSERT_TRUE(t.get("AAPL"));
  const std::string old = row_version(t, "AAPL");
  const BrandedId v = newer_than("QTE", BrandedId::parse(old).value());
  const BrandedId receipt = fresh_id("RCP");
  const std::string channel = table::ask_channel("quotes").value();
  auto heard = command_argv(client(),
                            {"PUBLISH", channel, std::string(receipt.view()) + ":AAPL:" + v.str()});
  ASSERT_TRUE(heard);
  EXPECT_EQ(heard->integer, 1) << "the node's subscriber hears the ask";
  EXPECT_TRUE(eventually([&] { return n->stats().tables[0].writer.receipts_withheld == 1; }, 10s));
  EXPECT_EQ(n->stats().tables[0].writer.receipts, 0u);
  const std::string key = table::receipt_key("quotes", receipt.view()).value();
  EXPECT_EQ(command_argv(client(), {"EXISTS", key})->integer, 0);
  // The same ask for the version the row holds is answered; garbage is counted, never answered.
  auto same =
      command_argv(client(), {"PUBLISH", channel, std::string(receipt.view()) + ":AAPL:" + old});
  ASSERT_TRUE(same);
  EXPECT_TRUE(eventually([&] { return n->stats().tables[0].writer.receipts == 1; }, 10s));
  EXPECT_TRUE(eventually([&] { return l2_raw(client(), key) == "1"; }, 10s));
  const auto garbage = n->stats().tables[0].garbage;
  ASSERT_TRUE(command_argv(client(), {"PUBLISH", channel, "not an ask"}));
  EXPECT_TRUE(eventually([&] { return n->stats().tables[0].garbage == garbage + 1; }, 10s));
}

// ---- The tracking lane: the ask rides the tracking connection, behind the invalidations ----

engine::TableSpec tracked_quotes() {
  engine::TableSpec s = quotes();
  s.coherence = CoherenceMode::kTracking;
  return s;
}

TEST_F(BroadcastReceipts, TrackingAnsweredOnceEveryNodeDroppedItsRow) {
  auto hold = std::make_shared<std::atomic<bool>>(false);
  auto held_spec = tracked_quotes();
  held_spec.on_message = [hold](const engine::Heard&) {
    while (hold->load()) std::this_thread::sleep_for(1ms);
  };
  auto n1 = node(3, {tracked_quotes()});
  auto n2 = node(1, {tracked_quotes()});
  auto n3 = node(2, {held_spec});
  ASSERT_TRUE(n1 && n2 && n3);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  auto t3 = n3->table<Quote>("quotes");
  ASSERT_TRUE(t2.get("AAPL"));
  ASSERT_TRUE(t3.get("AAPL"));
  auto applied = t1.publish_and_wait("AAPL", Quote{42, 43}, 10s);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, 3u);
  EXPECT_FALSE(holds_key(t2, "AAPL")) << "the invalidation dropped it before the ask";
  EXPECT_FALSE(holds_key(t3, "AAPL"));
  auto got = t2.get("AAPL");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->bid, 42);

  // Node 3's writer held: its invalidation waits, and so does its receipt.
  ASSERT_TRUE(t3.get("AAPL"));
  hold->store(true);
  auto late = t1.publish_and_wait("AAPL", Quote{44, 45}, 1s);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), make_error_code(Errc::kTimeout));
  EXPECT_NE(late.error().message().find("2 of 3 nodes applied it"), std::string::npos)
      << late.error().message();
  hold->store(false);
  EXPECT_TRUE(eventually([&] { return n3->stats().tables[0].writer.receipts == 2; }, 10s));
  EXPECT_FALSE(holds_key(t3, "AAPL"));
}

}  // namespace
}  // namespace echo::test
