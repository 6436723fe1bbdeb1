// SPDX-License-Identifier: MIT
// The writer under concurrent load (run under TSan): one ring producer publishing drops, one
// app thread putting new versions, two readers hitting L1 and missing through the inbox. Every
// value carries its own version, so a torn row (one version's value under another's stamp) is
// caught; every fill comes from an L2 that only moves forward. Bounded: 2 s of traffic.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <echo/engine/internal/table_writer.h>
#include <echo/engine/l2_frame.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace std::chrono_literals;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

TEST(TableWriterStress, ReadersNeverSeeATornRowUnderDropsPutsAndFills) {
  constexpr std::uint64_t kNames = 64;
  std::mutex mu;
  std::unordered_map<std::string, std::string> l2;  // name -> framed value
  WriterPorts ports;
  ports.fetch = [&](std::string_view name, std::function<void(L2Fetch)> done) {
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
  TableSpec spec;
  spec.name = "stress";
  spec.kind = "AST";
  spec.ring_capacity = 256;
  spec.max_batch = 32;
  spec.max_size = 32;  // small: forces reclaim of expired/skip paths as well
  spec.ttl_ms = 50;
  spec.sweep_ms = 5;
  spec.loader = [](const BrandedId&) -> LoadResult { return Loaded{"", {}}; };
  TableWriter w(spec, ports, 3);
  auto& ring = w.add_ring(ring::FullPolicy::kDrop);
  w.start();

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> clock{1'000'000};
  std::atomic<std::uint64_t> reads{0}, torn{0}, misses{0};

  std::thread putter([&] {
    std::uint64_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto name = id("AST", i++ % kNames);
      const auto v = id("TXN", clock.fetch_add(1));
      {
        std::lock_guard lock(mu);
        l2[name.str()] = frame_l2_value(v, v.view());
      }
      std::promise<void> done;
      w.put(name, std::string(v.view()), v, [&done] { done.set_value(); });
      done.get_future().wait();
    }
  });
  std::thread producer([&] {
    std::uint64_t i = 7;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto name = id("AST", i++ % kNames);
      ring.try_publish(CoherenceItem{{name, id("TXN", clock.fetch_add(1))}, 0, 0});
      if (i % 64 == 0) std::this_thread::yield();
    }
  });
  auto reader = [&] {
    std::string value;
    table::IdBytes version;
    std::uint64_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto name = id("AST", i++ % kNames);
      if (w.map().get(name.view(), value, &version)) {
        reads.fetch_add(1, std::memory_order_relaxed);
        if (value != table::view(version)) torn.fetch_add(1, std::memory_order_relaxed);
      } else if (i % 16 == 0) {
        misses.fetch_add(1, std::memory_order_relaxed);
        std::promise<GetOutcome> p;
        w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
        auto o = p.get_future().get();
        if (!o.ec && o.version && o.value != o.version->view()) torn.fetch_add(1);
      }
    }
  };
  std::thread r1(reader), r2(reader);
  std::this_thread::sleep_for(2s);
  stop = true;
  for (auto* t : {&putter, &producer, &r1, &r2}) t->join();
  w.stop();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(misses.load(), 0u);
  EXPECT_GT(w.stats().applied + w.stats().stale, 0u);
}

