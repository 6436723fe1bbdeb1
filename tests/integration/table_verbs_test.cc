// SPDX-License-Identifier: MIT
// The verbs a service writes every day, against a real redis-server: a read callback that takes
// the value alone; on_change hearing fills, puts and carried values with the new value on the
// writer thread; for_each over the rows a node holds, beside a writer applying publishes; remove,
// a newer-wins tombstone every node hears (and an older one that leaves a newer L2 row alone);
// negative caching, a loader's Absent remembered, answered without L2 or the loader, and
// forgotten by a write of the key or its TTL; publish_async on the broadcast and job lanes, its
// done once the row is in; get_many, the misses read together; the small face: an empty handle,
// a table with no kind and no loader, a handle once its engine stopped, and the thread past the
// reader slots answered a typed error; publish_and_wait, answered once every live member applied
// the write (and a stalled member's miss of the deadline named).
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>

#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using namespace std::chrono_literals;
using engine::Errc;
using engine::Table;

struct Quote {
  double bid, ask;
};

// Text keys on the broadcast lane (values carried); the loader answers bid 100 + the key's length,
// or Absent for keys that start with "NONE".
engine::TableSpec quotes(std::shared_ptr<std::atomic<int>> loads) {
  engine::TableSpec s = engine::text_table("quotes");
  s.kind = "QTE";
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<Quote>([loads](const engine::Key& k) -> std::optional<Quote> {
    loads->fetch_add(1);
    if (k.view().starts_with("NONE")) return std::nullopt;
    return Quote{100.0 + static_cast<double>(k.view().size()), 0};
  });
  return engine::typed<Quote>(s);
}

class TableVerbsTest : public SingleServerTest {
 protected:
  std::shared_ptr<std::atomic<int>> loads1 = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> loads2 = std::make_shared<std::atomic<int>>(0);
};

bool holds(const Table<Quote>& t, std::string_view key) {
  return t.l1().visit(key, [](std::string_view, std::string_view) {});
}

TEST_F(TableVerbsTest, AReadCallbackMayTakeTheValueAlone) {
  auto n = node(1, {quotes(loads1)});
  ASSERT_TRUE(n);
  auto t = n->table<Quote>("quotes");
  double bid = 0;
  auto r = t.read("AAPL", [&bid](const Quote& q) { bid = q.bid; });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(bid, 104);
  bid = 0;
  EXPECT_TRUE(t.try_read("AAPL", [&bid](const Quote& q) { bid = q.bid; }));
  EXPECT_EQ(bid, 104);
}

TEST_F(TableVerbsTest, OnChangeHearsEveryValueThatEntersL1OnTheWriterThread) {
  struct Heard {
    std::string key;
    double bid;
    std::size_t version_size;
    std::thread::id thread;
  };
  std::mutex mu;
  std::vector<Heard> heard;
  auto spec = quotes(loads2);
  spec.on_change = engine::on_change_of<Quote>(
      [&](std::string_view key, std::string_view version, const Quote& q) {
        std::lock_guard lock(mu);
        heard.push_back({std::string(key), q.bid, version.size(), std::this_thread::get_id()});
      });
  // The listening node is node 1: a publish of node 2 minted in the same millisecond as node 1's
  // fill is newer (versions of one millisecond order by node), so its carried value applies.
  auto n2 = node(1, {spec});
  auto n1 = node(2, {quotes(loads1)});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  const auto count = [&] {
    std::lock_guard lock(mu);
    return heard.size();
  };
  ASSERT_TRUE(t2.get("AAPL"));  // a fill (the loader's)
  ASSERT_EQ(count(), 1u);
  ASSERT_TRUE(t1.publish("AAPL", Quote{189.5, 189.6}));  // carried to node 2: an update
  EXPECT_TRUE(poll_until([&] { return count() == 2; }, 10s, 2ms));
  ASSERT_TRUE(t2.put("MSFT", Quote{7, 8}));  // a put of this node
  EXPECT_TRUE(poll_until([&] { return count() == 3; }, 10s, 2ms));
  std::lock_guard lock(mu);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[0].key, "AAPL");
  EXPECT_EQ(heard[0].bid, 104);
  EXPECT_EQ(heard[1].key, "AAPL");
  EXPECT_EQ(heard[1].bid, 189.5) << "the carried value, not a refill";
  EXPECT_EQ(heard[2].key, "MSFT");
  EXPECT_EQ(heard[2].bid, 7);
  for (const auto& h : heard) {
    EXPECT_EQ(h.version_size, table::kIdSize);
    EXPECT_NE(h.thread, std::this_thread::get_id()) << "the writer thread, not the caller's";
    EXPECT_EQ(h.thread, heard[0].thread) << "one writer thread";
  }
  EXPECT_EQ(loads2->load(), 1);
}

