// SPDX-License-Identifier: MIT
// Benchmarks of the L1 map with their baselines in the same binary (docs/architecture.md,
// "Measuring"): `get` on a hit (1 and 2 reader threads, writer idle or churning >= 1M drops/s)
// against std::unordered_map under std::shared_mutex and an unsynchronised read-only
// absl::flat_hash_map; the writer's apply throughput against absl::flat_hash_map
// find+compare+erase; memory per row for 1M rows. p50/p99 are per-get latencies averaged over runs
// of 16 gets (one clock read per 16 gets).
#include <benchmark/benchmark.h>
#include <echo/base/counter.h>
#include <echo/table/l1_map.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#if __has_include(<absl/container/flat_hash_map.h>)
#include <absl/container/flat_hash_map.h>
#define ECHO_HAVE_ABSL 1
#endif

namespace {

using echo::table::BrandedId;
using echo::table::CoherenceMessage;
using echo::table::Eviction;
using echo::table::InsertVerdict;
using echo::table::L1Config;
using echo::table::L1Map;
using echo::table::Verdict;

constexpr std::size_t kRows = 100'000;  // rows in the read benchmarks; half read, half churned
constexpr std::size_t kValueSize = 64;
constexpr std::int64_t kChurnPerMs = 1'500;  // target drops per ms while churning (1.5M/s)
constexpr std::size_t kOrder = 1 << 16;      // shuffled read order, indices into the read half

BrandedId name_id(std::uint64_t n) { return *BrandedId::encode("USR", 3'000'000 + n); }
BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 8'000'000'000 + n); }

const std::vector<std::string>& names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kRows; ++i) out.push_back(name_id(i).str());
    return out;
  }();
  return v;
}
const std::vector<std::uint32_t>& read_order() {
  static const std::vector<std::uint32_t> v = [] {
    std::vector<std::uint32_t> out(kOrder);
    std::mt19937 rng(1);
    for (auto& x : out) x = static_cast<std::uint32_t>(rng() % (kRows / 2));
    return out;
  }();
  return v;
}
const std::string& value_bytes() {
  static const std::string v(kValueSize, 'v');
  return v;
}

// Allocations made by reader threads inside a counted read loop (operator new below counts).
std::atomic<std::uint64_t> g_allocations{0};
thread_local bool t_counting = false;
void set_counting(bool on) noexcept { t_counting = on; }

// Runs `get_one(i)` per iteration and records per-get latency in runs of 16; reports p50/p99
// (averaged over threads) and items processed.
template <class F>
void read_loop(benchmark::State& state, F&& get_one, bool count_allocations = false) {
  std::vector<float> samples;
  samples.reserve(1 << 20);
  std::uint64_t i = static_cast<std::uint64_t>(state.thread_index()) * 7919;
  std::uint64_t hits = 0;
  int k = 0;
  auto t0 = std::chrono::steady_clock::now();
  set_counting(count_allocations);
  for (auto _ : state) {
    hits += get_one(read_order()[i++ & (kOrder - 1)]);
    if (++k == 16) {
      const auto t1 = std::chrono::steady_clock::now();
      if (samples.size() < samples.capacity()) {
        samples.push_back(std::chrono::duration<float, std::nano>(t1 - t0).count() / 16.0f);
      }
      t0 = t1;
      k = 0;
    }
  }
  set_counting(false);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  if (samples.empty()) return;
  std::sort(samples.begin(), samples.end());
  const auto avg = benchmark::Counter::kAvgThreads;
  state.counters["p50_ns"] = benchmark::Counter(samples[samples.size() / 2], avg);
  state.counters["p99_ns"] = benchmark::Counter(samples[samples.size() * 99 / 100], avg);
  state.counters["hit_ratio"] =
      benchmark::Counter(static_cast<double>(hits) / static_cast<double>(state.iterations()), avg);
}

// Between a fixture's writer thread and the benchmarks: ChurnScope sets `mode` (0 idle, 1 churn);
// the writer says when its fill is done and counts the rows its churn dropped.
struct WriterSwitch {
  std::atomic<int> mode{0};
  std::atomic<bool> ready{false};
  std::atomic<std::uint64_t> drops{0};

