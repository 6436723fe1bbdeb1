// SPDX-License-Identifier: MIT
// `echostore bench`'s io_threads_2_vs_1 row: a multi-table flood's decode-and-apply throughput
// on one io thread against two (EngineOptions::io_threads). Two receiving nodes alike but for
// that knob, each with four broadcast tables (block policy: nothing dropped, a full ring holds
// its io thread back); one raw connection PUBLISHes the flood round-robin over a node's four
// channels as fast as the socket takes it, and the figure is messages / (first send -> the last
// one applied by its table's writer, counted in TableSpec::on_message). Interleaved per round.
// Beside it, where the CPU went during each flood (this process's threads by name, from
// /proc/self/task, and the server's INFO cpu), so the figure on a small machine can be explained.
#include <dirent.h>
#include <unistd.h>

#include <echo/base/cache_line.h>
#include <echo/engine/engine.h>
#include <echo/harness/stage.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>
#include <fstream>
#include <sstream>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
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
struct alignas(base::kCacheLine) Heard {
  std::atomic<std::uint64_t> n{0};
};

class FloodNode {
 public:
  FloodNode(const BenchConfig& c, const DrillTarget& target, unsigned id, int io_threads,
            const std::string& run_id)
      : heard_(std::make_shared<std::array<Heard, kTables>>()) {
    std::vector<engine::TableSpec> specs;
    for (int k = 0; k < kTables; ++k) {
      const std::string t =
          "bench_fl" + std::to_string(io_threads) + "_" + std::to_string(k) + "_" + run_id;
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

// CPU seconds (user + system) so far of this process's threads whose name starts with `prefix`.
double task_cpu(const std::string& prefix) {
  double ticks = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (const dirent* d = ::readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + d->d_name + "/stat");
    std::string stat;
    std::getline(f, stat);
    const std::size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (stat.compare(open + 1, prefix.size(), prefix) != 0) continue;
    std::istringstream rest(stat.substr(close + 2));  // from field 3 (state) on
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    ticks += utime + stime;
  }
  ::closedir(dir);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The server's own CPU seconds (INFO cpu: used_cpu_sys + used_cpu_user); 0 if unreadable.
double server_cpu(floors::Redis& plain) {
  floors::Reply info = plain.command("INFO cpu");
  if (!info || info->type != REDIS_REPLY_STRING) return 0;
  const std::string text(info->str, info->len);
  double sum = 0;
  for (const char* key : {"used_cpu_sys:", "used_cpu_user:"}) {
    const std::size_t at = text.find(key);
    if (at != std::string::npos) sum += std::stod(text.substr(at + std::strlen(key)));
  }
  return sum;
}

// Where the CPU went during one flood, in CPU seconds per second of it.
struct CpuSplit {
  double sender = 0, io = 0, writers = 0, server = 0;
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

// Messages per second from the first send to the last message heard; `cpu`, when given, gets
// where the CPU went meanwhile (the other node idles: its threads add nothing).
double flood(const DrillTarget& target, const FloodNode& node, const PublishStream& s,
             std::vector<CpuSplit>* cpu = nullptr) {
  RawPublisher pub(target);
  floors::Redis plain(target);
  const std::uint64_t before = node.heard(), n = s.size();
  const CpuSplit c0{task_cpu("echostore"), task_cpu("echo-io"), task_cpu("echo-w"),
                    server_cpu(plain)};
  const auto t0 = floors::Clock::now();
  for (std::size_t at = 0; at < n; at += kChunk)
    pub.send(s, at, std::min<std::size_t>(at + kChunk, n));
  const bool all =
      floors::eventually([&] { return node.heard() - before >= n; }, std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(floors::Clock::now() - t0).count();
  if (cpu != nullptr) {
    cpu->push_back(CpuSplit{
        (task_cpu("echostore") - c0.sender) / seconds, (task_cpu("echo-io") - c0.io) / seconds,
        (task_cpu("echo-w") - c0.writers) / seconds, (server_cpu(plain) - c0.server) / seconds});
  }
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
  std::vector<CpuSplit> cpu_one, cpu_two;
  for (int round = 0; round < c.rounds; ++round) {
    progress.step("4-table flood on 2 io threads vs 1", round, c.rounds);
    const PublishStream s1 = flood_of(one, minter, n), s2 = flood_of(two, minter, n);
    if (round % 2 == 0) {  // interleaved, each first in turn
      x.base_rounds.push_back(flood(target, one, s1, &cpu_one));
      x.ours_rounds.push_back(flood(target, two, s2, &cpu_two));
    } else {
      x.ours_rounds.push_back(flood(target, two, s2, &cpu_two));
      x.base_rounds.push_back(flood(target, one, s1, &cpu_one));
    }
  }
  // CPU seconds per flood second, medians of the rounds (clock ticks: coarse on short floods).
  auto med = [](const std::vector<CpuSplit>& v, double CpuSplit::*part) {
    std::vector<double> xs;
    for (const CpuSplit& split_of_round : v) xs.push_back(split_of_round.*part);
    std::sort(xs.begin(), xs.end());
    return xs.empty() ? 0.0 : xs[xs.size() / 2];
  };
  auto split = [&](const std::vector<CpuSplit>& v) {
    return floors::fmt("sender %.2f, io %.2f, writers %.2f, redis-server %.2f",
                       med(v, &CpuSplit::sender), med(v, &CpuSplit::io), med(v, &CpuSplit::writers),
                       med(v, &CpuSplit::server));
  };
  x.what += "; CPU s per s: 2 io threads: " + split(cpu_two) + "; 1 io thread: " + split(cpu_one);
  rows.push_back(std::move(x));
}

}  // namespace echo::cli::bench
