// SPDX-License-Identifier: MIT
// The L1 map's row lifetimes: retired rows are pinned by a guard, reclaimed at a paced scan, freed
// exactly once (counted allocations), dropped without allocating, and shown as a backlog in stats.

#include "l1_map_counted_new.h"

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

TEST(L1Map, AGuardPinsRetiredRowsUntilItIsReleased) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "pinned-value", ver(1)), InsertVerdict::kInserted);
  {
    ReadGuard g;
    const auto row = m.find(g, name_id(1).view());
    ASSERT_TRUE(row.has_value());
    ASSERT_EQ(m.apply_coherence(name_id(1), ver(2)), Verdict::kApplied);
    m.reclaim();
    m.reclaim();
    EXPECT_EQ(m.stats().retired_pending, 1u);
    EXPECT_EQ(row->value, "pinned-value");  // still readable: ASan would flag a freed row
    EXPECT_EQ(row->version, ver(1).view());
  }
  m.reclaim();
  EXPECT_EQ(m.stats().retired_pending, 0u);
}

// Each scan of the reader slots is a membarrier: an IPI to every CPU the process runs on. The
// writer's idle pass called reclaim() after any retire, so sparse traffic paid one per message
// (100 drops 1 ms apart: 100 scans). reclaim_due() paces them to one per kScanIntervalMs, says
// when the waiting rows will be freed, and frees them by then.
TEST(L1Map, ReclaimScansArePacedNotOnePerDrop) {
  set_now(0);
  L1Map m(config());
  for (std::uint64_t i = 0; i < 100; ++i)
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  const std::uint64_t scans0 = m.stats().reclaim_scans;
  std::int64_t due = -1;
  for (std::uint64_t i = 0; i < 100; ++i) {
    set_now(static_cast<std::int64_t>(i));  // one drop a millisecond, an idle pass after each
    ASSERT_EQ(m.apply_coherence(name_id(i), ver(2)), Verdict::kApplied);
    due = m.reclaim_due(fake_now());
    // -1: this pass's scan freed every waiting row; else the writer must come back by `due`.
    if (due != -1) {
      EXPECT_GT(due, fake_now());
      EXPECT_LE(due, fake_now() + L1Map::kScanIntervalMs);
    }
  }
  ASSERT_NE(due, -1) << "the last drops' rows wait for the next scan";
  const std::uint64_t scans = m.stats().reclaim_scans - scans0;
  EXPECT_LE(scans, 100u / L1Map::kScanIntervalMs + 1) << "one scan per drop";
  EXPECT_GE(scans, 100u / L1Map::kScanIntervalMs - 1);
  EXPECT_GT(m.stats().retired_pending, 0u);
  set_now(due);
  EXPECT_EQ(m.reclaim_due(fake_now()), -1) << "nothing left waiting once the due scan ran";
  EXPECT_EQ(m.stats().retired_pending, 0u);
  EXPECT_EQ(m.reclaim_due(fake_now()), -1);
  EXPECT_EQ(m.stats().reclaim_scans - scans0, scans + 1) << "a pass with nothing waiting scans";
}

