// SPDX-License-Identifier: MIT
// `echostore bench`'s measurements: each row runs our code and its baseline side by side in every
// round (interleaved, so a noisy neighbour hits both), and reports the median of the rounds for
// each and their ratio (a figure is a ratio to a baseline measured in the same run:
// docs/benchmarks.md). The in-process rows (ring, L1, RESP3) live in micro.cc and micro_l1.cc, the
// rows that need a server (lanes, journal) in lanes.cc, the neighbour-jitter rows in neighbour.cc,
// the table and the JSON in report.cc.
#pragma once

#include <sys/types.h>

#include <echo/engine/table_spec.h>
#include <echo/ring/ring_config.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "drill/drill.h"
#include "peer_process.h"

namespace echo::cli::bench {

// What the user tunes (applied to the engine's tables in the lane rows and to the ring row) and
// how long the run is.
struct BenchConfig {
  std::size_t ring_capacity = 4096;
  std::size_t max_batch = 256;
  ring::WaitStrategy wait = ring::WaitStrategy::kPark;
  int rounds = 7;                       // medians over this many rounds
  std::uint64_t ring_items = 1u << 20;  // items per ring contender per round
  std::uint64_t gets = 1u << 19;        // L1 gets per contender per round
  int decode_streams = 200;             // 1024-frame streams per decoder per round
  int messages = 200;                   // lane messages (and journal pairs) per contender per round
  bool quick = false;
  // "" (every part but open_loop, churn and peers), "micro", "hit_ratio", "lanes", "publish",
  // "io_threads", "neighbour", "open_loop" (the open-loop rows alone: what --load selects),
  // "churn" or "peers" (what --peers selects).
  std::string only;
  // The peers' Node.js package set (peers.cc): the source tree's bench/peers unless --peers-dir.
  std::string peers_dir;
  // --load: the open-loop rates in messages/s (bare --load: 10000, 50000, 100000), each run for
  // 1 s (0.5 s with --quick) per contender per round; empty unless the open-loop part runs.
  std::vector<double> load;
  // Thread placement (--placement): the bench process's threads all start from the pinned main
  // thread and inherit its CPU; the engines' io and writer threads are also pinned by their knobs
  // (EngineOptions::io.cpu, TableSpec::writer_cpu). -1 = unpinned.
  std::string placement = "unpinned";  // unpinned, one-core, spread
  int process_cpu = -1;                // every thread of this process
  int server_cpu = -1;                 // the redis-server the bench started (never a given one)
};

// "all threads of the bench on CPU 0, redis-server on CPU 1", or "... unpinned", for `threads`
// ("producer: the bench thread; consumer: one thread").
std::string placement_of(const BenchConfig& config, const std::string& threads, bool with_server);

// One line of the table. Ratio = ours / baseline: above 1 is better for throughput, below 1 for
// latency (`higher_better` says which).
struct Row {
  std::string id;        // stable key in the JSON ("ring_vs_boost")
  std::string what;      // "ring throughput, batched publish"
  std::string ours;      // "SpscRing"
  std::string baseline;  // "boost::lockfree::spsc_queue"
  std::string unit;      // "ops/s" or "us"
  bool higher_better = true;
  std::string placement;  // which threads ran where
  std::vector<double> ours_rounds, base_rounds;
  // Other contenders run beside the two (the hit-ratio rows: CLOCK, skip): name and figure.
  std::vector<std::pair<std::string, double>> also;
  // Every message's latency behind the rounds' medians (the lane rows; empty for the rows
  // measured in aggregate): the percentile curves of --html.
  std::vector<double> ours_samples, base_samples;
  // Figures beside the row's own that are not in its unit (a churn row's p99.99 in us and its
  // misses beside its reads/s), each named with its unit: the JSON's `beside`; the table
  // carries them in `what`.
  std::vector<std::pair<std::string, double>> beside;
  // Added to both medians before they are divided: a count that may be 0 in either contender
  // keeps a finite, defined ratio (0: the plain ours / baseline).
  double ratio_offset = 0;