  void filled() noexcept { ready.store(true, std::memory_order_release); }
  void wait_ready() const noexcept {
    while (!ready.load(std::memory_order_acquire)) std::this_thread::yield();  // pairs: filled()
  }
  void count_drop() noexcept {  // the writer is the only one adding
    echo::base::solo_add(drops);
  }
};

// A fixture's writer loop after the fill, until `stop`: idle (calling `idle`, then sleeping
// 200 us) while the mode is 0; while it is 1, `churn_one(row, version)` kChurnPerMs times per
// millisecond over the churn half (never a key a reader reads), versions ever newer.
template <class Idle, class ChurnOne>
void churn_loop(const WriterSwitch& sw, std::stop_token stop, Idle idle, ChurnOne churn_one) {
  std::uint64_t v = 1;
  std::size_t next = kRows / 2;
  auto slot = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    if (sw.mode.load(std::memory_order_acquire) == 0) {  // pairs with ChurnScope's stores
      idle();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      slot = std::chrono::steady_clock::now();
      continue;
    }
    for (std::int64_t j = 0; j < kChurnPerMs; ++j) {
      churn_one(next, v);
      ++v;
      if (++next == kRows) next = kRows / 2;
    }
    slot += std::chrono::milliseconds(1);
    std::this_thread::sleep_until(slot);
  }
}

// ---- The L1 map, with a writer thread that owns it for its whole life (debug builds check).

struct L1Fixture {
  explicit L1Fixture(echo::table::MonotonicClock clock)
      : map([clock] {
          L1Config c;
          c.max_size = kRows;
          c.ttl_ms = 3'600'000;
          c.clock = clock;
          return c;
        }()) {}
  L1Map map;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    std::vector<BrandedId> ids;
    for (std::size_t i = 0; i < kRows; ++i) ids.push_back(name_id(i));
    for (std::size_t i = 0; i < kRows; ++i) map.put(ids[i], value_bytes(), ver(0));
    sw.filled();
    // Drop + re-insert, paced per millisecond.
    churn_loop(
        sw, stop, [this] { map.reclaim(); },
        [&](std::size_t row, std::uint64_t v) {
          if (map.apply_coherence(ids[row], ver(v)) == Verdict::kApplied) sw.count_drop();
          map.put(ids[row], value_bytes(), ver(v));
        });
  }
};

L1Fixture& l1_fixture() {
  static L1Fixture f(&echo::table::steady_clock_ms);
  f.sw.wait_ready();
  return f;
}
L1Fixture& l1_coarse_fixture() {
  static L1Fixture f(&echo::table::coarse_monotonic_ms);
  f.sw.wait_ready();
  return f;
}

// Thread 0 switches the writer's mode before the loop (the loop start is a barrier for every
// benchmark thread) and reports the achieved drop rate after it.
struct ChurnScope {
  benchmark::State& state;
  std::atomic<int>& mode;
  std::atomic<std::uint64_t>& drops;
  std::uint64_t drops0 = 0;
  std::chrono::steady_clock::time_point t0;
  ChurnScope(benchmark::State& s, WriterSwitch& sw, bool churn)
      : state(s), mode(sw.mode), drops(sw.drops) {
    if (state.thread_index() != 0) return;
    mode.store(churn ? 1 : 0, std::memory_order_release);  // pairs with the writer's acquire
    drops0 = drops.load(std::memory_order_relaxed);
    t0 = std::chrono::steady_clock::now();
    if (churn) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // writer is running
  }
  void finish() {
    if (state.thread_index() != 0) return;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.counters["writer_drops_per_s"] =
        static_cast<double>(drops.load(std::memory_order_relaxed) - drops0) / secs;
    mode.store(0, std::memory_order_release);
  }
};

// A hit through L1Map::get into a std::string, on `f`'s map.
void get_hit(benchmark::State& state, L1Fixture& f) {
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) { return f.map.get(n[i], value); });
  churn.finish();
}

void BM_L1Map_GetHit(benchmark::State& state) { get_hit(state, l1_fixture()); }