// Carried values through a ring and its ByteArena (and deliver()'s direct apply while the writer
// parks): one producer delivering values that grow and shrink, two readers checking every hit is
// one version's value whole, the writer draining, sweeping and reclaiming. A small arena fills, so
// some messages degrade to drops: still never a torn or an older row.
TEST(TableWriterStress, ReadersNeverSeeATornCarriedValue) {
  WriterPorts ports;
  ports.fetch = [](std::string_view, std::function<void(L2Fetch)> done) { done(L2Fetch{}); };
  ports.load = [](std::string_view, const BrandedId&, bool, std::shared_ptr<LoadClaim>,
                  std::function<void(LoadOutcome)> done) { done(LoadOutcome{}); };
  TableSpec spec;
  spec.name = "carried";
  spec.kind = "AST";
  spec.keys = KeyKind::kText;
  spec.coherence = CoherenceMode::kBroadcast;
  spec.carry = Carry::kUpsert;
  spec.carry_max_bytes = 600;
  spec.carry_arena_bytes = 2 * (600 + 216);  // the least: fills up, degrades to drops
  spec.ring_capacity = 64;
  spec.max_batch = 16;
  spec.max_size = 16;
  spec.loader = [](const Key&) -> LoadResult { return Loaded{"", {}}; };
  TableWriter w(spec, ports, 3);
  auto& ring = w.add_ring(ring::FullPolicy::kDrop, true);
  ring::ByteArena* arena = w.arena_of(ring);
  ASSERT_NE(arena, nullptr);
  w.start();

  // A value is its version's 14 bytes repeated to a length that depends on the version.
  const auto value_of = [](const BrandedId& v) {
    std::string out;
    const std::size_t size = 14 * (1 + v.snowflake() % 40);
    while (out.size() < size) out += v.view();
    return out;
  };
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0}, torn{0}, degraded{0};
  std::thread producer([&] {
    std::uint64_t clock = 1'000'000;
    std::string buf;
    for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const std::string key = "k" + std::to_string(i % 24);
      const BrandedId v = id("TXN", clock++);
      buf = key + "}" + std::string(v.view()) + value_of(v);  // the frame past its "{"
      CoherenceItem item{table::CoherenceMessage{v, v}, 0, 0};
      item.key = buf.data();
      item.key_size = static_cast<std::uint8_t>(key.size());
      item.value_size = static_cast<std::uint32_t>(buf.size() - key.size() - 15);
      item.kind = ItemKind::kCarried;
      if (!w.deliver_carried(ring, *arena, std::move(item))) {
        degraded.fetch_add(1, std::memory_order_relaxed);
        CoherenceItem drop{table::CoherenceMessage{v, v}, 0, 0};
        drop.text_hash = table::hash_key(key);
        drop.kind = ItemKind::kTextHash;
        w.deliver(ring, std::move(drop));
      }
      if (i % 32 == 0) std::this_thread::yield();
    }
  });
  auto reader = [&] {
    std::string value;
    table::IdBytes version;
    for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      if (!w.map().get("k" + std::to_string(i % 24), value, &version)) continue;
      reads.fetch_add(1, std::memory_order_relaxed);
      if (value != value_of(BrandedId::parse(table::view(version)).value())) {
        torn.fetch_add(1, std::memory_order_relaxed);
      }
    }
  };
  std::thread r1(reader), r2(reader);
  std::this_thread::sleep_for(2s);
  stop = true;
  for (auto* t : {&producer, &r1, &r2}) t->join();
  w.stop();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  const WriterStats s = w.stats();
  EXPECT_GT(s.carried_updates + s.carried_inserts, 0u);
  std::printf("carried: %llu reads, %llu updates, %llu inserts, %llu direct, %llu degraded\n",
              static_cast<unsigned long long>(reads.load()),
              static_cast<unsigned long long>(s.carried_updates),
              static_cast<unsigned long long>(s.carried_inserts),
              static_cast<unsigned long long>(s.direct_applies),
              static_cast<unsigned long long>(degraded.load()));
}

// Engine::apply_coherence and apply_and_remember ask running() on the caller's thread while the
// owner may be in stop(). running() read the jthread (joinable()) that stop()'s join() writes: a
// data race TSan reports here. Each caller's apply is answered, by the loop or as `stopped`.
TEST(TableWriterStress, CallersAskingRunningAndApplyingWhileStopJoinsAreAllAnswered) {
  WriterPorts ports;
  ports.fetch = [](std::string_view, std::function<void(L2Fetch)> done) { done(L2Fetch{}); };
  ports.load = [](std::string_view, const BrandedId&, bool, std::shared_ptr<LoadClaim>,
                  std::function<void(LoadOutcome)> done) { done(LoadOutcome{}); };
  TableSpec spec;
  spec.name = "stopping";
  spec.kind = "AST";
  spec.loader = [](const BrandedId&) -> LoadResult { return Loaded{"", {}}; };
  for (int round = 0; round < 50; ++round) {
    TableWriter w(spec, ports, 3);
    w.start();
    std::atomic<int> answered{0}, asked{0};
    auto caller = [&] {
      for (std::uint64_t i = 0; w.running(); ++i) {
        asked.fetch_add(1, std::memory_order_relaxed);
        std::promise<WriterAnswer<table::Verdict>> p;
        w.apply(table::CoherenceMessage{id("AST", i % 8), id("TXN", i + 1)},
                [&p](WriterAnswer<table::Verdict> v) { p.set_value(std::move(v)); });
        if (p.get_future().wait_for(5s) == std::future_status::ready) {
          answered.fetch_add(1, std::memory_order_relaxed);
        }
      }
    };
    std::thread c1(caller), c2(caller);
    std::this_thread::sleep_for(1ms);
    w.stop();
    c1.join();
    c2.join();
    EXPECT_EQ(answered.load(), asked.load()) << "round " << round;
  }
}

}  // namespace
}  // namespace echo::engine