// Under heavy traffic the pace gives way to a memory bound: however fast the drops come (here
// the clock does not move at all), no more than kForceScanRows retired rows (plus the batch
// that crosses it) wait.
TEST(L1Map, ReclaimForcesAScanOnceManyRowsWait) {
  set_now(0);
  L1Map m(config(20'000));
  constexpr std::uint64_t kRows = 3 * L1Map::kForceScanRows;
  for (std::uint64_t i = 0; i < kRows; ++i)
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  (void)m.reclaim_due(fake_now());
  std::size_t most = 0;
  for (std::uint64_t i = 0; i < kRows; ++i) {
    ASSERT_EQ(m.apply_coherence(name_id(i), ver(2)), Verdict::kApplied);
    most = std::max<std::size_t>(most, m.stats().retired_pending);
  }
  EXPECT_LE(most, L1Map::kForceScanRows + L1Map::kReclaimBatch);
  EXPECT_LT(m.stats().retired_pending, kRows);
}

// A writer that lends its role (the engine's direct apply) holds reclamation: the borrower's
// retires only wait, however many, and the writer frees them at its next reclaim_due().
TEST(L1Map, HeldReclaimLeavesEveryRetiredRowToTheWriter) {
  set_now(0);
  L1Map m(config(5000));
  for (std::uint64_t i = 0; i < 2000; ++i)
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  const std::uint64_t scans0 = m.stats().reclaim_scans;
  m.hold_reclaim(true);
  for (std::uint64_t i = 0; i < 2000; ++i)
    ASSERT_EQ(m.apply_coherence(name_id(i), ver(2)), Verdict::kApplied);
  EXPECT_EQ(m.stats().reclaim_scans, scans0) << "a retire under hold scanned";
  EXPECT_EQ(m.stats().retired_pending, 2000u);
  m.hold_reclaim(false);
  set_now(1000);
  EXPECT_EQ(m.reclaim_due(fake_now()), -1);
  EXPECT_EQ(m.stats().retired_pending, 0u);
}

TEST(L1Map, RowsAreFreedExactlyOnce) {
  set_now(0);
  std::thread([] {  // registers this thread's reader slot outside the counted scope
    std::string v;
    ReadGuard g;
  })
      .join();
  { ReadGuard g; }
  const long before = g_live.load(std::memory_order_relaxed);
  {
    L1Map m(config(512, 100, 0.2));
    std::mt19937_64 rng(3);
    for (int i = 0; i < 50'000; ++i) {
      const BrandedId n = name_id(rng() % 700);
      const std::string value(
          static_cast<std::size_t>(rng() % 8 == 0 ? 900 + rng() % 400 : rng() % 64), 'v');
      switch (rng() % 6) {
        case 0:
          m.put(n, value, ver(rng() % 50));
          break;
        case 1:
          m.insert_fill(n, value, ver(rng() % 50));
          break;
        case 2:
          m.apply_coherence(n, ver(rng() % 50));
          break;
        case 3:
          m.erase(n);
          break;
        case 4:
          set_now(g_now.load(std::memory_order_relaxed) + 1);
          m.sweep(fake_now());
          break;
        default:
          if (rng() % 100 == 0) m.clear();
          break;
      }
    }
    m.clear();
    m.reclaim();
    EXPECT_EQ(m.value_bytes(), 0u);
    EXPECT_EQ(m.stats().retired_pending, 0u);
  }
  EXPECT_EQ(g_live.load(std::memory_order_relaxed), before);
}

// The epoch handshake's mode is the kernel's (asymmetric where membarrier is offered, as on CI)
// unless ECHO_EPOCH_SYMMETRIC=1 or a TSan build forces the symmetric one: the unit and
// integration suites (ASan) run the asymmetric handshake, the stress suite (TSan, including
// l1_map_stress_test's reclamation under churn) the symmetric one.
TEST(Epoch, TheHandshakeModeIsFixedAndSaid) {
  const char* env = std::getenv("ECHO_EPOCH_SYMMETRIC");
  const bool forced = env != nullptr && env[0] == '1';
  const bool asym = epoch::asymmetric();
  if (forced) {
    EXPECT_FALSE(asym);
  }
  EXPECT_EQ(asym, epoch::asymmetric());
  std::printf("[ epoch ] handshake: %s\n",
              asym ? "asymmetric (membarrier)" : "symmetric (seq_cst)");
  {
    ReadGuard g;  // a section opens under the same mode
    EXPECT_TRUE(g.protecting());
  }
  EXPECT_EQ(epoch::barrier_failures(), 0u);
}

// The writer's ring drain is noexcept, so a drop must not allocate. Retired rows
// chain through themselves: with a reader pinning reclamation, thousands of drops (and their
// tombstones, once remembered) allocate nothing. The old retire vector grew here.
TEST(L1Map, DropsAllocateNothingWhileAReaderPinsReclamation) {
  set_now(0);
  constexpr int kRows = 4000;
  L1Map m(config(kRows));
  for (int i = 0; i < kRows; ++i)
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  for (int i = 0; i < kRows; ++i)
    ASSERT_EQ(m.apply_coherence(name_id(i), ver(2)), Verdict::kApplied);
  for (int i = 0; i < kRows; ++i)
    ASSERT_EQ(m.put(name_id(i), "v", ver(3)), InsertVerdict::kInserted);
  m.reclaim();
  ReadGuard pin;  // this thread's section: nothing retired from here on can be freed
  ASSERT_TRUE(pin.protecting());
  std::vector<CoherenceMessage> drops;
  for (int i = 0; i < kRows; ++i) drops.push_back({name_id(i), ver(4)});
  const long before = g_news.load(std::memory_order_relaxed);
  EXPECT_EQ(m.apply_batch(drops), static_cast<std::size_t>(kRows));
  m.reclaim();
  EXPECT_EQ(g_news.load(std::memory_order_relaxed), before);
  EXPECT_EQ(m.stats().retired_pending, static_cast<std::uint64_t>(kRows));
}

// A reader pinning reclamation across more reclaims than kRetireBatches: later batches join the
// newest one; nothing is freed while the reader stays, everything exactly once after it leaves.
TEST(L1Map, RetireBatchesPastTheirBoundMergeAndAreFreedOnceTheReaderLeaves) {
  set_now(0);
  const long before = g_live.load(std::memory_order_relaxed);
  {
    L1Map m(config());
    constexpr int kRounds = 3 * static_cast<int>(L1Map::kRetireBatches);
    auto pin = std::make_unique<ReadGuard>();
    for (int r = 0; r < kRounds; ++r) {
      for (int i = 0; i < 5; ++i) {
        m.put(name_id(i), std::string(static_cast<std::size_t>(r + 1), 'v'),
              ver(static_cast<std::uint64_t>(2 * r)));
      }
      for (int i = 0; i < 5; ++i)
        m.apply_coherence(name_id(i), ver(static_cast<std::uint64_t>(2 * r + 1)));
      m.reclaim();
    }
    EXPECT_EQ(m.stats().retired_pending, 5u * kRounds);
    pin.reset();
    m.reclaim();
    EXPECT_EQ(m.stats().retired_pending, 0u);
    EXPECT_EQ(m.stats().retired_bytes, 0u);
    EXPECT_EQ(m.value_bytes(), 0u);
  }
  EXPECT_EQ(g_live.load(std::memory_order_relaxed), before);
}

// One stuck reader holds reclamation back; the map's stats show how much and for
// how long, and drop back to zero once it leaves.
TEST(L1Map, StatsShowTheRetiredBacklogAndItsAge) {
  set_now(1000);
  L1Map m(config());
  for (int i = 0; i < 600; ++i)
    ASSERT_EQ(m.put(name_id(i), std::string(100, 'v'), ver(1)), InsertVerdict::kInserted);
  m.reclaim();
  EXPECT_EQ(m.stats().retired_age_ms, 0u);
  {
    ReadGuard stuck;
    for (int i = 0; i < 600; ++i) m.apply_coherence(name_id(i), ver(2));
    set_now(8000);
    m.reclaim();
    const L1Stats s = m.stats();
    EXPECT_EQ(s.retired_pending, 600u);
    EXPECT_GE(s.retired_bytes, 600u * 100u);
    EXPECT_EQ(s.retired_age_ms, 7000u);  // retired at 1000, still pinned at 8000
  }
  m.reclaim();
  const L1Stats s = m.stats();
  EXPECT_EQ(s.retired_pending, 0u);
  EXPECT_EQ(s.retired_bytes, 0u);
  EXPECT_EQ(s.retired_age_ms, 0u);
}

}  // namespace
}  // namespace echo::table
