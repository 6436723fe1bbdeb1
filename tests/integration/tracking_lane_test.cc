// SPDX-License-Identifier: MIT
// The tracking lane (CoherenceMode::kTracking, docs/wire.md, "Table semantics") against a real
// redis-server: the server's own invalidations (CLIENT TRACKING ON BCAST PREFIX ecc:{t}:) drop
// rows; a nil key list flushes the table; a reconnect flushes and tracks again; raw values written
// by a plain client; and the fill race, staged deterministically with fill_hold: a fill an
// invalidation overtook is served to the readers that asked before it and never cached.
#include <hiredis/hiredis.h>

#include <future>
#include <optional>
#include <string>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Errc;
using engine::L2Format;
using engine::Source;
using table::BrandedId;

class TrackingLane : public SingleServerTest {};

engine::TableSpec tracking_spec(std::string name, engine::Loader loader) {
  return table_spec(std::move(name), "TRK", CoherenceMode::kTracking, std::move(loader));
}

// A text-key table over raw values (what programs other than EchoStore write).
engine::TableSpec raw_spec(std::string name) {
  engine::TableSpec s = table_spec(std::move(name), "RAW", CoherenceMode::kTracking,
                                   [](const engine::Key&) -> engine::LoadResult {
                                     return engine::Loaded{"loaded", std::nullopt};
                                   });
  s.keys = engine::KeyKind::kText;
  s.l2_format = L2Format::kRaw;
  return s;
}

void set_framed(redisContext* c, const std::string& key, const BrandedId& version,
                std::string_view value) {
  const std::string framed = engine::frame_l2_value(version, value);
  RedisReply r = command(c, "SET %b %b", key.data(), key.size(), framed.data(), framed.size());
  ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS);
}

std::uint64_t applied(const Engine& e, std::string_view table) {
  return writer_of(e, table).stats().applied;
}

// Invalidations the node's writer applied, whatever their verdict.
std::uint64_t heard(const Engine& e, std::string_view table) {
  const auto s = writer_of(e, table).stats();
  return s.applied + s.stale;
}

// Runs `write` (a plain client's change under the prefix), then waits until every node in
// `nodes` applied one more invalidation: its push travels on another connection than a read's
// GET, so a read right after the write could cache a row the late push then drops.
template <class Write>
void write_and_settle(std::initializer_list<const Engine*> nodes, std::string_view table,
                      Write write) {
  std::vector<std::uint64_t> before;
  for (const Engine* n : nodes) before.push_back(heard(*n, table));
  write();
  std::size_t i = 0;
  for (const Engine* n : nodes) {
    const std::uint64_t was = before[i++];
    ASSERT_TRUE(eventually([&] { return heard(*n, table) > was; })) << "no invalidation came";
  }
}

TEST_F(TrackingLane, AnotherClientsSetDropsTheRowAndTheNextReadSeesIt) {
  LoaderProbe loader;
  auto a = node(1, {tracking_spec("limits", loader.answer("max=10"))});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->directory().at(0).coherence, CoherenceMode::kTracking);
  EXPECT_EQ(engine::to_string(a->directory().at(0).coherence), "tracking");
  EXPECT_EQ(a->stats().tracking_sends, 1u);
  EXPECT_EQ(a->stats().tracking_refusals, 0u);

  const BrandedId name = fresh_id("TRK");
  const std::string key = l2_key("limits", name);
  write_and_settle({a.get()}, "limits",
                   [&] { set_framed(client(), key, fresh_id("TRK"), "max=20"); });
  auto first = a->get("limits", name.view());
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(first->source, Source::kL2);
  EXPECT_EQ(first->value, "max=20");
  auto hit = a->get("limits", name.view());
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->source, Source::kL1);

  // A plain client's SET: no message of ours, no version the lane reads; the server tells.
  const std::uint64_t before = applied(*a, "limits");
  set_framed(client(), key, fresh_id("TRK"), "max=30");
  ASSERT_TRUE(eventually([&] { return applied(*a, "limits") > before; }));
  EXPECT_FALSE(l1_holds(*a, "limits", name));
  auto after = a->get("limits", name.view());
  ASSERT_TRUE(after);
  EXPECT_NE(after->source, Source::kL1);
  EXPECT_EQ(after->value, "max=30");

  // So do an expiry and a DEL: any change under the prefix.
  ASSERT_TRUE(a->get("limits", name.view()));  // cached again
  ASSERT_TRUE(l1_holds(*a, "limits", name));
  ASSERT_TRUE(command(client(), "DEL %b", key.data(), key.size()));
  ASSERT_TRUE(eventually([&] { return !l1_holds(*a, "limits", name); }));
  EXPECT_EQ(a->stats().unrouted_pushes, 0u);
  EXPECT_EQ(loader.runs(), 0);
}

