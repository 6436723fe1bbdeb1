// SPDX-License-Identifier: MIT
// The in-process rows of `echostore bench`: the ring against boost::lockfree::spsc_queue and
// moodycamel::ReaderWriterQueue (two threads, every item checked in order), the L1 hit against
// an unsynchronised flat map (writer idle) and a std::shared_mutex map (both under the same
// paced writer churn), and the RESP decoder against hiredis's reader on the same bytes. The
// bench/ binaries hold the finer-grained versions of each; these are the side-by-side summary.
#include <echo/base/cache_line.h>
#include <echo/io/resp3_decoder.h>
#include <echo/ring/spsc_ring.h>
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>
#include <hiredis/hiredis.h>
#include <readerwriterqueue/readerwriterqueue.h>

#include <algorithm>
#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <shared_mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench.h"

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

using Clock = std::chrono::steady_clock;
using table::BrandedId;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- Ring: the producer is this thread, the consumer a std::thread checking order. ----

constexpr std::size_t kProducerChunk = 64;  // what one io-thread read decodes, at most

// Polls with pause, then yields: how the baselines' consumer and every full producer wait (the
// ring's consumer waits by its own strategy instead; that is what --wait tunes).
struct Backoff {
  unsigned spins = 0;
  void idle() {
    if (++spins > 64) std::this_thread::yield();
    ring::cpu_relax();
  }
  void reset() { spins = 0; }
};

// Runs `items` through a queue: `push(first, n)` publishes first..first+n-1 and returns how many
// it took; `pop(check)` hands items to check and returns how many; `wait()` is the consumer's
// idle step. Returns items per second; throws when an item arrives out of order.
template <class Push, class Pop, class Wait>
double two_threads(std::uint64_t items, std::size_t chunk, Push push, Pop pop, Wait wait) {
  std::atomic<bool> wrong{false};
  const auto t0 = Clock::now();
  std::thread consumer([&] {
    std::uint64_t next = 0;
    bool ok = true;
    auto check = [&](std::uint64_t v) noexcept {
      ok = ok && v == next;
      ++next;
    };
    while (next < items) {
      if (pop(check) == 0) wait();
    }
    if (!ok) wrong.store(true, std::memory_order_relaxed);  // read after join
  });
  Backoff full;
  for (std::uint64_t i = 0; i < items;) {
    const std::size_t n =
        push(i, static_cast<std::size_t>(std::min<std::uint64_t>(chunk, items - i)));
    if (n == 0) {
      full.idle();
    } else {
      full.reset();
      i += n;
    }
  }
  consumer.join();
  const double secs = seconds_since(t0);
  if (wrong.load(std::memory_order_relaxed)) throw std::runtime_error("a queue reordered items");
  return static_cast<double>(items) / secs;
}

ring::RingConfig ring_config(const BenchConfig& c) {
  ring::RingConfig r;
  r.capacity = c.ring_capacity;
  // The ring's own default spin budget before the strategy proper (RingConfig), as the bench/
  // binaries run it; the lane rows keep the writer's (TableSpec::writer_wait, spin 0).
  r.consumer_wait = {c.wait, ring::WaitConfig{}.spin_budget};  // and the default gather
  return r;
}

double ring_rate(const BenchConfig& c, std::size_t chunk) {
  ring::SpscRing<std::uint64_t> q(ring_config(c));
  std::uint64_t buf[kProducerChunk];
  return two_threads(
      c.ring_items, chunk,
      [&](std::uint64_t first, std::size_t n) -> std::size_t {
        if (chunk == 1) {  // the 1-item verb, as moodycamel's try_enqueue is theirs
          std::uint64_t v = first;
          return q.try_publish(std::move(v)) ? 1 : 0;
        }
        for (std::size_t i = 0; i < n; ++i) buf[i] = first + i;
        return q.try_publish_batch(std::span<std::uint64_t>(buf, n));
      },
      [&](auto& check) {
        return q.drain(c.max_batch, [&](std::span<std::uint64_t> s) noexcept {
          for (std::uint64_t v : s) check(v);
        });
      },
      // No deadline: the consumer waits only while items are still to come, so a publish always
      // ends the wait (a deadline cost a clock read on every catch-up: the harness's, not the
      // ring's).
      [&] { (void)q.wait_for_work(); });
}

double boost_rate(const BenchConfig& c) {
  boost::lockfree::spsc_queue<std::uint64_t> q(c.ring_capacity);
  std::uint64_t in[kProducerChunk];
  std::vector<std::uint64_t> out(c.max_batch);
  Backoff empty;
  return two_threads(
      c.ring_items, kProducerChunk,
      [&](std::uint64_t first, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) in[i] = first + i;
        return q.push(in, n);  // the prefix that fits
      },
      [&](auto& check) {
        const std::size_t n = q.pop(out.data(), out.size());
        for (std::size_t i = 0; i < n; ++i) check(out[i]);
        if (n != 0) empty.reset();
        return n;
      },
      [&] { empty.idle(); });
}

