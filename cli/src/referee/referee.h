// SPDX-License-Identifier: MIT
// `echostore referee` (docs/benchmarks.md, "The Cache Referee"): one workload, one oracle, every
// coherence lane beside the two classic ways of keeping a local cache. Each contestant runs in turn
// on the same server: writers update Zipf-chosen names, readers on several nodes read them, and two
// races are injected the same way for all (a fill held between its L2 read and its insert; messages
// delayed and reordered). The oracle (oracle.h) counts the stale reads, the rows still stale once
// everything is quiet, the longest staleness window, and the time from a write to the row gone at
// each node.
//
// This header: the workload's knobs, what a contestant is to the workload, and what a run
// reports. workload.cc runs one contestant; echostore_lanes.cc and classic_lanes.cc are the
// contestants; report.cc prints and writes the results; referee_cmd.cc is the command.
#pragma once

#include <echo/table/branded_id.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "drill/drill.h"
#include "referee/late_mailer.h"
#include "referee/oracle.h"

namespace echo::cli::referee {

// The workload, the same for every contestant.
struct RefereeConfig {
  int seconds = 10;  // of reads and writes per contestant
  std::size_t names = 2000;
  double zipf = 0.99;  // both the writers' and the readers' choice of name
  int nodes = 3;       // caches reading, each its own instance with its own connections
  int readers_per_node = 4;
  int writers = 2;
  double writes_per_s = 2000;  // all writers together, paced
  // Readers read in bursts with a pause between (readers_per_node x nodes threads reading flat
  // out would take every core of a small machine from the writers, the server and the threads
  // that apply messages, and the latencies would measure the scheduler). Throughput is then
  // bounded by the pace; what it shows is what misses and fills cost.
  int read_burst = 16;
  std::chrono::microseconds read_pause{50};
  // Race (1): every fill waits this long between its L2 read and its insert.
  std::chrono::microseconds fill_hold{2000};
  // Race (2): this fraction of the writes of the lanes whose messages the referee sends has its
  // message held back uniformly [late_min, late_max] by the late mailer.
  double late_fraction = 0.2;
  std::chrono::microseconds late_min{1000}, late_max{20000};
  // After the writers stop and the late mailer has sent everything: the wait before the rows
  // are compared with L2 (every message delivered and applied).
  std::chrono::milliseconds quiet{500};
  bool quick = false;
};

// What a contestant's nodes, readers and writers share for one run.
struct Stage {
  const RefereeConfig& config;
  DrillTarget target;
  // The names (14-byte branded ids, kind REF, minted once per referee run) and their index by
  // table::hash_key (a tracking invalidation names its key only by hash).
  const std::vector<std::string>& names;
  const std::unordered_map<std::uint64_t, std::uint32_t>& by_hash;
  Oracle& oracle;
  LateMailer& mailer;
  std::string run_id;  // fresh table names and prefixes per run
};

// A value in every cache and in L2 is the decimal sequence number of the write that made it
// (seq 0: the seed), so the oracle knows which write a read returned.
std::optional<std::uint32_t> parse_seq(std::string_view value) noexcept;

// One reader thread of one node.
class NodeReader {
 public:
  virtual ~NodeReader() = default;
  // One read of name `name` as the cache serves it (a hit, or a miss filled from L2): the write
  // it returned, or nullopt with `error` set. The node's reader thread.
  virtual std::optional<std::uint32_t> read(std::size_t name, std::string& error) = 0;
};

// One writer thread.
class Writer {
 public:
  virtual ~Writer() = default;
  // The version of the next write, on a versioned lane (minted before the write leaves, so the
  // oracle knows it before any node can hear it); nullopt on the others.
  virtual std::optional<table::BrandedId> mint() { return std::nullopt; }
  // Writes `seq` of `name` (under `version` on a versioned lane) and sends its message at once,
  // or with `late` hands the message to the stage's late mailer. True once L2 has the value
  // (the acknowledgement); false with `error` set. The workload holds the name's write lock.
  virtual bool write(std::size_t name, std::uint32_t seq,
                     const std::optional<table::BrandedId>& version, bool late,
                     std::string& error) = 0;
};

class Contestant {
 public:
  virtual ~Contestant() = default;
  virtual std::string_view name() const = 0;
  // The tracking lanes' messages come from the server: nothing for the late mailer.
  virtual bool mails_late() const = 0;
  // Seeds every name (write 0, told to the oracle) and starts the nodes. Throws
  // std::runtime_error naming what failed. `stage` outlives the contestant's run.
  virtual void start(Stage& stage) = 0;
  virtual std::unique_ptr<NodeReader> reader(int node) = 0;
  virtual std::unique_ptr<Writer> writer() = 0;
  // The write `node`'s cache holds for `name` without filling (L1 only), if any. After the run.
  virtual std::optional<std::uint32_t> peek(int node, std::size_t name) = 0;
  // Where L2 keeps `name`, and whether the value there is framed (version ‖ value, docs/wire.md,
  // "L2 values").
  virtual std::string l2_key(std::size_t name) const = 0;
  virtual bool framed() const = 0;
  // What went wrong on the contestant's own threads (a lost connection); empty: nothing.
  virtual std::string trouble() const = 0;
  // Stops the nodes and the writer's connections. Idempotent.
  virtual void stop() = 0;
};

// The contestants, in the order they run.
std::vector<std::unique_ptr<Contestant>> echostore_lanes();
std::vector<std::unique_ptr<Contestant>> classic_caches();
// `referee --peers` (real_clients.cc): node-redis's client-side cache, run by Node.js from
// `peers_dir` (bench/peers). Its start() throws PeersMissing (peer_process.h) when Node.js or the
// package is not installed.
std::vector<std::unique_ptr<Contestant>> real_clients(const std::string& peers_dir);

// One contestant's run.
struct Figures {
  std::string name;
  std::string failure;  // empty: it ran and the oracle could judge it
  std::uint64_t reads = 0, read_errors = 0, writes = 0, mailed = 0, permanently_stale = 0;
  std::string first_read_error;
  Judgement judged;
  double seconds = 0;  // the measured run (reads and writes)
  bool echostore = false;
  double reads_per_s() const { return seconds > 0 ? static_cast<double>(reads) / seconds : 0; }
  double writes_per_s() const { return seconds > 0 ? static_cast<double>(writes) / seconds : 0; }
};

// Runs `contestant` against `target`: FLUSHALL, seed, the workload, the quiet, the comparison of
// every node's rows with L2, the oracle's judgement. Never throws: a failure is in `failure`.
// Progress lines on `err`.
Figures run_contestant(Contestant& contestant, const RefereeConfig& config,
                       const DrillTarget& target, const std::vector<std::string>& names,
                       std::ostream& err);

// The results as a Markdown table (with the workload, the oracle's definition and the verdicts)
// and as JSON. `verdicts`: the reasons the run fails (empty: it passed).
struct RunHeader {
  std::string command, server, machine;
};
std::vector<std::string> verdicts(const std::vector<Figures>& figures);
void print_results(std::ostream& out, const RunHeader& header, const RefereeConfig& config,
                   const std::vector<Figures>& figures, const std::vector<std::string>& failed);
// False when `path` cannot be written.
bool write_json(const std::string& path, const RunHeader& header, const RefereeConfig& config,
                const std::vector<Figures>& figures, const std::vector<std::string>& failed);

// Adds the `referee` subcommand to `app`; its callback sets `exit_code` (0 passed, 1 a verdict
// failed or a contestant could not run, 2 bad arguments).
void add_referee_command(CLI::App& app, int& exit_code);

}  // namespace echo::cli::referee