TEST_F(TrackingLane, RawValuesWrittenByAPlainClientAreCachedAndInvalidated) {
  auto a = node(1, {raw_spec("px")});
  auto b = node(2, {raw_spec("px")});
  ASSERT_TRUE(a && b);
  write_and_settle({a.get(), b.get()}, "px",
                   [&] { ASSERT_TRUE(command(client(), "SET ecc:{px}:AAPL 189.10")); });
  for (Engine* n : {a.get(), b.get()}) {
    auto got = n->get("px", "AAPL");
    ASSERT_TRUE(got) << got.error().message();
    EXPECT_EQ(got->value, "189.10") << "a raw value is the whole value, no frame";
    EXPECT_EQ(got->source, Source::kL2);
    ASSERT_TRUE(got->version) << "the row carries this node's stamp";
    EXPECT_EQ(got->version->ns(), "RAW");
    auto hit = n->get("px", "AAPL");
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->source, Source::kL1);
  }
  ASSERT_TRUE(command(client(), "SET ecc:{px}:AAPL 189.20"));
  for (Engine* n : {a.get(), b.get()}) {
    ASSERT_TRUE(eventually([&] {
      auto got = n->get("px", "AAPL");
      return got && got->value == "189.20";
    })) << "a node kept the old raw value";
  }
  // EchoStore's own put writes raw too, and other nodes hear it from the server.
  write_and_settle({a.get(), b.get()}, "px", [&] { ASSERT_TRUE(a->put("px", "MSFT", "420.00")); });
  EXPECT_EQ(l2_raw(client(), "ecc:{px}:MSFT"), "420.00");
  ASSERT_TRUE(b->get("px", "MSFT"));
  ASSERT_TRUE(a->publish("px", "MSFT", "421.00")) << "publish on a tracking table is put";
  ASSERT_TRUE(eventually([&] {
    auto got = b->get("px", "MSFT");
    return got && got->value == "421.00";
  }));
  // A miss the loader answers: written NX, raw.
  auto loaded = a->get("px", "NVDA");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->source, Source::kLoader);
  EXPECT_EQ(l2_raw(client(), "ecc:{px}:NVDA"), "loaded");
  // No version in L2: the verb that orders versions refuses, nothing on the wire.
  auto dropped = a->drop_l2("px", "AAPL", fresh_id("RAW"));
  ASSERT_FALSE(dropped);
  EXPECT_EQ(dropped.error(), Errc::kNotVersioned);
}

TEST_F(TrackingLane, ANilInvalidateFlushesTheTable) {
  LoaderProbe loader;
  auto a = node(1, {tracking_spec("limits", loader.answer("max=10")),
                    table_spec("plain", "PLN", CoherenceMode::kNone, loader.answer("p"))});
  ASSERT_TRUE(a);
  const BrandedId x = fresh_id("TRK"), y = fresh_id("TRK");
  for (const BrandedId& n : {x, y}) {
    // A loader's fill writes L2, and that SET's own invalidation keeps it from being cached
    // (TableWriter::serve_forgotten): the second read caches from L2.
    ASSERT_TRUE(a->get("limits", n.view()));
    ASSERT_TRUE(
        eventually([&] { return a->get("limits", n.view()) && l1_holds(*a, "limits", n); }));
  }
  const std::uint64_t flushes = writer_of(*a, "limits").map().stats().invalidated;
  ASSERT_TRUE(command(client(), "FLUSHALL"));  // invalidate with a nil key list
  ASSERT_TRUE(eventually([&] { return writer_of(*a, "limits").map().size() == 0; }));
  EXPECT_GE(writer_of(*a, "limits").map().stats().invalidated, flushes + 2);
  EXPECT_FALSE(writer_of(*a, "limits").stats().suspended) << "a flush, not a loss: still caching";
  auto again = a->get("limits", x.view());
  ASSERT_TRUE(again);
  EXPECT_NE(again->source, Source::kL1);
}

