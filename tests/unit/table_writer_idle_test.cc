// SPDX-License-Identifier: MIT
// The quiet guest: what a parked writer costs the process it lives in (its doorbell, its wakes, and
// reclamation kept off the thread that applies directly).

#include "table_writer_fixture.h"

namespace echo::engine {
namespace {

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
    if (w.deliver(ring,
                  CoherenceItem{
                      {id("AST", static_cast<std::uint64_t>(i + 1)), id("TXN", seq++)}, 0, 0})) {
      ++direct;
      EXPECT_EQ(ring.doorbell().light_rings_approx(), 0u) << "a direct apply left the ring light";
    }
  }
  std::this_thread::sleep_for(100ms);  // and idle
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
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
  int direct = 0, lapses = 0;
  const std::uint64_t signals0 = w.stats().signals;
  auto last = std::chrono::steady_clock::now();
  for (int i = 0; i < kMessages; ++i) {
    std::promise<void> put;
    w.put(id("AST", 1), "v", id("TXN", seq++), [&put] { put.set_value(); });
    put.get_future().wait();
    std::this_thread::sleep_for(1ms);  // parked again, lending
    direct += w.deliver(ring, CoherenceItem{{id("AST", 1), id("TXN", seq++)}, 0, 0}) ? 1 : 0;
    // A loaded machine may stretch one round past the writer's reclaim deadline: the writer then
    // freed everything and parked with none, and this apply's rows rightly wake it once more.
    const auto now = std::chrono::steady_clock::now();
    if (now - last >= std::chrono::milliseconds(table::L1Map::kScanIntervalMs) - 2ms) ++lapses;
    last = now;
  }
  const std::uint64_t signals = w.stats().signals - signals0;
  ASSERT_GT(direct, kMessages / 2) << "the writer seldom lent its token";
  // One signal per put, and one wake for retired rows: the first borrowed apply's (the writer
  // had parked with none), and one more after each round that outlasted the reclaim deadline
  // (none on a quiet machine: a round takes ~1.1 ms). Before, a borrower woke the writer whenever
  // its pass had freed every retired row (about one scan interval in ten messages here). A
  // message that found the writer awake went through the ring, whose publish may signal too.
  EXPECT_LE(signals, static_cast<std::uint64_t>(kMessages + 2 + lapses + (kMessages - direct)))
      << direct << " direct applies cost " << signals - kMessages << " wakes beyond the puts' ("
      << lapses << " rounds outlasted the reclaim deadline)";
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
  EXPECT_EQ(g_destroyed_here.load(), 0u)
      << "rows were reclaimed on the delivering thread (" << direct << " direct applies)";
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