TEST_F(TableVerbsTest, ForEachWalksTheRowsANodeHoldsBesideItsWriter) {
  auto n1 = node(1, {quotes(loads1)});
  auto n2 = node(2, {quotes(loads2)});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  constexpr int kKeys = 300;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(t2.put("K" + std::to_string(i), Quote{1.0 * i, 0}));
  std::map<std::string, double> seen;
  EXPECT_EQ(t2.for_each([&seen](std::string_view key, const Quote& q, std::string_view v) {
    EXPECT_EQ(v.size(), table::kIdSize);
    EXPECT_TRUE(seen.emplace(std::string(key), q.bid).second) << key << " twice";
  }),
            static_cast<std::size_t>(kKeys));
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kKeys));
  EXPECT_EQ(seen["K42"], 42);
  // Beside node 2's writer applying carried updates of every key: each walk sees each key at most
  // once, each value one that was written.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int round = 1; !stop.load(); ++round) {
      for (int i = 0; i < kKeys && !stop.load(); i += 7) {
        (void)t1.publish("K" + std::to_string(i), Quote{1.0 * i + 1000.0 * round, 0});
      }
    }
  });
  for (int walk = 0; walk < 50; ++walk) {
    std::map<std::string, int> once;
    t2.for_each([&once](std::string_view key, const Quote& q, std::string_view) {
      ++once[std::string(key)];
      const int i = std::stoi(std::string(key.substr(1)));
      EXPECT_EQ(static_cast<long>(q.bid) % 1000, i % 1000) << key;
    });
    for (const auto& [key, times] : once) EXPECT_EQ(times, 1) << key;
  }
  stop = true;
  writer.join();
}

TEST_F(TableVerbsTest, RemoveIsATombstoneEveryNodeHears) {
  auto n1 = node(1, {quotes(loads1)});
  auto n2 = node(2, {quotes(loads2)});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  ASSERT_TRUE(t1.publish("AAPL", Quote{1, 2}));
  ASSERT_TRUE(t2.get("AAPL"));
  ASSERT_TRUE(holds(t2, "AAPL"));
  auto removed = t1.remove("AAPL");
  ASSERT_TRUE(removed) << removed.error().message();
  EXPECT_FALSE(holds(t1, "AAPL")) << "this node's row went before remove returned";
  EXPECT_TRUE(poll_until([&] { return !holds(t2, "AAPL"); }, 10s, 2ms)) << "node 2 never heard";
  EXPECT_EQ(command_argv(client(), {"EXISTS", "ecc:{quotes}:AAPL"})->integer, 0);
  // The next read loads (L2 holds nothing), under a version newer than the tombstone.
  auto again = t2.get("AAPL");
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->bid, 104);

  // A removal older than L2's row leaves the row (newer wins); its message is stale everywhere.
  const auto older = n1->mint("QTE");
  ASSERT_TRUE(older);
  ASSERT_TRUE(t1.publish("MSFT", Quote{5, 6}));
  ASSERT_TRUE(t1.remove("MSFT", *older));
  EXPECT_EQ(command_argv(client(), {"EXISTS", "ecc:{quotes}:MSFT"})->integer, 1);
  auto kept = t1.get("MSFT");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->bid, 5);
  // A bad key reaches nothing.
  auto bad = t1.remove("has space");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), make_error_code(Errc::kBadKey));
}