// The same hit on a map whose clock is CLOCK_MONOTONIC_COARSE (L1Config.clock).
void BM_L1Map_GetHitCoarse(benchmark::State& state) { get_hit(state, l1_coarse_fixture()); }

// The same hit with the caller's clock reading (one per batch, as a writer loop would) and a
// caller buffer: the map's own cost without CLOCK_MONOTONIC.
void BM_L1Map_GetHitAt(benchmark::State& state) {
  L1Fixture& f = l1_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  char buf[kValueSize];
  const std::int64_t now = f.map.now();
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    return f.map.read_at(n[i], buf, now).status == echo::table::ReadStatus::kHit;
  });
  churn.finish();
}

// ---- Baseline 1: std::unordered_map under std::shared_mutex, same churn under unique_lock.

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
struct Row {
  std::string version;
  std::string value;
};

struct SharedFixture {
  std::unordered_map<std::string, Row, TransparentHash, std::equal_to<>> map;
  mutable std::shared_mutex mu;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    const auto& n = names();
    {
      std::unique_lock lock(mu);
      map.reserve(kRows);
      for (const auto& s : n) map.emplace(s, Row{ver(0).str(), value_bytes()});
    }
    sw.filled();
    churn_loop(
        sw, stop, [] {},
        [&](std::size_t row, std::uint64_t v) {
          const std::string vs = ver(v).str();
          {
            std::unique_lock lock(mu);
            auto it = map.find(n[row]);
            if (it != map.end() && echo::table::newer(vs, it->second.version)) {
              map.erase(it);
              sw.count_drop();
            }
          }
          {
            std::unique_lock lock(mu);
            map.insert_or_assign(n[row], Row{vs, value_bytes()});
          }
        });
  }
};

SharedFixture& shared_fixture() {
  static SharedFixture f;
  f.sw.wait_ready();
  return f;
}

void BM_SharedMutexMap_GetHit(benchmark::State& state) {
  SharedFixture& f = shared_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    std::shared_lock lock(f.mu);
    auto it = f.map.find(std::string_view(n[i]));
    if (it == f.map.end()) return false;
    value.assign(it->second.value);
    return true;
  });
  churn.finish();
}

// ---- Typed rows: a struct decoded once by the writer, read in place by a callback, under natural
// (text) keys, against absl::flat_hash_map<std::string, Quote>::find + reading the struct. The
// map's clock is CLOCK_MONOTONIC_COARSE, as the engine's tables use it.

struct Quote {
  double bid;
  double ask;
  std::int64_t ts;
  std::int32_t size;
  char venue[4];
};
static_assert(std::is_trivially_copyable_v<Quote>);

// Symbols of 4..8 bytes ("S0", padded): the text keys of docs/wire.md, "Text keys".
const std::vector<std::string>& symbols() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kRows; ++i) out.push_back("Q" + std::to_string(i * 7 + 1000));
    return out;
  }();
  return v;
}
std::string quote_bytes(std::uint64_t v) {
  Quote q{100.0 + static_cast<double>(v % 100),
          100.5,
          static_cast<std::int64_t>(v),
          100,
          {'X', 'N', 'Y', 'S'}};
  return std::string(reinterpret_cast<const char*>(&q), sizeof q);
}
// The struct's whole read: what a caller of either map does with the row.
double use(const Quote& q) noexcept { return q.bid + q.ask + static_cast<double>(q.ts + q.size); }

struct TypedFixture {
  TypedFixture()
      : map([] {
          L1Config c;
          c.max_size = kRows;
          c.ttl_ms = 3'600'000;
          c.clock = &echo::table::coarse_monotonic_ms;  // the engine's default, L1Clock::kWriter
          c.read_clock = echo::table::ReadClock::kPublished;
          c.layout.size = sizeof(Quote);
          c.layout.align = alignof(Quote);
          c.layout.decode = [](std::string_view bytes, void* at, std::string& why) {
            if (bytes.size() != sizeof(Quote)) {
              why = "size";
              return false;
            }
            std::memcpy(at, bytes.data(), sizeof(Quote));
            return true;
          };
          return c;
        }()) {}
  L1Map map;
  WriterSwitch sw;
  std::jthread writer{[this](std::stop_token stop) { run(stop); }};  // last: stops and joins first

