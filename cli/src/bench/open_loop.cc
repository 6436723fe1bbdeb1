// SPDX-License-Identifier: MIT
// `echostore bench --load RATE[,RATE...]`: open-loop tails. The bench thread PUBLISHes on a fixed
// schedule (message i due at t0 + i / RATE, pipelined on a raw connection, never waiting for a
// reply), each message's version carrying its sequence number (snowflake = base + i). Its latency
// runs from its DUE time (harness/open_loop.h: a stall is charged to every message it delayed) to
// the moment its final consumer had it, stamped on that consumer's thread: for the broadcast lane
// the table's writer after applying it (TableSpec::on_message), for the floor a bare blocking
// hiredis subscriber after reading it. Both at the same rate, interleaved, in the same run.
#include <echo/base/clock.h>
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/harness/open_loop.h>
#include <echo/harness/stage.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/wire.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using harness::OpenLoopFigures;
using harness::OpenLoopRun;
using table::BrandedId;

constexpr unsigned kOpenLoopReceiver = 911, kOpenLoopMinter = 912;
constexpr double kOnSchedule = 0.05;  // the sender may end 5% of the schedule's span late

// What the lane's on_message hook records into: the run under way (null between runs) and the
// snowflake its message 0 carries. Set by the bench thread while no message is in flight.
struct HookTarget {
  std::atomic<OpenLoopRun*> run{nullptr};
  std::atomic<std::uint64_t> base{0};
};

// The schedule into `channel`: sends on the bench thread, returns once every message was
// observed (or 2 s after the last one was due) and every reply read.
OpenLoopFigures run_schedule(const DrillTarget& target, OpenLoopRun& run,
                             const PublishStream& stream) {
  RawPublisher pub(target);
  const std::uint64_t n = run.count();
  run.start(base::steady_ns() + 1'000'000);  // 1 ms to get going
  std::uint64_t sent = 0;
  while (sent < n) {
    const std::int64_t now = base::steady_ns();
    const std::uint64_t due = run.due_by(now);
    if (due > sent) {
      pub.send(stream, sent, due);
      run.sent(due, base::steady_ns());
      sent = due;
      continue;
    }
    // Early for the next one: yield (others get the CPU on a shared core), or sleep when it is
    // more than 2 ms away (only the very start, or a low rate).
    const std::int64_t ahead = run.due_ns(sent) - now;
    if (ahead > 2'000'000) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(ahead - 1'000'000));
    } else {
      std::this_thread::yield();
    }
  }
  const auto limit = floors::Clock::now() + std::chrono::seconds(2);
  while (run.delivered() < n && floors::Clock::now() < limit) std::this_thread::yield();
  if (!pub.await_replies(n)) {
    throw std::runtime_error("the open-loop sender got " + std::to_string(pub.replies()) +
                             " replies of " + std::to_string(n) + " PUBLISHes");
  }
  OpenLoopFigures f = run.figures(kOnSchedule);
  if (pub.unheard() != 0) f.sustained = false;  // a PUBLISH nobody (or two) heard
  return f;
}

