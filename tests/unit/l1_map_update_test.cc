// SPDX-License-Identifier: MIT
// Carried values (L1Map::apply_update): newer wins as for a drop, but the row is replaced in place
// by the value; a row the node does not hold is inserted only when asked; the version guards the
// fills in flight whatever happened to the value.

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

TEST(L1MapUpdate, NewerReplacesInPlaceOlderAndEqualChangeNothing) {
  L1Map m(config());
  const BrandedId n = name_id(1);
  ASSERT_EQ(m.put(n, "at-v2", ver(2)), InsertVerdict::kInserted);
  EXPECT_EQ(m.apply_update(n.view(), ver(1), "at-v1", false), UpdateVerdict::kStale);
  EXPECT_EQ(m.apply_update(n.view(), ver(2), "other-v2", false), UpdateVerdict::kStale);
  EXPECT_EQ(read_value(m, n), "at-v2");
  EXPECT_EQ(m.apply_update(n.view(), ver(3), "at-v3", false), UpdateVerdict::kUpdated);
  EXPECT_EQ(read_value(m, n), "at-v3");
  IdBytes version{};
  std::string value;
  ASSERT_TRUE(m.get(n.view(), value, &version));
  EXPECT_EQ(view(version), ver(3).view());
  EXPECT_EQ(m.apply_update(n.view(), ver(3), "replayed", false), UpdateVerdict::kStale);
  EXPECT_EQ(read_value(m, n), "at-v3");
  const L1Stats s = m.stats();
  EXPECT_EQ(s.coh_applied, 1u);
  EXPECT_EQ(s.coh_stale, 3u);
  EXPECT_EQ(s.replaced, 1u);
  EXPECT_EQ(s.size, 1u);
}

TEST(L1MapUpdate, AbsentRowIsInsertedOnlyWhenAsked) {
  L1Map m(config());
  const BrandedId a = name_id(1), b = name_id(2);
  EXPECT_EQ(m.apply_update(a.view(), ver(5), "a5", false), UpdateVerdict::kStale);
  EXPECT_EQ(read_value(m, a), "<miss>");
  EXPECT_EQ(m.apply_update(b.view(), ver(5), "b5", true), UpdateVerdict::kInserted);
  EXPECT_EQ(read_value(m, b), "b5");
  EXPECT_EQ(m.size(), 1u);
}

TEST(L1MapUpdate, TheVersionGuardsFillsInFlightEvenWhenNotInserted) {
  L1Map m(config());
  const BrandedId n = name_id(7);
  // Update-if-present on a row this node does not hold: nothing cached, but a fill that read L2
  // before the update (an older version) must not land afterwards.
  EXPECT_EQ(m.apply_update(n.view(), ver(4), "v4", false), UpdateVerdict::kStale);
  EXPECT_EQ(m.insert_fill(n, "v3", ver(3)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(m.insert_fill(n, "v4", ver(4)), InsertVerdict::kInserted);  // equal passes
  EXPECT_EQ(read_value(m, n), "v4");
}

TEST(L1MapUpdate, AnOlderUpdateAfterANewerDropIsStale) {
  L1Map m(config());
  const BrandedId n = name_id(3);
  ASSERT_EQ(m.put(n, "v1", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.apply_coherence(n, ver(6)), Verdict::kApplied);  // the row went at v6
  EXPECT_EQ(m.apply_update(n.view(), ver(5), "v5", true), UpdateVerdict::kStale);
  EXPECT_EQ(read_value(m, n), "<miss>");
  EXPECT_EQ(m.apply_update(n.view(), ver(6), "v6", true), UpdateVerdict::kInserted);
  EXPECT_EQ(read_value(m, n), "v6");
  // A drop of the same version leaves it: a row at v survives a message v.
  EXPECT_EQ(m.apply_coherence(n, ver(6)), Verdict::kStale);
  EXPECT_EQ(read_value(m, n), "v6");
}

TEST(L1MapUpdate, AValueTooLargeForL1DropsTheOlderRow) {
  L1Config c = config();
  c.max_bytes = 4096;
  L1Map m(c);
  const BrandedId n = name_id(4);
  ASSERT_EQ(m.put(n, "small", ver(1)), InsertVerdict::kInserted);
  EXPECT_EQ(m.apply_update(n.view(), ver(2), std::string(8192, 'x'), false),
            UpdateVerdict::kDropped);
  EXPECT_EQ(read_value(m, n), "<miss>");
  // And the version still guards: the older value cannot come back through a fill.
  EXPECT_EQ(m.insert_fill(n, "small", ver(1)), InsertVerdict::kRefusedTombstone);
}

TEST(L1MapUpdate, UpdatesUnderEvictionKeepTheBound) {
  L1Map m(config(/*max_size=*/8));
  for (std::uint64_t i = 0; i < 64; ++i) {
    const UpdateVerdict u = m.apply_update(name_id(i).view(), ver(i + 1), "v", true);
    EXPECT_EQ(u, UpdateVerdict::kInserted) << i;
    EXPECT_LE(m.size(), 8u);
  }
}

TEST(L1MapUpdate, ClearLeavesTheGuardAndTheNextUpdateInserts) {
  L1Map m(config());
  const BrandedId n = name_id(9);
  ASSERT_EQ(m.apply_update(n.view(), ver(2), "v2", true), UpdateVerdict::kInserted);
  m.clear();
  EXPECT_EQ(read_value(m, n), "<miss>");
  EXPECT_EQ(m.apply_update(n.view(), ver(1), "v1", true), UpdateVerdict::kStale);
  EXPECT_EQ(m.apply_update(n.view(), ver(3), "v3", true), UpdateVerdict::kInserted);
  EXPECT_EQ(read_value(m, n), "v3");
}

TEST(L1MapUpdate, BadNamesMatchNothing) {
  L1Map m(config());
  EXPECT_EQ(m.apply_update("", ver(1), "x", true), UpdateVerdict::kStale);
  EXPECT_EQ(m.apply_update(std::string(201, 'k'), ver(1), "x", true), UpdateVerdict::kStale);
  EXPECT_EQ(m.size(), 0u);
}

TEST(L1MapUpdate, AReaderSeesTheOldValueOrTheNewOneWhole) {
  L1Map m(config());
  const BrandedId n = name_id(11);
  ASSERT_EQ(m.put(n, std::string(64, 'a'), ver(1)), InsertVerdict::kInserted);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> torn{0}, reads{0};
  std::thread reader([&] {
    std::string v;
    while (!done.load(std::memory_order_relaxed)) {
      if (m.get(n.view(), v)) {
        // Every value is one letter repeated: a mix of two is a torn read.
        if (v.empty() || std::count(v.begin(), v.end(), v[0]) != static_cast<long>(v.size())) {
          torn.fetch_add(1, std::memory_order_relaxed);
        }
      }
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (std::uint64_t i = 2; i < 20'000; ++i) {
    const std::size_t size = 1 + (i * 37) % 700;  // growing and shrinking
    m.apply_update(n.view(), ver(i), std::string(size, static_cast<char>('a' + i % 26)), false);
    if (i % 64 == 0) m.reclaim();
  }
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
}

}  // namespace
}  // namespace echo::table
