// SPDX-License-Identifier: MIT
// Carried values against a real redis-server (docs/wire.md, "Carried values"): a publish on one
// node replaces another node's row in place, newer wins, with no read of L2; a node that does not
// hold the row inserts it only under carry upsert; a value over carry_max_bytes travels as the
// version only; a node that does not carry values applies a carried message as a drop; the job
// lane carries the value in the job (and its lead). Reads that never wait: try_read and try_get
// answer a miss at once and start one refill; a table with on_miss refill answers `miss` from get.
#include <hiredis/hiredis.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::Carry;
using engine::CoherenceMode;
using engine::Errc;
using engine::KeyKind;
using engine::OnMiss;
using engine::TableSpec;

class Carried : public SingleServerTest {};

TableSpec quotes(CoherenceMode mode, const LoaderProbe& loader, Carry carry = Carry::kAuto) {
  TableSpec s = table_spec("quotes", "QTE", mode, loader.answer("px=100.00"));
  s.keys = KeyKind::kText;
  s.carry = carry;
  return s;
}

// The value `table` holds for `key` in L1 now (nullopt on a miss), starting no refill.
std::optional<std::string> l1_value(engine::Engine& e, std::string_view table,
                                    std::string_view key) {
  std::string value;
  if (!writer_of(e, table).map().get(key, value)) return std::nullopt;
  return value;
}

// In every test node 2 publishes and node 1 reads: within one millisecond node 2's versions are
// the newer (docs/wire.md, "Branded ids"), so a publish right after node 1's fill is never stale.

TEST_F(Carried, APublishReplacesAnotherNodesRowInPlaceWithNoReadOfL2) {
  LoaderProbe loader;
  const TableSpec spec = quotes(CoherenceMode::kBroadcast, loader);  // text keys: auto = update
  ASSERT_EQ(engine::carry_of(spec), Carry::kUpdate);
  auto a = node(2, {spec});
  auto b = node(1, {spec});
  ASSERT_TRUE(a && b);
  auto fill = b->get("quotes", "AAPL");
  ASSERT_TRUE(fill) << fill.error().message();
  const auto before = writer_of(*b, "quotes").stats();
  for (int i = 1; i <= 50; ++i) {
    const std::string px = "px=" + std::to_string(100 + i);
    ASSERT_TRUE(a->publish("quotes", "AAPL", px)) << i;
    EXPECT_TRUE(eventually([&] { return l1_value(*b, "quotes", "AAPL") == px; })) << i;
  }
  const auto after = writer_of(*b, "quotes").stats();
  EXPECT_EQ(after.carried_updates - before.carried_updates, 50u);
  EXPECT_EQ(after.fills, before.fills) << "no refill: the value came with the message";
  EXPECT_EQ(after.l2_hits, before.l2_hits);
  EXPECT_EQ(loader.runs(), 1);
  // The row's version is the publish's.
  auto v = a->publish("quotes", "AAPL", "px=999");
  ASSERT_TRUE(v);
  table::IdBytes version{};
  std::string value;
  ASSERT_TRUE(eventually([&] {
    return writer_of(*b, "quotes").map().get("AAPL", value, &version) && value == "px=999";
  }));
  EXPECT_EQ(table::view(version), v->view());
}

TEST_F(Carried, UpdateKeepsL1ToWhatTheNodeReadsAndUpsertInsertsWhatIsPublished) {
  LoaderProbe loader;
  TableSpec update = quotes(CoherenceMode::kBroadcast, loader, Carry::kUpdate);
  update.try_refill = false;
  TableSpec upsert = update;
  upsert.name = "board";
  upsert.carry = Carry::kUpsert;
  auto a = node(2, {update, upsert});
  auto b = node(1, {update, upsert});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->publish("quotes", "MSFT", "px=1"));
  ASSERT_TRUE(a->publish("board", "MSFT", "px=2"));
  ASSERT_TRUE(eventually([&] { return l1_value(*b, "board", "MSFT") == "px=2"; }));
  // Both messages were applied in order on one io thread's ring per table; the board's landed,
  // so give the quotes' the same time and check that it inserted nothing.
  ASSERT_TRUE(eventually([&] { return writer_of(*b, "quotes").stats().stale >= 1; }));
  EXPECT_EQ(l1_value(*b, "quotes", "MSFT"), std::nullopt);
  EXPECT_EQ(writer_of(*b, "board").stats().carried_inserts, 1u);
  // The update-only node still reads the new value, from L2.
  auto got = b->get("quotes", "MSFT");
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->value, "px=1");
}

