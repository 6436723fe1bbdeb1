// SPDX-License-Identifier: MIT
// The in-process rows of `echostore bench`: the ring against boost::lockfree::spsc_queue and
// moodycamel::ReaderWriterQueue (two threads, every item checked in order), the L1 hit against
// an unsynchronised flat map (writer idle) and a std::shared_mutex map (both under the same
// paced writer churn), and the RESP decoder against hiredis's reader on the same bytes. The
// bench/ binaries hold the finer-grained versions of each; these are the side-by-side summary.
// The L1 rows live in micro_l1.cc (run_micro runs them between the ring's and RESP3's); what
// the two files share, in micro.h.
#include <echo/base/cache_line.h>
#include <echo/io/resp3_decoder.h>
#include <echo/ring/spsc_ring.h>
#include <hiredis/hiredis.h>
#include <readerwriterqueue/readerwriterqueue.h>

#include <algorithm>
#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/micro.h"

namespace echo::cli::bench {
namespace {

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

}  // namespace

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

  run_micro_l1(c, progress, rows);

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