  void run(std::stop_token stop) {
    const auto& n = symbols();
    const std::string q0 = quote_bytes(0);
    for (std::size_t i = 0; i < kRows; ++i) map.put(n[i], q0, ver(0));
    sw.filled();
    const std::string q1 = quote_bytes(1);
    churn_loop(
        sw, stop,
        [this] {
          map.reclaim();
          (void)map.tick();
        },
        [&](std::size_t row, std::uint64_t v) {
          if (map.apply_coherence(n[row], ver(v)) == Verdict::kApplied) sw.count_drop();
          map.put(n[row], q1, ver(v));
          if (row % 1024 == 0) (void)map.tick();  // an engine writer ticks each pass
        });
  }
};

TypedFixture& typed_fixture() {
  static TypedFixture f;
  f.sw.wait_ready();
  return f;
}

// Runs the read loop and reports the allocations it made per read (0 is the goal).
template <class F>
void counted_read_loop(benchmark::State& state, F&& get_one) {
  const std::uint64_t a0 = g_allocations.load(std::memory_order_relaxed);
  read_loop(state, std::forward<F>(get_one), /*count_allocations=*/true);
  if (state.thread_index() == 0) {
    state.counters["allocs_per_read"] =
        static_cast<double>(g_allocations.load(std::memory_order_relaxed) - a0) /
        static_cast<double>(state.iterations());
  }
}

// The zero-copy typed hit: L1Map::visit runs the callback on the row's Quote in place.
void BM_L1Map_TypedHit(benchmark::State& state) {
  TypedFixture& f = typed_fixture();
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  const auto& n = symbols();
  double sink = 0;
  counted_read_loop(state, [&](std::uint32_t i) {
    return f.map.visit(n[i], [&](std::string_view value, std::string_view) {
      sink += use(*reinterpret_cast<const Quote*>(value.data()));
    });
  });
  benchmark::DoNotOptimize(sink);
  churn.finish();
}

#ifdef ECHO_HAVE_ABSL
// Baseline: the same keys and struct in an unsynchronised absl::flat_hash_map (no writer may
// run: the churn argument only keeps the runs' names parallel; the writer churns the L1 map's
// other half, which this map does not share).
void BM_FlatHashMap_TypedHit(benchmark::State& state) {
  static const absl::flat_hash_map<std::string, Quote> map = [] {
    absl::flat_hash_map<std::string, Quote> m;
    const std::string q = quote_bytes(0);
    for (const auto& s : symbols()) {
      Quote v;
      std::memcpy(&v, q.data(), sizeof v);
      m.emplace(s, v);
    }
    return m;
  }();
  TypedFixture& f = typed_fixture();  // its writer churns when asked: the same machine load
  ChurnScope churn(state, f.sw, state.range(0) != 0);
  const auto& n = symbols();
  double sink = 0;
  counted_read_loop(state, [&](std::uint32_t i) {
    auto it = map.find(n[i]);
    if (it == map.end()) return false;
    sink += use(it->second);
    return true;
  });
  benchmark::DoNotOptimize(sink);
  churn.finish();
}
#endif

#ifdef ECHO_HAVE_ABSL
// ---- Baseline 2: an unsynchronised absl::flat_hash_map, read-only (no writer can run).
void BM_FlatHashMap_GetHit(benchmark::State& state) {
  static const absl::flat_hash_map<std::string, Row> map = [] {
    absl::flat_hash_map<std::string, Row> m;
    for (const auto& s : names()) m.emplace(s, Row{ver(0).str(), value_bytes()});
    return m;
  }();
  std::string value;
  value.reserve(kValueSize);
  const auto& n = names();
  read_loop(state, [&](std::uint32_t i) {
    auto it = map.find(n[i]);
    if (it == map.end()) return false;
    value.assign(it->second.value);
    return true;
  });
}
#endif

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

// ---- Memory per row beyond the value bytes, 1M rows of 64-byte values (malloc's own count).

