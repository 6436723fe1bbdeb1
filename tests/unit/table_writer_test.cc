// SPDX-License-Identifier: MIT
// The table writer with in-process ports (no server: the L2 side is a map the test controls, so
// each interleaving is staged exactly): single-flight, the fill guard across the wire's race,
// flights overtaken by newer drops, the flush policy, the disconnect policy, and G6 through the
// ring and the writer thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <echo/engine/errc.h>
#include <echo/engine/l2_frame.h>
#include <echo/engine/table_writer.h>

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace std::chrono_literals;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

// The L2 side, held by the test: fetches and loads park until the test releases them.
struct FakeL2 {
  std::mutex mu;
  std::unordered_map<std::string, std::string> rows;  // name -> framed value
  std::vector<std::function<void()>> parked;           // released by release_all()
  std::atomic<int> fetches{0}, loads{0};
  bool park = false;

  WriterPorts ports() {
    WriterPorts p;
    p.fetch = [this](std::string_view name, std::function<void(L2Fetch)> done) {
      ++fetches;
      // The GET executes now (the server's view at this instant); a parked answer is a reply
      // still on the wire.
      std::lock_guard lock(mu);
      auto it = rows.find(std::string(name));
      auto answer = [stored = it == rows.end() ? std::nullopt : std::optional<std::string>(it->second),
                     done = std::move(done)] { done(L2Fetch{{}, stored}); };
      if (park) {
        parked.push_back(std::move(answer));
      } else {
        std::thread(std::move(answer)).detach();
      }
    };
    p.load = [this](std::string_view asked, const BrandedId& minted, std::shared_ptr<LoadClaim>,
                    std::function<void(LoadOutcome)> done) {
      ++loads;
      std::thread([this, name = std::string(asked), minted, done = std::move(done)] {
        LoadOutcome out;
        out.value = "loaded";
        out.version = minted;
        {
          std::lock_guard lock(mu);
          auto& row = rows[name];
          // put_l2: store only if newer than what L2 holds.
          if (row.size() >= 14 && !table::newer(minted.view(), std::string_view(row).substr(0, 14))) {
            out.stored = false;
          } else {
            row = frame_l2_value(minted, out.value);
            out.stored = true;
          }
        }
        done(std::move(out));
      }).detach();
    };
    return p;
  }
  void set(const BrandedId& name, const BrandedId& version, std::string_view value) {
    std::lock_guard lock(mu);
    rows[name.str()] = frame_l2_value(version, value);
  }
  void set_park(bool on) {
    std::lock_guard lock(mu);
    park = on;
  }
  // Answers every parked read; from then on reads answer at once, unless `keep_parking`.
  void release_all(bool keep_parking = false) {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard lock(mu);
      now.swap(parked);
      park = keep_parking;
    }
    for (auto& f : now) f();
  }
};

TableSpec spec(CoherenceMode mode = CoherenceMode::kNone) {
  TableSpec s;
  s.name = "t";
  s.kind = "AST";
  s.coherence = mode;
  s.loader = [](const BrandedId&) -> LoadResult { return Loaded{"unused", {}}; };
  return s;
}

GetOutcome get_via(TableWriter& w, const BrandedId& name) {
  std::promise<GetOutcome> p;
  auto f = p.get_future();
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  EXPECT_EQ(f.wait_for(5s), std::future_status::ready);
  return f.get();
}

void sync(TableWriter& w) {
  std::promise<void> p;
  w.sync([&p] { p.set_value(); });
  ASSERT_EQ(p.get_future().wait_for(5s), std::future_status::ready);
}

table::Verdict apply_via(TableWriter& w, const BrandedId& name, const BrandedId& version) {
  std::promise<WriterAnswer<table::Verdict>> p;
  w.apply(table::CoherenceMessage{name, version},
          [&p](WriterAnswer<table::Verdict> v) { p.set_value(std::move(v)); });
  auto answer = p.get_future().get();
  EXPECT_TRUE(answer.has_value()) << answer.error().message();
  return answer ? *answer : table::Verdict::kStale;
}