// The floor's consumer: a blocking hiredis subscriber on its own thread, stamping each message
// as it reads it. Subscribed before the constructor returns.
class FloorSubscriber {
 public:
  FloorSubscriber(const DrillTarget& target, const std::string& channel, OpenLoopRun& run,
                  std::uint64_t base)
      : sub_(target) {
    floors::Reply ok = sub_.command("SUBSCRIBE %b", channel.data(), channel.size());
    if (!ok) throw std::runtime_error("the open-loop floor could not subscribe");
    // A read timeout ends the thread after the run (the context is spent by then).
    redisSetTimeout(sub_.raw(), timeval{0, 250'000});
    thread_ = std::jthread([this, &run, base] {
      while (run.delivered() < run.count()) {
        void* raw = nullptr;
        if (redisGetReply(sub_.raw(), &raw) != REDIS_OK) return;
        floors::Reply m(static_cast<redisReply*>(raw));
        if (m->type != REDIS_REPLY_ARRAY || m->elements != 3) continue;
        const auto frame =
            table::parse_frame(std::string_view(m->element[2]->str, m->element[2]->len));
        const std::int64_t at = base::steady_ns();
        run.observed(frame ? frame->version.snowflake() - base : ~0ull, at);
      }
    });
  }

 private:
  floors::Redis sub_;
  std::jthread thread_;  // last: joins before sub_ goes
};

struct Contender {
  std::vector<double> p50, p99, p999;
  std::vector<double> samples;  // every delivered message's latency, every round (--html)
  int sustained = 0, rounds = 0;
  std::uint64_t scheduled = 0, lost = 0;  // summed over the rounds
  double worst_late = 0;                  // the sender's worst end, fraction of the span
  void add(const OpenLoopFigures& f, const OpenLoopRun& run) {
    const std::vector<double> us = run.latencies_us();
    samples.insert(samples.end(), us.begin(), us.end());
    scheduled += f.scheduled;
    lost += f.scheduled - f.delivered;
    worst_late = std::max(worst_late, f.end_late_fraction);
    p50.push_back(f.p50_us);
    p99.push_back(f.p99_us);
    p999.push_back(f.p999_us);
    sustained += f.sustained ? 1 : 0;
    ++rounds;
  }
};

}  // namespace

void run_open_loop(const BenchConfig& c, const DrillTarget& target, Progress& progress,
                   std::vector<Row>& rows) {
  table::Minter minter(kOpenLoopMinter);
  const std::string run_id = minter.mint("BEN").value().str();
  const std::string t = "bench_ol_" + run_id;
  const std::string floor_channel = "echostore:bench:open-loop:" + run_id;
  const std::string lane_channel = table::coherence_channel(t).value();
  const BrandedId name = minter.mint("AST").value();

  // Every lane run lives until the node has stopped (declared before it): the writer may still
  // be inside the hook on a run the bench thread has finished with, and a late message lands in
  // the run it was addressed to (or as a stray in a newer one), never in freed memory.
  std::vector<std::unique_ptr<OpenLoopRun>> lane_runs;
  auto hook = std::make_shared<HookTarget>();
  engine::TableSpec spec = lane_spec(t, CoherenceMode::kBroadcast, c);
  spec.on_message = [hook](const engine::Heard& h) {
    OpenLoopRun* run = hook->run.load(std::memory_order_acquire);  // pairs with the store below
    if (run == nullptr) return;
    const auto v = table::base62_decode(h.version.substr(table::kNamespaceSize));
    const std::int64_t at = base::steady_ns();
    run->observed(v ? *v - hook->base.load(std::memory_order_relaxed) : ~0ull, at);
  };
  engine::Engine r(
      harness::node_options(target.host, target.port, kOpenLoopReceiver, c.process_cpu), {spec});
  if (auto ec = r.start())
    throw std::runtime_error("the open-loop node did not start: " + ec.message());

  std::uint64_t next_base = 0;
  // Each run's versions above every earlier run's and above anything minted before it.
  auto fresh_base = [&](std::uint64_t n) {
    next_base = std::max(next_base, minter.mint("TXN").value().snowflake());
    const std::uint64_t base = next_base;
    next_base += n;
    return base;
  };
  auto stream_of = [&](const std::string& channel, std::uint64_t base, std::uint64_t n) {
    PublishStream s;
    for (std::uint64_t i = 0; i < n; ++i) {
      const BrandedId v = BrandedId::encode("TXN", base + i).value();
      const auto frame = table::make_frame(name, v);
      s.add(channel, table::view(frame));
    }
    return s;
  };

  const double seconds = c.quick ? 0.5 : 1.0;
  std::vector<Contender> lane(c.load.size()), floor(c.load.size());
  for (int round = 0; round < c.rounds; ++round) {
    for (std::size_t k = 0; k < c.load.size(); ++k) {
      const double rate = c.load[k];
      progress.step("open loop at " + floors::grouped(rate) + " msg/s, lane and floor", round,
                    c.rounds);
      const auto n = static_cast<std::uint64_t>(rate * seconds);
      auto run_floor = [&] {
        const std::uint64_t base = fresh_base(n);
        const PublishStream s = stream_of(floor_channel, base, n);
        OpenLoopRun run(rate, n);
        FloorSubscriber sub(target, floor_channel, run, base);
        const OpenLoopFigures f = run_schedule(target, run, s);
        floor[k].add(f, run);
      };
      auto run_lane = [&] {
        const std::uint64_t base = fresh_base(n);
        const PublishStream s = stream_of(lane_channel, base, n);
        OpenLoopRun& run = *lane_runs.emplace_back(std::make_unique<OpenLoopRun>(rate, n));
        hook->base.store(base, std::memory_order_relaxed);
        hook->run.store(&run, std::memory_order_release);  // pairs with the hook's acquire
        const OpenLoopFigures f = run_schedule(target, run, s);
        hook->run.store(nullptr, std::memory_order_release);
        lane[k].add(f, run);
        // The next run starts on an empty ring (a run that lost messages may leave some queued).
        (void)floors::eventually([&] {
          for (const auto& ring : engine::internal::writer_of(r, t)->ring_stats()) {
            if (ring.occupancy != 0) return false;
          }
          return true;
        });
      };
      if (round % 2 == 0) {  // interleaved, each first in turn
        run_floor();
        run_lane();
      } else {
        run_lane();
        run_floor();
      }
    }
  }
  const std::string placement = placement_of(c,
                                             "the bench thread (the sender), the floor's "
                                             "subscriber thread, the node's io and writer threads",
                                             true);
  for (std::size_t k = 0; k < c.load.size(); ++k) {
    const std::string rate = std::to_string(static_cast<long long>(c.load[k]));
    Row x;
    x.id = "open_loop_p999_vs_floor_" + rate;
    // Sustained: every message delivered and the sender ended within 5% of its schedule.
    auto account = [](const Contender& who) {
      return std::to_string(who.sustained) + '/' + std::to_string(who.rounds) + " rounds, lost " +
             floors::grouped(static_cast<double>(who.lost)) + " of " +
             floors::grouped(static_cast<double>(who.scheduled)) + ", sender at worst " +
             floors::fmt("%.1f%%", 100 * who.worst_late) + " late";
    };
    x.what = "open loop at " + floors::grouped(c.load[k]) +
             " msg/s, due -> consumer had it, p99.9 (sustained: lane " + account(lane[k]) +
             "; floor " + account(floor[k]) + ")";
    x.ours = "broadcast lane (writer applied it)";
    x.baseline = "bare hiredis subscriber (read it)";
    x.unit = "us";
    x.higher_better = false;
    x.placement = placement;
    x.ours_rounds = lane[k].p999;
    x.base_rounds = floor[k].p999;
    x.ours_samples = std::move(lane[k].samples);
    x.base_samples = std::move(floor[k].samples);
    x.also = {{"lane p50", median_of(lane[k].p50)},
              {"lane p99", median_of(lane[k].p99)},
              {"floor p50", median_of(floor[k].p50)},
              {"floor p99", median_of(floor[k].p99)}};
    rows.push_back(std::move(x));
  }
}

}  // namespace echo::cli::bench
