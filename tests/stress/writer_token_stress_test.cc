// SPDX-License-Identifier: MIT
// The writer token under contention (run under TSan): borrowers racing the writer's lend and
// take-back on the bare token, then a TableWriter whose io threads deliver() drops (applied on
// their own thread while the writer is parked) racing puts and fills that wake it, readers, and a
// stop() that lands while a borrower may hold the token. Two holders at once would be a data race
// on plain memory (TSan) and a broken count; a lost or doubled apply shows in the counters; a wrong
// order shows as a row older than a drop applied to its name.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <echo/engine/internal/table_writer.h>
#include <echo/engine/internal/writer_token.h>
#include <echo/engine/l2_frame.h>

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace std::chrono_literals;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

TEST(WriterTokenStress, OneHolderAtATimeAcrossLendsBorrowsAndTakeBacks) {
  WriterToken token;
  std::uint64_t guarded = 0;  // plain memory: only the holder touches it
  std::atomic<int> holders{0};
  std::atomic<int> overlaps{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> borrowed{0};
  auto hold = [&] {
    if (holders.fetch_add(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1);
    ++guarded;
    holders.fetch_sub(1, std::memory_order_relaxed);
  };
  constexpr std::uint64_t kWriterTurns = 20'000;
  std::thread writer([&] {
    // The writer starts holding it (the initial state is closed: nobody borrows).
    for (std::uint64_t i = 0; i < kWriterTurns; ++i) {
      hold();
      token.lend();
      if (i % 16 == 0) std::this_thread::yield();  // a "park": borrowers get their turn
      token.take_back();
    }
    hold();
    token.close();
    stop.store(true, std::memory_order_relaxed);
  });
  std::vector<std::thread> borrowers;
  for (int b = 0; b < 3; ++b) {
    borrowers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (token.try_borrow()) {
          hold();
          borrowed.fetch_add(1, std::memory_order_relaxed);
          token.give_back();
        }
      }
    });
  }
  writer.join();
  for (auto& t : borrowers) t.join();
  EXPECT_FALSE(token.try_borrow()) << "a closed token is never lent again";
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(guarded, kWriterTurns + 1 + borrowed.load());
  EXPECT_GT(borrowed.load(), 0u) << "the borrowers never got the token: nothing was tested";
}

struct Harness {
  std::mutex mu;
  std::unordered_map<std::string, std::string> l2;  // name -> framed value
  WriterPorts ports;
  TableSpec spec;
  Harness() {
    ports.fetch = [this](std::string_view name, std::function<void(L2Fetch)> done) {
      std::optional<std::string> stored;
      {
        std::lock_guard lock(mu);
        auto it = l2.find(std::string(name));
        if (it != l2.end()) stored = it->second;
      }
      done(L2Fetch{{}, stored});
    };
    ports.load = [](std::string_view, const BrandedId& minted, bool, std::shared_ptr<LoadClaim>,
                    std::function<void(LoadOutcome)> done) {
      LoadOutcome out;
      out.value = std::string(minted.view());
      out.version = minted;
      out.stored = true;
      done(std::move(out));
    };
    spec.name = "token";
    spec.kind = "AST";
    spec.coherence = CoherenceMode::kNone;  // caching from the start (no lane to confirm)
    spec.ring_capacity = 64;
    spec.max_batch = 16;
    spec.ttl_ms = 60'000;
    spec.sweep_ms = 5;
    spec.loader = [](const BrandedId&) -> LoadResult { return Loaded{"", {}}; };
  }
};