TEST_F(Carried, AValueOverTheBoundTravelsAsTheVersionAndTheReaderRefills) {
  LoaderProbe loader;
  TableSpec spec = quotes(CoherenceMode::kBroadcast, loader);
  spec.carry_max_bytes = 16;
  auto a = node(2, {spec});
  auto b = node(1, {spec});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(b->get("quotes", "BIG"));
  const std::string big(64, 'x');
  ASSERT_TRUE(a->publish("quotes", "BIG", big));
  EXPECT_TRUE(eventually([&] { return !l1_value(*b, "quotes", "BIG"); })) << "dropped";
  EXPECT_EQ(writer_of(*b, "quotes").stats().carried_updates, 0u);
  auto got = b->get("quotes", "BIG");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, big);
}

TEST_F(Carried, ANodeThatDoesNotCarryAppliesACarriedMessageAsADrop) {
  LoaderProbe loader;
  auto a = node(2, {quotes(CoherenceMode::kBroadcast, loader, Carry::kUpdate)});
  auto b = node(1, {quotes(CoherenceMode::kBroadcast, loader, Carry::kOff)});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(b->get("quotes", "IBM"));
  ASSERT_TRUE(a->publish("quotes", "IBM", "px=7"));
  EXPECT_TRUE(eventually([&] { return !l1_value(*b, "quotes", "IBM"); }));
  EXPECT_EQ(b->stats().tables.front().garbage, 0u);
  auto got = b->get("quotes", "IBM");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, "px=7");
}

TEST_F(Carried, BrandedTablesKeepThe29ByteMessageUnlessTheyAsk) {
  LoaderProbe loader;
  TableSpec spec = table_spec("ids", "AST", CoherenceMode::kBroadcast, loader.answer("v0"));
  EXPECT_EQ(engine::carry_of(spec), Carry::kOff);
  spec.carry = Carry::kUpdate;
  auto a = node(2, {spec});
  auto b = node(1, {spec});
  ASSERT_TRUE(a && b);
  const table::BrandedId name = fresh_id("AST");
  ASSERT_TRUE(b->get("ids", name.view()));
  ASSERT_TRUE(a->publish("ids", name.view(), "v1"));
  EXPECT_TRUE(eventually([&] { return l1_value(*b, "ids", name.view()) == "v1"; }));
  EXPECT_EQ(writer_of(*b, "ids").stats().carried_updates, 1u);
}

TEST_F(Carried, TheJobLaneCarriesTheValueInTheJob) {
  LoaderProbe loader;
  TableSpec spec = quotes(CoherenceMode::kJob, loader);
  for (bool lead : {true, false}) {
    spec.name = lead ? "jq_lead" : "jq";
    spec.job_lead = lead;
    auto a = node(2, {spec});
    auto b = node(1, {spec});
    ASSERT_TRUE(a && b);
    ASSERT_TRUE(b->get(spec.name, "EUR"));
    for (int i = 1; i <= 20; ++i) {
      const std::string px = "px=" + std::to_string(i);
      ASSERT_TRUE(a->publish(spec.name, "EUR", px)) << i;
      EXPECT_TRUE(eventually([&] { return l1_value(*b, spec.name, "EUR") == px; }))
          << i << " lead " << lead;
    }
    const auto s = writer_of(*b, spec.name).stats();
    EXPECT_GE(s.carried_updates, 20u) << "lead " << lead;
    EXPECT_EQ(s.fills, 1u) << "lead " << lead;
  }
}