TEST_F(TableVerbsTest, ALoadersAbsentIsRememberedUntilAWriteOrItsTtl) {
  auto spec = quotes(loads2);
  spec.absent_ttl_ms = 400;
  auto n1 = node(1, {quotes(loads1)});
  auto n2 = node(2, {spec});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("quotes");
  auto t2 = n2->table<Quote>("quotes");
  const auto writer = [&] { return n2->stats().tables[0].writer; };
  auto first = t2.get("NONE1");
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error(), make_error_code(Errc::kAbsent));
  EXPECT_EQ(loads2->load(), 1);
  for (int i = 0; i < 5; ++i) {
    auto again = t2.get("NONE1");
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error(), make_error_code(Errc::kAbsent));
  }
  EXPECT_EQ(loads2->load(), 1) << "remembered: no L2 read, no loader call";
  EXPECT_EQ(writer().absent_loads, 1u);
  EXPECT_EQ(writer().absent_hits, 5u);
  EXPECT_FALSE(t2.try_read("NONE1", [](const Quote&) {}));

  // A publish of the key reaches node 2 and forgets it: the next read finds the row.
  ASSERT_TRUE(t1.publish("NONE1", Quote{9, 10}));
  EXPECT_TRUE(poll_until(
      [&] {
        auto r = t2.get("NONE1");
        return r && r->bid == 9;
      },
      10s, 5ms));

  // Its TTL: the loader is asked again once it passed.
  ASSERT_FALSE(t2.get("NONE2"));
  const int asked = loads2->load();
  ASSERT_FALSE(t2.get("NONE2"));
  EXPECT_EQ(loads2->load(), asked);
  std::this_thread::sleep_for(500ms);
  ASSERT_FALSE(t2.get("NONE2"));
  EXPECT_EQ(loads2->load(), asked + 1);

  // absent_ttl_ms 0: answered, never remembered.
  n2->stop();
  auto spec0 = quotes(loads2);
  spec0.absent_ttl_ms = 0;
  auto n3 = node(3, {spec0});
  ASSERT_TRUE(n3);
  auto t3 = n3->table<Quote>("quotes");
  const int before = loads2->load();
  ASSERT_FALSE(t3.get("NONE3"));
  ASSERT_FALSE(t3.get("NONE3"));
  EXPECT_EQ(loads2->load(), before + 2);
}

engine::TableSpec job_quotes(std::shared_ptr<std::atomic<int>> loads) {
  engine::TableSpec s = quotes(std::move(loads));
  s.name = "jquotes";
  s.coherence = engine::CoherenceMode::kJob;
  return s;
}

