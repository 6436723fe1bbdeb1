// SPDX-License-Identifier: MIT
// Unit tests of the L1 map's eviction (table/eviction.h): the exact order each policy evicts in
// on small scripted sequences (S3-FIFO's small queue, main queue and ghost; exact LRU, also
// against a list model over random scripts; CLOCK; the original's skip), a hit's mark
// saturating, max_bytes held at every step under churn and filled to within 5%, removal causes
// counted and told, and the ghost filter on its own.
#include <echo/table/l1_map.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace echo::table {
namespace {

std::atomic<std::int64_t> g_now{1'000'000};
std::int64_t fake_now() noexcept { return g_now.load(std::memory_order_relaxed); }
void set_now(std::int64_t t) { g_now.store(t, std::memory_order_relaxed); }

BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 5'000'000 + n); }

// What the listener heard, in order.
struct Heard {
  std::string name;
  std::string version;
  RemovalCause cause;
};
struct Recorder {
  std::vector<Heard> heard;
  static void on(void* self, std::string_view name, std::string_view version,
                 RemovalCause cause) noexcept {
    static_cast<Recorder*>(self)->heard.push_back({std::string(name), std::string(version), cause});
  }
  // The names evicted (kSize or kBytes), in order, and forgets what it heard.
  std::vector<std::string> evicted() {
    std::vector<std::string> out;
    for (const Heard& h : heard) {
      if (h.cause == RemovalCause::kSize || h.cause == RemovalCause::kBytes) out.push_back(h.name);
    }
    heard.clear();
    return out;
  }
};

L1Config config(Eviction e, std::size_t max_size, Recorder* rec, std::size_t max_bytes = 0) {
  L1Config c;
  c.eviction = e;
  c.max_size = max_size;
  c.max_bytes = max_bytes;
  c.ttl_ms = 3'600'000;
  c.jitter = 0.0;
  c.clock = &fake_now;
  if (rec != nullptr) c.on_removal = RemovalListener{&Recorder::on, rec};
  return c;
}

std::uint64_t g_version = 1;
void put(L1Map& m, std::string_view name, std::size_t value_size = 8) {
  ASSERT_NE(m.put(name, std::string(value_size, 'v'), ver(g_version++)), InsertVerdict::kFullSkip)
      << name;
}
void hit(const L1Map& m, std::string_view name, int times = 1) {
  std::string v;
  for (int i = 0; i < times; ++i) ASSERT_TRUE(m.get(name, v)) << name;
}
std::vector<std::string> names(std::initializer_list<const char*> l) {
  return {l.begin(), l.end()};
}

TEST(L1Eviction, S3FifoSmallQueuePromotesRowsHitThereAndGhostsTheRest) {
  Recorder rec;
  L1Map m(config(Eviction::kS3Fifo, 10, &rec));
  for (const char* n : {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}) put(m, n);
  hit(m, "B", 2);
  hit(m, "C", 5);  // the count saturates at 3
  hit(m, "E", 1);
  EXPECT_EQ(m.mark("B"), 2);
  EXPECT_EQ(m.mark("C"), 3);
  EXPECT_EQ(m.mark("D"), 0);
  put(m, "K");  // small holds every row (> 10%): its oldest, A, unhit, goes (to the ghost)
  EXPECT_EQ(rec.evicted(), names({"A"}));
  put(m, "L");  // B and C move to main (marks cleared), D goes
  EXPECT_EQ(rec.evicted(), names({"D"}));
  EXPECT_EQ(m.mark("B"), 0);
  EXPECT_EQ(m.mark("C"), 0);
  put(m, "A");  // E moves to main, F goes; A is in the ghost: it enters main, behind E
  EXPECT_EQ(rec.evicted(), names({"F"}));
  // Small holds G..L, unhit, and stays at its share: the next seven inserts take G..L and then
  // the first of themselves, never main's rows.
  for (const char* n : {"M", "N", "O", "P", "Q", "R", "S"}) put(m, n);
  EXPECT_EQ(rec.evicted(), names({"G", "H", "I", "J", "K", "L", "M"}));
  std::string v;
  for (const char* n : {"A", "B", "C", "E"}) EXPECT_TRUE(m.get(n, v)) << n;
  EXPECT_EQ(m.size(), 10u);
  const L1Stats s = m.stats();
  EXPECT_EQ(s.evicted_size, 10u);
  EXPECT_EQ(s.evicted_bytes, 0u);
}

