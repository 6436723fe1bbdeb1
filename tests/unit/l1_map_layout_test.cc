// SPDX-License-Identifier: MIT
// The L1 map's names and values: text names of every length are their own rows, and an object
// layout decodes once on the writer, destroys once on free, and keeps the old row if decode throws.

#include "l1_map_fixture.h"

namespace echo::table {
namespace {

// ---- Text names (docs/wire.md, "Text keys") and object layouts.

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

}  // namespace
}  // namespace echo::table