// A writer of `mode` with one ring (flush policy), started, its lane confirmed: caching.
struct RingWriter {
  explicit RingWriter(CoherenceMode mode)
      : w(spec(mode), l2.ports(), 1), ring(w.add_ring(ring::FullPolicy::kFlush)) {
    w.start();
    w.subscription_confirmed();
    sync(w);
  }
  FakeL2 l2;
  TableWriter w;
  CoherenceRing& ring;
};

// Publishes `item` into the ring and waits until the writer applied it (either verdict).
void publish_and_settle(TableWriter& w, CoherenceRing& ring, const CoherenceItem& item) {
  const auto before = w.stats().applied + w.stats().stale;
  ASSERT_TRUE(ring.try_publish(CoherenceItem(item)));
  for (int i = 0; i < 5000 && w.stats().applied + w.stats().stale == before; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(w.stats().applied + w.stats().stale, before);
}

TEST(TableWriter, MissFillsFromL2ThenHits) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 100), v1 = id("TXN", 1000);
  l2.set(name, v1, "px=105.00");
  auto first = get_via(w, name);
  ASSERT_FALSE(first.ec);
  EXPECT_EQ(first.source, Source::kL2);
  EXPECT_EQ(first.value, "px=105.00");
  auto second = get_via(w, name);
  EXPECT_EQ(second.source, Source::kL1);
  EXPECT_EQ(l2.fetches.load(), 1);
  std::string value;
  EXPECT_TRUE(w.map().get(name.view(), value));
  EXPECT_EQ(w.stats().l2_hits, 1u);
}

TEST(TableWriter, NilRunsTheLoaderOnceWithTheMintedVersion) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 101);
  auto got = get_via(w, name);
  ASSERT_FALSE(got.ec);
  EXPECT_EQ(got.source, Source::kLoader);
  ASSERT_TRUE(got.version.has_value());
  EXPECT_EQ(got.version->ns(), "AST");  // a plain loader value takes a table-kind version
  EXPECT_EQ(l2.loads.load(), 1);
  EXPECT_EQ(w.stats().fills, 1u);
}

TEST(TableWriter, ConcurrentMissesShareOneFlight) {
  FakeL2 l2;
  l2.set_park(true);
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 102);
  l2.set(name, id("TXN", 5), "v");
  std::vector<std::future<GetOutcome>> waits;
  std::vector<std::promise<GetOutcome>> promises(50);
  for (auto& p : promises) {
    waits.push_back(p.get_future());
    w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  }
  sync(w);
  l2.release_all();
  for (auto& f : waits) EXPECT_EQ(f.get().value, "v");
  EXPECT_EQ(l2.fetches.load(), 1);
  EXPECT_EQ(w.stats().coalesced, 49u);
}

TEST(TableWriter, FlightOvertakenByNewerDropRereadsL2) {
  // The classic race: the flight reads L2 at v1; the writer stores v2 and its drop is applied
  // here before the read lands. The flight must not answer (or cache) v1: it re-reads.
  FakeL2 l2;
  l2.set_park(true);
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 103), v1 = id("TXN", 10), v2 = id("TXN", 20);
  l2.set(name, v1, "old");
  std::promise<GetOutcome> p;
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  sync(w);  // the flight's read is parked
  // The writer's v2 lands in L2 and its drop is applied here before the v1 reply arrives.
  l2.set(name, v2, "new");
  EXPECT_EQ(apply_via(w, name, v2), table::Verdict::kStale);  // no row yet
  l2.release_all();  // the v1 reply lands; the flight was overtaken, so it re-reads
  auto got = p.get_future().get();
  ASSERT_FALSE(got.ec);
  EXPECT_EQ(got.value, "new");
  EXPECT_EQ(got.version->view(), v2.view());
  EXPECT_GE(w.stats().flight_restarts, 1u);
  EXPECT_EQ(get_via(w, name).source, Source::kL1);
}

