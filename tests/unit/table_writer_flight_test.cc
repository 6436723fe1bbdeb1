// SPDX-License-Identifier: MIT
// The table writer's flights: concurrent misses share one, a newer drop makes a flight read again
// (never cache the replaced version), loaders are bounded and timed out, and stop answers them.

#include "table_writer_fixture.h"

namespace echo::engine {
namespace {

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

// The guard's floor (the newest version of any name, once the tombstone table collapsed) does not
// push a loader's version into the future: one node whose clock runs ahead, or one far-future
// drop, would otherwise make every later loader row of this node newer than the correct
// publishes that follow, and L2's newer-only writes would refuse them. The version is minted past
// the name's own tombstone only.
TEST(TableWriter, TheFloorDoesNotPushALoadersVersionPastItself) {
  FakeL2 l2;
  auto s = spec(CoherenceMode::kBroadcast);
  s.max_size = 16;  // the guard's bound: 1,024 slots, 512 usable
  TableWriter w(s, l2.ports(), 1);
  w.start();
  w.subscription_confirmed();
  sync(w);
  // A drop minted on a node whose clock runs 500 ms ahead (within what a mint may borrow).
  const auto now = table::process_minter().mint("AST", 5).value();
  const auto far = id("AST", now.snowflake() + (std::uint64_t{500} << 22));
  for (std::uint64_t i = 0; i < 1500; ++i) (void)apply_via(w, id("AST", 900000 + i), far);
  ASSERT_GT(w.map().stats().tombstone_collapses, 0u) << "the floor never formed";
  auto got = get_via(w, id("AST", 101));
  ASSERT_FALSE(got.ec);
  ASSERT_TRUE(got.version.has_value());
  EXPECT_FALSE(table::newer(*got.version, far)) << "the loader's version was minted past the floor";
  // The floor still refuses to cache it (a refill later, never a stale row).
  EXPECT_EQ(w.map().size(), 0u);
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
  publish(v2);                            // overtakes the flight
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
  EXPECT_EQ(w.stats().flight_restarts, 1u)
      << "a message that said nothing new restarted the flight";
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
  ports.load = [&loads](std::string_view, const BrandedId& minted, bool, std::shared_ptr<LoadClaim>,
                        std::function<void(LoadOutcome)> done) {
    ++loads;
    LoadOutcome out;
    out.value = "loaded";
    out.version = minted;
    out.stored = false;  // L2 held a newer row, which is gone again when the flight re-reads
    std::thread([done = std::move(done), out = std::move(out)]() mutable {
      done(std::move(out));
    }).detach();
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
    p.load = [this](std::string_view, const BrandedId& v, bool, std::shared_ptr<LoadClaim> c,
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
    p.get_future().get();  // issued before the drop: may be older
    auto after = get_via(w, name);
    ASSERT_FALSE(after.ec);
    ASSERT_TRUE(after.version.has_value());
    EXPECT_FALSE(table::newer(vn.view(), after.version->view())) << "round " << round;
    ++checked;
  }
  EXPECT_EQ(checked, 2000);
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
  w.apply_and_remember(
      message, [&remembered](WriterAnswer<Applied> v) { remembered.set_value(std::move(v)); });
  auto verdict = applied.get_future();
  auto memory = remembered.get_future();
  ASSERT_EQ(verdict.wait_for(5s), std::future_status::ready)
      << "an apply after stop went unanswered";
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

}  // namespace
}  // namespace echo::engine