// The ceiling of a 64-item hand-off between the two cores, in the same harness: no queue, a
// bare array of the ring's capacity; the producer copies its chunk in (the prefix that fits) and
// release-stores its tail; the consumer pause-polls until half the array is filled (or the last
// items are in), then checks all of it and release-stores its head. Each line of items still
// crosses once each way, with the least protocol and the largest batches a ring of this size
// allows: what the items' own cache-line transfers cost here, which no queue gets under.
double bare_rate(const BenchConfig& c) {
  const std::size_t cap = c.ring_capacity, half = std::max<std::size_t>(1, c.ring_capacity / 2);
  const std::uint64_t items = c.ring_items;
  std::vector<std::uint64_t> slots(cap);
  struct alignas(base::kCacheLine) Sequence {
    std::atomic<std::uint64_t> at{0};
  };
  Sequence head, tail;
  std::uint64_t cached_head = 0;  // the producer's
  std::uint64_t in[kProducerChunk];
  // [from, from + n) of the array, as at most two runs (it wraps).
  auto runs = [&](std::uint64_t from, std::size_t n, auto&& fn) {
    const std::size_t first = static_cast<std::size_t>(from % cap), run = std::min(n, cap - first);
    fn(slots.data() + first, run);
    fn(slots.data(), n - run);
  };
  return two_threads(
      items, kProducerChunk,
      [&](std::uint64_t first, std::size_t n) -> std::size_t {
        if (first + n - cached_head > cap) cached_head = head.at.load(std::memory_order_acquire);
        n = std::min<std::size_t>(n, cap - static_cast<std::size_t>(first - cached_head));
        for (std::size_t i = 0; i < n; ++i) in[i] = first + i;
        const std::uint64_t* from = in;
        runs(first, n, [&](std::uint64_t* to, std::size_t k) {
          std::memcpy(to, from, k * sizeof *to);
          from += k;
        });
        if (n != 0) tail.at.store(first + n, std::memory_order_release);
        return n;
      },
      [&](auto& check) -> std::size_t {
        const std::uint64_t h = head.at.load(std::memory_order_relaxed),
                            t = tail.at.load(std::memory_order_acquire);
        if (t - h < half && t != items) return 0;
        runs(h, static_cast<std::size_t>(t - h), [&](std::uint64_t* from, std::size_t k) {
          for (std::size_t i = 0; i < k; ++i) check(from[i]);
        });
        head.at.store(t, std::memory_order_release);
        return static_cast<std::size_t>(t - h);
      },
      [] { ring::cpu_relax(); });
}

double rwq_rate(const BenchConfig& c) {
  moodycamel::ReaderWriterQueue<std::uint64_t> q(c.ring_capacity);
  Backoff empty;
  return two_threads(
      c.ring_items, 1,
      [&](std::uint64_t first, std::size_t) -> std::size_t { return q.try_enqueue(first) ? 1 : 0; },
      [&](auto& check) -> std::size_t {
        std::uint64_t v;
        std::size_t n = 0;
        while (n < c.max_batch && q.try_dequeue(v)) {
          check(v);
          ++n;
        }
        if (n != 0) empty.reset();
        return n;
      },
      [&] { empty.idle(); });
}

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

// ---- RESP decode: the same RESP2 bytes through both, in 16 KiB receives. ----

constexpr std::size_t kFrames = 1024;
constexpr std::size_t kReceive = 16 * 1024;

std::string push_frame() {
  return "*3\r\n$7\r\nmessage\r\n$11\r\necc:{t}:coh\r\n$29\r\nUSR0KHTOWnGLuC:USR0NgWEfAEJfs\r\n";
}

std::string mixed_stream() {
  std::string s;
  for (std::size_t i = 0; i < kFrames; ++i) {
    switch (i % 5) {
      case 0:
        s += push_frame();
        break;
      case 1:
        s += "$100\r\n" + std::string(100, 'v') + "\r\n";
        break;
      case 2:
        s += ":" + std::to_string(i * 7919) + "\r\n";
        break;
      case 3:
        s += "+OK\r\n";
        break;
      default:
        s += "*2\r\n$3\r\nabc\r\n$-1\r\n";
        break;
    }
  }
  return s;
}

double decode_ours(const std::string& bytes, int streams) {
  io::Resp3Decoder dec;
  std::uint64_t frames = 0, types = 0;
  const auto t0 = Clock::now();
  for (int k = 0; k < streams; ++k) {
    for (std::size_t at = 0; at < bytes.size(); at += kReceive) {
      dec.feed(std::string_view(bytes).substr(at, kReceive));
      for (io::Resp3Next r = dec.next(); r.status == io::Resp3Status::value; r = dec.next()) {
        types += static_cast<std::uint64_t>(r.value.type());
        ++frames;
      }
    }
  }
  const double secs = seconds_since(t0);
  if (frames != kFrames * static_cast<std::uint64_t>(streams) || types == 0)
    throw std::runtime_error("the RESP3 decoder lost frames");
  return static_cast<double>(frames) / secs;
}