// A message no newer than the drop the guard already holds for the name (a job behind its own
// lead, a replay) restarts no flight: the first drop restarted those begun before it, and the
// re-read went out after it. Restarting again would only spend the flight's budget.
TEST(TableWriter, AMessageNoNewerThanTheRememberedDropRestartsNoFlight) {
  RingWriter rw(CoherenceMode::kBroadcast);
  auto& [l2, w, ring] = rw;
  const auto name = id("AST", 104), v1 = id("TXN", 10), v2 = id("TXN", 20), v3 = id("TXN", 30);
  l2.set(name, v1, "old");
  l2.set_park(true);
  std::promise<GetOutcome> p;
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  sync(w);  // the read of v1 is parked
  auto publish = [&](const BrandedId& v) {
    publish_and_settle(w, ring, CoherenceItem{{name, v}, 0, 0});
  };
  l2.set(name, v2, "new");
  publish(v2);  // overtakes the flight
  l2.release_all(/*keep_parking=*/true);  // the v1 answer lands: the flight reads again, parked
  for (int i = 0; i < 5000 && w.stats().flight_restarts == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(w.stats().flight_restarts, 1u);
  publish(v2);  // the same version again (the job behind its lead), the re-read still parked
  publish(v1);  // and an older one (a late replay)
  l2.release_all(/*keep_parking=*/true);  // the re-read's answer: v2
  auto first = p.get_future();
  if (first.wait_for(5s) != std::future_status::ready) {
    ADD_FAILURE() << "the flight read again after a message that said nothing new";
    l2.release_all(/*keep_parking=*/true);
  }
  auto got = first.get();
  ASSERT_FALSE(got.ec);
  EXPECT_EQ(got.value, "new");
  EXPECT_EQ(w.stats().flight_restarts, 1u) << "a message that said nothing new restarted the flight";
  // A newer one still does.
  l2.set(name, v3, "v3");
  publish(v3);  // drops the cached v2 (no flight)
  std::promise<GetOutcome> q;
  w.miss(name, [&q](GetOutcome&& o) { q.set_value(std::move(o)); });
  sync(w);  // its read of v3 is parked
  const auto v4 = id("TXN", 40);
  l2.set(name, v4, "v4");
  publish(v4);
  l2.release_all();  // the v3 answer: overtaken, so it reads again (v4, at once)
  auto newest = q.get_future().get();
  ASSERT_FALSE(newest.ec);
  EXPECT_EQ(newest.value, "v4");
  EXPECT_EQ(w.stats().flight_restarts, 2u);
  w.stop();
}

// A drop that overtakes a flight of a name L2 lacks: the flight reads again, finds nil again, and
// runs the loader. The loader's value must go to L2 (and L1) under a version minted after that
// drop: under the flight's first version it sat in L2 as post-drop data under a pre-drop version,
// and the drop's tombstone refused it here, leaving the name uncached on this node.
TEST(TableWriter, AFlightRestartedByADropLoadsUnderAVersionMintedAfterTheDrop) {
  FakeL2 l2;
  l2.set_park(true);
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  const auto name = id("AST", 109);
  std::promise<GetOutcome> p;
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  sync(w);  // the flight has minted its version, and its read (nil) is parked
  // Another node's write and its drop: a version minted after the flight began.
  const BrandedId drop = table::process_minter().mint("AST", 2).value();
  EXPECT_EQ(apply_via(w, name, drop), table::Verdict::kStale);  // no row: a tombstone, overtaken
  l2.release_all();  // the nil reply lands; the flight restarts, reads nil again, loads
  const auto got = p.get_future().get();
  ASSERT_FALSE(got.ec) << got.ec.message();
  EXPECT_EQ(got.source, Source::kLoader);
  ASSERT_TRUE(got.version.has_value());
  EXPECT_TRUE(table::newer(*got.version, drop))
      << "the loader's value went out under " << got.version->str() << ", minted before the drop "
      << drop.str();
  {
    std::lock_guard lock(l2.mu);
    EXPECT_TRUE(table::newer(std::string_view(l2.rows[name.str()]).substr(0, 14), drop.view()))
        << "L2 holds the loader's value under a pre-drop version";
  }
  EXPECT_EQ(get_via(w, name).source, Source::kL1) << "the fill was refused by the drop's tombstone";
  EXPECT_GE(w.stats().flight_restarts, 1u);
}

// The loader's write refused (L2 held a newer row) restarts the flight too, and within the same
// bound: a row that keeps vanishing again before each re-read ends in `contended`, never a loop.
TEST(TableWriter, ALoaderWriteRefusedEveryTimeEndsContendedWithinTheRestartBound) {
  FakeL2 l2;
  WriterPorts ports = l2.ports();
  std::atomic<int> loads{0};
  ports.load = [&loads](std::string_view, const BrandedId& minted, std::shared_ptr<LoadClaim>,
                        std::function<void(LoadOutcome)> done) {
    ++loads;
    LoadOutcome out;
    out.value = "loaded";
    out.version = minted;
    out.stored = false;  // L2 held a newer row, which is gone again when the flight re-reads
    std::thread([done = std::move(done), out = std::move(out)]() mutable { done(std::move(out)); }).detach();
  };
  TableWriter w(spec(), std::move(ports), 1);
  w.start();
  std::promise<GetOutcome> p;
  w.miss(id("AST", 110), [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  auto answer = p.get_future();
  ASSERT_EQ(answer.wait_for(5s), std::future_status::ready)
      << "the flight is still restarting after " << loads.load() << " loads";
  EXPECT_EQ(answer.get().ec, make_error_code(Errc::kContended));
  EXPECT_LE(loads.load(), 9) << "the refused-write restart skipped the restart bound";
  w.stop();
}

// A loader call the test plays by hand: the port hands its claim and done over and returns.
struct HeldLoad {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<LoadClaim> claim;
  std::function<void(LoadOutcome)> done;
  BrandedId minted = BrandedId::parse("AST0000000000A").value();

  WriterPorts ports(FakeL2& l2) {
    WriterPorts p = l2.ports();
    p.load = [this](std::string_view, const BrandedId& v, std::shared_ptr<LoadClaim> c,
                    std::function<void(LoadOutcome)> d) {
      std::lock_guard lock(mu);
      minted = v;
      claim = std::move(c);
      done = std::move(d);
      cv.notify_all();
    };
    return p;
  }
  void wait_called() {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [this] { return static_cast<bool>(done); }));
  }
  LoadOutcome answer() {
    LoadOutcome out;
    out.value = "loaded";
    out.version = minted;
    out.stored = true;
    return out;
  }
};

TEST(TableWriter, ALoaderPastItsTimeoutAnswersLoaderTimeoutAndItsLateAnswerIsCountedNotCached) {
  FakeL2 l2;
  HeldLoad held;
  auto s = spec();
  s.loader_timeout = 50ms;
  TableWriter w(s, held.ports(l2), 1);
  w.start();
  const BrandedId name = id("AST", 301);
  const GetOutcome got = get_via(w, name);
  EXPECT_EQ(got.ec, Errc::kLoaderTimeout) << got.ec;
  EXPECT_EQ(got.ec.message(), "loader_timeout: table 't': the loader did not answer within 50 ms");
  EXPECT_EQ(w.stats().loader_timeouts, 1u);
  ASSERT_NO_FATAL_FAILURE(held.wait_called());
  // The loader answers late: its claim is lost, so the port reports without writing L2.
  EXPECT_FALSE(held.claim->claim_answer());
  held.done(held.answer());
  sync(w);
  EXPECT_EQ(w.stats().loader_late, 1u);
  std::string value;
  EXPECT_FALSE(w.map().get(name.view(), value, nullptr));
  w.stop();
}

// The other order of the race: the loader claimed its answer before the deadline, and its L2
// write outlasts the deadline: the flight waits for it and answers the value.
TEST(TableWriter, ALoaderThatClaimedItsAnswerBeforeTheDeadlineIsWaitedFor) {
  FakeL2 l2;
  HeldLoad held;
  auto s = spec();
  s.loader_timeout = 50ms;
  TableWriter w(s, held.ports(l2), 1);
  w.start();
  const BrandedId name = id("AST", 302);
  std::promise<GetOutcome> p;
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  ASSERT_NO_FATAL_FAILURE(held.wait_called());
  ASSERT_TRUE(held.claim->claim_answer());
  // The condition here is the clock itself: past the deadline (set before the port was called),
  // then two syncs, so a whole writer pass (which checks the deadlines after its commands) has
  // run after it.
  std::this_thread::sleep_until(std::chrono::steady_clock::now() + 60ms);
  sync(w);
  sync(w);
  held.done(held.answer());
  const GetOutcome got = p.get_future().get();
  ASSERT_FALSE(got.ec) << got.ec;
  EXPECT_EQ(got.value, "loaded");
  EXPECT_EQ(w.stats().loader_timeouts, 0u);
  EXPECT_EQ(w.stats().loader_late, 0u);
  w.stop();
}

TEST(TableWriter, FillGuardHoldsOverRandomizedInterleavings) {
  // 2,000 rounds, each a random order of: a flight reading L2, the writer's L2 update, the drop.
  // Oracle: once apply_via() has returned for version vN, no later get returns older than vN.
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  std::mt19937 rng(42);
  const auto name = id("AST", 104);
  std::uint64_t seq = 1;
  l2.set(name, id("TXN", seq), "v1");
  int checked = 0;
  for (int round = 0; round < 2000; ++round) {
    l2.set_park(rng() % 2 == 0);
    std::promise<GetOutcome> p;
    w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
    const auto vn = id("TXN", ++seq);
    if (rng() % 2) sync(w);
    l2.set(name, vn, "v" + std::to_string(seq));
    apply_via(w, name, vn);  // the drop is applied: from here, nothing older than vn
    l2.release_all();
    p.get_future().get();    // issued before the drop: may be older
    auto after = get_via(w, name);
    ASSERT_FALSE(after.ec);
    ASSERT_TRUE(after.version.has_value());
    EXPECT_FALSE(table::newer(vn.view(), after.version->view())) << "round " << round;
    ++checked;
  }
  EXPECT_EQ(checked, 2000);
}

// True once `pred` holds, polled for up to 5 s.
template <class Pred>
bool eventually_true(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The writer token: a parked writer lends its token; deliver() then applies on the calling thread
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

TEST(TableWriter, StopAnswersPendingFlightsWithStopped) {
  FakeL2 l2;
  l2.set_park(true);
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  std::promise<GetOutcome> p;
  w.miss(id("AST", 107), [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  sync(w);
  w.stop();
  EXPECT_EQ(p.get_future().get().ec, make_error_code(Errc::kStopped));
  l2.release_all();  // a late answer finds no writer loop: it is queued and dropped
}

// A read that passed the engine's running check just before stop() posts after the writer's loop
// ended: it is answered `stopped` at once, not left to the caller's 10 s timeout (helper-28).
TEST(TableWriter, ACommandPostedAfterStopIsAnsweredAtOnce) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 1);
  w.start();
  w.stop();
  std::promise<GetOutcome> miss;
  w.miss(id("AST", 108), [&miss](GetOutcome&& o) { miss.set_value(std::move(o)); });
  auto got = miss.get_future();
  ASSERT_EQ(got.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(got.get().ec, make_error_code(Errc::kStopped));
  std::promise<void> put, erased, synced;
  w.put(id("AST", 108), "v", id("TXN", 1), [&put] { put.set_value(); });
  w.erase(id("AST", 108), [&erased] { erased.set_value(); });
  w.sync([&synced] { synced.set_value(); });
  EXPECT_EQ(put.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(erased.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(synced.get_future().wait_for(5s), std::future_status::ready);
  // Applies too: they carry a verdict, and a stopped writer has none to give (they were left
  // unanswered, so Engine::apply_coherence and apply_and_remember waited get_timeout and said
  // `timeout`).
  const table::CoherenceMessage message{id("AST", 108), id("TXN", 2)};
  std::promise<WriterAnswer<table::Verdict>> applied;
  std::promise<WriterAnswer<Applied>> remembered;
  w.apply(message, [&applied](WriterAnswer<table::Verdict> v) { applied.set_value(std::move(v)); });
  w.apply_and_remember(message,
                       [&remembered](WriterAnswer<Applied> v) { remembered.set_value(std::move(v)); });
  auto verdict = applied.get_future();
  auto memory = remembered.get_future();
  ASSERT_EQ(verdict.wait_for(5s), std::future_status::ready) << "an apply after stop went unanswered";
  ASSERT_EQ(memory.wait_for(5s), std::future_status::ready)
      << "an apply_and_remember after stop went unanswered";
  const auto v = verdict.get();
  const auto m = memory.get();
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error(), make_error_code(Errc::kStopped));
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error(), make_error_code(Errc::kStopped));
  EXPECT_FALSE(w.running());
  w.start();  // a writer started again answers as before
  EXPECT_TRUE(w.running());
  EXPECT_EQ(get_via(w, id("AST", 108)).ec, std::error_code{});
  w.stop();
}

// The job lane's text-key item (WIRE §2.2) carries its key's bytes: the writer drops the row by
// its key (not by hash), consults and feeds the applied memory under the key, and acks.
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
    it.text = true;
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
  item.forget = Forget::kKey;
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
    w.put(n.view(), "mine", id("TXN", 5), [&done] { done.set_value(); }, guard);
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
  all.forget = Forget::kAll;
  publish_and_settle(w, ring, all);
  EXPECT_EQ(w.map().size(), 0u);
  EXPECT_NE(w.forget_token(other.view()), before_flush);
  put(other, before_flush);
  EXPECT_EQ(w.map().size(), 0u);
  w.stop();
}

}  // namespace
}  // namespace echo::engine

