// SPDX-License-Identifier: MIT
// What the chaos drill's threads share (chaos.cc runs them, chaos_report.cc prints the figures):
// the nodes and their proxies, the names and their write history, the oracle, the events each
// node told, and the tallies. The knobs a run uses are here with their reasons.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/harness/fault_proxy.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "drill/chaos_faults.h"
#include "referee/oracle.h"

namespace echo::cli::chaos {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline constexpr int kNodes = 3;
inline constexpr std::size_t kNames = 48;     // broadcast names; node n writes those i % 3 == n
inline constexpr std::size_t kJobNames = 24;  // job-lane names, written by node 1 with the journal
// Short knobs, so that a silent connection is noticed within ~1 s: an idle PING every 250 ms, and
// a reply overdue 750 ms later is a socket loss (ConnectionOptions::call_timeout).
inline constexpr auto kHeartbeat = 250ms;
inline constexpr auto kCallTimeout = 750ms;
inline constexpr auto kGetTimeout = 2000ms;
inline constexpr auto kWritePause = 10ms;     // each writer: ~100 writes a second at most
inline constexpr auto kJobWritePause = 40ms;  // the journal's writer: ~25 intents a second
inline constexpr auto kConvergeBound = 10s;   // after a heal, every node agrees with L2 within it
inline constexpr std::string_view kTable = "chaos", kJobTable = "chaosjob", kKind = "CHS";

// One event a node's engine told (EngineOptions::on_event), stamped when heard.
struct Told {
  engine::EventKind kind;
  std::string subject;
  std::int64_t at_ns;
};

struct NodeLog {
  mutable std::mutex mu;
  std::vector<Told> told;
  // The first `kind` of `subject` at or after `from_ns` (and before `to_ns`), or -1.
  std::int64_t first(engine::EventKind kind, std::string_view subject, std::int64_t from_ns,
                     std::int64_t to_ns = INT64_MAX) const {
    const std::lock_guard lock(mu);
    for (const Told& t : told) {
      if (t.kind == kind && t.subject == subject && t.at_ns >= from_ns && t.at_ns < to_ns) {
        return t.at_ns;
      }
    }
    return -1;
  }
};

// A broadcast name's acknowledged writes (the staleness window's "latest write").
struct History {
  std::mutex mu;
  std::vector<std::int64_t> ack_ns;     // index = seq; 0: never acknowledged (failed)
  std::atomic<std::uint32_t> acked{0};  // the newest acknowledged seq; released after ack_ns
};

struct Stage {
  Stage() : oracle(kNames, kNodes) {}
  std::vector<std::unique_ptr<harness::FaultProxy>> proxies;
  std::vector<std::unique_ptr<engine::Engine>> nodes;
  std::array<NodeLog, kNodes> logs;
  std::vector<std::string> names, job_names;
  std::unordered_map<std::uint64_t, std::uint32_t> by_hash;
  referee::Oracle oracle;
  std::array<History, kNames> history;
  std::array<std::uint32_t, kNames> last_seq{};  // each name's writer thread's own

  // The writers stop between a heal and its convergence check; `writing` counts those mid-write.
  std::atomic<bool> paused{false};
  std::atomic<int> writing{0};
  // The fault injected last (its kind indexes window_ns; kFaultKinds: none yet).
  std::atomic<int> current_kind{kFaultKinds};
  std::array<std::atomic<std::int64_t>, kFaultKinds + 1> window_ns{};
  std::atomic<std::uint64_t> writes{0}, write_errors{0}, log_lines{0};

  // The journal's side.
  std::unique_ptr<engine::Journal> journal;
  std::optional<table::BrandedId> group;
  std::mutex intended_mu;
  std::vector<std::optional<table::BrandedId>> intended;  // per job name: the newest intent
  std::atomic<std::uint64_t> intents{0}, intent_errors{0}, replayed{0};
};

// Raises `cell` to at least `v` (relaxed: a figure read after the threads joined).
inline void raise_max(std::atomic<std::int64_t>& cell, std::int64_t v) {
  std::int64_t cur = cell.load(std::memory_order_relaxed);
  while (cur < v && !cell.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace echo::cli::chaos
