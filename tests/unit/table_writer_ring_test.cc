// SPDX-License-Identifier: MIT
// The table writer's delivery: applied on the calling thread or through the ring, the flush
// policy once the ring refused, caching only while subscribed, serve-stale, and G6 convergence;
// a receipt ask answered only once what its ring held ahead of it is applied.

#include <optional>
#include <string>
#include <vector>

#include "table_writer_fixture.h"

namespace echo::engine {
namespace {

// A parked writer lends its token; deliver() then applies on the calling thread
// (the row is gone when it returns, the ring never saw the item). The writer wakes for its sweep
// now and then, so a deliver that meets it awake goes through the ring: retried on a new name.
TEST(TableWriter, DeliverAppliesOnTheCallingThreadWhileTheWriterIsParked) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 3);
  CoherenceRing& ring = w.add_ring(ring::FullPolicy::kDrop);
  w.start();
  bool direct = false;
  for (std::uint64_t i = 1; i <= 50 && !direct; ++i) {
    const BrandedId name = id("AST", i);
    std::promise<void> put;
    w.put(name, "v1", id("TXN", 10 * i), [&put] { put.set_value(); });
    put.get_future().wait();
    std::this_thread::sleep_for(2ms);  // the writer parks
    direct = w.deliver(ring, CoherenceItem{{name, id("TXN", 10 * i + 1)}, 0, 0});
    if (direct) {
      std::string value;
      EXPECT_FALSE(w.map().get(name.view(), value)) << "applied before deliver returned";
    }
  }
  ASSERT_TRUE(direct) << "the writer never lent its token in 50 tries";
  sync(w);
  const WriterStats s = w.stats();
  EXPECT_GE(s.direct_applies, 1u);
  EXPECT_EQ(s.applied, s.direct_applies + w.ring_stats().front().applied);
  w.stop();
}

// Off (direct_apply false), or a listener the writer thread must run: every item through the ring.
TEST(TableWriter, DeliverGoesThroughTheRingWhenOffOrWhenAListenerMustRunOnTheWriter) {
  for (int variant = 0; variant < 2; ++variant) {
    FakeL2 l2;
    TableSpec s = spec();
    if (variant == 0) s.direct_apply = false;
    std::atomic<int> heard{0};
    if (variant == 1) s.on_message = [&heard](const Heard&) { heard.fetch_add(1); };
    TableWriter w(s, l2.ports(), 3);
    CoherenceRing& ring = w.add_ring(ring::FullPolicy::kDrop);
    w.start();
    for (std::uint64_t i = 1; i <= 20; ++i) {
      std::this_thread::sleep_for(1ms);  // parked, and still not lent
      EXPECT_FALSE(w.deliver(ring, CoherenceItem{{id("AST", i), id("TXN", i)}, 0, 0}));
    }
    sync(w);
    ASSERT_TRUE(eventually_true([&] { return w.ring_stats().front().applied == 20; }));
    EXPECT_EQ(w.stats().direct_applies, 0u);
    if (variant == 1) {
      EXPECT_EQ(heard.load(), 20);
    }
    w.stop();
  }
}