namespace echo::engine {
namespace {

// The quiet guest: what a parked writer costs the process it lives in.

std::uint64_t door_barriers(const TableWriter& w) {
  // WriterStats::membarriers less reclamation's scans: the doorbell's handshake alone.
  const std::uint64_t scans = table::epoch::asymmetric() ? w.map().stats().reclaim_scans : 0;
  return w.stats().membarriers - scans;
}

// A burst through the ring while the writer keeps up makes the ring go light (adaptive
// handshake); the sparse messages after it meet the writer parked and are applied by their io
// thread under the writer's token, so the ring never saw a waiter again and stayed light: every
// park of the writer paid a membarrier (an IPI to each CPU running the process), 250 a second
// from the clock tick alone. The first direct apply now takes the ring back to the seq_cst
// handshake, and reclamation's scans are paced: at most one membarrier per 10 ms in all.
TEST(TableWriter, ARingLeftLightByABurstLeavesAtTheFirstDirectApply) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 3);
  CoherenceRing& ring = w.add_ring(ring::FullPolicy::kDrop);
  if (!ring.doorbell().adaptive()) GTEST_SKIP() << "no membarrier here: no ring goes light";
  w.start();
  std::uint64_t seq = 1;
  // Bursts until one finds the writer awake throughout; a loaded machine may hold the woken
  // writer off the CPU for a whole burst (each is ~20 us), so this goes on for up to 5 s.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (ring.doorbell().light_rings_approx() == 0 && std::chrono::steady_clock::now() < give_up) {
    for (int i = 0; i < 1000; ++i) {
      (void)ring.try_publish(CoherenceItem{{id("AST", 1000 + i % 64), id("TXN", seq++)}, 0, 0});
    }
  }
  ASSERT_EQ(ring.doorbell().light_rings_approx(), 1u) << "no burst found the writer awake";
  constexpr int kRows = 40;
  for (int i = 0; i < kRows; ++i) {
    std::promise<void> put;
    w.put(id("AST", static_cast<std::uint64_t>(i + 1)), "v", id("TXN", seq++),
          [&put] { put.set_value(); });
    put.get_future().wait();
  }
  ASSERT_TRUE(eventually_true([&] { return ring.occupancy_approx() == 0; }));
  std::this_thread::sleep_for(20ms);
  const std::uint64_t door0 = door_barriers(w), all0 = w.stats().membarriers;
  const auto t0 = std::chrono::steady_clock::now();
  int direct = 0;
  for (int i = 0; i < kRows; ++i) {
    std::this_thread::sleep_for(5ms);  // sparse: the writer parks between messages
    if (w.deliver(ring, CoherenceItem{{id("AST", static_cast<std::uint64_t>(i + 1)), id("TXN", seq++)}, 0, 0})) {
      ++direct;
      EXPECT_EQ(ring.doorbell().light_rings_approx(), 0u) << "a direct apply left the ring light";
    }
  }
  std::this_thread::sleep_for(100ms);  // and idle
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0).count();
  ASSERT_GT(direct, 0) << "the writer never lent its token";
  EXPECT_LE(door_barriers(w) - door0, 2u) << "parks paid the light handshake's barrier";
  EXPECT_LE(w.stats().membarriers - all0, static_cast<std::uint64_t>(ms / 10 + 3))
      << "more than one membarrier per 10 ms over " << ms << " ms";
  EXPECT_EQ(w.map().stats().retired_pending, 0u) << "the dropped rows were not freed";
  w.stop();
}

