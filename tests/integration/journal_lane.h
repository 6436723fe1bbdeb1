// SPDX-License-Identifier: MIT
// Shared by the journal's tests on one server (journal_gates_test) and on a cluster
// (cluster_job_lane_test): the job-lane table a consumer declares and the writer's declaration
// of it, the journal's options and the writer's enqueue edge, and the two halves of H4
// (docs/wire.md, "The gates") both stage: intents recorded and enqueued, some applied directly;
// after the loss, the replay in seq order and its drain.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine_nodes.h"
#include "support/temp_dir.h"  // TempDir, for the journal files

namespace echo::test {

inline constexpr std::int64_t kLeaseMs = 2000;

// A job-lane table of kind AST consumed by its node (beat 100 ms, so a deleted membership comes
// back within a tenth of a second).
inline engine::TableSpec lane_spec(const std::string& table,
                                   engine::Loader loader = answering("loaded")) {
  auto s = table_spec(table, "AST", engine::CoherenceMode::kJob, std::move(loader));
  s.job_lease_ms = kLeaseMs;
  s.job_beat_ms = 100;
  s.job_retry_delay_ms = 20;
  return s;
}

// The writer's declaration: not a member; its lease is the hand-off lease.
inline engine::TableSpec writer_spec(const std::string& table,
                                     engine::Loader loader = answering("loaded")) {
  auto s = table_spec(table, "AST", engine::CoherenceMode::kNone, std::move(loader));
  s.job_lease_ms = kLeaseMs;
  return s;
}

inline engine::JournalOptions journal_options(const std::filesystem::path& dir,
                                              const table::BrandedId& group, unsigned node = 0) {
  engine::JournalOptions o;
  o.dir = dir;
  o.group = group.str();
  o.node_id = node;
  return o;
}

// The writer's edge onto the job lane of `table` through engine `w`, in the journal's group.
inline engine::EnqueueFn lane_enqueue(engine::Engine& w, const std::string& table,
                                      const table::BrandedId& group) {
  return [&w, table, group](const table::BrandedId& job, std::string_view name,
                            const table::BrandedId& version) {
    return w.enqueue_job(table, group, job, name, version);
  };
}

// Intents as the writer recorded them: names[i] at versions[i] under job id jobs[i], in seq order.
struct Intents {
  std::vector<table::BrandedId> names, versions, jobs;
};

// Records and enqueues through `j` one version minted by `w` for each of `count` fresh names.
// Fatal on a refused intent (call under ASSERT_NO_FATAL_FAILURE).
inline void record_intents(engine::Journal& j, engine::Engine& w, int count,
                           const engine::EnqueueFn& enqueue, Intents& out) {
  for (int i = 0; i < count; ++i) {
    out.names.push_back(fresh_id("AST"));
    out.versions.push_back(w.mint("AST").value());
    auto job = j.intend_and_enqueue(out.names.back(), out.versions.back(), enqueue);
    ASSERT_TRUE(job) << job.error().message();
    out.jobs.push_back(*job);
  }
}

// The consumer `c` applies and remembers the first `count` intents directly (none remembered
// stale). Fatal on an error (call under ASSERT_NO_FATAL_FAILURE).
inline void apply_directly(engine::Engine& c, const std::string& table, const Intents& intents,
                           int count) {
  for (int i = 0; i < count; ++i) {
    auto a = c.apply_and_remember(table, intents.names[i].view(), intents.versions[i]);
    ASSERT_TRUE(a);
    EXPECT_NE(*a, engine::Applied::kRememberedStale);
  }
}

// H4's answer after the loss: one replay re-enqueues exactly the intents after the first
// `applied`, in seq order under their recorded ids, and the consumer drains them until every
// name's last applied version is its recorded one (within 20 s). Fatal on a failed replay or a
// drain that never ends (call under ASSERT_NO_FATAL_FAILURE).
inline void replay_and_drain(engine::Journal& j, const engine::EnqueueFn& enqueue,
                             const Intents& intents, int applied, engine::ReplayResult& out) {
  const int total = static_cast<int>(intents.names.size());
  std::vector<table::BrandedId> order;
  auto r =
      j.replay([&](const table::BrandedId& job, std::string_view n, const table::BrandedId& v) {
        order.push_back(job);
        return enqueue(job, n, v);
      });
  ASSERT_TRUE(r) << r.error().message();
  out = *r;
  EXPECT_EQ(r->replayed, static_cast<std::uint64_t>(total - applied));
  EXPECT_EQ(r->deduplicated, 0u);
  EXPECT_EQ(order,
            std::vector<table::BrandedId>(intents.jobs.begin() + applied, intents.jobs.end()))
      << "the uncovered intents in seq order under their recorded ids";
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < total; ++i) {
          if (j.last_applied(intents.names[i]) != intents.versions[i]) return false;
        }
        return true;
      },
      std::chrono::seconds(20)))
      << "the consumer never drained the replay";
}

// How many names the journal remembers at their recorded versions.
inline int at_final_versions(const engine::Journal& j, const Intents& intents) {
  int n = 0;
  for (std::size_t i = 0; i < intents.names.size(); ++i) {
    n += j.last_applied(intents.names[i]) == intents.versions[i];
  }
  return n;
}

}  // namespace echo::test
