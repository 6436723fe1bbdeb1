// SPDX-License-Identifier: MIT
// The writer's apply of carried values (ItemKind::kCarried): a newer value replaces the row in
// place, an older one is stale, an absent row is inserted only under carry upsert, and a value
// that overtakes a flight makes the flight read again, whether or not the node holds the row
// (the race the referee's carried contestants caught: a reader joining that flight after the
// message was answered the value the flight had read before it).
#include "table_writer_fixture.h"

namespace echo::engine {
namespace {

// A carried item for `name` at `version`: its bytes ("key}version value") live in `buf`, which
// must outlive the item's apply.
CoherenceItem carried(std::string& buf, const BrandedId& name, const BrandedId& version,
                      std::string_view value) {
  buf = std::string(name.view()) + "}" + std::string(version.view()) + std::string(value);
  CoherenceItem item{table::CoherenceMessage{version, version}, 0, 0};
  item.key = buf.data();
  item.key_size = static_cast<std::uint8_t>(name.view().size());
  item.value_size = static_cast<std::uint32_t>(value.size());
  item.kind = ItemKind::kCarried;
  return item;
}

// A broadcast writer whose table carries values (`carry`), one ring, caching.
struct CarriedWriter {
  explicit CarriedWriter(Carry carry, bool park_l2 = false)
      : w(make_spec(carry), ports(park_l2), 1), ring(w.add_ring(ring::FullPolicy::kFlush)) {
    w.start();
    w.subscription_confirmed();
    sync(w);
  }
  static TableSpec make_spec(Carry carry) {
    TableSpec s = spec(CoherenceMode::kBroadcast);
    s.carry = carry;
    return s;
  }
  WriterPorts ports(bool park) {
    l2.set_park(park);
    return l2.ports();
  }
  FakeL2 l2;
  TableWriter w;
  CoherenceRing& ring;
};

std::string l1_value(const TableWriter& w, const BrandedId& name) {
  std::string v;
  return w.map().get(name.view(), v) ? v : std::string("<miss>");
}

TEST(TableWriterCarried, ANewerValueReplacesTheRowAndAnOlderOneIsStale) {
  CarriedWriter cw(Carry::kUpdate);
  const auto name = id("AST", 201), v1 = id("TXN", 10), v2 = id("TXN", 20);
  cw.l2.set(name, v1, "v1");
  ASSERT_EQ(get_via(cw.w, name).value, "v1");
  std::string b2, b1;
  publish_and_settle(cw.w, cw.ring, carried(b2, name, v2, "v2"));
  EXPECT_EQ(l1_value(cw.w, name), "v2");
  publish_and_settle(cw.w, cw.ring, carried(b1, name, v1, "old"));
  EXPECT_EQ(l1_value(cw.w, name), "v2");
  const WriterStats s = cw.w.stats();
  EXPECT_EQ(s.carried_updates, 1u);
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(s.stale, 1u);
  EXPECT_EQ(get_via(cw.w, name).source, Source::kL1);
}

TEST(TableWriterCarried, AnAbsentRowIsInsertedOnlyUnderUpsert) {
  for (Carry carry : {Carry::kUpdate, Carry::kUpsert}) {
    CarriedWriter cw(carry);
    const auto name = id("AST", 202), v = id("TXN", 30);
    std::string b;
    publish_and_settle(cw.w, cw.ring, carried(b, name, v, "pushed"));
    EXPECT_EQ(l1_value(cw.w, name), carry == Carry::kUpsert ? "pushed" : "<miss>");
    EXPECT_EQ(cw.w.stats().carried_inserts, carry == Carry::kUpsert ? 1u : 0u);
  }
}

TEST(TableWriterCarried, AValueThatOvertakesAFlightOfARowNotHeldMakesItReadAgain) {
  CarriedWriter cw(Carry::kUpdate, /*park_l2=*/true);
  const auto name = id("AST", 203), v1 = id("TXN", 10), v2 = id("TXN", 20);
  cw.l2.set(name, v1, "old");
  std::promise<GetOutcome> first;
  cw.w.miss(name, [&first](GetOutcome&& o) { first.set_value(std::move(o)); });
  sync(cw.w);  // the flight's read of v1 is parked
  // v2 lands in L2 and its carried message here (the node holds no row: nothing inserted).
  cw.l2.set(name, v2, "new");
  std::string b;
  publish_and_settle(cw.w, cw.ring, carried(b, name, v2, "new"));
  // A reader that asks after the message joins the flight: it must not get v1.
  std::promise<GetOutcome> second;
  cw.w.miss(name, [&second](GetOutcome&& o) { second.set_value(std::move(o)); });
  sync(cw.w);
  cw.l2.release_all();  // the v1 reply lands: the flight was overtaken, so it reads again
  cw.l2.set_park(false);
  cw.l2.release_all();
  for (auto* p : {&first, &second}) {
    auto got = p->get_future().get();
    ASSERT_FALSE(got.ec) << got.ec.message();
    EXPECT_EQ(got.value, "new");
  }
  EXPECT_GE(cw.w.stats().flight_restarts, 1u);
}

}  // namespace
}  // namespace echo::engine