TEST_F(TableVerbsTest, PublishAsyncAnswersTheVersionAtOnceAndDoneOnceTheRowIsIn) {
  auto n1 = node(1, {quotes(loads1), job_quotes(loads1)});
  auto n2 = node(2, {quotes(loads2), job_quotes(loads2)});
  ASSERT_TRUE(n1 && n2);
  for (const char* name : {"quotes", "jquotes"}) {
    SCOPED_TRACE(name);
    auto t1 = n1->table<Quote>(name);
    auto t2 = n2->table<Quote>(name);
    constexpr int kCalls = 200;
    std::atomic<int> done{0}, failed{0};
    std::atomic<bool> row_in{true};
    std::vector<table::BrandedId> versions;
    for (int i = 0; i < kCalls; ++i) {
      // One publish per key: a later publish of the same key announced before this one's row
      // lands would rightly keep it out (its tombstone is newer).
      const std::string key = "A" + std::to_string(i);
      auto v = t1.publish_async(key, Quote{1.0 * i, 0},
                                [&, key](const engine::Result<table::BrandedId>& r) {
                                  if (!r) {
                                    ++failed;
                                  } else if (!t1.l1().visit(key, [](auto, auto) {})) {
                                    row_in = false;  // read-your-writes once done runs
                                  }
                                  ++done;
                                });
      ASSERT_TRUE(v) << v.error().message();
      versions.push_back(*v);
    }
    EXPECT_TRUE(poll_until([&] { return done.load() == kCalls; }, 20s, 2ms)) << done.load();
    EXPECT_EQ(failed.load(), 0);
    EXPECT_TRUE(row_in.load());
    for (std::size_t i = 1; i < versions.size(); ++i) {
      EXPECT_TRUE(table::newer(versions[i].view(), versions[i - 1].view()));
    }
    // The last value of each key reaches the other node.
    EXPECT_TRUE(poll_until(
        [&] {
          auto r = t2.get("A" + std::to_string(kCalls - 1));
          return r && r->bid == kCalls - 1;
        },
        10s, 5ms));
  }
  // A refusal is the call's: nothing sent, done never runs.
  bool ran = false;
  auto bad = n1->table<Quote>("quotes").publish_async("has space", Quote{},
                                                      [&](const auto&) { ran = true; });
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), make_error_code(Errc::kBadKey));
  n1->stop();
  auto stopped =
      n1->table<Quote>("quotes").publish_async("AAPL", Quote{}, [&](const auto&) { ran = true; });
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error(), make_error_code(Errc::kStopped));
  EXPECT_FALSE(ran);
}

TEST_F(TableVerbsTest, GetManyAnswersEachKeyInOrderHitsMissesAndAbsents) {
  auto n1 = node(1, {quotes(loads1)});
  ASSERT_TRUE(n1);
  auto t = n1->table<Quote>("quotes");
  ASSERT_TRUE(t.put("HIT", Quote{1, 2}));
  ASSERT_TRUE(command_argv(client(), {"DEL", "ecc:{quotes}:L2ROW"}));
  auto n2 = node(2, {quotes(loads2)});
  ASSERT_TRUE(n2);
  ASSERT_TRUE(n2->table<Quote>("quotes").put("L2ROW", Quote{3, 4}));
  std::vector<std::string> names = {"HIT", "L2ROW", "LOADED", "NONEX", "bad key"};
  for (int i = 0; i < 40; ++i) names.push_back("K" + std::to_string(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  const int loads_before = loads1->load();
  auto got = t.get_many(keys);
  ASSERT_EQ(got.size(), keys.size());
  ASSERT_TRUE(got[0]);
  EXPECT_EQ(got[0]->bid, 1);
  ASSERT_TRUE(got[1]) << got[1].error().message();
  EXPECT_EQ(got[1]->bid, 3) << "L2's row";
  ASSERT_TRUE(got[2]);
  EXPECT_EQ(got[2]->bid, 106) << "the loader's";
  ASSERT_FALSE(got[3]);
  EXPECT_EQ(got[3].error(), make_error_code(Errc::kAbsent));
  ASSERT_FALSE(got[4]);
  EXPECT_EQ(got[4].error(), make_error_code(Errc::kBadKey));
  for (std::size_t i = 5; i < got.size(); ++i) {
    ASSERT_TRUE(got[i]) << keys[i];
    EXPECT_EQ(got[i]->bid, 100.0 + static_cast<double>(keys[i].size()));
  }
  EXPECT_EQ(loads1->load(), loads_before + 42) << "LOADED, NONEX and the 40 K keys";
  // Now every key but the absent and the bad one hits.
  const auto hits = t.l1().stats().hits;
  got = t.get_many(keys);
  EXPECT_EQ(t.l1().stats().hits, hits + 43);
}

TEST_F(TableVerbsTest, PublishAndWaitAnswersOnceEveryLiveMemberAppliedIt) {
  // The publisher is node 2: its version is newer than node 1's fill even within one millisecond
  // (versions of one millisecond order by node), so node 1 applies it as an update.
  auto n1 = node(2, {job_quotes(loads1)});
  auto n2 = node(1, {job_quotes(loads2)});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("jquotes");
  auto t2 = n2->table<Quote>("jquotes");
  ASSERT_TRUE(t2.get("AAPL"));  // node 2 holds a row: the write must reach it
  auto applied = t1.publish_and_wait("AAPL", Quote{42, 43}, 10s);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, 2u) << "both members";
  // Applied means read: node 2's very next read sees the new value, no waiting.
  double bid = 0;
  ASSERT_TRUE(t2.read("AAPL", [&bid](const Quote& q) { bid = q.bid; }));
  EXPECT_EQ(bid, 42);

  // A member that is live but never applies (a stalled process): staged as its membership and
  // its live key, the epoch moved so the fan-out reads the list again.
  const std::string q = "ecc.coh.jquotes";
  ASSERT_TRUE(command_argv(client(), {"ZADD", "emq:{" + q + "}:members", "99999999999999", "99"}));
  ASSERT_TRUE(command_argv(client(), {"SET", "emq:{" + q + "|99}:live", "30000", "PX", "60000"}));
  ASSERT_TRUE(command_argv(client(), {"INCR", "emq:{" + q + "}:mepoch"}));
  auto late = t1.publish_and_wait("AAPL", Quote{44, 45}, 300ms);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), make_error_code(Errc::kTimeout));
  EXPECT_NE(late.error().message().find("2 of 3 members applied it"), std::string::npos)
      << late.error().message();
  EXPECT_TRUE(poll_until(
      [&] {
        auto r = t2.get("AAPL");
        return r && r->bid == 44;
      },
      10s, 5ms))
      << "the write stands";

  // A table without coherence acknowledges nothing: refused, nothing written. (The broadcast
  // and tracking lanes' receipts: broadcast_receipts_test.)
  auto plain = quotes(loads1);
  plain.coherence = engine::CoherenceMode::kNone;
  auto b = node(3, {plain});
  ASSERT_TRUE(b);
  auto no = b->table<Quote>("quotes").publish_and_wait("MSFT", Quote{1, 2}, 1s);
  ASSERT_FALSE(no);
  EXPECT_EQ(no.error(), make_error_code(Errc::kNoReceipts));
  EXPECT_EQ(command_argv(client(), {"EXISTS", "ecc:{quotes}:MSFT"})->integer, 0);
}

