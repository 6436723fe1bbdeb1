// SPDX-License-Identifier: MIT
// The shared-queue relay (docs/wire.md, "The job lane's member queues"): an original writer admits
// one job into the shared queue ecc.coh.<t> (genqueue, docs/wire.md, "Scripts"), which no EchoStore
// member drains (each drains its own member queue). So each member of a job-lane table with
// job_relay also consumes the shared queue as an original consumer does (docs/wire.md,
// "A consumer": reap, promote, gclaim until empty, park on its wake list), competing with the
// others and with any original consumer for each job; a claimed job is admitted into every live
// member queue under its own JOB id (a queue that holds it already answers duplicate) and only then
// completed on the shared queue with its fencing token. A crash between the two leaves the job
// active; its lease lapses, any relay's reap returns it, and the next claim repeats the fan-out
// (duplicates) and completes. So an original writer's message reaches every live EchoStore member
// at least once, and the shared queue does not grow while any member is live.
//
// One thread per engine, for all its relaying tables: it blocks (the fan-out waits for its
// replies), and it parks between claims in a BLPOP on the tables' wake lists (one connection of
// its own; a cluster polls every beat instead: the wake lists hash to several slots).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/error.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/table_spec.h>
#include <echo/io/resp3_value.h>
#include <echo/table/branded_id.h>

#include "housekeeping.h"

namespace echo::engine {

// EngineStats::relay: summed over the relaying tables.
struct RelayCounters {
  std::uint64_t claimed = 0;    // shared-queue jobs this engine claimed
  std::uint64_t relayed = 0;    // fanned out to the member queues and completed
  std::uint64_t malformed = 0;  // payloads that are not a message of the table (retried, then dead)
  std::uint64_t errors = 0;  // claims, fan-outs or completions that failed (the lease returns it)
  std::uint64_t maintenance = 0;  // reaped + promoted shared-queue jobs
};

class SharedQueueRelay {
 public:
  struct Table {
    const TableSpec* spec;  // the declaration (keys, kind, lease, retry knobs)
    JobLaneKeys keys;
  };
  struct Ports {
    // A command and a script on the command path, blocking (the engine's Impl::command, script).
    std::function<Result<io::Resp3Owned>(std::vector<std::string> args)> command;
    std::function<Result<io::Resp3Owned>(const io::Script&, std::vector<std::string> keys,
                                         std::vector<std::string> argv)>
        script;
    // Admits the message under `job` into every live member queue of the table (Engine::fan_out,
    // never the shared queue). kNoLiveMember is not an error here: nobody holds a row.
    std::function<std::error_code(const TableSpec& spec, const table::BrandedId& group,
                                  const table::BrandedId& job, std::string_view name,
                                  const table::BrandedId& version)>
        fan_out;
    // Waits up to `timeout` for a wake token on any of `wake_lists` (or just waits, on a cluster).
    std::function<void(const std::vector<std::string>& wake_lists,
                       std::chrono::milliseconds timeout)>
        park;
  };

  SharedQueueRelay(std::vector<Table> tables, Ports ports, std::chrono::milliseconds beat);
  ~SharedQueueRelay();  // stop()
  SharedQueueRelay(const SharedQueueRelay&) = delete;
  SharedQueueRelay& operator=(const SharedQueueRelay&) = delete;

  // Where its thread runs (EngineOptions::housekeeping_cpus). Owner thread, before start().
  void set_housekeeping(const Housekeeping& h) noexcept { housekeeping_ = &h; }
  void start();
  // Asks the thread to stop; `unpark` (run after the request) should end a park under way.
  void stop(const std::function<void()>& unpark = {});
  RelayCounters stats() const;

 private:
  void run(const std::stop_token& stop);
  void maintain(const Table& t);
  // Claims until the shared queue answers empty (or `stop`).
  void drain(const Table& t, const std::stop_token& stop);
  void settle(const Table& t, const std::vector<std::string>& job);
  void retry(const Table& t, std::string_view id, std::string_view token, std::string reason);

  std::vector<Table> tables_;
  Ports ports_;
  std::chrono::milliseconds beat_;
  JobLaneScripts scripts_ = JobLaneScripts::embedded();
  std::vector<std::string> wake_lists_;
  const Housekeeping* housekeeping_ = nullptr;
  std::jthread thread_;
  std::atomic<std::uint64_t> claimed_{0}, relayed_{0}, malformed_{0}, errors_{0}, maintenance_{0};
};

}  // namespace echo::engine