TEST(L1Eviction, S3FifoMainQueueGivesMarkedRowsAnotherTripOneMarkLess) {
  Recorder rec;
  L1Map m(config(Eviction::kS3Fifo, 20, &rec));
  for (int i = 0; i < 20; ++i) put(m, "a" + std::to_string(i));
  for (int i = 0; i < 18; ++i) hit(m, "a" + std::to_string(i), 1);
  // a0..a17 move to main, unmarked; small is then 2 rows of 20, at its 10%: a18 goes.
  put(m, "b0");
  EXPECT_EQ(rec.evicted(), names({"a18"}));
  EXPECT_EQ(m.mark("a0"), 0);
  hit(m, "a0", 2);
  hit(m, "a1", 1);
  hit(m, "a19", 1);
  // Small (a19, b0) at its share: a19 moves to main, leaving small under it: main's turn.
  // a0 goes round with one mark less, a1 with none, a2 goes.
  put(m, "b1");
  EXPECT_EQ(rec.evicted(), names({"a2"}));
  EXPECT_EQ(m.mark("a0"), 1);
  EXPECT_EQ(m.mark("a1"), 0);
  EXPECT_EQ(m.mark("a19"), 0);
  // Small (b0, b1) at its share again: its oldest goes.
  put(m, "b2");
  EXPECT_EQ(rec.evicted(), names({"b0"}));
  // Main's order is now a3..a17, a19, a0, a1. b1, hit, moves to main at small's end,
  // leaving small under its share: main's oldest, a3, goes.
  hit(m, "b1", 1);
  put(m, "b3");
  EXPECT_EQ(rec.evicted(), names({"a3"}));
}

TEST(L1Eviction, LruEvictsTheLeastRecentlyUsedRowExactly) {
  Recorder rec;
  L1Map m(config(Eviction::kLru, 4, &rec));
  for (const char* n : {"A", "B", "C", "D"}) put(m, n);
  hit(m, "A");
  hit(m, "C");
  put(m, "E");  // B is the least recently used
  EXPECT_EQ(rec.evicted(), names({"B"}));
  put(m, "D");  // a replacement is a use: D is now the newest
  put(m, "F");  // A, C, E, D by last use: A goes
  EXPECT_EQ(rec.evicted(), names({"A"}));
  hit(m, "C");
  put(m, "G");
  EXPECT_EQ(rec.evicted(), names({"E"}));
  put(m, "H");
  EXPECT_EQ(rec.evicted(), names({"D"}));
}

TEST(L1Eviction, LruMatchesAListModelOverRandomScripts) {
  // The model: a list, most recent at the front; a hit or an insert moves the name to the
  // front, a drop takes it out, an insert into a full map evicts the back first.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    Recorder rec;
    const std::size_t cap = 3 + rng() % 12;
    L1Map m(config(Eviction::kLru, cap, &rec));
    std::list<std::string> model;
    for (int step = 0; step < 2000; ++step) {
      const std::string n = "n" + std::to_string(rng() % (cap * 3));
      const auto at = std::find(model.begin(), model.end(), n);
      switch (rng() % 4) {
        case 0:
        case 1: {  // read
          std::string v;
          ASSERT_EQ(m.get(n, v), at != model.end()) << n;
          if (at != model.end()) model.splice(model.begin(), model, at);
          break;
        }
        case 2: {  // put
          if (at != model.end()) {
            model.erase(at);
          } else if (model.size() == cap) {
            const std::string victim = model.back();
            model.pop_back();
            put(m, n);
            ASSERT_EQ(rec.evicted(), std::vector<std::string>{victim}) << "step " << step;
            model.push_front(n);
            break;
          }
          put(m, n);
          ASSERT_TRUE(rec.evicted().empty());
          model.push_front(n);
          break;
        }
        default:  // a coherence message drops it
          m.apply_coherence(n, ver(g_version++));
          if (at != model.end()) model.erase(at);
          break;
      }
      ASSERT_EQ(m.size(), model.size());
    }
  }
}

