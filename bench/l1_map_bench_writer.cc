// SPDX-License-Identifier: MIT
// l1_map_bench's writer side (l1_map_bench.cc says what the bench measures): coherence drops on
// a full map, batched and one by one, under each eviction policy, against absl::flat_hash_map's
// find+compare+erase; fills of new names into a full map (evicting) against a map with room.
#include "l1_map_bench.h"

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace l1_map_bench {

// ---- Writer apply throughput: batches of 1024 drops that all apply, rows refilled untimed.

constexpr std::size_t kDropBatch = 1024;

// 0..rows-1 in a fixed shuffled order: the messages' order over the rows.
std::vector<std::uint32_t> shuffled_rows(std::size_t rows) {
  std::vector<std::uint32_t> order(rows);
  for (std::uint32_t i = 0; i < rows; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(2));
  return order;
}

// The timed loop: `apply(at)` applies messages [at, at + kDropBatch) and returns how many
// dropped a row; when fewer than a batch are left, `refill()` (untimed) puts every row back
// and makes `message_count()` fresh messages. Returns the rows dropped.
template <class Count, class Refill, class Apply>
std::uint64_t apply_batches(benchmark::State& state, Count message_count, Refill refill,
                            Apply apply) {
  refill();
  std::size_t at = 0;
  std::uint64_t applied = 0;
  for (auto _ : state) {
    if (at + kDropBatch > message_count()) {
      state.PauseTiming();
      refill();
      at = 0;
      state.ResumeTiming();
    }
    applied += apply(at);
    at += kDropBatch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kDropBatch));
  state.counters["drops_per_s"] =
      benchmark::Counter(static_cast<double>(applied), benchmark::Counter::kIsRate);
  return applied;
}

// Coherence drops on a full map. evict: the rows sit in the policy's queues (0 skip: none, the
// baseline; 1 S3-FIFO; 2 LRU; 3 CLOCK), so each drop also takes its row out of its queue.
// batched: 1 the writer's apply, L1Map::apply_batch (every hash computed and its bucket,
// tombstone, row and tail prefetched ahead of its apply); 0 its baseline in the same run, the
// same messages through apply_coherence one by one.
Eviction policy_arg(std::int64_t a) {
  switch (a) {
    case 1:
      return Eviction::kS3Fifo;
    case 2:
      return Eviction::kLru;
    case 3:
      return Eviction::kClock;
    default:
      return Eviction::kSkip;
  }
}

void BM_L1Map_ApplyDrops(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  L1Config c;
  c.max_size = rows;
  c.ttl_ms = 3'600'000;
  c.eviction = policy_arg(state.range(1));
  const bool batched = state.range(2) != 0;
  L1Map map(c);
  std::vector<BrandedId> ids;
  for (std::size_t i = 0; i < rows; ++i) ids.push_back(name_id(i));
  const std::vector<std::uint32_t> order = shuffled_rows(rows);
  std::uint64_t round = 0;
  std::vector<CoherenceMessage> msgs;
  auto refill = [&] {
    ++round;
    msgs.clear();
    const BrandedId row_version = ver(2 * round);
    const BrandedId drop_version = ver(2 * round + 1);
    for (std::size_t i = 0; i < rows; ++i) map.put(ids[i], value_bytes(), row_version);
    for (std::uint32_t i : order) msgs.push_back({ids[i], drop_version});
  };
  const std::uint64_t applied = apply_batches(
      state, [&] { return msgs.size(); }, refill,
      [&](std::size_t at) -> std::size_t {
        if (batched) {
          return map.apply_batch(std::span<const CoherenceMessage>(msgs.data() + at, kDropBatch));
        }
        std::size_t dropped = 0;
        for (std::size_t j = at; j < at + kDropBatch; ++j) {
          dropped += map.apply_coherence(msgs[j].name, msgs[j].version) == Verdict::kApplied;
        }
        return dropped;
      });
  state.counters["applied_ratio"] =
      static_cast<double>(applied) / static_cast<double>(state.iterations() * kDropBatch);
}

// Fills of new names, a batch per iteration. full 1: the map is at max_size, so every fill
// evicts a row by the policy first; full 0 (the baseline): the same fills into a map with room
// for them all (max_size twice the rows, emptied between rounds).
void BM_L1Map_FillEvicting(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  const bool full = state.range(2) != 0;
  L1Config c;
  c.max_size = full ? rows : 2 * rows;
  c.ttl_ms = 3'600'000;
  c.eviction = policy_arg(state.range(1));
  L1Map map(c);
  std::vector<BrandedId> ids;
  for (std::size_t i = 0; i < 2 * rows; ++i) ids.push_back(name_id(i));
  const BrandedId v = ver(1);
  for (std::size_t i = 0; i < rows; ++i) map.put(ids[i], value_bytes(), v);
  std::size_t next = rows;  // the next name to fill: rows..2*rows-1, then 0..rows-1, ...
  std::size_t filled = 0;
  for (auto _ : state) {
    if (filled + kDropBatch > rows) {
      state.PauseTiming();
      if (!full) {  // room again for the next round's fills
        map.clear();
        map.reclaim();
        for (std::size_t i = 0; i < rows; ++i) {
          map.put(ids[(next + rows + i) % (2 * rows)], value_bytes(), v);
        }
      }
      filled = 0;
      state.ResumeTiming();
    }
    for (std::size_t j = 0; j < kDropBatch; ++j) {
      map.put(ids[next], value_bytes(), v);
      next = next + 1 == 2 * rows ? 0 : next + 1;
    }
    filled += kDropBatch;
  }
  if (map.size() > c.max_size) state.SkipWithError("over max_size");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kDropBatch));
  state.counters["evicted"] = static_cast<double>(map.stats().evicted_size);
}

#ifdef ECHO_HAVE_ABSL
// Baseline: the same verdicts on an unsynchronised absl::flat_hash_map (find, compare, erase).
void BM_FlatHashMap_ApplyDrops(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  absl::flat_hash_map<std::string, Row> map;
  map.reserve(rows);
  const auto& pool = names();
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < rows; ++i)
    keys.push_back(i < pool.size() ? pool[i] : name_id(i).str());
  const std::vector<std::uint32_t> order = shuffled_rows(rows);
  std::uint64_t round = 0;
  std::vector<std::pair<const std::string*, std::string>> msgs;
  auto refill = [&] {
    ++round;
    msgs.clear();
    for (std::size_t i = 0; i < rows; ++i)
      map.insert_or_assign(keys[i], Row{ver(2 * round).str(), value_bytes()});
    for (std::uint32_t i : order) msgs.emplace_back(&keys[i], ver(2 * round + 1).str());
  };
  apply_batches(
      state, [&] { return msgs.size(); }, refill,
      [&](std::size_t at) {
        std::uint64_t applied = 0;
        for (std::size_t j = at; j < at + kDropBatch; ++j) {
          auto it = map.find(*msgs[j].first);
          if (it != map.end() && echo::table::newer(msgs[j].second, it->second.version)) {
            map.erase(it);
            ++applied;
          }
        }
        return applied;
      });
}
#endif

}  // namespace l1_map_bench
