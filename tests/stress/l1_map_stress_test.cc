// SPDX-License-Identifier: MIT
// Stress test of the L1 map under TSan/ASan: three reader threads read while the writer puts,
// fills (some stale), applies drops and carried values (growing and shrinking), erases, sweeps
// and clears, bounded in seconds. Every value
// encodes its name and version, so a torn row (one version's value with another's stamp) fails;
// every read must be at least as new as the newest drop applied before it began. A second test
// holds one reader's section open across more reclaims than L1Map::kRetireBatches (the retire
// batches merge) while the writer drops and refills the row it holds.
#include <echo/table/l1_map.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace echo::table {
namespace {

constexpr std::size_t kNames = 512;
constexpr auto kRunFor = std::chrono::milliseconds(1500);  // per eviction policy

BrandedId name_id(std::uint64_t n) { return *BrandedId::encode("USR", 7'000'000 + n); }
BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 9'000'000 + n); }

// name ‖ version ‖ (version % 97) filler bytes that also depend on the version.
std::string encode_value(const BrandedId& name, const BrandedId& version, std::uint64_t v) {
  std::string s = name.str() + version.str();
  s.append(v % 97, static_cast<char>('a' + v % 26));
  return s;
}

::testing::AssertionResult well_formed(std::string_view name, std::string_view value,
                                       std::string_view version) {
  if (value.size() < 2 * kIdSize || value.substr(0, kIdSize) != name ||
      value.substr(kIdSize, kIdSize) != version) {
    return ::testing::AssertionFailure() << "torn row: value does not carry its name and version";
  }
  const auto parsed = BrandedId::parse(version);
  if (!parsed) return ::testing::AssertionFailure() << "garbage version";
  const std::uint64_t v = parsed->snowflake() - 9'000'000;
  const std::string_view fill = value.substr(2 * kIdSize);
  if (fill.size() != v % 97 ||
      fill.find_first_not_of(static_cast<char>('a' + v % 26)) != std::string_view::npos) {
    return ::testing::AssertionFailure() << "torn value bytes for version " << v;
  }
  return ::testing::AssertionSuccess();
}

// Each eviction policy: rows evicted (and, under S3-FIFO, bounded by bytes too) while readers
// stand on them and mark them.
class L1MapStress : public ::testing::TestWithParam<Eviction> {};

TEST_P(L1MapStress, ReadersNeverSeeTornOrDroppedRowsWhileTheWriterChurns) {
  L1Config cfg;
  cfg.eviction = GetParam();
  // Fewer slots than names: full_skips and reclaim-on-full happen under skip; under the others,
  // half the names, so evictions happen despite the drops, erases, clears and sweeps.
  cfg.max_size = cfg.eviction == Eviction::kSkip ? 400 : 256;
  // S3-FIFO in a map of more than kRelinkAtOnceRows rows, bound by bytes: drops leave their
  // queue links to reclaim() (L1Map::leave); CLOCK's drops relink at once.
  if (cfg.eviction == Eviction::kS3Fifo) cfg.max_size = 40000;
  cfg.ttl_ms = 20;
  cfg.jitter = 0.25;
  // S3-FIFO under a byte bound as well, tighter than its rows: ~150 of its 96..224-byte rows.
  if (cfg.eviction == Eviction::kS3Fifo) cfg.max_bytes = 150 * 160;
  L1Map map(cfg);

  std::vector<BrandedId> names;
  for (std::size_t i = 0; i < kNames; ++i) names.push_back(name_id(i));
  // floor[i]: newest drop version applied for name i. The writer stores it (release) after
  // apply_coherence returned; a reader loads it (acquire) before reading: the unlink happened
  // before, so no row older than it may be served (the fill guard keeps older fills out).
  std::array<std::atomic<std::uint64_t>, kNames> floor{};
  std::atomic<bool> stop{false};
  std::atomic<long> total_reads{0};
  std::atomic<long> total_hits{0};

  auto reader = [&](unsigned seed) {
    std::mt19937_64 rng(seed);
    std::string value;
    std::array<char, 256> buf;
    long reads = 0;
    long hits = 0;
    // acquire pairs with the writer's release store of `stop` (nothing to publish; symmetry).
    while (!stop.load(std::memory_order_acquire)) {
      const std::size_t i = rng() % kNames;
      const std::string_view n = names[i].view();
      // acquire pairs with the writer's release store of floor[i].
      const std::uint64_t f = floor[i].load(std::memory_order_acquire);
      std::string_view got_value;
      IdBytes got_version;
      bool hit = false;
      ReadGuard guard;
      switch (reads % 3) {
        case 0:
          hit = map.get(n, value, &got_version);
          got_value = value;
          break;
        case 1: {
          const ReadResult r = map.read(n, buf);
          ASSERT_NE(r.status, ReadStatus::kTooSmall);
          hit = r.status == ReadStatus::kHit;
          got_value = {buf.data(), r.size};
          got_version = r.version;
          break;
        }
        default: {
          const std::int64_t before = map.now();
          if (auto row = map.find(guard, n)) {
            hit = true;
            // Live at some instant during this read: it had not expired when the read began.
            ASSERT_GT(row->expires_at, before);
            got_value = row->value;
            std::copy(row->version.begin(), row->version.end(), got_version.begin());
          }
          break;
        }
      }
      ++reads;
      if (!hit) continue;
      ++hits;
      ASSERT_TRUE(well_formed(n, got_value, view(got_version)));
      if (f != 0) {
        ASSERT_FALSE(newer(ver(f).view(), view(got_version)))
            << "served a row older than drop " << f << " applied before the read";
      }
    }
    total_reads.fetch_add(reads, std::memory_order_relaxed);  // read after join
    total_hits.fetch_add(hits, std::memory_order_relaxed);
  };

  std::vector<std::thread> readers;
  for (unsigned t = 0; t < 3; ++t) readers.emplace_back(reader, 100 + t);

  std::mt19937_64 rng(42);
  std::uint64_t next_version = 1;
  std::array<std::uint64_t, kNames> applied_floor{};
  long ops = 0;
  const auto deadline = std::chrono::steady_clock::now() + kRunFor;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int burst = 0; burst < 64; ++burst, ++ops) {
      const std::size_t i = rng() % kNames;
      const std::uint64_t back = rng() % 40;
      const std::uint64_t v = next_version > back ? next_version - back : 1;
      switch (rng() % 10) {
        case 0:
        case 1: {
          const std::uint64_t pv = next_version++;
          map.put(names[i], encode_value(names[i], ver(pv), pv), ver(pv));
          break;
        }
        case 2:
        case 3:
          map.insert_fill(names[i], encode_value(names[i], ver(v), v), ver(v));
          break;
        case 4:
        case 5:
          if (map.apply_coherence(names[i], ver(v)) == Verdict::kApplied && v > applied_floor[i]) {
            applied_floor[i] = v;
            // release pairs with the reader's acquire load of floor[i].
            floor[i].store(v, std::memory_order_release);
          }
          break;
        case 6:
          map.erase(names[i]);
          break;
        case 7:
        case 8: {
          // A carried value (growing and shrinking with v), inserted or not when absent.
          const UpdateVerdict u = map.apply_update(names[i].view(), ver(v),
                                                   encode_value(names[i], ver(v), v), rng() & 1);
          if (u != UpdateVerdict::kStale && v > applied_floor[i]) {
            applied_floor[i] = v;
            floor[i].store(v, std::memory_order_release);  // as a drop's: nothing older after it
          }
          break;
        }
        default:
          if (rng() % 64 == 0) map.clear();
          break;
      }
    }
    map.sweep(map.now());
  }
  // release pairs with the readers' acquire loads of `stop`.
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  map.reclaim();

  const L1Stats s = map.stats();
  EXPECT_GT(total_reads.load(std::memory_order_relaxed), 1000);
  EXPECT_GT(total_hits.load(std::memory_order_relaxed), 100);
  EXPECT_EQ(s.hits + s.misses,
            static_cast<std::uint64_t>(total_reads.load(std::memory_order_relaxed)));
  EXPECT_GT(s.coh_applied, 0u);
  EXPECT_GT(s.sweeps, 0u);
  EXPECT_GT(ops, 1000);
  EXPECT_EQ(s.retired_pending, 0u);  // readers gone: everything retired is freed
  if (cfg.eviction != Eviction::kSkip) {
    EXPECT_GT(s.evicted_size + s.evicted_bytes, 0u);
  }
  if (cfg.max_bytes != 0) {
    EXPECT_LE(s.bytes, cfg.max_bytes);
  }
  EXPECT_EQ(s.bytes, map.bytes());
}