// Two io threads deliver() drops on 64 names, each through its own ring; a putter's puts and
// two readers' misses (fills) keep waking the writer, so borrows race take-backs throughout.
// Every delivered drop is counted exactly once (applied or stale); no
// row is ever torn; and at the end no row is older than a drop delivered to its name.
TEST(WriterTokenStress, DirectAppliesRacePutsFillsAndTheWritersWakes) {
  constexpr std::uint64_t kNames = 64;
  Harness h;
  TableWriter w(h.spec, h.ports, 3);
  // Block: a full ring makes its producer wait, never refuses, so every drop is applied.
  CoherenceRing* rings[] = {&w.add_ring(ring::FullPolicy::kBlock),
                            &w.add_ring(ring::FullPolicy::kBlock)};
  w.start();
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> clock{1'000'000};
  std::atomic<std::uint64_t> delivered{0}, torn{0};
  std::mutex drops_mu;
  std::unordered_map<std::string, BrandedId> newest_drop;  // name -> newest delivered drop

  std::thread putter([&] {
    for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const auto name = id("AST", i % kNames);
      const auto v = id("TXN", clock.fetch_add(1));
      {
        std::lock_guard lock(h.mu);
        h.l2[name.str()] = frame_l2_value(v, v.view());
      }
      std::promise<void> done;
      w.put(name, std::string(v.view()), v, [&done] { done.set_value(); });
      done.get_future().wait();
      std::this_thread::sleep_for(50us);  // let the writer park between wakes
    }
  });
  auto producer = [&](int which) {
    for (std::uint64_t i = which; !stop.load(std::memory_order_relaxed); i += 2) {
      const auto name = id("AST", i % kNames);
      const auto v = id("TXN", clock.fetch_add(1));
      {
        std::lock_guard lock(drops_mu);
        auto [it, fresh] = newest_drop.try_emplace(name.str(), v);
        if (!fresh && table::newer(v.view(), it->second.view())) it->second = v;
      }
      w.deliver(*rings[which], CoherenceItem{{name, v}, 0, 0});
      delivered.fetch_add(1, std::memory_order_relaxed);
      if (i % 8 == 0) std::this_thread::yield();
    }
  };
  auto reader = [&] {
    std::string value;
    table::IdBytes version;
    for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const auto name = id("AST", i % kNames);
      if (w.map().get(name.view(), value, &version)) {
        if (value != table::view(version)) torn.fetch_add(1, std::memory_order_relaxed);
      } else if (i % 8 == 0) {
        std::promise<GetOutcome> p;
        w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
        auto o = p.get_future().get();
        if (!o.ec && o.version && o.value != o.version->view()) torn.fetch_add(1);
      }
    }
  };
  std::thread p0(producer, 0), p1(producer, 1), r1(reader), r2(reader);
  std::this_thread::sleep_for(2s);
  stop = true;
  for (auto* t : {&putter, &p0, &p1, &r1, &r2}) t->join();

  auto accounted = [&] {
    const WriterStats s = w.stats();
    std::uint64_t refused = 0;
    for (const auto& r : w.ring_stats()) refused += r.dropped;
    return s.applied + s.stale + refused;
  };
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (accounted() != delivered.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(accounted(), delivered.load());
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(w.stats().direct_applies, 0u) << "no deliver() was applied directly: not tested";
  EXPECT_LT(w.stats().direct_applies, delivered.load()) << "the ring path was never taken";
  // Read on the writer thread (sync): every drop is applied by now.
  std::promise<std::size_t> older;
  w.sync([&] {
    std::size_t n = 0;
    std::string value;
    table::IdBytes version;
    for (const auto& [name, drop] : newest_drop) {
      if (w.map().get(name, value, &version) && !table::newer(table::view(version), drop.view())) {
        ++n;
      }
    }
    older.set_value(n);
  });
  EXPECT_EQ(older.get_future().get(), 0u) << "a row survived a newer drop of its name";
  w.stop();
}

// stop() while io threads keep delivering: the writer takes its token back from whoever holds
// it and closes it; later deliveries go to the rings (nobody drains them); no apply runs after
// the writer's thread ended, and every flight's reader is answered.
TEST(WriterTokenStress, StopWhileBorrowedEndsCleanly) {
  Harness h;
  for (int round = 0; round < 40; ++round) {
    TableWriter w(h.spec, h.ports, 3);
    CoherenceRing& ring = w.add_ring(ring::FullPolicy::kDrop);
    w.start();
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> clock{1'000'000};
    std::thread producer([&] {
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        w.deliver(ring, CoherenceItem{{id("AST", i % 16), id("TXN", clock.fetch_add(1))}, 0, 0});
      }
    });
    std::thread asker([&] {
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        std::promise<GetOutcome> p;
        w.miss(id("AST", i % 16), [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
        EXPECT_EQ(p.get_future().wait_for(5s), std::future_status::ready);
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200 + 50 * round));
    w.stop();
    const WriterStats after_stop = w.stats();
    std::this_thread::sleep_for(1ms);  // deliveries continue into the ring
    EXPECT_EQ(w.stats().direct_applies, after_stop.direct_applies) << "round " << round;
    EXPECT_EQ(w.stats().applied + w.stats().stale, after_stop.applied + after_stop.stale);
    stop = true;
    producer.join();
    asker.join();
  }
}

}  // namespace
}  // namespace echo::engine
