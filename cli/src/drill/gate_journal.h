// SPDX-License-Identifier: MIT
// What the journal gates' two files share (gate_journal.cc: H1-H5; gate_journal_price.cc: H6):
// the minter of their names and versions, a gate's temp dir and journal options, the job-lane
// table, the journal's enqueue edge on a sender node, and a lane member's check.
#pragma once

#include <hiredis/hiredis.h>

#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>
#include <echo/table/branded_id.h>

#include <filesystem>
#include <new>
#include <string>
#include <string_view>

#include "drill/floors.h"

namespace echo::cli::journal_gates {

using engine::CoherenceMode;
using engine::Engine;
using engine::JournalOptions;
using engine::TableSpec;
using floors::Redis;
using floors::Reply;
using table::BrandedId;
namespace fs = std::filesystem;

// The journal gates' names and versions come from one minter (gate_journal.cc's and
// gate_journal_price.cc's), so they are in mint order.
inline constexpr unsigned kGateNode = 440;

inline table::Minter& minter() {
  static table::Minter m(kGateNode);
  return m;
}
inline BrandedId mint(std::string_view ns) { return minter().mint(ns).value(); }

// The gates' journal files: a fresh temp dir per gate, removed with everything in it; ok() is
// false when it could not be made (the gate fails that check).
struct JournalDir : harness::TempDir {
  JournalDir() noexcept : TempDir("echostore-drill-journal-", std::nothrow) {}
};

inline JournalOptions options(const fs::path& dir, const BrandedId& group) {
  return harness::journal_options(dir, group.str(), kGateNode + 1);
}

inline TableSpec lane_table(const std::string& name, CoherenceMode mode) {
  TableSpec s = harness::ast_table(name, mode, harness::answering("px=1"));
  s.job_lease_ms = 2000;
  s.job_beat_ms = 100;
  return s;
}

inline engine::EnqueueFn lane_enqueue(Engine& w, const std::string& table, const BrandedId& group) {
  return [&w, table, group](const BrandedId& job, std::string_view name, const BrandedId& version) {
    return w.enqueue_job(table, group, job, name, version);
  };
}

inline bool member(Redis& r, const std::string& table, unsigned node) {
  Reply z = r.command("ZSCORE %s %s", engine::JobLaneKeys::for_table(table).members.c_str(),
                      std::to_string(node).c_str());
  return z && z->type == REDIS_REPLY_STRING;
}

}  // namespace echo::cli::journal_gates