// A writer that parks after borrowers applied keeps a reclaim deadline one scan interval out, so
// the next borrowers' retired rows wait for it: no borrower wakes it for them (each such wake was
// a futex call on the io thread and a woken writer competing with the reader the apply served).
// The pattern is the lanes bench's: a put (the writer wakes for it), then one message applied
// directly, again and again.
TEST(TableWriter, BorrowersDoNotWakeAWriterThatParkedAfterBorrowedApplies) {
  FakeL2 l2;
  TableWriter w(spec(), l2.ports(), 3);
  CoherenceRing& ring = w.add_ring(ring::FullPolicy::kDrop);
  w.start();
  sync(w);
  constexpr int kMessages = 50;
  std::uint64_t seq = 1;
  int direct = 0;
  const std::uint64_t signals0 = w.stats().signals;
  for (int i = 0; i < kMessages; ++i) {
    std::promise<void> put;
    w.put(id("AST", 1), "v", id("TXN", seq++), [&put] { put.set_value(); });
    put.get_future().wait();
    std::this_thread::sleep_for(1ms);  // parked again, lending
    direct += w.deliver(ring, CoherenceItem{{id("AST", 1), id("TXN", seq++)}, 0, 0}) ? 1 : 0;
  }
  const std::uint64_t signals = w.stats().signals - signals0;
  ASSERT_GT(direct, kMessages / 2) << "the writer seldom lent its token";
  // One signal per put, and one wake for retired rows: the first borrowed apply's (the writer
  // had parked with none). Before, a borrower woke the writer whenever its pass had freed every
  // retired row (about one scan interval in ten messages here). A message that found the writer
  // awake went through the ring, whose publish may signal too.
  EXPECT_LE(signals, static_cast<std::uint64_t>(kMessages + 2 + (kMessages - direct)))
      << direct << " direct applies cost " << signals - kMessages << " wakes beyond the puts'";
  ASSERT_TRUE(eventually_true([&] { return w.map().stats().retired_pending == 0; }))
      << "the retired rows were never freed";
  w.stop();
}

