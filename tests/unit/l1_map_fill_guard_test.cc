// SPDX-License-Identifier: MIT
// The L1 map's fill guard: no fill older than an applied drop is ever served, with or without a
// row, and the tombstones that remember drops keep the newest version as they grow and collapse.

#include <string>
#include <unordered_set>

#include "l1_map_counted_new.h"

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

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
  // A put is newer-wins too: an older one leaves the newer row (the tombstone refuses first).
  EXPECT_EQ(m.put(n, "v3", ver(3)), InsertVerdict::kRefusedOlder);
  EXPECT_EQ(m.put(n, "v1", ver(1)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(read_value(m, n), "v6");
  EXPECT_EQ(m.put(n, "v6b", ver(6)), InsertVerdict::kReplaced) << "equal versions replace";
  const L1Stats s = m.stats();
  EXPECT_EQ(s.fill_refused, 3u);
  EXPECT_EQ(s.put_refused, 2u);
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

TEST(HashKey, ShortNamesOfDifferentLengthsNeverShareAHash) {
  // Every name of 1..3 bytes over a key alphabet, and "A1000".."A10999": no two share a hash (a
  // length folded into the low byte once made "A9" and "A98" one hash, so a publish of one
  // refused the other's put and a hashed message dropped both).
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:.-_";
  std::unordered_set<std::uint64_t> seen;
  std::size_t names = 0;
  const auto add = [&](const std::string& name) {
    ++names;
    EXPECT_TRUE(seen.insert(hash_key(name)).second) << name;
  };
  for (const char a : alphabet) {
    add(std::string{a});
    for (const char b : alphabet) {
      add(std::string{a, b});
      for (const char c : alphabet) add(std::string{a, b, c});
    }
  }
  for (int i = 1000; i < 11000; ++i) add("A" + std::to_string(i));  // 5-6 bytes: none above
  EXPECT_EQ(seen.size(), names);
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

// A map whose fill guard collapsed into its floor (the newest version of any name, applied to
// every name): `row` holds v10, then drops of other names push the floor past v50.
struct FloorMap {
  L1Map m;
  BrandedId row = name_id(1);
  explicit FloorMap(L1Config c) : m(std::move(c)) {
    set_now(0);
    EXPECT_EQ(m.put(row, "v10", ver(10)), InsertVerdict::kInserted);
    for (int i = 0; i < 64; ++i) (void)m.apply_coherence(name_id(100 + i), ver(100 + i));
    EXPECT_GT(m.stats().tombstone_collapses, 0u) << "the floor never formed";
    EXPECT_FALSE(m.tombstone(row).has_value()) << "the row's name has no tombstone of its own";
  }
};
L1Config floor_config() {
  L1Config c = config();
  c.tombstone_capacity = 16;  // 8 usable slots: 64 drops collapse it
  return c;
}

TEST(L1Map, UnderTheFloorACarriedValueNewerThanTheRowDropsIt) {
  FloorMap f(floor_config());
  // v50 is newer than the row and older than the floor: it cannot be held, and the row must not
  // stay in its place (L2 holds v50 or newer).
  const UpdateVerdict u = f.m.apply_update(f.row.view(), ver(50), "v50", /*insert_absent=*/true);
  EXPECT_EQ(u, UpdateVerdict::kDropped);
  EXPECT_EQ(read_value(f.m, f.row), "<miss>");
  // A message older than the row changes nothing.
  FloorMap g(floor_config());
  EXPECT_EQ(g.m.apply_update(g.row.view(), ver(5), "v5", true), UpdateVerdict::kStale);
  EXPECT_EQ(read_value(g.m, g.row), "v10");
}

TEST(L1Map, UnderTheFloorAPutOrFillNewerThanTheRowIsRefusedAndTheRowGoes) {
  FloorMap f(floor_config());
  EXPECT_EQ(f.m.put(f.row, "v60", ver(60)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(read_value(f.m, f.row), "<miss>") << "the older row stayed in place of v60";
  FloorMap g(floor_config());
  EXPECT_EQ(g.m.insert_fill(g.row, "v60", ver(60)), InsertVerdict::kRefusedTombstone);
  EXPECT_EQ(read_value(g.m, g.row), "<miss>");
  // Past the floor, a put is stored as ever.
  FloorMap h(floor_config());
  EXPECT_EQ(h.m.put(h.row, "v900", ver(900)), InsertVerdict::kReplaced);
  EXPECT_EQ(read_value(h.m, h.row), "v900");
}

TEST(L1Map, AnEraseWithAVersionRefusesOlderPutsAfterIt) {
  set_now(0);
  L1Map m(config());
  const BrandedId n = name_id(3);
  ASSERT_EQ(m.put(n, "v1", ver(1)), InsertVerdict::kInserted);
  EXPECT_TRUE(m.erase(n.view(), ver(5)));
  EXPECT_EQ(read_value(m, n), "<miss>");
  EXPECT_EQ(m.put(n, "v2", ver(2)), InsertVerdict::kRefusedTombstone) << "minted before the erase";
  EXPECT_EQ(m.put(n, "v6", ver(6)), InsertVerdict::kInserted);
  // Without a version, an erase remembers nothing (the admin verb with no lease).
  const BrandedId o = name_id(4);
  ASSERT_EQ(m.put(o, "v1", ver(1)), InsertVerdict::kInserted);
  EXPECT_TRUE(m.erase(o));
  EXPECT_EQ(m.put(o, "v0", ver(0)), InsertVerdict::kInserted);
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

}  // namespace
}  // namespace echo::table