// Bound by rows (a small map: a drop relinks its queue at once), and by bytes in a map of more
// than L1Map::kRelinkAtOnceRows rows (a drop leaves the relinking to reclaim()).
class ClockModel : public ::testing::TestWithParam<bool> {};

TEST_P(ClockModel, MatchesAQueueModelThroughDropsReclaimsAndClears) {
  const bool by_bytes = GetParam();
  // The model: a queue of (name, mark), oldest first. A hit sets the mark; a fill into a full
  // map sends marked rows round (unmarked) and evicts the first unmarked; a replacement moves
  // the name to the newer end with its mark; a drop (coherence message) takes it out. In the
  // map a drop leaves its row threaded through the queue until reclaim() frees it: evictions
  // step over such rows, reclaim() relinks them, clear() forgets them; the model sees none of
  // that, so any slip shows as a wrong victim (or, under ASan, a use after free).
  std::mt19937_64 rng(23);
  for (int round = 0; round < 20; ++round) {
    Recorder rec;
    std::size_t cap = 3 + rng() % 10;
    // Every row here is charged 96 bytes (a 2-4 byte name, an 8-byte value).
    if (by_bytes) cap = 43 + rng() % 20;
    L1Map m(by_bytes ? config(Eviction::kClock, 40000, &rec, cap * 96)
                     : config(Eviction::kClock, cap, &rec));
    ASSERT_EQ(m.row_charge(4, 8), 96u);
    std::list<std::pair<std::string, bool>> model;
    const auto find = [&model](const std::string& n) {
      return std::find_if(model.begin(), model.end(), [&n](const auto& e) { return e.first == n; });
    };
    for (int step = 0; step < 3000; ++step) {
      const std::string n = "n" + std::to_string(rng() % (cap * 3));
      const auto at = find(n);
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2: {
          std::string v;
          ASSERT_EQ(m.get(n, v), at != model.end()) << n;
          if (at != model.end()) at->second = true;
          break;
        }
        case 3:
        case 4:
        case 5: {
          std::vector<std::string> want;
          bool mark = false;
          if (at != model.end()) {
            mark = at->second;
            model.erase(at);
          } else if (model.size() == cap) {
            while (model.front().second) {
              model.push_back({model.front().first, false});
              model.pop_front();
            }
            want.push_back(model.front().first);
            model.pop_front();
          }
          put(m, n);
          ASSERT_EQ(rec.evicted(), want) << "step " << step;
          model.push_back({n, mark});
          break;
        }
        case 6:
        case 7:
          m.apply_coherence(n, ver(g_version++));
          if (at != model.end()) model.erase(at);
          break;
        case 8:
          m.reclaim();
          break;
        default:
          if (rng() % 50 == 0) {
            m.clear();
            model.clear();
          }
          break;
      }
      rec.heard.clear();
      ASSERT_EQ(m.size(), model.size());
    }
    // Every row the drops left behind is relinked and freed once no reader holds it.
    m.reclaim();
    EXPECT_EQ(m.stats().retired_pending, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Bounds, ClockModel, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "bytes" : "rows"; });

