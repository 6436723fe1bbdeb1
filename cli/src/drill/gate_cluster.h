// SPDX-License-Identifier: MIT
// What the cluster gates' two files share (gate_cluster.cc: C1, F2, F3, F5 and the run;
// gate_cluster_failover.cc: FO): the drill's minting node and the tables every gate declares.
#pragma once

#include <echo/engine/engine.h>
#include <echo/harness/stage.h>

#include <atomic>
#include <string>

#include "drill/floors.h"

namespace echo::cli::cluster_gates {

// The gates' minters run on this node and the next few (one node per concurrent minter).
inline constexpr unsigned kDrillNode = 300;

inline engine::TableSpec spec(const std::string& name, engine::CoherenceMode mode,
                              std::atomic<int>& loads) {
  engine::TableSpec s = harness::ast_table(name, mode, floors::counting_loader(loads, "loaded"));
  s.job_lease_ms = 2000;
  s.job_beat_ms = 100;
  s.job_retry_delay_ms = 20;
  return s;
}

}  // namespace echo::cli::cluster_gates