TEST_F(TrackingLane, AReconnectFlushesAndTracksAgain) {
  LoaderProbe loader;
  auto a = node(1, {tracking_spec("limits", loader.answer("max=10"))});
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("TRK");
  const std::string key = l2_key("limits", name);
  write_and_settle({a.get()}, "limits",
                   [&] { set_framed(client(), key, fresh_id("TRK"), "max=20"); });
  ASSERT_TRUE(a->get("limits", name.view()));
  ASSERT_TRUE(l1_holds(*a, "limits", name));

  // Kill the subscriber connection (CLIENT SETNAME echostore-sub) and write while it is gone: the
  // server forgets its tracking with the client, so this invalidation is lost.
  RedisReply list = command(client(), "CLIENT LIST");
  ASSERT_TRUE(list && list->type == REDIS_REPLY_STRING);
  const std::string clients(list->str, list->len);
  const std::size_t at = clients.find("name=echostore-sub");
  ASSERT_NE(at, std::string::npos) << clients;
  const std::size_t line =
      clients.rfind('\n', at) == std::string::npos ? 0 : clients.rfind('\n', at) + 1;
  const std::string id = clients.substr(line + 3, clients.find(' ', line) - line - 3);  // "id=N "
  RedisReply killed = command(client(), "CLIENT KILL ID %s", id.c_str());
  ASSERT_TRUE(killed && killed->type == REDIS_REPLY_INTEGER);
  EXPECT_EQ(killed->integer, 1);
  set_framed(client(), key, fresh_id("TRK"), "max=40");

  ASSERT_TRUE(eventually(
      [&] {
        const auto s = a->stats();
        return s.tracking_sends >= 2 && !s.tables[0].writer.suspended;
      },
      15s))
      << "the tracking command was not sent again, or the table never resumed";
  EXPECT_EQ(a->stats().tracking_refusals, 0u);
  EXPECT_GE(writer_of(*a, "limits").stats().disconnect_flushes, 1u);
  auto after = a->get("limits", name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_NE(after->source, Source::kL1) << "a row from before the loss was served";
  EXPECT_EQ(after->value, "max=40");
  auto cached = a->get("limits", name.view());
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->source, Source::kL1) << "caching resumes once tracking is on again";
  // And the new tracking works: a later SET still drops the row.
  set_framed(client(), key, fresh_id("TRK"), "max=50");
  ASSERT_TRUE(eventually([&] { return !l1_holds(*a, "limits", name); }));
}

