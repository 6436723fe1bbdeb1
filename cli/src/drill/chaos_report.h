// SPDX-License-Identifier: MIT
// The chaos drill's figures and the goals they are held to: 0 crashes (no phantom read, the process
// standing), 0 stale reads by the referee's definition, 0 permanently stale rows, 0 writes lost in
// L2, 0 journal intents lost, and the longest staleness window at most the heartbeat's detection
// time plus a resubscribe, both measured in the same run.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <utility>

#include "drill/chaos_faults.h"
#include "referee/oracle.h"

namespace echo::cli::chaos {

struct Figures {
  std::array<std::uint64_t, kFaultKinds> injected{};
  std::uint64_t faults = 0, not_applied = 0, reconnects = 0;
  std::uint64_t reads = 0, read_errors = 0, phantom = 0, writes = 0, write_errors = 0;
  std::string first_read_error;
  referee::Judgement judged;  // stale reads and their longest window, by the oracle
  // (node, name) pairs that missed a convergence bound after some heal; the ones still off at the
  // end, after one more bound, are permanently stale.
  std::set<std::pair<int, std::size_t>> late_rows;
  std::uint64_t permanently_stale = 0;
  std::uint64_t l2_regressions = 0;  // checks that found L2 older than an acknowledged write
  double converge_max_ms = 0;
  // A read's staleness window: from the acknowledgement of the first write newer than the one it
  // returned to the read's start. Longest per kind of the fault injected last ([kFaultKinds]:
  // none).
  std::array<double, kFaultKinds + 1> window_ms{};
  double detect_max_ms = 0, resub_max_ms = 0;  // fault start -> loss told; loss -> resubscribed
  std::array<double, kFaultKinds> detect_by_kind_ms{};  // the longest detection, per fault kind
  std::uint64_t detections = 0, resubscribes = 0;
  std::uint64_t intents = 0, intent_errors = 0, replayed = 0, replay_errors = 0, intents_lost = 0;
  std::uint64_t log_lines = 0;
};

// Prints the report and the goals' verdicts; true when every goal held.
bool print_report(std::ostream& out, const Figures& f);

}  // namespace echo::cli::chaos