INSTANTIATE_TEST_SUITE_P(Policies, L1MapStress,
                         ::testing::Values(Eviction::kS3Fifo, Eviction::kLru, Eviction::kClock,
                                           Eviction::kSkip),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(L1MapStressHeld, ARowHeldAcrossMergedRetireBatchesStaysIntactUntilItsReaderLeaves) {
  L1Config cfg;
  cfg.max_size = 64;
  cfg.ttl_ms = 1'000'000;
  L1Map map(cfg);
  constexpr std::size_t kHeld = 8;
  constexpr std::uint64_t kRounds = 4 * L1Map::kRetireBatches;
  std::uint64_t next_version = 1;
  for (std::size_t i = 0; i < kHeld; ++i) {
    map.put(name_id(i), encode_value(name_id(i), ver(next_version), next_version),
            ver(next_version));
    ++next_version;
  }
  // The writer's progress, in reclaims; the reader waits on it (acquire pairs with the writer's
  // release stores: nothing else to publish, symmetry).
  std::atomic<std::uint64_t> reclaims{0};
  std::atomic<bool> holding{false};
  std::atomic<long> checked{0};
  std::thread reader([&] {
    ReadGuard guard;
    ASSERT_TRUE(guard.protecting());
    std::vector<RowView> rows;
    for (std::size_t i = 0; i < kHeld; ++i) {
      auto row = map.find(guard, name_id(i).view());
      ASSERT_TRUE(row.has_value());
      rows.push_back(*row);
    }
    // release pairs with the writer's acquire load: it starts churning only now.
    holding.store(true, std::memory_order_release);
    while (reclaims.load(std::memory_order_acquire) < kRounds) std::this_thread::yield();
    for (std::size_t i = 0; i < kHeld; ++i) {
      ASSERT_TRUE(well_formed(rows[i].name, rows[i].value, rows[i].version));
      checked.fetch_add(1, std::memory_order_relaxed);  // read after join
    }
  });
  while (!holding.load(std::memory_order_acquire)) std::this_thread::yield();
  for (std::uint64_t r = 0; r < kRounds; ++r) {
    for (std::size_t i = 0; i < kHeld; ++i) {
      map.apply_coherence(name_id(i), ver(next_version++));
      const std::uint64_t pv = next_version++;
      map.put(name_id(i), encode_value(name_id(i), ver(pv), pv), ver(pv));
    }
    map.reclaim();
    reclaims.store(r + 1, std::memory_order_release);
  }
  EXPECT_GE(map.stats().retired_pending, kHeld);
  reader.join();
  map.reclaim();
  EXPECT_EQ(checked.load(std::memory_order_relaxed), static_cast<long>(kHeld));
  EXPECT_EQ(map.stats().retired_pending, 0u);
  EXPECT_EQ(map.stats().retired_bytes, 0u);
}

}  // namespace
}  // namespace echo::table
