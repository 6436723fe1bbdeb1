// SPDX-License-Identifier: MIT
// `echostore bench`'s io_threads_2_vs_1 row: a multi-table flood's decode-and-apply throughput
// on one io thread against two (EngineOptions::io_threads). Two receiving nodes alike but for
// that knob, each with four broadcast tables (block policy: nothing dropped, a full ring holds
// its io thread back); one raw connection PUBLISHes the flood round-robin over a node's four
// channels as fast as the socket takes it, and the figure is messages / (first send -> the last
// one applied by its table's writer, counted in TableSpec::on_message). Interleaved per round.
#include <echo/engine/engine.h>
#include <echo/harness/stage.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/wire.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using table::BrandedId;

constexpr int kTables = 4;
constexpr unsigned kFloodNode1 = 921, kFloodNode2 = 922, kFloodMinter = 923;
constexpr std::size_t kChunk = 256;  // messages per write: the sender never waits on a reply

// One writer's count of messages heard, on its own line (four writers bump their own).
struct alignas(64) Heard {
  std::atomic<std::uint64_t> n{0};
};

class FloodNode {
 public:
  FloodNode(const BenchConfig& c, const DrillTarget& target, unsigned id, int io_threads,
            const std::string& run_id)
      : heard_(std::make_shared<std::array<Heard, kTables>>()) {
    std::vector<engine::TableSpec> specs;
    for (int k = 0; k < kTables; ++k) {
      const std::string t = "bench_fl" + std::to_string(io_threads) + "_" + std::to_string(k) +
                            "_" + run_id;
      channels_.push_back(table::coherence_channel(t).value());
      engine::TableSpec s = lane_spec(t, CoherenceMode::kBroadcast, c);
      s.full_policy = ring::FullPolicy::kBlock;
      s.on_message = [heard = heard_, k](const engine::Heard&) {
        auto& n = (*heard)[static_cast<std::size_t>(k)].n;  // this writer's own counter
        n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      };
      specs.push_back(std::move(s));
    }
    engine::EngineOptions o = harness::node_options(target.host, target.port, id, c.process_cpu);
    o.io_threads = io_threads;
    node_ = std::make_unique<engine::Engine>(std::move(o), std::move(specs));
    if (auto ec = node_->start()) {
      throw std::runtime_error("the flood node with " + std::to_string(io_threads) +
                               " io threads did not start: " + ec.message());
    }
  }
  const std::vector<std::string>& channels() const { return channels_; }
  std::uint64_t heard() const {
    std::uint64_t sum = 0;
    for (const auto& h : *heard_) sum += h.n.load(std::memory_order_acquire);
    return sum;
  }

 private:
  std::shared_ptr<std::array<Heard, kTables>> heard_;
  std::vector<std::string> channels_;
  std::unique_ptr<engine::Engine> node_;  // last: stopped before the counters go
};

// `n` messages round-robin over `node`'s channels, each naming its own version.
PublishStream flood_of(const FloodNode& node, table::Minter& minter, std::uint64_t n) {
  const BrandedId name = minter.mint("AST").value();
  const std::uint64_t base = minter.mint("TXN").value().snowflake();
  PublishStream s;
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto frame = table::make_frame(name, BrandedId::encode("TXN", base + i).value());
    s.add(node.channels()[i % kTables], table::view(frame));
  }
  return s;
}

// Messages per second from the first send to the last message heard.
double flood(const DrillTarget& target, const FloodNode& node, const PublishStream& s) {
  RawPublisher pub(target);
  const std::uint64_t before = node.heard(), n = s.size();
  const auto t0 = floors::Clock::now();
  for (std::size_t at = 0; at < n; at += kChunk) pub.send(s, at, std::min<std::size_t>(at + kChunk, n));
  const bool all = floors::eventually([&] { return node.heard() - before >= n; },
                                      std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(floors::Clock::now() - t0).count();
  if (!all) {
    throw std::runtime_error("the flood's node heard " + std::to_string(node.heard() - before) +
                             " of " + std::to_string(n) + " messages within 20 s");
  }
  if (!pub.await_replies(n) || pub.unheard() != 0) {
    throw std::runtime_error("the flood's PUBLISHes were not each heard once");
  }
  return static_cast<double>(n) / seconds;
}

}  // namespace

void run_io_threads(const BenchConfig& c, const DrillTarget& target, Progress& progress,
                    std::vector<Row>& rows) {
  table::Minter minter(kFloodMinter);
  const std::string run_id = minter.mint("BEN").value().str();
  FloodNode one(c, target, kFloodNode1, 1, run_id), two(c, target, kFloodNode2, 2, run_id);
  // At most ~10 MB queued for a lagging subscriber: under the server's pubsub output limits.
  const std::uint64_t n = c.quick ? 30'000 : 100'000;
  (void)flood(target, one, flood_of(one, minter, n / 10));  // warm-up, unmeasured
  (void)flood(target, two, flood_of(two, minter, n / 10));
  Row x;
  x.id = "io_threads_2_vs_1";
  x.what = "4-table flood, pipelined PUBLISH -> applied by the tables' writers, " +
           floors::grouped(static_cast<double>(n)) + " messages";
  x.ours = "io_threads = 2 (2 subscribers, 2 tables each)";
  x.baseline = "io_threads = 1 (1 subscriber, 4 tables)";
  x.unit = "msg/s";
  x.higher_better = true;
  x.placement = placement_of(
      c, "the bench thread (the sender), each node's io threads and four writer threads", true);
  for (int round = 0; round < c.rounds; ++round) {
    progress.step("4-table flood on 2 io threads vs 1", round, c.rounds);
    const PublishStream s1 = flood_of(one, minter, n), s2 = flood_of(two, minter, n);
    if (round % 2 == 0) {  // interleaved, each first in turn
      x.base_rounds.push_back(flood(target, one, s1));
      x.ours_rounds.push_back(flood(target, two, s2));
    } else {
      x.ours_rounds.push_back(flood(target, two, s2));
      x.base_rounds.push_back(flood(target, one, s1));
    }
  }
  rows.push_back(std::move(x));
}

}  // namespace echo::cli::bench
