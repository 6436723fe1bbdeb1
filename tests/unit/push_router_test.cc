// SPDX-License-Identifier: MIT
// The push router without a server: RESP3 pushes decoded from bytes go in, and what reaches each
// table's writer (rows dropped newer-wins, tables confirmed, invalidations) and what is counted
// (pushes, garbage, unrouted) comes out.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <echo/io/resp3_decoder.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include "push_router.h"

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace std::chrono_literals;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

// One RESP3 push of bulk strings (an empty optional: a null), decoded as the subscriber's
// connection decodes it.
io::Resp3Owned push(std::initializer_list<std::optional<std::string_view>> parts) {
  std::string wire = ">" + std::to_string(parts.size()) + "\r\n";
  for (const auto& p : parts) {
    wire += p ? "$" + std::to_string(p->size()) + "\r\n" + std::string(*p) + "\r\n" : "_\r\n";
  }
  io::Resp3Decoder dec;
  dec.feed(wire);
  const io::Resp3Next next = dec.next();
  EXPECT_EQ(next.status, io::Resp3Status::value);
  return next.value.to_owned();
}

// ["invalidate", [keys...]]
io::Resp3Owned invalidate(std::initializer_list<std::string_view> keys) {
  std::string wire = ">2\r\n$10\r\ninvalidate\r\n*" + std::to_string(keys.size()) + "\r\n";
  for (auto k : keys) wire += "$" + std::to_string(k.size()) + "\r\n" + std::string(k) + "\r\n";
  io::Resp3Decoder dec;
  dec.feed(wire);
  return dec.next().value.to_owned();
}

std::string frame(const BrandedId& name, const BrandedId& version) {
  return std::string(table::view(table::make_frame(name, version)));
}

TableSpec spec(std::string name, CoherenceMode mode, KeyKind keys = KeyKind::kBranded) {
  TableSpec s;
  s.name = std::move(name);
  s.kind = "AST";
  s.keys = keys;
  s.coherence = mode;
  if (mode == CoherenceMode::kTracking) s.l2_format = L2Format::kRaw;
  s.loader = [](const Key&) -> LoadResult { return Loaded{"unused", {}}; };
  return s;
}

// One table as the engine wires it: a started writer with one ring, and the route into it.
struct Lane {
  explicit Lane(TableSpec s, int io_thread = 0)
      : w(s, WriterPorts{}, 1), ring(w.add_ring(ring::FullPolicy::kFlush)) {
    target = PushRouter::Target{&w, &ring, s.keys, &counters, io_thread};
    w.start();
  }
  void put(std::string_view name, const BrandedId& version) {
    std::promise<void> done;
    w.put(name, "v", version, [&done] { done.set_value(); });
    ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  }
  bool has(std::string_view name) const {
    std::string value;
    return w.map().get(name, value);
  }
  // Waits (up to 5 s) until `name` has left the map: true when it did.
  bool gone(std::string_view name) const {
    for (int i = 0; i < 5000 && has(name); ++i) std::this_thread::sleep_for(1ms);
    return !has(name);
  }
  // Waits until the writer has given `n` verdicts in all (ring items and direct applies).
  void settle(std::uint64_t n) const {
    for (int i = 0; i < 5000 && w.stats().applied + w.stats().stale < n; ++i) {
      std::this_thread::sleep_for(1ms);
    }
  }
  TableWriter w;
  CoherenceRing& ring;
  PushRouter::Counters counters;
  PushRouter::Target target;
};

// The staging several tests share: the broadcast table "quotes" routed and confirmed, holding
// one row (AST 1) at version TXN 20.
struct Quotes {
  Quotes() {
    router.add_broadcast("ecc:{quotes}:coh", q.target);
    router.on_push(push({"subscribe", "ecc:{quotes}:coh", "1"}).view());
    q.put(name.view(), id("TXN", 20));
  }
  Lane q{spec("quotes", CoherenceMode::kBroadcast)};
  PushRouter router;
  const BrandedId name = id("AST", 1);
};

TEST(PushRouter, AMessageDropsTheRowOnlyWhenItsVersionIsNewer) {
  Lane q(spec("quotes", CoherenceMode::kBroadcast));
  PushRouter router;
  router.add_broadcast(table::coherence_channel("quotes").value(), q.target);
  router.on_push(push({"subscribe", "ecc:{quotes}:coh", "1"}).view());
  const BrandedId name = id("AST", 1);
  q.put(name.view(), id("TXN", 20));

  router.on_push(push({"message", "ecc:{quotes}:coh", frame(name, id("TXN", 10))}).view());
  q.settle(1);
  EXPECT_TRUE(q.has(name.view())) << "an older message must not erase a newer row";
  EXPECT_EQ(q.w.stats().stale, 1u);

  router.on_push(push({"message", "ecc:{quotes}:coh", frame(name, id("TXN", 30))}).view());
  q.settle(2);
  EXPECT_FALSE(q.has(name.view()));
  EXPECT_EQ(q.w.stats().applied, 1u);
  EXPECT_EQ(q.counters.pushes.load(), 2u);
  EXPECT_EQ(q.counters.garbage.load(), 0u);
  EXPECT_EQ(router.unrouted(), 0u);
}