TEST_F(TableVerbsTest, AnEmptyHandleAnswersNoSuchCacheAndNeverCrashes) {
  Table<Quote> empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.name(), "");
  auto r = empty.read("AAPL", [](const Quote&) {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_FALSE(empty.try_read("AAPL", [](const Quote&) {}));
  EXPECT_EQ(empty.get("AAPL").error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_EQ(empty.publish("AAPL", Quote{}).error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_EQ(empty.remove("AAPL").error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_EQ(empty.for_each([](auto, const Quote&, auto) {}), 0u);
  auto n = node(1, {quotes(loads1)});
  ASSERT_TRUE(n);
  empty = n->table<Quote>("quotes");  // set later, as a member would be
  EXPECT_TRUE(empty);
  EXPECT_TRUE(empty.get("AAPL"));
}

TEST_F(TableVerbsTest, ATextTableNeedsNoKindAndNoLoader) {
  auto n1 = node(1, {engine::typed<Quote>(engine::text_table("book"))});
  auto n2 = node(2, {engine::typed<Quote>(engine::text_table("book"))});
  ASSERT_TRUE(n1 && n2);
  auto t1 = n1->table<Quote>("book");
  auto t2 = n2->table<Quote>("book");
  auto none = t2.get("IBM");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error(), make_error_code(Errc::kAbsent)) << "no loader: what L2 lacks is absent";
  auto v = t1.publish(engine::TextKey("IBM", 2026), Quote{3, 4});
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(v->view().substr(0, 3), engine::kTextKind);
  EXPECT_TRUE(poll_until(
      [&] {
        auto r = t2.get(engine::TextKey("IBM", 2026));
        return r && r->bid == 3;
      },
      10s, 5ms));
}

TEST_F(TableVerbsTest, AHandleOfAStoppedEngineAnswersStopped) {
  auto n = node(1, {quotes(loads1)});
  ASSERT_TRUE(n);
  auto t = n->table<Quote>("quotes");
  ASSERT_TRUE(t.put("AAPL", Quote{1, 2}));
  ASSERT_TRUE(t.read("AAPL", [](const Quote&) {}));
  n->stop();
  auto r = t.read("AAPL", [](const Quote&) {});
  ASSERT_FALSE(r) << "a stopped engine's rows are not served";
  EXPECT_EQ(r.error(), make_error_code(Errc::kStopped));
  EXPECT_EQ(t.get("AAPL").error(), make_error_code(Errc::kStopped));
  EXPECT_FALSE(t.try_read("AAPL", [](const Quote&) {}));
}

TEST_F(TableVerbsTest, AHandleThatOutlivesItsEngineAnswersStoppedAndNeverTouchesIt) {
  auto n = node(1, {quotes(loads1)});
  ASSERT_TRUE(n);
  auto t = n->table<Quote>("quotes");
  ASSERT_TRUE(t.put("AAPL", Quote{1, 2}));
  ASSERT_TRUE(t.read("AAPL", [](const Quote&) {}));
  n.reset();  // the engine is gone; ASan reports any touch of its memory below
  auto copy = t;
  EXPECT_TRUE(copy) << "still a handle on a declared table";
  EXPECT_EQ(copy.name(), "quotes");
  const auto stopped = make_error_code(Errc::kStopped);
  for (int i = 0; i < 200; ++i) {  // past the 1-in-64 timed reads, which note into the engine
    auto r = copy.read("AAPL", [](const Quote&) {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), stopped);
    EXPECT_EQ(copy.get("MSFT").error(), stopped);
  }
  EXPECT_FALSE(copy.try_read("AAPL", [](const Quote&) {}));
  EXPECT_FALSE(copy.try_get("AAPL"));
  EXPECT_EQ(copy.for_each([](auto&&...) {}), 0U);
  EXPECT_EQ(copy.put("AAPL", Quote{3, 4}).error(), stopped);
  EXPECT_EQ(copy.publish("AAPL", Quote{3, 4}).error(), stopped);
  EXPECT_EQ(copy.publish_async("AAPL", Quote{3, 4}, [](auto) {}).error(), stopped);
  EXPECT_EQ(copy.remove("AAPL").error(), stopped);
  EXPECT_EQ(copy.invalidate("AAPL").error(), stopped);
  const std::string_view keys[] = {"AAPL", "MSFT"};
  for (const auto& r : copy.get_many(keys)) EXPECT_EQ(r.error(), stopped);
  EXPECT_EQ(copy.l1().size(), 0U);
}

TEST_F(TableVerbsTest, AThreadPastTheReaderSlotsIsAnsweredATypedError) {
  auto n = node(1, {quotes(loads1)});
  ASSERT_TRUE(n);
  auto t = n->table<Quote>("quotes");
  ASSERT_TRUE(t.put("AAPL", Quote{1, 2}));
  // More live reader threads than there are slots: each reads once and holds on to its slot
  // (a thread keeps its slot until it exits) until all have read.
  constexpr int kThreads = static_cast<int>(table::kMaxReaderThreads) + 8;
  std::atomic<int> ok{0}, refused{0}, other{0}, arrived{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto r = t.read("AAPL", [](const Quote&) {});
      if (r) {
        ++ok;
      } else if (r.error() == make_error_code(Errc::kNoReaderSlot)) {
        ++refused;
      } else {
        ++other;
      }
      ++arrived;
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
  }
  EXPECT_TRUE(poll_until([&] { return arrived.load() == kThreads; }, 60s, 5ms));
  release = true;
  for (auto& th : threads) th.join();
  EXPECT_GE(refused.load(), 8) << "every thread past the slots answered no_reader_slot";
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + refused.load(), kThreads);
  EXPECT_GE(t.l1().stats().reader_slot_refusals, static_cast<std::uint64_t>(refused.load()));
}

}  // namespace
}  // namespace echo::test