// Reclamation (a scan of the reader slots with a membarrier, the values' destructors, a batch
// free of unbounded size) stays on the writer: every 256th retire of a direct apply used to run
// it on the io thread that carries every connection.
std::atomic<std::uint64_t> g_destroyed{0}, g_destroyed_here{0};
std::thread::id g_delivering_thread;
table::ValueLayout counting_layout() {
  table::ValueLayout l;
  l.size = 8;
  l.align = 8;
  l.decode = [](std::string_view bytes, void* at, std::string& why) {
    if (bytes.size() != 8) {
      why = "want 8 bytes";
      return false;
    }
    std::memcpy(at, bytes.data(), 8);
    return true;
  };
  l.destroy = [](void*) noexcept {
    g_destroyed.fetch_add(1, std::memory_order_relaxed);
    if (std::this_thread::get_id() == g_delivering_thread) {
      g_destroyed_here.fetch_add(1, std::memory_order_relaxed);
    }
  };
  return l;
}

TEST(TableWriter, ReclamationNeverRunsOnTheThreadThatAppliesDirectly) {
  g_delivering_thread = std::this_thread::get_id();
  g_destroyed = 0;
  g_destroyed_here = 0;
  FakeL2 l2;
  TableSpec s = spec();
  s.value.layout = counting_layout();
  s.max_size = 20'000;
  s.ring_capacity = 16384;
  TableWriter w(s, l2.ports(), 3);
  CoherenceRing& ring = w.add_ring(ring::FullPolicy::kBlock);
  w.start();
  // Past the forced-scan bound: a retire that may reclaim at all scans then, paced or not.
  constexpr std::uint64_t kRows = 3 * table::L1Map::kForceScanRows;
  std::atomic<std::uint64_t> puts{0};
  for (std::uint64_t i = 1; i <= kRows; ++i) {
    w.put(id("AST", i), "12345678", id("TXN", i), [&puts] { puts.fetch_add(1); });
  }
  ASSERT_TRUE(eventually_true([&] { return puts.load() == kRows; }));
  std::this_thread::sleep_for(20ms);  // parked, lending
  std::uint64_t direct = 0;
  for (std::uint64_t i = 1; i <= kRows; ++i) {  // back to back: many applies per lend
    direct += w.deliver(ring, CoherenceItem{{id("AST", i), id("TXN", kRows + i)}, 0, 0}) ? 1 : 0;
  }
  ASSERT_GT(direct, 0u) << "the writer never lent its token";
  sync(w);
  ASSERT_TRUE(eventually_true([&] { return g_destroyed.load() == kRows; }))
      << g_destroyed.load() << " of " << kRows << " rows destroyed";
  EXPECT_EQ(g_destroyed_here.load(), 0u) << "rows were reclaimed on the delivering thread ("
                                         << direct << " direct applies)";
  EXPECT_EQ(w.map().stats().retired_pending, 0u);
  w.stop();
}