TEST(TableWriter, FlushPolicyDropsEveryRowOnceTheRingRefused) {
  FakeL2 l2;
  auto s = spec();
  s.ring_capacity = 2;
  s.max_batch = 2;
  TableWriter w(s, l2.ports(), 1);
  auto& ring = w.add_ring(ring::FullPolicy::kFlush);
  // Before the writer runs: fill two rows through puts, then overflow the ring.
  w.start();
  for (std::uint64_t i = 1; i <= 3; ++i) {
    std::promise<void> done;
    w.put(id("AST", i), "v", id("TXN", 50), [&done] { done.set_value(); });
    done.get_future().get();
  }
  EXPECT_EQ(w.map().size(), 3u);
  w.stop();  // hold the consumer so the ring fills
  int accepted = 0;
  for (std::uint64_t i = 0; i < 5; ++i) {
    accepted += ring.try_publish(CoherenceItem{{id("AST", 900 + i), id("TXN", 60)}, 0, 0});
  }
  EXPECT_EQ(accepted, 2);
  EXPECT_EQ(ring.stats().dropped, 3u);
  w.start();
  for (int i = 0; i < 500 && w.stats().ring_flushes == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(w.stats().ring_flushes, 1u);
  sync(w);
  EXPECT_EQ(w.map().size(), 0u);
}

// A receipt ask (docs/wire.md, "Receipts") reaches the writer through its inbox while its message
// may still wait in the ring behind others (a drain takes max_batch = 1 item a pass here): the
// writer applies the ring first, then answers. A row older than the ask, with no message for it,
// withholds the answer; a name it does not hold is answered.
TEST(TableWriter, AnAskIsAnsweredOnceTheRingAheadOfItIsApplied) {
  FakeL2 l2;
  std::mutex mu;
  std::vector<std::string> acks;
  bool held_at_ack = true;
  const BrandedId name = id("AST", 1);
  std::optional<TableWriter> w;
  WriterPorts ports = l2.ports();
  ports.acknowledge = [&](std::string_view receipt) {
    std::string value;
    std::lock_guard lock(mu);
    held_at_ack = w->map().get(name.view(), value);
    acks.emplace_back(receipt);
  };
  auto s = spec(CoherenceMode::kBroadcast);
  s.ring_capacity = 64;
  s.max_batch = 1;
  w.emplace(s, std::move(ports), 1);
  auto& ring = w->add_ring(ring::FullPolicy::kDrop);
  w->start();
  w->subscription_confirmed();
  sync(*w);
  const auto put = [&](const BrandedId& version) {
    std::promise<void> done;
    w->put(name, "v", version, [&done] { done.set_value(); });
    done.get_future().get();
  };
  const auto answered = [&] {
    std::lock_guard lock(mu);
    return acks.size();
  };
  put(id("TXN", 50));
  for (std::uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 100 + i), id("TXN", 60)}, 0, 0}));
  }
  ASSERT_TRUE(ring.try_publish(CoherenceItem{{name, id("TXN", 60)}, 0, 0}));
  w->ask(name.view(), id("TXN", 60), "RCP0000000000A");
  ASSERT_TRUE(eventually_true([&] { return answered() == 1; }));
  {
    std::lock_guard lock(mu);
    EXPECT_FALSE(held_at_ack) << "answered before the message ahead of it was applied";
    EXPECT_EQ(acks[0], "RCP0000000000A");
  }
  EXPECT_EQ(w->stats().receipts, 1u);

  put(id("TXN", 70));  // no message for version 80 ever comes: the row stays older
  w->ask(name.view(), id("TXN", 80), "RCP0000000000B");
  w->ask(name.view(), id("TXN", 70), "RCP0000000000C");            // as new as the row: applied
  w->ask(id("AST", 999).view(), id("TXN", 80), "RCP0000000000D");  // no row: applied
  sync(*w);
  EXPECT_EQ(w->stats().receipts_withheld, 1u);
  EXPECT_EQ(w->stats().receipts, 3u);
  std::lock_guard lock(mu);
  EXPECT_EQ(acks, (std::vector<std::string>{"RCP0000000000A", "RCP0000000000C", "RCP0000000000D"}));
}

// A read in flight when the ring refused a drop may have read the version that drop replaces: the
// flush marks it overtaken, as a resubscription does, so it reads L2 again instead of caching the
// older row until its TTL (the refused message never reached the map, so no tombstone guards it).
TEST(TableWriter, AFillInFlightAcrossARingFlushRereadsAndNeverCachesTheReplacedVersion) {
  FakeL2 l2;
  auto s = spec(CoherenceMode::kBroadcast);
  s.ring_capacity = 2;
  s.max_batch = 2;
  s.ttl_ms = 60000;
  TableWriter w(s, l2.ports(), 1);
  auto& ring = w.add_ring(ring::FullPolicy::kFlush);
  w.start();
  w.subscription_confirmed();
  sync(w);
  const auto name = id("AST", 200), v1 = id("TXN", 10), v2 = id("TXN", 20);
  l2.set(name, v1, "old");
  l2.set_park(true);
  std::promise<GetOutcome> first;
  w.miss(name, [&first](GetOutcome&& o) { first.set_value(std::move(o)); });
  sync(w);  // the flight's GET ran (it saw v1); its reply is still on the wire
  // v2 reaches L2 and its drop is refused: the writer is held, the ring full.
  l2.set(name, v2, "new");
  std::promise<void> hold, entered;
  auto held = hold.get_future().share();
  w.sync([&entered, held] {
    entered.set_value();
    held.wait();
  });
  entered.get_future().wait();
  EXPECT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 901), id("TXN", 30)}, 0, 0}));
  EXPECT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 902), id("TXN", 30)}, 0, 0}));
  EXPECT_FALSE(ring.try_publish(CoherenceItem{{name, v2}, 0, 0}));
  hold.set_value();
  for (int i = 0; i < 2000 && w.stats().ring_flushes == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(w.stats().ring_flushes, 1u);
  sync(w);
  l2.release_all();  // the v1 reply lands after the flush
  const GetOutcome got = first.get_future().get();
  ASSERT_FALSE(got.ec);
  ASSERT_TRUE(got.version.has_value());
  EXPECT_EQ(got.version->str(), v2.str()) << "the overtaken flight read L2 again";
  const GetOutcome after = get_via(w, name);
  ASSERT_FALSE(after.ec);
  ASSERT_TRUE(after.version.has_value());
  EXPECT_EQ(after.version->str(), v2.str())
      << "L1 serves " << after.version->str() << " (" << after.value << ") after " << v2.str()
      << " was published";
  w.stop();
}