// The race Redis's client-side caching documentation describes, staged: the fill's GET reads v1,
// the answer is held (fill_hold), another client SETs v2 and its invalidation is applied while
// the answer waits. The reader that asked before gets v1 (its read began before the invalidation
// reached the node) and nothing is cached; a reader that joins after the invalidation gets v2.
TEST_F(TrackingLane, AFillAnInvalidationOvertookIsServedButNotCached) {
  LoaderProbe loader;
  auto spec = tracking_spec("limits", loader.answer("max=10"));
  spec.fill_hold = std::chrono::seconds(2);
  auto a = node(1, {spec});
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("TRK");
  const std::string key = l2_key("limits", name);
  write_and_settle({a.get()}, "limits",
                   [&] { set_framed(client(), key, fresh_id("TRK"), "max=20"); });

  std::promise<engine::Result<engine::Got>> early, late;
  a->get_async("limits", name.view(),
               [&](engine::Result<engine::Got> r) { early.set_value(std::move(r)); });
  ASSERT_TRUE(eventually([&] { return writer_of(*a, "limits").stats().held_fills == 1; }))
      << "the fill's GET never came back";
  const std::uint64_t before = writer_of(*a, "limits").stats().stale;
  set_framed(client(), key, fresh_id("TRK"), "max=30");
  ASSERT_TRUE(eventually([&] { return writer_of(*a, "limits").stats().stale > before; }))
      << "the invalidation was not applied while the fill was held";
  a->get_async("limits", name.view(),
               [&](engine::Result<engine::Got> r) { late.set_value(std::move(r)); });

  auto e = early.get_future().get();
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->value, "max=20") << "the early reader's own read";
  auto l = late.get_future().get();
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l->value, "max=30") << "a reader that asked after the invalidation got the old value";
  const auto s = writer_of(*a, "limits").stats();
  EXPECT_EQ(s.forgotten_fills, 1u);
  ASSERT_TRUE(eventually(
      [&] {
        auto got = a->get("limits", name.view());
        return got && got->value == "max=30" && got->source == Source::kL1;
      },
      10s))
      << "the fresh value never settled in L1";
  EXPECT_EQ(l2_raw(client(), key).substr(14), "max=30");
}

// NOLOOP is off: the node's own write comes back as an invalidation and drops the row it just
// cached; the next read refills. Never a stale read, at the price of that refill.
TEST_F(TrackingLane, TheNodesOwnPutIsInvalidatedToo) {
  LoaderProbe loader;
  auto a = node(1, {tracking_spec("limits", loader.answer("max=10"))});
  auto b = node(2, {tracking_spec("limits", loader.answer("max=10"))});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("TRK");
  write_and_settle({a.get(), b.get()}, "limits", [&] {
    set_framed(client(), l2_key("limits", name), fresh_id("TRK"), "max=20");
  });
  ASSERT_TRUE(b->get("limits", name.view()));
  ASSERT_TRUE(l1_holds(*b, "limits", name));
  const std::uint64_t before = applied(*b, "limits");
  const auto v = a->put("limits", name.view(), "max=99");
  ASSERT_TRUE(v);
  for (Engine* n : {a.get(), b.get()}) {
    ASSERT_TRUE(eventually([&] {
      auto got = n->get("limits", name.view());
      return got && got->value == "max=99";
    }));
  }
  EXPECT_GT(applied(*b, "limits"), before) << "b's row went by the server's invalidation";
}

// Anything but +OK to CLIENT TRACKING fails the start. An ACL that forbids the
// subcommand (the boot's CLIENT SETNAME still passes) makes the server answer NOPERM.
TEST_F(TrackingLane, ATrackingCommandTheServerRefusesFailsTheStart) {
  ASSERT_TRUE(command(client(), "ACL SETUSER default -client|tracking"));
  Engine e(node_options(server(), 1), {tracking_spec("limits", answering("x"))});
  const std::error_code ec = e.start(std::chrono::seconds(5));
  ASSERT_TRUE(command(client(), "ACL SETUSER default +@all"));
  EXPECT_EQ(ec, make_error_code(Errc::kTrackingRefused)) << ec.message();
  EXPECT_EQ(ec.message(), "tracking_refused");
  EXPECT_EQ(e.stats().tracking_refusals, 1u);
  EXPECT_FALSE(e.running());
}

TEST_F(TrackingLane, ConfigurationRefusals) {
  auto raw_broadcast = raw_spec("px");
  raw_broadcast.coherence = CoherenceMode::kBroadcast;
  EXPECT_THROW(engine::validate(raw_broadcast), engine::ConfigError) << "raw needs tracking";
  auto hold = tracking_spec("limits", answering("x"));
  hold.fill_hold = std::chrono::seconds(11);
  EXPECT_THROW(engine::validate(hold), engine::ConfigError);
  engine::EngineOptions cluster = node_options(server(), 1);
  cluster.mode = engine::ServerMode::kCluster;
  try {
    Engine e(cluster, {tracking_spec("limits", answering("x"))});
    ADD_FAILURE() << "a tracking table in cluster mode was accepted";
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tracking"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace echo::test