TEST(L1Eviction, ClockGivesEachMarkedRowOneMoreTrip) {
  Recorder rec;
  L1Map m(config(Eviction::kClock, 4, &rec));
  for (const char* n : {"A", "B", "C", "D"}) put(m, n);
  hit(m, "A", 3);  // one bit: saturates at 1
  EXPECT_EQ(m.mark("A"), 1);
  hit(m, "C");
  put(m, "E");  // A goes round (unmarked), B goes
  EXPECT_EQ(rec.evicted(), names({"B"}));
  put(m, "F");  // C goes round, D goes
  EXPECT_EQ(rec.evicted(), names({"D"}));
  put(m, "G");  // queue: A, C, E, F, all unmarked
  EXPECT_EQ(rec.evicted(), names({"A"}));
}

TEST(L1Eviction, SkipEvictsNothingAndAHitWritesNothing) {
  Recorder rec;
  L1Map m(config(Eviction::kSkip, 3, &rec));
  for (const char* n : {"A", "B", "C"}) put(m, n);
  hit(m, "A", 5);
  EXPECT_EQ(m.mark("A"), 0);
  EXPECT_EQ(m.put("D", "v", ver(g_version++)), InsertVerdict::kFullSkip);
  EXPECT_TRUE(rec.evicted().empty());
  EXPECT_EQ(m.stats().full_skips, 1u);
  EXPECT_EQ(m.size(), 3u);
}

TEST(L1Eviction, MaxBytesHoldsAtEveryStepUnderChurnAndFillsToWithinFivePercent) {
  for (const Eviction e : {Eviction::kS3Fifo, Eviction::kLru, Eviction::kClock}) {
    Recorder rec;
    constexpr std::size_t kBudget = 256 << 10;
    L1Map m(config(e, 100000, &rec, kBudget));
    std::mt19937_64 rng(11);
    std::size_t low = kBudget;
    for (int step = 0; step < 40000; ++step) {
      const std::string n = "k" + std::to_string(rng() % 4000);
      switch (rng() % 8) {
        case 0:
          m.apply_coherence(n, ver(g_version++));
          break;
        case 1: {
          std::string v;
          m.get(n, v);
          break;
        }
        default:
          m.put(n, std::string(rng() % 1024, 'x'), ver(g_version++));
          break;
      }
      ASSERT_LE(m.bytes(), kBudget) << to_string(e) << " step " << step;
      if (step > 10000) low = std::min(low, m.bytes());
    }
    // The bound is the linked rows' charge, kept exactly: the sum of every live row's charge.
    EXPECT_EQ(m.stats().bytes, m.bytes());
    // Every eviction stops once the new row fits, and the churn's drops free at most a row at a
    // time: full to within 5% between drops.
    EXPECT_GE(low, kBudget * 95 / 100) << to_string(e);
    EXPECT_GT(m.stats().evicted_bytes, 1000u) << to_string(e);
    EXPECT_EQ(m.stats().evicted_size, 0u);
  }
}

TEST(L1Eviction, RowChargeIsTheArenaBlockAndAnOversizedRowIsNotCached) {
  Recorder rec;
  L1Map m(config(Eviction::kS3Fifo, 100, &rec, 4096));
  // The 32-byte meta and 16-byte links, the 24-byte header, the name, the value, then up to
  // the arena's 16: 48 + 24 + 1 + 8 = 81 -> 96.
  EXPECT_EQ(m.row_charge(1, 8), 96u);
  put(m, "small", 100);
  const std::size_t charged = m.bytes();
  EXPECT_EQ(charged, m.row_charge(5, 100));
  EXPECT_EQ(m.put("big", std::string(5000, 'x'), ver(g_version++)), InsertVerdict::kFullSkip);
  EXPECT_EQ(m.stats().full_skips, 1u);
  // A replacement too large to cache: the old row is older than it, so it goes as well.
  EXPECT_EQ(m.put("small", std::string(5000, 'x'), ver(g_version++)), InsertVerdict::kFullSkip);
  std::string v;
  EXPECT_FALSE(m.get("small", v));
  EXPECT_EQ(m.bytes(), 0u);
  ASSERT_EQ(rec.heard.size(), 1u);
  EXPECT_EQ(rec.heard[0].cause, RemovalCause::kReplaced);
}