struct ReaderFree {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

double decode_hiredis(const std::string& bytes, int streams) {
  std::unique_ptr<redisReader, ReaderFree> reader(redisReaderCreate());
  std::uint64_t frames = 0, types = 0;
  const auto t0 = Clock::now();
  for (int k = 0; k < streams; ++k) {
    for (std::size_t at = 0; at < bytes.size(); at += kReceive) {
      redisReaderFeed(reader.get(), bytes.data() + at, std::min(kReceive, bytes.size() - at));
      void* reply = nullptr;
      while (redisReaderGetReply(reader.get(), &reply) == REDIS_OK && reply != nullptr) {
        types += static_cast<std::uint64_t>(static_cast<redisReply*>(reply)->type);
        freeReplyObject(reply);
        ++frames;
      }
    }
  }
  const double secs = seconds_since(t0);
  if (frames != kFrames * static_cast<std::uint64_t>(streams) || types == 0)
    throw std::runtime_error("hiredis's reader lost frames");
  return static_cast<double>(frames) / secs;
}

Row make_row(std::string id, std::string what, std::string ours, std::string base, std::string unit,
             bool higher_better, std::string placement) {
  Row r;
  r.id = std::move(id);
  r.what = std::move(what);
  r.ours = std::move(ours);
  r.baseline = std::move(base);
  r.unit = std::move(unit);
  r.higher_better = higher_better;
  r.placement = std::move(placement);
  return r;
}

}  // namespace

void run_micro(const BenchConfig& c, Progress& progress, std::vector<Row>& rows) {
  const std::string wait(ring::to_string(c.wait));
  const std::string two =
      placement_of(c, "producer: the bench thread; consumer: one thread", false);
  // Each contender's consumer wait, in the row: ours by --wait (park: sleeps on the doorbell's
  // futex once idle; the default adaptive handshake spares the producer the store-load fence while
  // the consumer keeps up), the baselines' by Backoff (they have no wait of their own).
  const ring::WaitConfig w{};
  const std::string handshake =
      c.wait != ring::WaitStrategy::kPark
          ? ""
          : (ring::Doorbell(ring::WaitConfig{c.wait, w.spin_budget}).adaptive()
                 ? ", adaptive handshake"
                 : ", seq_cst handshake (no membarrier here)");
  const std::string ours = "SpscRing (consumer: " + std::to_string(w.spin_budget) +
                           " pause polls, then " + wait + handshake + "; under continuous " +
                           "traffic each wait first pauses " + std::to_string(w.gather) +
                           " times, the gather)";
  const std::string never_sleeps = " (consumer: 64 pause polls, then sched_yield per poll)";
  Row batched = make_row("ring_vs_boost", "ring throughput, 64-item publishes", ours,
                         "boost::lockfree::spsc_queue" + never_sleeps, "ops/s", true, two);
  Row single = make_row("ring_vs_rwq", "ring throughput, 1-item publishes", ours,
                        "moodycamel::ReaderWriterQueue" + never_sleeps, "ops/s", true, two);
  std::vector<double> ceiling;
  for (int r = 0; r < c.rounds; ++r) {
    progress.step("ring vs boost spsc_queue", r, c.rounds);
    batched.ours_rounds.push_back(ring_rate(c, kProducerChunk));
    batched.base_rounds.push_back(boost_rate(c));
    ceiling.push_back(bare_rate(c));
  }
  // The physical bound beside the two: both queues' items cross the same lines.
  batched.also.emplace_back("bare hand-off ceiling", median_of(std::move(ceiling)));
  for (int r = 0; r < c.rounds; ++r) {
    progress.step("ring vs moodycamel ReaderWriterQueue", r, c.rounds);
    single.ours_rounds.push_back(ring_rate(c, 1));
    single.base_rounds.push_back(rwq_rate(c));
  }
  rows.push_back(std::move(batched));
  rows.push_back(std::move(single));

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

  const std::string one = placement_of(c, "the bench thread", false);
  Row pushes = make_row("resp3_vs_hiredis", "RESP decode, pushes `message ch <29 B>`",
                        "Resp3Decoder", "hiredis redisReader", "ops/s", true, one);
  Row mixed = make_row("resp3_mixed_vs_hiredis", "RESP decode, mixed replies", "Resp3Decoder",
                       "hiredis redisReader", "ops/s", true, one);
  std::string push_bytes;
  for (std::size_t i = 0; i < kFrames; ++i) push_bytes += push_frame();
  const std::string mixed_bytes = mixed_stream();
  for (int r = 0; r < c.rounds; ++r) {
    progress.step("RESP3 decode vs hiredis", r, c.rounds);
    pushes.ours_rounds.push_back(decode_ours(push_bytes, c.decode_streams));
    pushes.base_rounds.push_back(decode_hiredis(push_bytes, c.decode_streams));
    mixed.ours_rounds.push_back(decode_ours(mixed_bytes, c.decode_streams));
    mixed.base_rounds.push_back(decode_hiredis(mixed_bytes, c.decode_streams));
  }
  rows.push_back(std::move(pushes));
  rows.push_back(std::move(mixed));
}

}  // namespace echo::cli::bench
