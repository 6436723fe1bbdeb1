// SPDX-License-Identifier: MIT
// Rows dropped by key rather than by version: the job lane's text item, and the tracking lane's
// guard (an invalidation sequence per key) against a fill or a put that an invalidation overtook.

#include "table_writer_fixture.h"

namespace echo::engine {
namespace {

// The job lane's text-key item (docs/wire.md, "Text keys") carries its key's bytes: the writer
// drops the row by its key (not by hash), consults and feeds the applied memory under the key, and
// acks.
TEST(TableWriter, AJobLaneTextItemDropsItsRowByKeyAndFeedsTheMemoryUnderTheKey) {
  FakeL2 l2;
  auto s = spec(CoherenceMode::kJob);
  s.keys = KeyKind::kText;
  TableWriter w(s, l2.ports(), 1);
  auto& ring = w.add_ring(ring::FullPolicy::kBlock);
  std::mutex mu;
  std::vector<JobAck> acks;
  std::vector<std::pair<std::string, std::string>> remembered;
  w.set_ack_sink([&](std::span<const JobAck> batch) {
    std::lock_guard lock(mu);
    acks.insert(acks.end(), batch.begin(), batch.end());
  });
  MemoryHooks hooks;
  hooks.stale = [&](std::string_view name, const BrandedId& v) {
    std::lock_guard lock(mu);
    for (const auto& [n, r] : remembered) {
      if (n == name && !table::newer(v.view(), r)) return true;
    }
    return false;
  };
  hooks.remember = [&](std::string_view name, const BrandedId& v) {
    std::lock_guard lock(mu);
    remembered.emplace_back(std::string(name), v.str());
  };
  w.set_memory(std::move(hooks));
  w.start();
  w.subscription_confirmed();  // the lane delivers: the table caches
  for (const char* key : {"AAPL", "EUR:USD"}) {
    std::promise<void> done;
    w.put(key, "v", id("TXN", 50), [&done] { done.set_value(); });
    done.get_future().get();
  }
  ASSERT_EQ(w.map().size(), 2u);
  // The key's bytes live in the payload the consumer holds until the ack (here: this string).
  const std::string payload = std::string("EUR:USD:") + id("TXN", 60).str();
  const auto item = [&payload](std::uint64_t ticket, const BrandedId& v) {
    CoherenceItem it{table::CoherenceMessage{v, v}, 0, ticket};
    it.key = payload.data();
    it.key_size = 7;  // "EUR:USD"
    it.kind = ItemKind::kTextKey;
    return it;
  };
  ASSERT_TRUE(ring.try_publish(item(7, id("TXN", 60))));
  ASSERT_TRUE(ring.try_publish(item(8, id("TXN", 55))));  // older than the memory now holds
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard lock(mu);
      if (acks.size() == 2) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  sync(w);
  std::lock_guard lock(mu);
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].ticket, 7u);
  EXPECT_EQ(acks[0].verdict, table::Verdict::kApplied);
  EXPECT_FALSE(acks[0].remembered);
  EXPECT_EQ(acks[1].ticket, 8u);
  EXPECT_TRUE(acks[1].remembered);  // remembered_stale: the table untouched
  ASSERT_EQ(remembered.size(), 1u);
  EXPECT_EQ(remembered[0].first, "EUR:USD");
  EXPECT_EQ(remembered[0].second, id("TXN", 60).str());
  std::string value;
  EXPECT_FALSE(w.map().get("EUR:USD", value)) << "the row of the item's key went";
  EXPECT_TRUE(w.map().get("AAPL", value)) << "no other row did (no hash collision drops it)";
  EXPECT_EQ(w.stats().remembered_stale, 1u);
  w.stop();
}

// ---- the tracking lane's guard (no versions: an invalidation sequence per key) ----

CoherenceItem forget_item(std::string_view key) {
  CoherenceItem item{{id("AST", 1), id("AST", 1)}, 0, 0};
  item.kind = ItemKind::kForgetKey;
  item.text_hash = table::hash_key(key);
  return item;
}