TEST(L1Eviction, EveryRemovalIsCountedByCauseAndToldOnce) {
  Recorder rec;
  L1Map m(config(Eviction::kS3Fifo, 4, &rec));
  put(m, "A");
  put(m, "B");
  put(m, "A");                               // replaced
  m.apply_coherence("B", ver(g_version++));  // message
  put(m, "C");
  put(m, "D");
  put(m, "E");
  put(m, "F");   // full: A, the small queue's oldest, evicted by size
  m.erase("C");  // counted, not told
  set_now(g_now.load() + 3'600'001);
  m.sweep(m.now());  // the rest expired
  m.put("H", "v", ver(g_version++));
  m.clear();  // counted, not told

  std::map<RemovalCause, int> told;
  for (const Heard& h : rec.heard) ++told[h.cause];
  EXPECT_EQ(told[RemovalCause::kReplaced], 1);
  EXPECT_EQ(told[RemovalCause::kMessage], 1);
  EXPECT_EQ(told[RemovalCause::kSize], 1);
  EXPECT_EQ(told[RemovalCause::kExpired], 3);
  EXPECT_EQ(rec.heard.size(), 6u);
  const auto msg = std::find_if(rec.heard.begin(), rec.heard.end(),
                                [](const Heard& h) { return h.cause == RemovalCause::kMessage; });
  EXPECT_EQ(msg->name, "B");
  EXPECT_EQ(msg->version.size(), kIdSize);  // the message's version
  const L1Stats s = m.stats();
  EXPECT_EQ(s.replaced, 1u);
  EXPECT_EQ(s.evicted_size, 1u);
  EXPECT_EQ(s.expired, 3u);
  EXPECT_EQ(s.swept, 3u);
  EXPECT_EQ(s.invalidated, 3u);  // the message, the erase, the clear's one row
  EXPECT_EQ(s.coh_applied, 1u);
  EXPECT_EQ(s.bytes, 0u);
}

TEST(L1Eviction, AVictimFoundExpiredIsToldAsExpired) {
  Recorder rec;
  L1Map m(config(Eviction::kClock, 2, &rec));
  put(m, "A");
  set_now(g_now.load() + 3'600'000);  // A's expires_at: no longer live
  put(m, "B");
  put(m, "C");  // A is the victim, and it had expired
  ASSERT_EQ(rec.heard.size(), 1u);
  EXPECT_EQ(rec.heard[0].name, "A");
  EXPECT_EQ(rec.heard[0].cause, RemovalCause::kExpired);
  EXPECT_EQ(m.stats().evicted_size, 0u);
}

TEST(L1Config, EvictionKnobsAreChecked) {
  L1Config c;
  c.max_bytes = 4095;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.max_bytes = (std::size_t{1} << 44) + 1;
  EXPECT_THROW(L1Map{c}, std::invalid_argument);
  c.max_bytes = 4096;
  EXPECT_NO_THROW(L1Map{c});
  c.eviction = static_cast<Eviction>(9);
  try {
    L1Map m(c);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("eviction"), std::string::npos) << e.what();
  }
}

TEST(GhostFilter, RemembersTheLastWindowOfAddsAndForgetsWhatItGives) {
  GhostFilter g(1024);
  for (std::uint64_t i = 0; i < 100; ++i) g.add(hash_key("name" + std::to_string(i)));
  EXPECT_TRUE(g.take(hash_key("name99"), 50));
  EXPECT_FALSE(g.take(hash_key("name99"), 50));  // taken
  EXPECT_TRUE(g.take(hash_key("name60"), 50));   // 40 adds ago
  EXPECT_FALSE(g.take(hash_key("name10"), 50));  // 90 adds ago: out of the window
  EXPECT_FALSE(g.take(hash_key("never"), 1000));
  GhostFilter none(0);
  none.add(1);
  EXPECT_FALSE(none.take(1, 10));
  EXPECT_EQ(none.memory_bytes(), 0u);
}

}  // namespace
}  // namespace echo::table
