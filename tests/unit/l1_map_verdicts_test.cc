// SPDX-License-Identifier: MIT
// The L1 map's verdicts: newer wins, one by one or by batch alike, knobs are checked by name, the
// writer role moves between threads, and shuffled streams converge (G6).

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

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

// A property: on random batches full of duplicate names and of older, equal and
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

}  // namespace
}  // namespace echo::table