// The classic race, staged: the GET reads v1, the write of v2 lands and its invalidation is
// applied while the reply is on the wire. The reader that asked before gets v1 (its read began
// before the invalidation reached the node); one that asks after gets v2; L1 never holds v1.
TEST(TableWriter, TrackingAFillAnInvalidationOvertookIsServedNotCachedAndLateRidersReadAgain) {
  RingWriter rw(CoherenceMode::kTracking);
  auto& [l2, w, ring] = rw;
  const auto name = id("AST", 300);
  l2.set(name, id("TXN", 10), "v1");
  l2.set_park(true);
  std::promise<GetOutcome> early, late;
  w.miss(name, [&early](GetOutcome&& o) { early.set_value(std::move(o)); });
  sync(w);  // the GET ran and saw v1
  l2.set(name, id("TXN", 20), "v2");
  publish_and_settle(w, ring, forget_item(name.view()));
  w.miss(name, [&late](GetOutcome&& o) { late.set_value(std::move(o)); });
  sync(w);  // joined the flight after the invalidation
  l2.set_park(false);
  l2.release_all();
  const GetOutcome e = early.get_future().get();
  ASSERT_FALSE(e.ec);
  EXPECT_EQ(e.value, "v1");
  const GetOutcome l = late.get_future().get();
  ASSERT_FALSE(l.ec);
  EXPECT_EQ(l.value, "v2") << "a reader that asked after the invalidation got the old value";
  EXPECT_EQ(w.stats().forgotten_fills, 1u);
  const GetOutcome again = get_via(w, name);
  EXPECT_EQ(again.value, "v2");
  EXPECT_EQ(again.source, Source::kL1) << "the re-read (after the invalidation) was cached";
  w.stop();
}

TEST(TableWriter, TrackingAPutAnInvalidationOvertookIsNotCachedAndAFlushMovesEveryToken) {
  RingWriter rw(CoherenceMode::kTracking);
  auto& [l2, w, ring] = rw;
  const auto name = id("AST", 301), other = id("AST", 302);
  auto put = [&w](const BrandedId& n, std::uint64_t guard) {
    std::promise<void> done;
    w.put(
        n.view(), "mine", id("TXN", 5), [&done] { done.set_value(); }, guard);
    done.get_future().wait();
  };
  // The token, then (while the put's SET is on the wire) another write's invalidation lands.
  const std::uint64_t token = w.forget_token(name.view());
  publish_and_settle(w, ring, forget_item(name.view()));
  put(name, token);
  EXPECT_EQ(w.map().size(), 0u) << "a put older than an invalidation it could not see was cached";
  EXPECT_EQ(w.stats().forgotten_puts, 1u);
  // Nothing since the token: cached.
  put(name, w.forget_token(name.view()));
  EXPECT_EQ(w.map().size(), 1u);
  // Another name's invalidation leaves this one's token alone (unless they share a slot).
  const std::uint64_t mine = w.forget_token(other.view());
  publish_and_settle(w, ring, forget_item(name.view()));
  EXPECT_EQ(w.map().size(), 0u) << "the invalidation dropped the row whatever its version";
  if (w.forget_token(other.view()) == mine) {
    put(other, mine);
    EXPECT_EQ(w.map().size(), 1u);
  }
  // An invalidate with a nil key list: every row goes, every token moves.
  const std::uint64_t before_flush = w.forget_token(other.view());
  CoherenceItem all = forget_item("");
  all.kind = ItemKind::kForgetAll;
  publish_and_settle(w, ring, all);
  EXPECT_EQ(w.map().size(), 0u);
  EXPECT_NE(w.forget_token(other.view()), before_flush);
  put(other, before_flush);
  EXPECT_EQ(w.map().size(), 0u);
  w.stop();
}

}  // namespace
}  // namespace echo::engine