// Bytes malloc hands out: small-block arenas plus mmap'd blocks (large tables, 2 MiB chunks).
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void BM_L1Map_MemoryPerRow(benchmark::State& state) {
  constexpr std::size_t kN = 1'000'000;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    L1Config c;
    c.max_size = kN;
    c.ttl_ms = 3'600'000;
    auto map = std::make_unique<L1Map>(c);
    for (std::size_t i = 0; i < kN; ++i) map->put(name_id(i), value_bytes(), ver(1));
    const std::size_t after = heap_in_use();
    const double n = static_cast<double>(kN);
    const double heap = static_cast<double>(after - before) - n * kValueSize;
    state.counters["heap_bytes_per_row"] = heap / n;  // index + headers + tombstones + malloc
    state.counters["accounted_bytes_per_row"] =
        (static_cast<double>(map->memory_bytes() - map->value_bytes())) / n;
    state.counters["index_bytes_per_row"] = static_cast<double>(map->bucket_count() * 8) / n;
    state.SetItemsProcessed(static_cast<std::int64_t>(kN));
  }
}

// A baseline's heap per row: 1M string-keyed rows in a `Map` (reserved up front).
template <class Map>
void string_map_memory_per_row(benchmark::State& state) {
  constexpr std::size_t kN = 1'000'000;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    auto map = std::make_unique<Map>();
    map->reserve(kN);
    for (std::size_t i = 0; i < kN; ++i)
      map->emplace(name_id(i).str(), Row{ver(1).str(), value_bytes()});
    const std::size_t after = heap_in_use();
    const double n = static_cast<double>(kN);
    state.counters["heap_bytes_per_row"] =
        (static_cast<double>(after - before) - n * kValueSize) / n;
    state.SetItemsProcessed(static_cast<std::int64_t>(kN));
  }
}

#ifdef ECHO_HAVE_ABSL
void BM_FlatHashMap_MemoryPerRow(benchmark::State& state) {
  string_map_memory_per_row<absl::flat_hash_map<std::string, Row>>(state);
}
#endif

void BM_SharedMutexMap_MemoryPerRow(benchmark::State& state) {
  string_map_memory_per_row<std::unordered_map<std::string, Row>>(state);
}

// The read benchmarks' runs: arg 0 writer idle, 1 writer churning (drop + re-insert) at ~1.5M
// drops/s; 1 and 2 reader threads; real time.
void churn_and_readers(benchmark::internal::Benchmark* b) {
  b->ArgName("churn")->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();
}
BENCHMARK(BM_L1Map_GetHit)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_GetHitCoarse)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_GetHitAt)->Apply(churn_and_readers);
BENCHMARK(BM_SharedMutexMap_GetHit)->Apply(churn_and_readers);
BENCHMARK(BM_L1Map_TypedHit)->Apply(churn_and_readers);
#ifdef ECHO_HAVE_ABSL
BENCHMARK(BM_FlatHashMap_TypedHit)->Apply(churn_and_readers);
#endif
#ifdef ECHO_HAVE_ABSL
BENCHMARK(BM_FlatHashMap_GetHit)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_FlatHashMap_ApplyDrops)->ArgName("rows")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_FlatHashMap_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_L1Map_ApplyDrops)
    ->ArgNames({"rows", "evict", "batched"})
    ->ArgsProduct({{10'000, 1'000'000}, {0, 1, 2, 3}, {0, 1}});
BENCHMARK(BM_L1Map_FillEvicting)
    ->ArgNames({"rows", "evict", "full"})
    ->ArgsProduct({{10'000, 1'000'000}, {1, 2, 3}, {0, 1}});
BENCHMARK(BM_L1Map_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SharedMutexMap_MemoryPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

// Counts the reader threads' allocations inside counted loops (allocs_per_read: the timed loop
// only, the samples' buffer is reserved before it); the default behaviour otherwise.
void* operator new(std::size_t n) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC 12 takes free() in a replaced operator delete for a mismatch (-Wmismatched-new-delete):
// the replacement operator new above allocates with malloc, so free is the match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

BENCHMARK_MAIN();