// An idle writer with nothing that needs the clock parks until work comes: the fixed 4 ms tick
// cost 250 wakes a second per table. Rows still expire on time for readers under
// L1Clock::kWriter: the writer wakes at the earliest expiry and publishes the time.
TEST(TableWriter, AnIdleWriterSleepsUntilWorkOrAnExpiryNeedsIt) {
  FakeL2 l2;
  TableSpec s = spec();
  s.ttl_ms = 60'000;
  TableWriter w(s, l2.ports(), 3);
  w.start();
  sync(w);
  const BrandedId far = id("AST", 1);
  std::promise<void> put;
  w.put(far, "v", id("TXN", 1), [&put] { put.set_value(); });
  put.get_future().wait();
  std::this_thread::sleep_for(30ms);
  const std::uint64_t parks0 = w.stats().parks, passes0 = w.stats().passes;
  std::this_thread::sleep_for(400ms);
  EXPECT_LE(w.stats().parks - parks0, 2u) << "an idle writer kept waking";
  EXPECT_LE(w.stats().passes - passes0, 2u);
  w.stop();

  // A short-lived row: readers must see it expire though nothing else wakes the writer.
  FakeL2 l2b;
  s.ttl_ms = 50;
  s.jitter = 0.0;
  TableWriter v(s, l2b.ports(), 3);
  v.start();
  std::promise<void> put2;
  v.put(far, "v", id("TXN", 1), [&put2] { put2.set_value(); });
  put2.get_future().wait();
  std::string value;
  EXPECT_TRUE(v.map().get(far.view(), value));
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(v.map().get(far.view(), value)) << "the readers' time did not pass the expiry";
  EXPECT_GE(v.stats().parks, 1u);
  v.stop();
}

}  // namespace
}  // namespace echo::engine
