// SPDX-License-Identifier: MIT
// Unit tests of the L1 map (WIRE §4.2-4.4): newer-wins verdicts, TTL with jitter (E5's spirit,
// on an injected clock), max_size and full_skips (E6), sweeps, G6 convergence, the fill guard
// over randomized interleavings, row lifetime (counted allocations), allocation-free drops, the
// reclamation backlog in stats, reader-slot refusal, and the debug-only thread checks.
// The replaced operator new/delete below forward to malloc/free; g++ 12 then flags every inlined
// new/delete pair of the TU as mismatched, although the pair is ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <echo/table/l1_map.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// Counted allocations: every operator new/delete of this binary moves `g_live`, so a scope that
// builds and destroys a map must leave it where it found it (a leak shows; ASan catches the
// double free).
// `g_news` counts every allocation, for scopes that must make none.
namespace {
std::atomic<long> g_live{0};
std::atomic<long> g_news{0};
}  // namespace
void* operator new(std::size_t n) {
  // relaxed: counters read after the scope's threads are joined.
  g_live.fetch_add(1, std::memory_order_relaxed);
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void* operator new(std::size_t n, std::align_val_t a) {
  g_live.fetch_add(1, std::memory_order_relaxed);
  g_news.fetch_add(1, std::memory_order_relaxed);
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete[](void* p, std::align_val_t) noexcept { operator delete(p); }

namespace echo::table {
namespace {

// The injected monotonic clock (ms). relaxed: tests set it from the writer thread only.
std::atomic<std::int64_t> g_now{1'000'000};
std::int64_t fake_now() noexcept { return g_now.load(std::memory_order_relaxed); }
void set_now(std::int64_t t) { g_now.store(t, std::memory_order_relaxed); }

BrandedId name_id(std::uint64_t n) { return *BrandedId::encode("USR", 1'000'000 + n); }
BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 5'000'000 + n); }

L1Config config(std::size_t max_size = 1000, std::int64_t ttl = 5000, double jitter = 0.0,
                Eviction eviction = Eviction::kS3Fifo) {
  L1Config c;
  c.max_size = max_size;
  c.eviction = eviction;
  c.ttl_ms = ttl;
  c.jitter = jitter;
  c.clock = &fake_now;
  return c;
}

std::string read_value(const L1Map& m, const BrandedId& n) {
  std::string v;
  return m.get(n.view(), v) ? v : std::string("<miss>");
}

std::int64_t expiry_of(const L1Map& m, const BrandedId& n) {
  ReadGuard g;
  auto row = m.find(g, n.view());
  return row ? row->expires_at : -1;
}

TEST(L1Config, BadKnobsThrowNamingKnobAndRange) {
  auto expect_throw = [](L1Config c, const char* knob) {
    try {
      L1Map m(c);
      FAIL() << "no throw for " << knob;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(knob), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find('['), std::string::npos) << e.what();
    }
  };
  L1Config c = config();
  c.jitter = 0.51;
  expect_throw(c, "jitter");
  c.jitter = -0.01;
  expect_throw(c, "jitter");
  c.jitter = std::nan("");
  expect_throw(c, "jitter");
  c = config();
  c.ttl_ms = 0;
  expect_throw(c, "ttl_ms");
  c = config();
  c.max_size = 0;
  expect_throw(c, "max_size");
  c = config();
  c.jitter = 0.5;
  EXPECT_NO_THROW(L1Map{c});
}

TEST(L1Map, ApplyCoherenceVerdictsFollowNewerWins) {
  L1Map m(config());
  const BrandedId n = name_id(1);
  EXPECT_EQ(m.apply_coherence(n, ver(2)), Verdict::kStale);  // no row
  ASSERT_EQ(m.put(n, "at-v2", ver(2)), InsertVerdict::kInserted);
  ASSERT_EQ(m.put(n, "at-v2", ver(2)), InsertVerdict::kReplaced);
  EXPECT_EQ(m.apply_coherence(n, ver(1)), Verdict::kStale);  // older
  EXPECT_EQ(read_value(m, n), "at-v2");
  EXPECT_EQ(m.apply_coherence(n, ver(2)), Verdict::kStale);  // equal is not newer
  EXPECT_EQ(read_value(m, n), "at-v2");
  EXPECT_EQ(m.apply_coherence(n, ver(3)), Verdict::kApplied);
  EXPECT_EQ(read_value(m, n), "<miss>");
  EXPECT_EQ(m.apply_coherence(n, ver(3)), Verdict::kStale);  // replay
  const L1Stats s = m.stats();
  EXPECT_EQ(s.coh_applied, 1u);
  EXPECT_EQ(s.coh_stale, 4u);
  EXPECT_EQ(s.size, 0u);
}

TEST(L1Map, ApplyBatchGivesTheSameVerdictsAsOneByOne) {
  L1Map m(config());
  for (int i = 0; i < 10; ++i) ASSERT_EQ(m.put(name_id(i), "x", ver(5)), InsertVerdict::kInserted);
  std::vector<CoherenceMessage> batch;
  for (int i = 0; i < 10; ++i) batch.push_back({name_id(i), ver(i % 2 == 0 ? 6 : 5)});
  batch.push_back({name_id(0), ver(7)});  // row already gone: stale
  EXPECT_EQ(m.apply_batch(batch), 5u);
  EXPECT_EQ(m.size(), 5u);
  EXPECT_EQ(m.stats().coh_stale, 6u);
}

// Every removal a map tells its listener, in order: (name, version, cause).
struct Removals {
  std::vector<std::string> seen;
  static void on(void* self, std::string_view name, std::string_view version,
                 RemovalCause cause) noexcept {
    static_cast<Removals*>(self)->seen.push_back(std::string(name) + "@" + std::string(version) +
                                                 "#" + std::to_string(static_cast<int>(cause)));
  }
};

// A ring slot's shape: the message first, then other fields, 64 bytes a slot (the writer's
// CoherenceItem), so apply_batch strides over the messages inside the items.
struct alignas(64) Slot {
  CoherenceMessage message;
  std::uint64_t other = 0;
};

// The batched apply, property: on random batches full of duplicate names and of older, equal and
// newer versions, over random rows, the batched apply (strided over ring-like slots, verdicts
// out) does exactly what apply_coherence one by one does: each verdict, the rows left with their
// values, the fill guard's tombstones, the counters and the listener's calls in order.
TEST(L1Map, ApplyBatchMatchesSequentialApplyOnRandomBatchesWithDuplicates) {
  std::mt19937_64 rng(28);
  for (int round = 0; round < 300; ++round) {
    const std::size_t names = 1 + rng() % 40;  // few names: batches repeat them
    Removals told_seq, told_batch;
    L1Config c = config(64);
    c.on_removal = {&Removals::on, &told_seq};
    L1Map seq(c);
    c.on_removal = {&Removals::on, &told_batch};
    L1Map batched(c);
    // Rows at random versions (some names without a row), some tombstones already held.
    for (std::size_t i = 0; i < names; ++i) {
      if (rng() % 4 == 0) continue;
      const BrandedId v = ver(rng() % 8);
      ASSERT_EQ(seq.put(name_id(i), "v" + std::to_string(i), v),
                batched.put(name_id(i), "v" + std::to_string(i), v));
    }
    const std::size_t size = 1 + rng() % 300;
    std::vector<Slot> slots;
    for (std::size_t k = 0; k < size; ++k) {
      const BrandedId n = name_id(rng() % names), v = ver(rng() % 10);
      slots.push_back(Slot{{n, v}, rng()});
    }
    std::vector<Verdict> one_by_one;
    std::size_t applied_seq = 0;
    for (const Slot& slot : slots) {
      one_by_one.push_back(seq.apply_coherence(slot.message.name, slot.message.version));
      applied_seq += one_by_one.back() == Verdict::kApplied;
    }
    std::vector<Verdict> verdicts(size, Verdict::kStale);
    const std::size_t applied =
        batched.apply_batch(&slots[0].message, size, sizeof(Slot), verdicts.data());
    ASSERT_EQ(applied, applied_seq) << "round " << round;
    ASSERT_EQ(verdicts, one_by_one) << "round " << round;
    ASSERT_EQ(told_batch.seen, told_seq.seen) << "round " << round;
    for (std::size_t i = 0; i < names; ++i) {
      std::string a, b;
      IdBytes va{}, vb{};
      ASSERT_EQ(seq.get(name_id(i).view(), a, &va), batched.get(name_id(i).view(), b, &vb));
      ASSERT_EQ(a, b);
      ASSERT_EQ(view(va), view(vb));
      const auto ta = seq.tombstone(name_id(i)), tb = batched.tombstone(name_id(i));
      ASSERT_EQ(ta.has_value(), tb.has_value());
      if (ta) {
        ASSERT_EQ(view(*ta), view(*tb));
      }
    }
    const L1Stats sa = seq.stats(), sb = batched.stats();
    ASSERT_EQ(sa.coh_applied, sb.coh_applied);
    ASSERT_EQ(sa.coh_stale, sb.coh_stale);
    ASSERT_EQ(sa.size, sb.size);
    ASSERT_EQ(sa.tombstones, sb.tombstones);
    ASSERT_EQ(sa.invalidated, sb.invalidated);
  }
}

// newer_id (the apply path's inline compare) answers as newer() on the ids' bytes, for random
// bytes of every value (high bytes too: unsigned order) and pairs equal in a prefix.
TEST(NewerId, AgreesWithNewerOnRandomBytes) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200'000; ++i) {
    IdBytes a, b;
    for (auto& c : a) c = static_cast<char>(rng());
    b = a;
    const std::size_t from = 3 + rng() % 12;  // b differs from a from this byte on (14: equal)
    for (std::size_t k = from; k < kIdSize; ++k) b[k] = static_cast<char>(rng());
    ASSERT_EQ(newer_id(a, b), newer(view(a), view(b))) << i;
    ASSERT_EQ(newer_id(b, a), newer(view(b), view(a))) << i;
  }
}

