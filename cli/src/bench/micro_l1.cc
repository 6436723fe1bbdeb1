// SPDX-License-Identifier: MIT
// `echostore bench`'s L1 rows (run_micro, micro.cc, runs them between the ring's and RESP3's): the
// L1 get against an unsynchronised flat map (writer idle) and a std::shared_mutex map (both under
// the same paced writer churn), and the typed hit read in place against a flat map's find.
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "bench/micro.h"

#if __has_include(<absl/container/flat_hash_map.h>) && defined(ECHO_BENCH_HAVE_ABSL)
#include <absl/container/flat_hash_map.h>
#define ECHO_FLAT_MAP absl::flat_hash_map
#define ECHO_FLAT_MAP_NAME "absl::flat_hash_map"
#else
#define ECHO_FLAT_MAP std::unordered_map
#define ECHO_FLAT_MAP_NAME "std::unordered_map"
#endif

namespace echo::cli::bench {
namespace {

using table::BrandedId;

// ---- L1: the map's writer thread owns it; readers are this thread. ----

constexpr std::size_t kRows = 50'000;  // half read, half churned
constexpr std::size_t kValueSize = 64;
constexpr int kChurnPerMs = 200;  // drop + re-put pairs per millisecond while churning (200k/s)

BrandedId row_name(std::uint64_t n) { return *BrandedId::encode("USR", 3'000'000 + n); }
BrandedId row_version(std::uint64_t n) { return *BrandedId::encode("TXN", 8'000'000'000 + n); }

// A writer thread that fills a map, then idles or churns the second half of the rows (never a
// row a reader reads) at kChurnPerMs, paced per millisecond, until destroyed.
class Churner {
 public:
  // `fill()` runs first on the writer thread; `churn(row, version)` then runs per drop+re-put,
  // and `tick()` at least every millisecond, churning or idle (an engine writer's pass).
  template <class Fill, class Churn, class Tick = void (*)()>
  Churner(
      Fill fill, Churn churn, int per_ms = kChurnPerMs, Tick tick = [] {})
      : thread_([this, fill, churn, per_ms, tick]() mutable {
          fill();
          ready_.store(true, std::memory_order_release);  // pairs with wait_ready's acquire
          std::uint64_t v = 1;
          std::size_t next = kRows / 2;
          auto slot = Clock::now();
          for (;;) {
            const int m = mode_.load(std::memory_order_acquire);  // pairs with set_churn's store
            if (m == kQuit) break;
            tick();
            if (m == kIdle) {
              std::this_thread::sleep_for(std::chrono::microseconds(200));
              slot = Clock::now();
              continue;
            }
            for (int j = 0; j < per_ms; ++j) {
              churn(next, v++);
              if (++next == kRows) next = kRows / 2;
            }
            slot += std::chrono::milliseconds(1);
            std::this_thread::sleep_until(slot);
          }
        }) {
    while (!ready_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  ~Churner() {
    mode_.store(kQuit, std::memory_order_release);
    thread_.join();
  }
  Churner(const Churner&) = delete;
  Churner& operator=(const Churner&) = delete;
  void set_churn(bool on) { mode_.store(on ? kChurn : kIdle, std::memory_order_release); }

 private:
  static constexpr int kIdle = 0, kChurn = 1, kQuit = 2;
  std::atomic<int> mode_{kIdle};
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

struct Row2 {
  std::string version, value;
};
struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using SharedMap = std::unordered_map<std::string, Row2, TransparentHash, std::equal_to<>>;

struct L1Fixtures {
  std::vector<std::string> names;
  std::vector<std::uint32_t> order;  // shuffled reads into the first half
  std::string value = std::string(kValueSize, 'v');

  table::L1Map l1{[] {
    table::L1Config c;
    c.max_size = kRows;
    c.ttl_ms = 3'600'000;
    return c;
  }()};
  std::unique_ptr<Churner> l1_writer;

  SharedMap shared;
  std::shared_mutex shared_mu;
  std::unique_ptr<Churner> shared_writer;

  ECHO_FLAT_MAP<std::string, Row2> flat;

  L1Fixtures() {
    for (std::size_t i = 0; i < kRows; ++i) names.push_back(row_name(i).str());
    order.resize(1 << 16);
    std::mt19937 rng(1);
    for (auto& x : order) x = static_cast<std::uint32_t>(rng() % (kRows / 2));
    l1_writer = std::make_unique<Churner>(
        [this] {
          for (std::size_t i = 0; i < kRows; ++i) l1.put(row_name(i), value, row_version(0));
        },
        [this](std::size_t row, std::uint64_t v) {
          const BrandedId id = row_name(row);
          (void)l1.apply_coherence(id, row_version(v));
          l1.put(id, value, row_version(v));
        });
    shared_writer = std::make_unique<Churner>(
        [this] {
          std::unique_lock lock(shared_mu);
          shared.reserve(kRows);
          for (const auto& n : names) shared.emplace(n, Row2{row_version(0).str(), value});
        },
        [this](std::size_t row, std::uint64_t v) {
          const std::string vs = row_version(v).str();
          {
            std::unique_lock lock(shared_mu);
            auto it = shared.find(std::string_view(names[row]));
            if (it != shared.end() && table::newer(vs, it->second.version)) shared.erase(it);
          }
          std::unique_lock lock(shared_mu);
          shared.insert_or_assign(names[row], Row2{vs, value});
        });
    for (std::size_t i = 0; i < kRows / 2; ++i)
      flat.emplace(names[i], Row2{row_version(0).str(), value});
  }
};

// ---- Typed rows: a struct decoded once by the writer and read in place under text keys, against
// the same struct found in a flat map by the same keys.

struct Quote {
  double bid, ask;
  std::int64_t ts;
  std::int32_t size;
  char venue[4];
};
constexpr int kTypedChurnPerMs = 1'000;  // drop + re-put pairs per millisecond (1M drops/s)

std::string quote_bytes(std::uint64_t v) {
  const Quote q{100.0 + static_cast<double>(v % 100),
                100.5,
                static_cast<std::int64_t>(v),
                100,
                {'X', 'N', 'Y', 'S'}};
  return std::string(reinterpret_cast<const char*>(&q), sizeof q);
}

struct TypedFixtures {
  std::vector<std::string> symbols;  // "Q1000", "Q1007", ...: text keys of 5-6 bytes
  std::vector<std::uint32_t> order;
  table::L1Map l1{[] {
    table::L1Config c;
    c.max_size = kRows;
    c.ttl_ms = 3'600'000;
    // As the engine's tables read it by default (L1Clock::kWriter): the writer's coarse time.
    c.clock = &table::coarse_monotonic_ms;
    c.read_clock = table::ReadClock::kPublished;
    c.layout.size = sizeof(Quote);
    c.layout.align = alignof(Quote);
    c.layout.decode = [](std::string_view bytes, void* at, std::string&) {
      if (bytes.size() != sizeof(Quote)) return false;
      std::memcpy(at, bytes.data(), sizeof(Quote));
      return true;
    };
    return c;
  }()};
  std::unique_ptr<Churner> writer;
  ECHO_FLAT_MAP<std::string, Quote> flat;

  TypedFixtures() {
    for (std::size_t i = 0; i < kRows; ++i) symbols.push_back("Q" + std::to_string(1000 + 7 * i));
    order.resize(1 << 16);
    std::mt19937 rng(1);
    for (auto& x : order) x = static_cast<std::uint32_t>(rng() % (kRows / 2));
    const std::string q0 = quote_bytes(0), q1 = quote_bytes(1);
    writer = std::make_unique<Churner>(
        [this, q0] {
          for (std::size_t i = 0; i < kRows; ++i) l1.put(symbols[i], q0, row_version(0));
        },
        [this, q1](std::size_t row, std::uint64_t v) {
          (void)l1.apply_coherence(symbols[row], row_version(v));
          l1.put(symbols[row], q1, row_version(v));
        },
        kTypedChurnPerMs, [this] { (void)l1.tick(); });
    // Every row the L1 map holds (the churned half too): the same table size for both.
    for (std::size_t i = 0; i < kRows; ++i) {
      Quote q;
      std::memcpy(&q, q0.data(), sizeof q);
      flat.emplace(symbols[i], q);
    }
  }
};

// Seconds for reads [from, from + n) of the shuffled order, each using the whole struct; throws
// on a miss.
template <class Read>
double read_seconds(const TypedFixtures& f, std::uint64_t from, std::uint64_t n, Read read) {
  double sum = 0;
  std::uint64_t hits = 0;
  const auto t0 = Clock::now();
  for (std::uint64_t i = from; i < from + n; ++i) {
    hits += read(f.symbols[f.order[i & 0xFFFF]], [&sum](const Quote& q) {
      sum += q.bid + q.ask + static_cast<double>(q.ts + q.size + q.venue[0]);
    });
  }
  const double secs = seconds_since(t0);
  if (hits != n || sum <= 0) throw std::runtime_error("a typed read missed a row");
  return secs;
}

// Microseconds per read of `ours` and of `base`, each over `n` reads taken in 4 alternating
// slices (ours, base, base, ours), so both sample the same stretches of a VM whose speed drifts
// within a round. Slices of n/4 reads (32-128 Ki, against 25 Ki rows read) leave each map
// mostly warm: 16 slices measured each map just after the other had evicted it from the L2.
template <class Ours, class Base>
std::pair<double, double> paired_read_us(const TypedFixtures& f, std::uint64_t n, Ours ours,
                                         Base base) {
  constexpr std::uint64_t kSlices = 4;
  const std::uint64_t slice = std::max<std::uint64_t>(1, n / kSlices);
  double a = 0, b = 0;
  for (std::uint64_t k = 0; k < kSlices; ++k) {
    const std::uint64_t from = k * slice;
    if (k % 2 == 0) {
      a += read_seconds(f, from, slice, ours);
      b += read_seconds(f, from, slice, base);
    } else {
      b += read_seconds(f, from, slice, base);
      a += read_seconds(f, from, slice, ours);
    }
  }
  const double reads = static_cast<double>(slice * kSlices);
  return {a * 1e6 / reads, b * 1e6 / reads};
}

// Microseconds per get over `n` gets in the shuffled order; throws on a miss (every read row is
// present and never churned).
template <class Get>
double per_get_us(const L1Fixtures& f, std::uint64_t n, Get get) {
  std::string out;
  out.reserve(kValueSize);
  std::uint64_t hits = 0;
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < n; ++i) hits += get(f.names[f.order[i & 0xFFFF]], out) ? 1 : 0;
  const double us = seconds_since(t0) * 1e6 / static_cast<double>(n);
  if (hits != n || out.size() != kValueSize) throw std::runtime_error("an L1 read missed a row");
  return us;
}

}  // namespace

void run_micro_l1(const BenchConfig& c, Progress& progress, std::vector<Row>& rows) {
  const std::string reader =
      placement_of(c, "reader: the bench thread; the map's writer: one thread", false);
  Row flat = make_row("l1_vs_flat_map", "L1 get hit, writer idle", "L1Map::get",
                      ECHO_FLAT_MAP_NAME " (unsynchronised)", "us", false, reader);
  Row shared =
      make_row("l1_vs_shared_mutex", "L1 get hit, writer churning 200k drops/s", "L1Map::get",
               "std::unordered_map + std::shared_mutex", "us", false, reader);
  {
    L1Fixtures f;
    const std::uint64_t n = c.gets;
    auto l1_get = [&](const std::string& name, std::string& out) { return f.l1.get(name, out); };
    for (int r = 0; r < c.rounds; ++r) {
      progress.step("L1 get vs flat map and shared_mutex map", r, c.rounds);
      flat.ours_rounds.push_back(per_get_us(f, n, l1_get));
      flat.base_rounds.push_back(per_get_us(f, n, [&](const std::string& name, std::string& out) {
        auto it = f.flat.find(name);
        if (it == f.flat.end()) return false;
        out.assign(it->second.value);
        return true;
      }));
      f.l1_writer->set_churn(true);
      shared.ours_rounds.push_back(per_get_us(f, n, l1_get));
      f.l1_writer->set_churn(false);
      f.shared_writer->set_churn(true);
      shared.base_rounds.push_back(per_get_us(f, n, [&](const std::string& name, std::string& out) {
        std::shared_lock lock(f.shared_mu);
        auto it = f.shared.find(std::string_view(name));
        if (it == f.shared.end()) return false;
        out.assign(it->second.value);
        return true;
      }));
      f.shared_writer->set_churn(false);
    }
  }
  rows.push_back(std::move(flat));
  rows.push_back(std::move(shared));

  Row typed =
      make_row("l1_typed_hit_vs_flat_map",
               "typed L1 hit in place (text key, 32 B struct), "
               "writer idle",
               "L1Map::visit", ECHO_FLAT_MAP_NAME "::find (unsynchronised)", "us", false, reader);
  Row typed_churn = make_row("l1_typed_hit_churn_vs_flat_map",
                             "typed L1 hit in place, writer churning 1M drops/s", "L1Map::visit",
                             ECHO_FLAT_MAP_NAME "::find (unsynchronised)", "us", false, reader);
  {
    TypedFixtures f;
    const std::uint64_t n = c.gets;
    auto visit = [&f](const std::string& key, auto use) {
      return f.l1.visit(key, [&use](std::string_view value, std::string_view) {
        use(*std::launder(reinterpret_cast<const Quote*>(value.data())));
      });
    };
    auto find = [&f](const std::string& key, auto use) {
      auto it = f.flat.find(key);
      if (it == f.flat.end()) return false;
      use(it->second);
      return true;
    };
    for (int r = 0; r < c.rounds; ++r) {
      progress.step("typed L1 hit vs flat map", r, c.rounds);
      const auto [idle_ours, idle_base] = paired_read_us(f, n, visit, find);
      typed.ours_rounds.push_back(idle_ours);
      typed.base_rounds.push_back(idle_base);
      f.writer->set_churn(true);
      const auto [churn_ours, churn_base] = paired_read_us(f, n, visit, find);
      typed_churn.ours_rounds.push_back(churn_ours);
      typed_churn.base_rounds.push_back(churn_base);
      f.writer->set_churn(false);
    }
  }
  rows.push_back(std::move(typed));
  rows.push_back(std::move(typed_churn));
}

}  // namespace echo::cli::bench