TEST_F(Carried, CarryingValuesRefusesTheSharedQueueOfTheOriginalsConsumers) {
  LoaderProbe loader;
  TableSpec spec = quotes(CoherenceMode::kJob, loader);
  spec.job_shared_queue = true;
  try {
    engine::validate(spec);
    FAIL() << "no ConfigError";
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("job_shared_queue"), std::string::npos) << e.what();
  }
  spec.carry = Carry::kOff;
  EXPECT_NO_THROW(engine::validate(spec));
}

TEST_F(Carried, StartRefusesToCarryValuesToASubscriberThatReadsOnly29Bytes) {
  // An original node's subscription: the table's channel, without the carried marker.
  std::unique_ptr<redisContext, decltype(&redisFree)> original(
      redisConnect(server().host().c_str(), server().port()), &redisFree);
  ASSERT_TRUE(original && !original->err);
  auto* r = static_cast<redisReply*>(redisCommand(original.get(), "SUBSCRIBE ecc:{quotes}:coh"));
  ASSERT_NE(r, nullptr);
  freeReplyObject(r);
  LoaderProbe loader;
  {
    engine::Engine carrying(node_options(server(), 1), {quotes(CoherenceMode::kBroadcast, loader)});
    const engine::Error e = carrying.start();
    EXPECT_EQ(e, Errc::kMixedFrames) << e.message();
    EXPECT_NE(e.message().find("1 subscriber(s) of ecc:{quotes}:coh"), std::string::npos)
        << e.message();
    EXPECT_FALSE(carrying.running());
  }
  // The same table with carry off starts beside it (it sends 29-byte messages only).
  auto plain = node(1, {quotes(CoherenceMode::kBroadcast, loader, Carry::kOff)});
  EXPECT_TRUE(plain);
  // And once the original left, a carrying node starts beside the plain one (which reads both).
  original.reset();
  ASSERT_TRUE(eventually([&] {
    engine::Engine probe(node_options(server(), 2), {quotes(CoherenceMode::kBroadcast, loader)});
    return !probe.start();
  }));
}

TEST_F(Carried, TryReadNeverWaitsAndItsMissStartsOneRefill) {
  LoaderProbe loader;
  auto a = node(1, {quotes(CoherenceMode::kBroadcast, loader)});
  ASSERT_TRUE(a);
  auto quotes_table = a->table<std::string>("quotes");
  bool ran = false;
  EXPECT_FALSE(
      quotes_table.try_read("GOOG", [&](std::string_view, std::string_view) { ran = true; }));
  EXPECT_FALSE(ran);
  // Many misses of one key: one refill, one loader run.
  for (int i = 0; i < 1000; ++i) quotes_table.try_get("GOOG");
  EXPECT_TRUE(eventually([&] { return quotes_table.try_get("GOOG") == "px=100.00"; }));
  EXPECT_EQ(loader.runs(), 1);
  std::string seen;
  EXPECT_TRUE(quotes_table.try_read("GOOG", [&](std::string_view v, std::string_view version) {
    seen = v;
    EXPECT_EQ(version.size(), 14u);
  }));
  EXPECT_EQ(seen, "px=100.00");
  // A bad key misses and starts nothing.
  EXPECT_FALSE(quotes_table.try_get("bad key"));
}

TEST_F(Carried, OnMissRefillAnswersMissAtOnceAndTheNextReadHits) {
  LoaderProbe loader;
  TableSpec spec = quotes(CoherenceMode::kBroadcast, loader);
  spec.on_miss = OnMiss::kRefill;
  auto a = node(1, {spec});
  ASSERT_TRUE(a);
  auto got = a->get("quotes", "NVDA");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), Errc::kMiss) << got.error().message();
  auto quotes_table = a->table<std::string>("quotes");
  EXPECT_TRUE(eventually([&] {
    auto r = quotes_table.get("NVDA");
    return r && *r == "px=100.00";
  }));
  EXPECT_EQ(loader.runs(), 1);
}

}  // namespace
}  // namespace echo::test