// The writer hand-over (engine::WriterToken): after release_writer(), another thread may write,
// and the first thread may write again once that one released it. Debug builds check it; in
// release builds it shows the hand-over changes nothing of what the map holds.
TEST(L1Map, ReleaseWriterHandsTheWriterRoleToAnotherThread) {
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  m.release_writer();
  std::thread([&] {
    EXPECT_EQ(m.apply_coherence(name_id(1), ver(2)), Verdict::kApplied);
    m.release_writer();
  }).join();
  EXPECT_EQ(m.put(name_id(2), "w", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  EXPECT_EQ(read_value(m, name_id(2)), "w");
}

TEST(L1Map, ExpiryIsNowPlusTtlPlusUniformJitterWithinTruncSpan) {
  set_now(1'000'000);
  L1Map jittered(config(1000, 300, 0.2));  // s = trunc(300 * 0.2) = 60
  L1Map control(config(1000, 300, 0.0));
  ASSERT_EQ(jittered.jitter_span_ms(), 60);
  std::vector<std::int64_t> exp;
  for (int i = 0; i < 400; ++i) {
    ASSERT_EQ(jittered.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    ASSERT_EQ(control.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    exp.push_back(expiry_of(jittered, name_id(i)));
    EXPECT_EQ(expiry_of(control, name_id(i)), 1'000'300);
  }
  const auto [lo, hi] = std::minmax_element(exp.begin(), exp.end());
  EXPECT_GE(*lo, 1'000'240);
  EXPECT_LE(*hi, 1'000'360);
  // 400 uniform draws over 121 values: the spread covers nearly the whole [-60, +60] window
  // (E5: rows filled together expire apart), while the control spreads over 0 ms.
  EXPECT_GE(*hi - *lo, 100);
  const double mean = std::accumulate(exp.begin(), exp.end(), 0.0) / 400.0;
  EXPECT_NEAR(mean, 1'000'300.0, 8.0);

  // Live iff now < expires_at.
  set_now(*lo - 1);
  EXPECT_EQ(jittered.stats().size, 400u);
  set_now(1'000'300);
  EXPECT_EQ(read_value(control, name_id(0)), "<miss>");
  set_now(1'000'299);
  EXPECT_EQ(read_value(control, name_id(0)), "v");

  // E5's end: a sweep after the window removes every row and counts it.
  EXPECT_EQ(jittered.sweep(1'000'361), 400u);
  EXPECT_EQ(jittered.stats().swept, 400u);
  EXPECT_EQ(jittered.stats().sweeps, 1u);
  EXPECT_EQ(jittered.size(), 0u);
}

TEST(L1Map, JitterOfHalfTtlCoversBothEnds) {
  set_now(0);
  L1Map m(config(5000, 10, 0.5));  // s = 5: 11 possible offsets
  std::vector<int> seen(11, 0);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
    const std::int64_t e = expiry_of(m, name_id(i));
    ASSERT_GE(e, 5);
    ASSERT_LE(e, 15);
    ++seen[static_cast<std::size_t>(e - 5)];
  }
  for (int c : seen) EXPECT_GT(c, 100);  // ~182 expected each
}

TEST(L1Map, FullMapSkipsInsertsAndCountsThem) {  // E6, under the original's policy
  set_now(1'000'000);
  L1Map m(config(100, 5000, 0.1, Eviction::kSkip));
  for (int i = 0; i < 51; ++i)
    ASSERT_EQ(m.put(name_id(i), "live", ver(1)), InsertVerdict::kInserted);
  int inserted = 0;
  int skipped = 0;
  for (int i = 1000; i < 1150; ++i) {
    const InsertVerdict v = m.insert_fill(name_id(i), "fill", ver(1));
    inserted += v == InsertVerdict::kInserted;
    skipped += v == InsertVerdict::kFullSkip;
  }
  EXPECT_EQ(inserted, 49);
  EXPECT_EQ(skipped, 101);
  EXPECT_EQ(m.size(), 100u);
  EXPECT_EQ(m.stats().full_skips, 101u);
  // A row that exists is replaced even when full (size does not grow).
  EXPECT_EQ(m.insert_fill(name_id(0), "newer", ver(2)), InsertVerdict::kReplaced);
  EXPECT_EQ(read_value(m, name_id(0)), "newer");
}

TEST(L1Map, FullMapReclaimsExpiredRowsWithoutCountingThemSwept) {
  set_now(1000);
  L1Map m(config(10, 100, 0.0, Eviction::kSkip));
  for (int i = 0; i < 10; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  set_now(1099);
  EXPECT_EQ(m.put(name_id(50), "v", ver(1)), InsertVerdict::kFullSkip);
  set_now(1100);  // every row's expires_at == now: no longer live, so reclaimable
  EXPECT_EQ(m.put(name_id(50), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.stats().swept, 0u);
  EXPECT_EQ(m.stats().expired, 10u);  // a removal cause all the same
  EXPECT_EQ(m.stats().full_skips, 1u);
}

TEST(L1Map, SweepDeletesRowsExpiredBeforeNowAndCounts) {
  set_now(0);
  L1Map m(config(100, 100, 0.0));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  set_now(50);
  for (int i = 5; i < 8; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.sweep(100), 0u);  // expires_at == 100 is not < 100
  EXPECT_EQ(m.sweep(101), 5u);
  EXPECT_EQ(m.sweep(149), 0u);
  EXPECT_EQ(m.sweep(151), 3u);
  const L1Stats s = m.stats();
  EXPECT_EQ(s.swept, 8u);
  EXPECT_EQ(s.sweeps, 4u);
  EXPECT_EQ(s.size, 0u);
}

TEST(L1Map, WithoutAReadClockARowServesUntilTheSweepDropsIt) {
  // read_clock = kNone (TableSpec's L1Clock::kSweep): reads read no clock; the writer's sweep
  // is what ends a row, and every read that takes the map's time (find, visit, get, read)
  // agrees. read_at judges by the time it is given, whatever the read clock.
  set_now(0);
  L1Config c = config(100, 100, 0.0);
  c.read_clock = ReadClock::kNone;
  L1Map m(c);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  set_now(500);  // well past expires_at = 100
  EXPECT_EQ(m.tick(), 500);  // ticks move nothing under kNone
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  EXPECT_TRUE(m.visit(name_id(1).view(), [](std::string_view value, std::string_view) { EXPECT_EQ(value, "v"); }));
  char buf[8];
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kHit);
  EXPECT_EQ(m.read_at(name_id(1).view(), buf, 500).status, ReadStatus::kMiss);
  EXPECT_EQ(m.sweep(500), 1u);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  EXPECT_FALSE(m.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  // With kCall (the default) the same row misses as soon as the clock passes its expiry.
  set_now(0);
  L1Map exact(config(100, 100, 0.0));
  ASSERT_EQ(exact.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  set_now(100);
  EXPECT_EQ(read_value(exact, name_id(1)), "<miss>");
  EXPECT_FALSE(exact.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  const L1Stats s = m.stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 3u);
}

TEST(L1Map, APublishedReadClockMovesOnlyWhenTheWriterTicks) {
  // read_clock = kPublished (TableSpec's L1Clock::kWriter): reads judge expiry by the time the
  // writer last published: the clock at construction, then each tick(). Never ahead of the
  // clock, so a row is never dropped early; late by at most the gap between ticks.
  set_now(0);
  L1Config c = config(100, 100, 0.0);
  c.read_clock = ReadClock::kPublished;
  L1Map m(c);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);  // expires_at 100
  set_now(99);
  EXPECT_EQ(m.tick(), 99);
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  set_now(500);  // the clock is past the expiry; the readers' time is not, until a tick
  EXPECT_EQ(read_value(m, name_id(1)), "v");
  char buf[8];
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kHit);
  EXPECT_EQ(m.tick(), 500);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  EXPECT_FALSE(m.visit(name_id(1).view(), [](std::string_view, std::string_view) {}));
  EXPECT_EQ(m.read(name_id(1).view(), buf).status, ReadStatus::kMiss);
  // A clock that reads earlier (a test's; a monotonic one never does) does not move it back.
  set_now(50);
  EXPECT_EQ(m.tick(), 50);
  EXPECT_EQ(read_value(m, name_id(1)), "<miss>");
  // Under kCall a tick changes nothing: every read calls the clock.
  set_now(0);
  L1Map call(config(100, 100, 0.0));
  ASSERT_EQ(call.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(call.tick(), 0);
  set_now(100);
  EXPECT_EQ(read_value(call, name_id(1)), "<miss>");
}

TEST(L1Map, ABadReadClockIsRefusedByName) {
  L1Config c = config();
  c.read_clock = static_cast<ReadClock>(3);
  try {
    L1Map m(c);
    FAIL() << "a read clock of 3 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("L1Config.read_clock"), std::string::npos) << e.what();
  }
}

TEST(L1Map, G6ShuffledStreamsConvergeToExactCounts) {
  set_now(1'000'000);
  L1Map m(config(1000));
  const BrandedId v1 = ver(1), v2 = ver(2), v3 = ver(3);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(m.put(name_id(i), "at-v2", v2), InsertVerdict::kInserted);
  std::vector<CoherenceMessage> stream;
  for (int i = 0; i < 100; ++i) {
    for (const BrandedId& v : {v1, v3, v1}) stream.push_back({name_id(i), v});
  }
  for (int i = 100; i < 200; ++i) {
    for (const BrandedId& v : {v1, v1}) stream.push_back({name_id(i), v});
  }
  std::mt19937_64 rng(6);
  std::shuffle(stream.begin(), stream.end(), rng);
  int applied = 0;
  int stale = 0;
  for (const auto& msg : stream) {
    (m.apply_coherence(msg.name, msg.version) == Verdict::kApplied ? applied : stale)++;
  }
  EXPECT_EQ(applied, 100);
  EXPECT_EQ(stale, 400);
  EXPECT_EQ(m.stats().coh_applied, 100u);
  EXPECT_EQ(m.stats().coh_stale, 400u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(read_value(m, name_id(i)), "<miss>") << i;
  for (int i = 100; i < 200; ++i) EXPECT_EQ(read_value(m, name_id(i)), "at-v2") << i;
}

TEST(L1Map, ForgetHashedDropsTheRowWhateverItsVersionAndRemembersNothing) {
  set_now(0);
  L1Map m(config());
  const BrandedId n = name_id(8), other = name_id(9);
  ASSERT_EQ(m.insert_fill(n, "v9", ver(9)), InsertVerdict::kInserted);
  ASSERT_EQ(m.insert_fill(other, "o", ver(1)), InsertVerdict::kInserted);
  const auto applied = m.stats().coh_applied;
  EXPECT_EQ(m.forget_hashed(table::hash_key(n.view())), Verdict::kApplied);
  EXPECT_EQ(read_value(m, n), "<miss>");
  EXPECT_EQ(read_value(m, other), "o") << "only the rows of that hash go";
  EXPECT_EQ(m.stats().coh_applied, applied + 1);
  EXPECT_EQ(m.forget_hashed(table::hash_key(n.view())), Verdict::kStale) << "no row: stale";
  // No version travelled, so none guards: an older fill is accepted again (the writer's
  // invalidation sequence guards tracking fills instead).
  EXPECT_FALSE(m.tombstone(n).has_value());
  EXPECT_EQ(m.insert_fill(n, "v1", ver(1)), InsertVerdict::kInserted);
}

TEST(L1Map, FillGuardRefusesFillsOlderThanADropEvenWithoutARow) {
  set_now(0);
  L1Map m(config());
  const BrandedId n = name_id(7);
  // The classic race: a fill read L2 at v1, the drop for v2 arrives first (no row: stale).
  EXPECT_EQ(m.apply_coherence(n, ver(2)), Verdict::kStale);
  EXPECT_EQ(m.insert_fill(n, "v1", ver(1)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(read_value(m, n), "<miss>");
  // The version the drop announced is what L2 holds now: its fill is accepted.
  EXPECT_EQ(m.insert_fill(n, "v2", ver(2)), InsertVerdict::kInserted);
  // A fill older than the row is refused; equal refreshes it; newer replaces it.
  EXPECT_EQ(m.insert_fill(n, "v1", ver(1)), InsertVerdict::kRefusedTombstone);
  ASSERT_EQ(m.put(n, "v5", ver(5)), InsertVerdict::kReplaced);
  EXPECT_EQ(m.insert_fill(n, "v4", ver(4)), InsertVerdict::kRefusedOlder);
  EXPECT_EQ(m.insert_fill(n, "v5", ver(5)), InsertVerdict::kReplaced);
  EXPECT_EQ(m.insert_fill(n, "v6", ver(6)), InsertVerdict::kReplaced);
  // A put ignores the row's version but not the tombstone.
  EXPECT_EQ(m.put(n, "v3", ver(3)), InsertVerdict::kReplaced);
  EXPECT_EQ(m.put(n, "v1", ver(1)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(read_value(m, n), "v3");
  const L1Stats s = m.stats();
  EXPECT_EQ(s.fill_refused, 3u);
  EXPECT_EQ(s.put_refused, 1u);
  ASSERT_TRUE(m.tombstone(n).has_value());
  EXPECT_EQ(view(*m.tombstone(n)), ver(2).view());
}

TEST(L1Map, TombstonesKeepTheNewestVersionAndOutliveOneTtl) {
  set_now(0);
  L1Map m(config(100, 1000, 0.0));
  const BrandedId n = name_id(1);
  m.apply_coherence(n, ver(5));
  m.apply_coherence(n, ver(3));  // an older, late message does not lower the tombstone
  EXPECT_EQ(view(*m.tombstone(n)), ver(5).view());
  set_now(999);
  EXPECT_EQ(m.insert_fill(n, "v4", ver(4)), InsertVerdict::kRefusedTombstone);
}

TEST(TombstoneTable, CollapseIntoFloorStillRefusesOlderVersions) {
  TombstoneTable t(16, 1000);  // 8 usable slots
  std::vector<BrandedId> names;
  for (int i = 0; i < 40; ++i) names.push_back(name_id(i));
  for (int i = 0; i < 40; ++i) {
    t.remember(hash_name(names[i].view().data()), id_bytes(ver(100 + i)), 0);
  }
  EXPECT_GT(t.collapses(), 0u);
  EXPECT_LE(t.size(), 8u);
  for (int i = 0; i < 40; ++i) {
    // Every remembered name still refuses a version older than its own drop...
    EXPECT_TRUE(t.refuses(hash_name(names[i].view().data()), id_bytes(ver(99 + i)), 10)) << i;
  }
  // ...and accepts its latest drop's version once the floor has lapsed.
  EXPECT_FALSE(t.refuses(hash_name(names[39].view().data()), id_bytes(ver(139)), 10));
}

TEST(TombstoneTable, GrowsBeforeItCollapses) {
  TombstoneTable t(1 << 14, 1000);
  const std::size_t initial = t.capacity();
  for (int i = 0; i < 3000; ++i) {
    t.remember(hash_name(name_id(i).view().data()), id_bytes(ver(100 + i)), 0);
  }
  EXPECT_EQ(t.collapses(), 0u);
  EXPECT_EQ(t.size(), 3000u);
  EXPECT_GT(t.capacity(), initial);
  for (int i = 0; i < 3000; ++i) {
    const std::uint64_t h = hash_name(name_id(i).view().data());
    EXPECT_TRUE(t.refuses(h, id_bytes(ver(99 + i)), 10)) << i;
    EXPECT_FALSE(t.refuses(h, id_bytes(ver(100 + i)), 10)) << i;
  }
  // Expired entries are purged instead of growing further.
  for (int i = 3000; i < 9000; ++i) {
    t.remember(hash_name(name_id(i).view().data()), id_bytes(ver(100 + i)), 5000);
  }
  EXPECT_EQ(t.collapses(), 0u);
  EXPECT_LT(t.size(), 9000u);
}

// Purging lapsed entries works in place (a backward shift per entry, no scratch copy): the
// remembers that purge allocate nothing, and every entry still within its deadline stays
// findable with its newest version, whatever the probe clusters looked like.
TEST(TombstoneTable, PurgeInPlaceAllocatesNothingAndKeepsEveryLiveEntry) {
  TombstoneTable t(1024, 100);  // at its bound from the start: never grows
  std::mt19937_64 rng(11);
  std::map<std::uint64_t, std::pair<int, std::int64_t>> model;  // hash -> (version, deadline)
  std::int64_t now = 0;
  long allocations = 0;  // by remember() only: the model allocates too
  for (int i = 0; i < 20'000; ++i) {
    now += static_cast<std::int64_t>(rng() % 3);
    const std::uint64_t h = hash_name(name_id(rng() % 5000).view().data());
    const int v = i;  // rising: a purged-then-remembered entry and a kept one agree
    const IdBytes version = id_bytes(ver(static_cast<std::uint64_t>(v)));
    const long before = g_news.load(std::memory_order_relaxed);
    t.remember(h, version, now);
    allocations += g_news.load(std::memory_order_relaxed) - before;
    auto [it, fresh] = model.try_emplace(h, v, now + 100);
    if (!fresh) {
      it->second.first = std::max(it->second.first, v);
      it->second.second = now + 100;
    }
  }
  EXPECT_EQ(allocations, 0);
  ASSERT_EQ(t.collapses(), 0u);  // drops spread over time: purging always made room
  for (const auto& [h, entry] : model) {
    if (entry.second <= now) continue;  // lapsed: may be purged
    const IdBytes* found = t.find(h);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(view(*found), ver(static_cast<std::uint64_t>(entry.first)).view());
  }
}

// The fill guard over randomized interleavings. Per trial, one name; a writer bumps the L2
// version and sends a drop for it; fills read L2's current version and land later; drops and
// fills are delivered in random order. Model: once a drop at d was applied, no read returns a
// version older than d; and the newest fill after everything settles is accepted (liveness).
TEST(L1Map, FillGuardNeverServesOlderThanAnAppliedDrop) {
  set_now(1'000'000);
  L1Map m(config(4096, 60'000, 0.0));
  std::mt19937_64 rng(20261129);
  std::uint64_t next_version = 1;
  constexpr int kTrials = 120'000;
  long reads = 0;
  long hits = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const BrandedId n = name_id(static_cast<std::uint64_t>(trial % 2048));
    m.erase(n);
    std::uint64_t l2 = next_version++;  // L2 holds l2 (and L1 may not know it yet)
    std::uint64_t applied_floor = 0;    // newest drop version delivered to the map
    std::vector<std::uint64_t> drops;   // in flight
    std::vector<std::uint64_t> fills;   // in flight: the L2 version each read
    const int steps = 4 + static_cast<int>(rng() % 12);
    auto pick = [&](std::vector<std::uint64_t>& v) {
      const std::size_t i = rng() % v.size();
      const std::uint64_t x = v[i];
      v[i] = v.back();
      v.pop_back();
      return x;
    };
    auto check_read = [&] {
      std::string value;
      IdBytes got;
      ++reads;
      if (m.get(n.view(), value, &got)) {
        ++hits;
        ASSERT_FALSE(newer(ver(applied_floor).view(), view(got)))
            << "trial " << trial << ": served a version older than an applied drop";
        ASSERT_EQ(value, std::string(view(got)));  // value encodes its version: no torn row
      }
    };
    for (int s = 0; s < steps; ++s) {
      switch (rng() % 5) {
        case 0:  // a writer puts a newer value in L2 and sends its drop
          l2 = next_version++;
          drops.push_back(l2);
          break;
        case 1:  // a miss starts a fill: it reads L2 now
          fills.push_back(l2);
          break;
        case 2:
          if (!drops.empty()) {
            const std::uint64_t d = pick(drops);
            m.apply_coherence(n, ver(d));
            applied_floor = std::max(applied_floor, d);
          }
          break;
        case 3:
          if (!fills.empty()) {
            const std::uint64_t f = pick(fills);
            m.insert_fill(n, ver(f).view(), ver(f));
          }
          break;
        default:
          break;
      }
      check_read();
      if (HasFatalFailure()) return;
    }
    while (!drops.empty()) {
      const std::uint64_t d = pick(drops);
      m.apply_coherence(n, ver(d));
      applied_floor = std::max(applied_floor, d);
      check_read();
      if (HasFatalFailure()) return;
    }
    // Liveness: a fill of what L2 holds now is never refused.
    const InsertVerdict v = m.insert_fill(n, ver(l2).view(), ver(l2));
    ASSERT_TRUE(v == InsertVerdict::kInserted || v == InsertVerdict::kReplaced) << trial;
    check_read();
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(hits, reads / 4);  // the guard did not simply refuse everything
  EXPECT_GE(m.stats().fill_refused, 1000u);
}

TEST(L1Map, ReadIntoABufferReportsTooSmallWithoutCopying) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "0123456789", ver(9)), InsertVerdict::kInserted);
  char small[4] = {'x', 'x', 'x', 'x'};
  ReadResult r = m.read(name_id(1).view(), small);
  EXPECT_EQ(r.status, ReadStatus::kTooSmall);
  EXPECT_EQ(r.size, 10u);
  EXPECT_EQ(small[0], 'x');
  char big[16];
  r = m.read(name_id(1).view(), big);
  ASSERT_EQ(r.status, ReadStatus::kHit);
  EXPECT_EQ(std::string_view(big, r.size), "0123456789");
  EXPECT_EQ(view(r.version), ver(9).view());
  EXPECT_EQ(m.read(name_id(2).view(), big).status, ReadStatus::kMiss);
  EXPECT_EQ(m.read("short", big).status, ReadStatus::kMiss);
  const L1Stats s = m.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
}

TEST(L1Map, HitsAndMissesFromManyThreadsAreSummed) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      std::string v;
      for (int i = 0; i < 1000; ++i) {
        EXPECT_TRUE(m.get(name_id(1).view(), v));
        EXPECT_FALSE(m.get(name_id(2).view(), v));
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(m.stats().hits, 4000u);
  EXPECT_EQ(m.stats().misses, 4000u);
}

// A thread_local of the application's that reads L1 in its destructor (built before the thread's
// first read, so destroyed after whatever that read built). The reader slot it reads under must
// still be released at the thread's exit: the slot's release once ran as a thread_local built at
// the first read, so such a read claimed a slot nobody released, and the 513th exiting thread
// aborted the process ("more than kMaxReaderThreads (512) live reader threads").
const L1Map* g_exit_map = nullptr;
std::atomic<int> g_exit_hits{0};
struct ReadsL1AtThreadExit {
  ~ReadsL1AtThreadExit() {
    std::string v;
    if (g_exit_map->get(name_id(1).view(), v)) g_exit_hits.fetch_add(1);
  }
};
thread_local ReadsL1AtThreadExit t_reads_at_exit;

TEST(L1Map, ReadsFromThreadLocalDestructorsNeverLeakAReaderSlot) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  g_exit_map = &m;
  g_exit_hits = 0;
  const std::uint32_t before = epoch::reader_high_water();
  constexpr int kThreads = 2 * static_cast<int>(kMaxReaderThreads);  // one at a time
  for (int i = 0; i < kThreads; ++i) {
    std::thread([&] {
      static_cast<void>(&t_reads_at_exit);  // built before the first read
      std::string v;
      EXPECT_TRUE(m.get(name_id(1).view(), v));
    }).join();
  }
  EXPECT_EQ(g_exit_hits.load(), kThreads);
  // One thread at a time: each reuses a released slot, so the bound hardly moves.
  EXPECT_LE(epoch::reader_high_water(), before + 2);
  g_exit_map = nullptr;
}

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
  for (std::uint64_t i = 0; i < 100; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
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
  for (std::uint64_t i = 0; i < kRows; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
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
  for (std::uint64_t i = 0; i < 2000; ++i) ASSERT_EQ(m.put(name_id(i), "v", ver(1)), InsertVerdict::kInserted);
  const std::uint64_t scans0 = m.stats().reclaim_scans;
  m.hold_reclaim(true);
  for (std::uint64_t i = 0; i < 2000; ++i) ASSERT_EQ(m.apply_coherence(name_id(i), ver(2)), Verdict::kApplied);
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

// ---- Text names (WIRE §2.2) and object layouts.

TEST(L1Map, TextNamesOfEveryLengthAreTheirOwnRows) {
  set_now(0);
  L1Map m(config());
  // 1..200 bytes, including a 14-byte name that is no branded id, and names that share a prefix
  // or differ only in length.
  std::vector<std::string> names;
  for (std::size_t n = 1; n <= kMaxNameSize; n += 13) names.push_back(std::string(n, 'K'));
  names.push_back(std::string(kMaxNameSize, 'K'));
  names.push_back("AAPL");
  names.push_back("AAPL:X");
  names.push_back("not-a-brand-14");
  for (std::size_t i = 0; i < names.size(); ++i) {
    ASSERT_EQ(m.put(names[i], "v" + std::to_string(i), ver(1)), InsertVerdict::kInserted)
        << names[i].size();
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string v;
    ASSERT_TRUE(m.get(names[i], v)) << names[i];
    EXPECT_EQ(v, "v" + std::to_string(i));
    ReadGuard g;
    const auto row = m.find(g, names[i]);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->name, names[i]);
  }
  std::string v;
  EXPECT_FALSE(m.get("AAP", v));
  EXPECT_FALSE(m.get(std::string(kMaxNameSize + 1, 'K'), v));
  EXPECT_FALSE(m.get("", v));
  // Newer wins per text name; the others stay.
  EXPECT_EQ(m.apply_coherence("AAPL", ver(1)), Verdict::kStale);
  EXPECT_EQ(m.apply_coherence("AAPL", ver(2)), Verdict::kApplied);
  EXPECT_FALSE(m.get("AAPL", v));
  EXPECT_TRUE(m.get("AAPL:X", v));
  // The fill guard remembers the drop for the text name.
  EXPECT_EQ(m.insert_fill("AAPL", "old", ver(1)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(m.insert_fill("AAPL", "new", ver(3)), InsertVerdict::kInserted);
  // Names outside 1..200 bytes: a writer's programming error, refused loudly; a message for one
  // matches nothing.
  EXPECT_THROW(m.put(std::string(kMaxNameSize + 1, 'K'), "x", ver(1)), std::length_error);
  EXPECT_THROW(m.put("", "x", ver(1)), std::length_error);
  EXPECT_EQ(m.apply_coherence(std::string_view(), ver(9)), Verdict::kStale);
  EXPECT_TRUE(m.erase("AAPL:X"));
  EXPECT_FALSE(m.get("AAPL:X", v));
}

TEST(HashKey, BrandedLengthKeepsTheBrandedHashAndLengthsDiffer) {
  const BrandedId id = name_id(7);
  EXPECT_EQ(hash_key(id.view()), hash_name(id.view().data()));
  EXPECT_NE(hash_key(std::string_view("A", 1)), hash_key(std::string_view("A\0", 2)));
  EXPECT_NE(hash_key("AAPL"), hash_key("AAPM"));
  EXPECT_NE(hash_key(std::string(16, 'x')), hash_key(std::string(17, 'x')));
}

// An object layout whose objects count their lives, so that a test sees every row's object
// built once (by decode) and destroyed once (when its row is freed).
struct Counted {
  static inline std::atomic<int> live{0};
  std::string text;  // not trivially destructible: destroy must run
  std::int64_t n;
};
ValueLayout counted_layout() {
  ValueLayout l;
  l.size = sizeof(Counted);
  l.align = alignof(Counted);
  l.decode = [](std::string_view bytes, void* at, std::string& why) {
    if (bytes.empty() || bytes[0] != '#') {
      why = "no '#' before the number";
      return false;
    }
    new (at) Counted{std::string(bytes), static_cast<std::int64_t>(bytes.size())};
    Counted::live.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  l.destroy = [](void* at) noexcept {
    static_cast<Counted*>(at)->~Counted();
    Counted::live.fetch_sub(1, std::memory_order_relaxed);
  };
  return l;
}

TEST(L1Map, AnObjectLayoutDecodesOnceOnTheWriterAndDestroysOnceOnFree) {
  set_now(0);
  Counted::live = 0;
  {
    L1Config c = config(64);
    c.layout = counted_layout();
    L1Map m(c);
    ASSERT_EQ(m.put("AAPL", "#a long value that does not fit any small-string buffer", ver(1)),
              InsertVerdict::kInserted);
    ASSERT_EQ(m.insert_fill("MSFT", "#12", ver(1)), InsertVerdict::kInserted);
    EXPECT_EQ(Counted::live.load(), 2);
    const bool hit = m.visit("AAPL", [](std::string_view value, std::string_view version) {
      ASSERT_EQ(value.size(), sizeof(Counted));
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(value.data()) % alignof(Counted), 0u);
      const auto& q = *reinterpret_cast<const Counted*>(value.data());
      EXPECT_EQ(q.text, "#a long value that does not fit any small-string buffer");
      EXPECT_EQ(version, ver(1).view());
    });
    EXPECT_TRUE(hit);
    EXPECT_FALSE(m.visit("GOOG", [](std::string_view, std::string_view) { FAIL(); }));
    // A refused decode leaves the map as it was, says why, and is counted.
    EXPECT_EQ(m.put("AAPL", "12", ver(2)), InsertVerdict::kRefusedDecode);
    EXPECT_EQ(m.decode_error(), "no '#' before the number");
    EXPECT_EQ(m.stats().decode_errors, 1u);
    EXPECT_EQ(Counted::live.load(), 2);
    EXPECT_TRUE(m.visit("AAPL", [](std::string_view value, std::string_view version) {
      EXPECT_EQ(reinterpret_cast<const Counted*>(value.data())->n, 55);
      EXPECT_EQ(version, ver(1).view());
    }));
    // Replace, drop, sweep and clear each end one object's life, once its row is freed.
    ASSERT_EQ(m.put("AAPL", "#2", ver(2)), InsertVerdict::kReplaced);
    ASSERT_EQ(m.apply_coherence("MSFT", ver(5)), Verdict::kApplied);
    m.reclaim();
    EXPECT_EQ(Counted::live.load(), 1);
    for (int i = 0; i < 40; ++i) m.put("K" + std::to_string(i), "#" + std::to_string(i), ver(3));
    m.clear();
    m.reclaim();
    EXPECT_EQ(Counted::live.load(), 0);
    ASSERT_EQ(m.put("LAST", "#still here at destruction", ver(4)), InsertVerdict::kInserted);
  }
  EXPECT_EQ(Counted::live.load(), 0);  // the map's destructor ended the last one
}

// counted_layout's decode, but for the value "#throw", on which it throws (a user's codec may).
bool decode_or_throw(std::string_view bytes, void* at, std::string& why) {
  if (bytes == "#throw") throw std::runtime_error("the codec threw");
  return counted_layout().decode(bytes, at, why);
}

TEST(L1Map, AnUpdateWhoseDecodeThrowsLeavesTheOldRowInItsQueue) {
  // The update takes the old row out of its eviction queue before it builds the new one; a
  // throw there must put it back: still served, charged once, and evictable like any row.
  for (const Eviction e : {Eviction::kS3Fifo, Eviction::kLru, Eviction::kClock}) {
    SCOPED_TRACE(std::string(to_string(e)));
    set_now(0);
    Counted::live = 0;
    {
      constexpr std::size_t kRows = 8;
      L1Config c = config(kRows, 5000, 0.0, e);
      c.layout = counted_layout();
      c.layout.decode = &decode_or_throw;
      L1Map m(c);
      const auto key = [](std::size_t i) { return "K" + std::to_string(100 + i); };
      const std::uint64_t charge = m.row_charge(4, 0);  // every row's: the same name size
      for (std::size_t i = 0; i < kRows; ++i) {
        ASSERT_EQ(m.put(key(i), "#" + key(i), ver(1)), InsertVerdict::kInserted);
      }
      EXPECT_THROW(m.put(key(3), "#throw", ver(2)), std::runtime_error);
      EXPECT_EQ(m.size(), kRows);
      EXPECT_EQ(m.stats().bytes, kRows * charge);
      EXPECT_EQ(Counted::live.load(), static_cast<int>(kRows));
      EXPECT_TRUE(m.visit(key(3), [&](std::string_view value, std::string_view version) {
        EXPECT_EQ(reinterpret_cast<const Counted*>(value.data())->text, "#" + key(3));
        EXPECT_EQ(version, ver(1).view());
      }));
      // Past max_size: every insert evicts one row, none is skipped, the charge stays exact,
      // and the old row goes in its turn (but under S3-FIFO, where the hit above moved it to
      // the main queue, which outlives unhit newcomers by design).
      for (std::size_t i = kRows; i < 4 * kRows; ++i) {
        ASSERT_EQ(m.put(key(i), "#" + key(i), ver(3)), InsertVerdict::kInserted) << key(i);
        ASSERT_EQ(m.size(), kRows);
        ASSERT_EQ(m.stats().bytes, kRows * charge);
      }
      const L1Stats s = m.stats();
      EXPECT_EQ(s.evicted_size, 3 * kRows);
      EXPECT_EQ(s.full_skips, 0u);
      if (e != Eviction::kS3Fifo) {
        std::string v;
        EXPECT_FALSE(m.get(key(3), v)) << "the old row was never evicted";
      }
      // Everything expires: the sweep drops every row, each charged out once.
      EXPECT_EQ(m.sweep(1'000'000), kRows);
      EXPECT_EQ(m.size(), 0u);
      EXPECT_EQ(m.stats().bytes, 0u);
      m.reclaim();
      EXPECT_EQ(Counted::live.load(), 0);
      ASSERT_EQ(m.put(key(0), "#again", ver(4)), InsertVerdict::kInserted);
    }
    EXPECT_EQ(Counted::live.load(), 0);
  }
}

TEST(L1Config, ObjectLayoutKnobsAreChecked) {
  L1Config c = config();
  c.layout = counted_layout();
  c.layout.align = 32;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.layout.align = 3;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.layout = counted_layout();
  c.layout.decode = nullptr;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.layout = counted_layout();
  c.layout.size = (std::size_t{1} << 20) + 1;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.layout = counted_layout();
  EXPECT_NO_THROW(L1Map{c});
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
  std::printf("[ epoch ] handshake: %s\n", asym ? "asymmetric (membarrier)" : "symmetric (seq_cst)");
  {
    ReadGuard g;  // a section opens under the same mode
    EXPECT_TRUE(g.protecting());
  }
  EXPECT_EQ(epoch::barrier_failures(), 0u);
}

TEST(MonotonicClock, CoarseClockIsTheSameClockAtTickResolution) {
  for (int i = 0; i < 100; ++i) {
    const std::int64_t coarse = coarse_monotonic_ms();
    const std::int64_t exact = steady_clock_ms();
    EXPECT_LE(coarse, exact);
    EXPECT_GE(coarse, exact - 50);  // one kernel tick is 1-10 ms
  }
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

// A flush of an empty map walks no bucket, however large the index; sweeps of an
// empty map (or before any row can have expired) walk none either.
TEST(L1Map, ClearAndSweepOfAnEmptyBigMapWalkNoIndex) {
  set_now(0);
  L1Map m(config(1 << 20));
  ASSERT_GE(m.bucket_count(), std::size_t{1} << 20);
  for (int i = 0; i < 1000; ++i) {
    m.clear();
    m.sweep(fake_now() + i);
  }
  EXPECT_EQ(m.index_walks(), 0u);
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  m.sweep(fake_now());  // the row expires at 5000: nothing can have expired yet
  EXPECT_EQ(m.index_walks(), 0u);
  m.clear();
  EXPECT_EQ(m.index_walks(), 1u);
  m.clear();
  EXPECT_EQ(m.index_walks(), 1u);
  EXPECT_EQ(m.size(), 0u);
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

// A thread that finds every reader slot taken is refused, not aborted: its guard
// is not protecting(), its reads answer misses, and the map counts the refusals.
TEST(L1Map, AReaderThreadBeyondTheSlotsReadsMissesInsteadOfAborting) {
  set_now(0);
  L1Map m(config());
  ASSERT_EQ(m.put(name_id(1), "v", ver(1)), InsertVerdict::kInserted);
  { ReadGuard g; }  // this thread holds a slot, so kMaxReaderThreads more cannot all get one
  std::promise<void> go;
  const std::shared_future<void> released = go.get_future().share();
  std::atomic<int> protecting{0}, refused{0}, refused_hits{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> holders;
  for (std::size_t i = 0; i < kMaxReaderThreads; ++i) {
    holders.emplace_back([&] {
      ReadGuard g;
      if (g.protecting()) {
        protecting.fetch_add(1);
      } else {
        refused.fetch_add(1);
        std::string v;
        char buf[8];
        refused_hits.fetch_add(m.get(name_id(1).view(), v));
        refused_hits.fetch_add(m.read(name_id(1).view(), buf).status == ReadStatus::kHit);
        refused_hits.fetch_add(m.find(g, name_id(1).view()).has_value());
      }
      ready.fetch_add(1);
      released.wait();  // hold the slot until every holder has tried
    });
  }
  while (ready.load() != static_cast<int>(kMaxReaderThreads)) std::this_thread::yield();
  go.set_value();
  for (auto& t : holders) t.join();
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(protecting.load() + refused.load(), static_cast<int>(kMaxReaderThreads));
  EXPECT_EQ(refused_hits.load(), 0);
  EXPECT_EQ(m.stats().reader_slot_refusals, 3u * static_cast<std::uint64_t>(refused.load()));
  std::string v;
  EXPECT_TRUE(m.get(name_id(1).view(), v));  // slots freed: reads work again
}

TEST(L1MapDeathTest, ASecondWriterThreadAborts) {
#ifdef NDEBUG
  GTEST_SKIP() << "the single-writer check is compiled into debug builds only";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        L1Map m(config());
        m.put(name_id(1), "v", ver(1));
        std::thread([&] { m.put(name_id(2), "v", ver(1)); }).join();
      },
      "second writer thread");
#endif
}

// A guard is its thread's section; handing it to another thread would give that
// thread an unprotected read. Debug builds abort on the use and on the destruction.
TEST(L1MapDeathTest, AGuardUsedOnAnotherThreadAborts) {
#ifdef NDEBUG
  GTEST_SKIP() << "the guard's thread check is compiled into debug builds only";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  L1Map m(config());
  EXPECT_DEATH(
      {
        ReadGuard g;
        std::thread([&] { static_cast<void>(m.find(g, name_id(1).view())); }).join();
      },
      "ReadGuard used by L1Map::find on a thread that did not build it");
  EXPECT_DEATH(
      {
        auto* g = new ReadGuard;
        std::thread([&] { delete g; }).join();
      },
      "ReadGuard destroyed on a thread that did not build it");
#endif
}

}  // namespace
}  // namespace echo::table