TEST(TableWriter, BroadcastTableCachesOnlyWhileSubscribed) {
  FakeL2 l2;
  TableWriter w(spec(CoherenceMode::kBroadcast), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 105);
  l2.set(name, id("TXN", 7), "v");
  EXPECT_EQ(get_via(w, name).source, Source::kL2);
  EXPECT_EQ(get_via(w, name).source, Source::kL2);  // not subscribed yet: nothing cached
  EXPECT_GE(w.stats().suspended_fills, 2u);
  w.subscription_confirmed();
  EXPECT_EQ(get_via(w, name).source, Source::kL2);
  EXPECT_EQ(get_via(w, name).source, Source::kL1);
  w.subscription_lost();  // flush policy: drop everything, stop caching
  sync(w);
  EXPECT_EQ(w.map().size(), 0u);
  EXPECT_EQ(get_via(w, name).source, Source::kL2);
  EXPECT_EQ(get_via(w, name).source, Source::kL2);
  EXPECT_GE(w.stats().disconnect_flushes, 1u);
  w.subscription_confirmed();
  get_via(w, name);
  EXPECT_EQ(get_via(w, name).source, Source::kL1);
}

TEST(TableWriter, ServeStaleKeepsRowsUntilItsMaxAge) {
  FakeL2 l2;
  auto s = spec(CoherenceMode::kBroadcast);
  s.disconnect = DisconnectPolicy::kServeStale;
  s.serve_stale_max_ms = 150;
  s.sweep_ms = 10;  // the writer wakes at least this often to check the deadline
  TableWriter w(s, l2.ports(), 1);
  w.start();
  w.subscription_confirmed();
  const auto name = id("AST", 106);
  l2.set(name, id("TXN", 8), "v");
  get_via(w, name);
  w.subscription_lost();
  sync(w);
  EXPECT_EQ(w.map().size(), 1u);  // still served within the max age
  for (int i = 0; i < 1000 && !w.stats().suspended; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(w.stats().suspended);
  EXPECT_EQ(w.map().size(), 0u);
}

TEST(TableWriter, G6ConvergenceThroughTheRing) {
  // 200 names at v2 (v1 < v2 < v3); 100 get {v1, v3, v1}, 100 get {v1, v1}, shuffled: exactly
  // 100 applied and 400 stale; the first 100 rows gone, the rest still hit.
  FakeL2 l2;
  auto s = spec();
  s.ring_capacity = 1024;
  TableWriter w(s, l2.ports(), 1);
  auto& ring = w.add_ring(ring::FullPolicy::kDrop);
  w.start();
  const auto v1 = id("TXN", 1), v2 = id("TXN", 2), v3 = id("TXN", 3);
  for (std::uint64_t i = 0; i < 200; ++i) {
    std::promise<void> done;
    w.put(id("AST", 1000 + i), "v2", v2, [&done] { done.set_value(); });
    done.get_future().get();
  }
  std::vector<CoherenceItem> stream;
  for (std::uint64_t i = 0; i < 200; ++i) {
    const auto name = id("AST", 1000 + i);
    stream.push_back({{name, v1}, 0, 0});
    if (i < 100) stream.push_back({{name, v3}, 0, 0});
    stream.push_back({{name, v1}, 0, 0});
  }
  std::shuffle(stream.begin(), stream.end(), std::mt19937(6));
  ASSERT_EQ(ring.try_publish_batch(std::span<CoherenceItem>(stream)), 500u);
  for (int i = 0; i < 2000 && w.stats().applied + w.stats().stale < 500; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(w.stats().applied, 100u);
  EXPECT_EQ(w.stats().stale, 400u);
  std::string value;
  for (std::uint64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(w.map().get(id("AST", 1000 + i).view(), value), i >= 100) << i;
  }
}

TEST(TableWriter, StatsStampTheLastBatchThatDroppedARowAndItsLastDropsDecodeTime) {
  // What the lane benches split a message's latency on: last_applied_ns, when the batch's rows
  // were gone, and last_decoded_ns, the io thread's stamp on that batch's last dropping item. A
  // stale item (the job after its lead) stamps nothing.
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 1);
  auto& ring = w.add_ring(ring::FullPolicy::kDrop);
  w.start();
  EXPECT_EQ(w.stats().last_applied_ns, 0);
  EXPECT_EQ(w.stats().last_decoded_ns, 0);
  std::promise<void> put;
  w.put(id("AST", 77), "px", id("TXN", 4), [&put] { put.set_value(); });
  put.get_future().wait();
  const std::int64_t before = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count();
  ASSERT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 77), id("TXN", 5)}, 4242, 0}));
  ASSERT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 77), id("TXN", 5)}, 4343, 0}));  // stale
  for (int i = 0; i < 2000 && w.stats().stale == 0; ++i) std::this_thread::sleep_for(1ms);
  const auto s = w.stats();
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(s.stale, 1u);
  EXPECT_GE(s.last_applied_ns, before);
  EXPECT_EQ(s.last_decoded_ns, 4242) << "the stale item stamped the batch";
  ASSERT_TRUE(ring.try_publish(CoherenceItem{{id("AST", 78), id("TXN", 6)}, 4444, 0}));  // no row
  for (int i = 0; i < 2000 && w.stats().stale == 1; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(w.stats().last_applied_ns, s.last_applied_ns);
  EXPECT_EQ(w.stats().last_decoded_ns, 4242);
}

}  // namespace
}  // namespace echo::engine