  double ours_median() const;
  double base_median() const;
  double ratio() const;  // (ours_median + ratio_offset) / (base_median + ratio_offset)
};

// A latency row: microseconds, lower is better, run under `placement`.
inline Row latency_row(std::string id, std::string what, std::string ours, std::string baseline,
                       std::string placement) {
  Row x;
  x.id = std::move(id);
  x.what = std::move(what);
  x.ours = std::move(ours);
  x.baseline = std::move(baseline);
  x.unit = "us";
  x.higher_better = false;
  x.placement = std::move(placement);
  return x;
}

// The median of `v` (NaN when empty).
double median_of(std::vector<double> v);

// Progress on stderr, one line per step: "bench [12/49] RESP3 decode vs hiredis, round 2 of 7".
class Progress {
 public:
  Progress(std::ostream& err, int total) : err_(err), total_(total) {}
  void step(const std::string& what, int round, int rounds);

 private:
  std::ostream& err_;
  int total_;
  int at_ = 0;
};

// The in-process rows: ring vs boost spsc_queue and moodycamel ReaderWriterQueue, L1 get vs an
// unsynchronised flat map and vs a shared_mutex map, RESP3 decode vs hiredis's reader.
// Throws std::runtime_error when a contender gives a wrong answer.
void run_micro(const BenchConfig& config, Progress& progress, std::vector<Row>& rows);

// The hit-ratio rows (hit_ratio_*): generated traces replayed through the L1 map under each
// eviction policy; S3-FIFO against exact LRU, CLOCK and skip beside them.
void run_hit_ratio(const BenchConfig& config, Progress& progress, std::vector<Row>& rows);
inline constexpr int kHitRatioSteps = 8;  // traces (one step each, not per round)

// The rows against `target`: broadcast lane vs the PUBLISH floor, job lane vs broadcast lane,
// remembered lane vs job lane, the broadcast lane on epoll vs io_uring, journal pair vs a plain
// SQLite WAL commit. Throws std::runtime_error naming what did not arrive.
void run_lanes(const BenchConfig& config, const DrillTarget& target, Progress& progress,
               std::vector<Row>& rows);

// The publish rows (publish_vs_hiredis_eval, publish_vs_hiredis_eval_job; publish_floor.cc):
// Engine::publish's round trip on a broadcast-lane and a job-lane table against a plain hiredis
// client sending the same wire from the calling thread (EVALSHA of publish_l2; the job lane's two
// pipelines), in blocks taking turns. Throws std::runtime_error when a call fails or the node does
// not settle between calls.
void run_publish_floor(const BenchConfig& config, const DrillTarget& target, Progress& progress,
                       std::vector<Row>& rows);

// The open-loop rows (open_loop_p999_vs_floor_<rate>, open_loop.cc): at each rate of
// config.load, the broadcast lane's p50/p99/p99.9 from each message's scheduled send time beside
// a bare subscriber's (the floor), same schedule, same run. Throws std::runtime_error when the
// sender's PUBLISHes were not all answered.
void run_open_loop(const BenchConfig& config, const DrillTarget& target, Progress& progress,
                   std::vector<Row>& rows);

// The io_threads_2_vs_1 row (io_flood.cc): a 4-table flood's decode-and-apply throughput on a
// node with 2 io threads against one with 1. Throws std::runtime_error when a flood is not all
// applied within 20 s.
void run_io_threads(const BenchConfig& config, const DrillTarget& target, Progress& progress,
                    std::vector<Row>& rows);

// The neighbour-jitter rows (neighbour_gaps_vs_alone_{idle,sparse,burst}, neighbour.cc): a
// spinner pinned to CPU 1 counts its clock-loop gaps over 10 us (and 2 us) per second beside two
// engines whose threads, with the bench thread and the started server (`server_pid`, 0 for a
// given one), are on CPU 0, against the same spinner with no engine in the process. Left out
// (said on stderr) on one CPU or where a pinning is refused. Throws std::runtime_error when a
// node does not start or a message is not heard.
void run_neighbour(const BenchConfig& config, const DrillTarget& target, pid_t server_pid,
                   Progress& progress, std::vector<Row>& rows);

// The churn rows (churn.cc): churn_reads_vs_quiet_{1k,10k,50k}[_off], node B's reader's reads/s
// while node A publishes at each rate against the same reader with no publishes, carried values
// on and off; and carried_visible_vs_floor, A's publish -> B's row holding the value against a
// bare PUBLISH -> subscriber. On 2 CPUs or more (unless --placement one-core) B's reader owns
// the last CPU and every other thread of the churn rows, with the started server (`server_pid`,
// 0 for a given one), runs on the others; the bench thread and the server go back where
// --placement put them after each round's windows. Throws std::runtime_error when a node does
// not start, B does not hear every message or keep its rows, a thread or the server cannot be
// pinned, or a visible-row message is not seen within 2 s.
void run_churn(const BenchConfig& config, const DrillTarget& target, pid_t server_pid,
               Progress& progress, std::vector<Row>& rows);

// The peer rows (peers.cc): the job lane against BullMQ on the same server, in the same rounds
// (job_lane_vs_bullmq_throughput_c1, _c16, job_lane_vs_bullmq_latency_p50, _p99), and the
// tracking lane and carried values against node-redis's client-side cache under the referee's
// workload (<lane>_vs_node_redis_csc_{stale_reads,permanently_stale,applied_p50}). `peers` gets
// the peers' versions and the run's date, for the table's header and the JSON. Throws
// PeersMissing when Node.js or the pinned packages are not installed (naming the command that
// installs them, peer_process.h), std::runtime_error when a contender fails.
// `scratch`: the bench started the server, so the cache rows may FLUSHALL it (with a given
// --server they are left out, said on stderr).
void run_peers(const BenchConfig& config, const DrillTarget& target, bool scratch,
               Progress& progress, std::vector<Row>& rows,
               std::vector<std::pair<std::string, std::string>>& peers);

// A lane table of the bench's receiving node, carrying the user's ring capacity, max batch and
// wait (job credits capped at the ring). bench_cmd validates it before anything runs.
engine::TableSpec lane_spec(const std::string& name, engine::CoherenceMode mode,
                            const BenchConfig& config);

// Progress steps per round of each part (for "[k/n]").
inline constexpr int kMicroSteps = 5;  // ring x2, L1 get, typed hit, RESP3
inline constexpr int kLaneSteps = 4;
inline constexpr int kPublishSteps = 2;  // broadcast lane, job lane
inline constexpr int kIoThreadsSteps = 1;
inline constexpr int kOpenLoopStepsPerRate = 1;
inline constexpr int kNeighbourSteps = 3;   // idle, sparse, burst
inline constexpr int kChurnSteps = 7;       // 3 rates x carried on and off, the visible row
inline constexpr int kPeersSteps = 3;       // throughput c1, c16, latency (per round)
inline constexpr int kPeersCacheSteps = 1;  // the referee's workload, once

// The run's context, printed above the table and written into the JSON.
struct RunInfo {
  std::string server;   // "redis-server 7.0.15 on 127.0.0.1:40101 (started by the bench)"
  std::string command;  // the arguments given, as a command line that reproduces the run
  std::string commit, version, compiler, model, kernel;
  unsigned cores = 0;
  double seconds = 0;
  // The peers' versions and the date of the run (--peers; empty otherwise): "node" -> "20.20.2".
  std::vector<std::pair<std::string, std::string>> peers;
};
RunInfo machine_info();

void print_table(std::ostream& out, const RunInfo& info, const BenchConfig& config,
                 const std::vector<Row>& rows);
// False when `path` cannot be written.
bool write_json(const std::string& path, const RunInfo& info, const BenchConfig& config,
                const std::vector<Row>& rows);
// One self-contained page (html.cc): machine and knobs, ratio bars, the lane rows' percentile
// curves beside their baselines', the table. False when `path` cannot be written.
bool write_html(const std::string& path, const RunInfo& info, const BenchConfig& config,
                const std::vector<Row>& rows);

}  // namespace echo::cli::bench