TEST(PushRouter, ASubscribeConfirmationResumesItsTableOnly) {
  Lane q(spec("quotes", CoherenceMode::kBroadcast));
  Lane lead(spec("jobs", CoherenceMode::kJob));
  PushRouter router;
  router.add_broadcast("ecc:{quotes}:coh", q.target);
  router.add_lead("emq:{ecc.coh.jobs}:lead", lead.target);
  EXPECT_TRUE(q.w.stats().suspended);
  router.on_push(push({"subscribe", "emq:{ecc.coh.jobs}:lead", "1"}).view());
  EXPECT_TRUE(lead.w.stats().suspended) << "a lead's subscription is not the job lane's delivery";
  router.on_push(push({"subscribe", "ecc:{quotes}:coh", "2"}).view());
  for (int i = 0; i < 5000 && q.w.stats().suspended; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(q.w.stats().suspended);
  EXPECT_EQ(router.unrouted(), 0u);
  router.on_push(push({"subscribe", "ecc:{nobody}:coh", "3"}).view());
  EXPECT_EQ(router.unrouted(), 1u);
}

TEST(PushRouter, MalformedFramesAreCountedAndNeverApplied) {
  Quotes f;
  auto& [q, router, name] = f;
  for (std::string_view bad : {"", "short", "ASTAAAAAAAAAAA:TXNAAAAAAAAAAAA", "x:y"}) {
    router.on_push(push({"message", "ecc:{quotes}:coh", bad}).view());
  }
  EXPECT_EQ(q.counters.garbage.load(), 4u);
  EXPECT_EQ(q.counters.pushes.load(), 4u);
  EXPECT_TRUE(q.has(name.view()));
  EXPECT_EQ(q.w.stats().applied + q.w.stats().stale, 0u);
}

TEST(PushRouter, PushesForNoTableOrOfNoKnownShapeAreUnrouted) {
  Lane q(spec("quotes", CoherenceMode::kBroadcast));
  PushRouter router;
  router.add_broadcast("ecc:{quotes}:coh", q.target);
  router.on_push(push({"message"}).view());                                 // too short
  router.on_push(push({"message", "ecc:{other}:coh", "x"}).view());         // no such table
  router.on_push(push({"pmessage", "p", "ecc:{quotes}:coh", "x"}).view());  // not ours
  router.on_push(push({"invalidate", std::nullopt}).view());                // no tracking table
  EXPECT_EQ(router.unrouted(), 4u);
  EXPECT_EQ(q.counters.pushes.load(), 0u);
}

TEST(PushRouter, ATextKeyTableDropsByTheKeyInTheMessage) {
  Lane q(spec("books", CoherenceMode::kBroadcast, KeyKind::kText));
  PushRouter router;
  router.add_broadcast("ecc:{books}:coh", q.target);
  router.on_push(push({"subscribe", "ecc:{books}:coh", "1"}).view());
  q.put("EURUSD", id("TXN", 5));
  q.put("GBPUSD", id("TXN", 5));
  const std::string message =
      std::string(table::view(table::make_text_frame("EURUSD", id("TXN", 6)).value()));
  router.on_push(push({"message", "ecc:{books}:coh", message}).view());
  q.settle(1);
  EXPECT_FALSE(q.has("EURUSD"));
  EXPECT_TRUE(q.has("GBPUSD"));
}

TEST(PushRouter, TrackingInvalidationsForgetAKeyOrEverything) {
  Lane t(spec("prices", CoherenceMode::kTracking, KeyKind::kText));
  PushRouter router;
  router.add_tracking(table::tracking_prefix("prices").value(), t.target);
  router.tracking_confirmed();
  t.put("a", id("TXN", 1));
  t.put("b", id("TXN", 1));
  t.put("c", id("TXN", 1));
  router.on_push(invalidate({"ecc:{prices}:a", "ecc:{other}:b", "ecc:{prices}:"}).view());
  EXPECT_TRUE(t.gone("a"));
  t.put("a", id("TXN", 2));  // after the forget: the writer has dealt with it
  EXPECT_TRUE(t.has("b"));
  EXPECT_EQ(router.unrouted(), 2u) << "a key under no tracking prefix, and a prefix with no key";
  router.on_push(push({"invalidate", std::nullopt}).view());  // FLUSHALL
  EXPECT_TRUE(t.gone("a"));
  EXPECT_FALSE(t.has("b"));
  EXPECT_FALSE(t.has("c"));
  EXPECT_EQ(t.counters.pushes.load(), 2u);
}

TEST(PushRouter, AClosedRouterPutsNothingIntoARing) {
  Quotes f;
  auto& [q, router, name] = f;
  router.close();
  router.on_push(push({"message", "ecc:{quotes}:coh", frame(name, id("TXN", 30))}).view());
  EXPECT_EQ(q.counters.pushes.load(), 0u);
  EXPECT_TRUE(q.has(name.view()));
  router.reopen();
  router.on_push(push({"message", "ecc:{quotes}:coh", frame(name, id("TXN", 30))}).view());
  q.settle(1);
  EXPECT_FALSE(q.has(name.view()));
}

// A receipt ask (docs/wire.md, "Receipts"): receipt ":" message, to the table's writer, which
// answers when no older row of the key stays; its subscription confirms nothing; an ask that does
// not parse is garbage. The ask channel is subscribed before the table's own.
TEST(PushRouter, AnAskReachesItsTablesWriterAndGarbageIsCounted) {
  Quotes f;
  auto& [q, router, name] = f;
  const std::string ask = table::ask_channel("quotes").value();
  q.target.kind = "AST";  // as the engine's route names it: an ask's key must be of it
  router.add_ask(ask, q.target);
  router.on_push(push({"subscribe", ask, "2"}).view());
  EXPECT_EQ(router.unrouted(), 0u);
  const std::string receipt = id("RCP", 1).str();
  router.on_push(push({"message", ask, receipt + ":" + frame(name, id("TXN", 20))}).view());
  router.on_push(push({"message", ask, receipt + ":" + frame(name, id("TXN", 30))}).view());
  router.on_push(push({"message", ask, receipt + ":" + frame(id("AST", 2), id("TXN", 30))}).view());
  for (int i = 0; i < 5000 && q.w.stats().receipts + q.w.stats().receipts_withheld < 3; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(q.w.stats().receipts, 2u) << "the row's own version, and a key it does not hold";
  EXPECT_EQ(q.w.stats().receipts_withheld, 1u) << "a newer write whose message never came";
  const std::vector<std::string> bad = {
      "short", receipt + frame(name, id("TXN", 30)),      // no colon after the receipt
      "not-an-id-at-a:" + frame(name, id("TXN", 30)),     // no receipt id
      receipt + ":" + frame(id("USR", 1), id("TXN", 30))  // a key of another kind
  };
  for (const std::string& b : bad) router.on_push(push({"message", ask, b}).view());
  EXPECT_EQ(q.counters.garbage.load(), 4u);
  EXPECT_EQ(q.counters.pushes.load(), 0u) << "asks are not coherence pushes";
  EXPECT_EQ(router.unrouted(), 0u);
  EXPECT_EQ(router.channels_of(0),
            (std::vector<std::string>{"ecc:{quotes}:carried", ask, "ecc:{quotes}:coh"}));
}

TEST(PushRouter, ChannelsAreDealtToTheirIoThreadsAndLeadsToTheFirst) {
  Lane a(spec("a", CoherenceMode::kBroadcast), 1);
  Lane b(spec("b", CoherenceMode::kBroadcast), 0);
  Lane j(spec("j", CoherenceMode::kJob));
  Lane t(spec("t", CoherenceMode::kTracking, KeyKind::kText));
  PushRouter router;
  router.add_broadcast("ecc:{a}:coh", a.target);
  router.add_broadcast("ecc:{b}:coh", b.target);
  router.add_lead("emq:{ecc.coh.j}:lead", j.target);
  router.add_tracking("ecc:{t}:", t.target);
  // Each broadcast channel with its carried-values marker (same hash tag), on its io thread; the
  // marker first, so the channel's confirmation follows it.
  EXPECT_EQ(router.channels_of(1), (std::vector<std::string>{"ecc:{a}:carried", "ecc:{a}:coh"}));
  auto zero = router.channels_of(0);
  EXPECT_EQ(zero,
            (std::vector<std::string>{"ecc:{b}:carried", "ecc:{b}:coh", "emq:{ecc.coh.j}:lead"}));
  EXPECT_EQ(router.tracking_command(),
            (std::vector<std::string>{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ecc:{t}:"}));
  EXPECT_TRUE(PushRouter().tracking_command().empty());
}

}  // namespace
}  // namespace echo::engine
