// SPDX-License-Identifier: MIT
// The engine as a guest in a latency-sensitive process, against a real redis-server: what its
// threads cost the process's other threads when it is idle (wakes, membarriers: each membarrier
// interrupts every CPU a thread of the process runs on) and under sparse traffic. Counted by the
// kernel (/proc's context switches of every thread named echo-*) and by the engine's own stats.
#include <dirent.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/stats_export.h>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::EngineStats;
using table::BrandedId;

class QuietGuest : public SingleServerTest {};

// Voluntary context switches (one per sleep, so one wake each) of this process's threads whose
// name starts with "echo-": every thread an engine starts is named so.
std::uint64_t engine_thread_wakes() {
  std::uint64_t total = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string comm;
    std::getline(std::ifstream(base + "/comm") >> std::ws, comm);
    if (comm.rfind("echo-", 0) != 0) continue;
    std::ifstream status(base + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
        total += std::stoull(line.substr(line.find(':') + 1));
      }
    }
  }
  ::closedir(dir);
  return total;
}

std::uint64_t membarriers(const EngineStats& s) {
  std::uint64_t n = 0;
  for (const auto& t : s.tables) n += t.writer.membarriers;
  return n;
}

std::uint64_t writer_and_io_wakes(const EngineStats& s) {
  std::uint64_t n = 0;
  for (const auto& t : s.tables) n += t.writer.os_wakes;
  for (const auto& t : s.io_threads) n += t.os_wakes;
  return n;
}

// Idle: no barrier at all, and at most 10 wakes a second over every engine thread (io, four
// writers, the chores, the loaders). A fixed 4 ms clock tick alone was 1,000 a second.
TEST_F(QuietGuest, AnIdleEngineWithFourTablesMakesNoMembarrierAndFewWakes) {
  std::vector<engine::TableSpec> tables;
  for (const char* name : {"quotes", "positions", "limits", "orders"}) {
    tables.push_back(table_spec(name, "AST", CoherenceMode::kBroadcast, answering("x")));
  }
  auto e = node(2, tables);
  ASSERT_TRUE(e);
  // Some rows, far from expiry, and one read each (a miss, a fill), then quiet.
  for (const char* name : {"quotes", "positions", "limits", "orders"}) {
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(e->get(name, fresh_id("AST").view()));
  }
  std::this_thread::sleep_for(300ms);  // the fills' reclamation and the first beats settle
  EngineStats s0 = e->stats();
  e->add_thread_counts(s0);
  const std::uint64_t wakes0 = engine_thread_wakes();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(3s);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EngineStats s1 = e->stats();
  e->add_thread_counts(s1);
  const std::uint64_t wakes = engine_thread_wakes() - wakes0;
  const std::uint64_t barriers = membarriers(s1) - membarriers(s0);
  std::printf(
      "[ idle ] 4 tables, %.1f s: %llu wakes of echo-* threads (%.1f/s; writers + io %llu), "
      "%llu membarriers\n",
      secs, static_cast<unsigned long long>(wakes), static_cast<double>(wakes) / secs,
      static_cast<unsigned long long>(writer_and_io_wakes(s1) - writer_and_io_wakes(s0)),
      static_cast<unsigned long long>(barriers));
  for (std::size_t i = 0; i < s1.tables.size(); ++i) {
    const auto& a = s0.tables[i].writer;
    const auto& b = s1.tables[i].writer;
    std::printf("  echo-w:%s: %llu wakes, %llu parks, %llu passes, %llu signals\n",
                s1.tables[i].name.c_str(), static_cast<unsigned long long>(b.os_wakes - a.os_wakes),
                static_cast<unsigned long long>(b.parks - a.parks),
                static_cast<unsigned long long>(b.passes - a.passes),
                static_cast<unsigned long long>(b.signals - a.signals));
  }
  for (std::size_t k = 0; k < s1.io_threads.size(); ++k) {
    std::printf(
        "  echo-io:%zu: %llu wakes\n", k,
        static_cast<unsigned long long>(s1.io_threads[k].os_wakes - s0.io_threads[k].os_wakes));
  }
  EXPECT_EQ(barriers, 0u);
  EXPECT_LE(static_cast<double>(wakes) / secs, 10.0);
}

// Sparse traffic (one message a millisecond, each dropping a row): reclamation's scans are
// paced, and a ring never stays on the light handshake, so the table's writer makes at most one
// membarrier per 10 ms whatever the rate.
TEST_F(QuietGuest, SparseTrafficCostsAtMostOneMembarrierPerTenMilliseconds) {
  constexpr int kMessages = 1000;
  auto b = node(2, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("x"))});
  ASSERT_TRUE(b);
  std::vector<BrandedId> names;
  for (int i = 0; i < kMessages; ++i) {
    names.push_back(fresh_id("AST"));
    ASSERT_TRUE(b->put("quotes", names.back().view(), "px=100.00", fresh_id("AST")));
  }
  RedisClient pub = connect_client(server());
  const std::string channel = table::coherence_channel("quotes").value();
  std::this_thread::sleep_for(50ms);
  const EngineStats s0 = b->stats();
  const auto t0 = Clock::now();
  for (int i = 0; i < kMessages; ++i) {
    const std::string frame = frame_text(names[static_cast<std::size_t>(i)], fresh_id("AST"));
    RedisReply r(static_cast<redisReply*>(redisCommand(
        pub.get(), "PUBLISH %b %b", channel.data(), channel.size(), frame.data(), frame.size())));
    ASSERT_TRUE(r);
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(i + 1));
  }
  ASSERT_TRUE(eventually([&] { return b->stats().tables[0].writer.applied >= kMessages; }));
  std::this_thread::sleep_for(50ms);  // the last drops' rows freed
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const EngineStats s1 = b->stats();
  const std::uint64_t barriers = membarriers(s1) - membarriers(s0);
  const auto& w0 = s0.tables[0].writer;
  const auto& w1 = s1.tables[0].writer;
  std::printf(
      "[ sparse ] %d messages in %.0f ms: %llu membarriers, %llu direct applies, %llu "
      "writer parks, %llu signals\n",
      kMessages, ms, static_cast<unsigned long long>(barriers),
      static_cast<unsigned long long>(w1.direct_applies - w0.direct_applies),
      static_cast<unsigned long long>(w1.parks - w0.parks),
      static_cast<unsigned long long>(w1.signals - w0.signals));
  EXPECT_LE(static_cast<double>(barriers), ms / 10.0 + 3.0);
  EXPECT_EQ(s1.tables[0].l1.retired_pending, 0u);
}

// The CPUs a thread may run on, as /proc shows them ("1", "0-1"); "" when it is gone.
std::string cpus_allowed(const std::string& task) {
  std::ifstream status("/proc/self/task/" + task + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

// housekeeping_cpus: the chores thread and the loaders (the housekeeping threads a broadcast
// table starts) run on the set given; the io thread and the writer, which have their own
// knobs, do not inherit it.
TEST_F(QuietGuest, HousekeepingThreadsRunOnTheCpusGiven) {
  const unsigned cpus = std::thread::hardware_concurrency();
  if (cpus < 2) GTEST_SKIP() << "one CPU: no set to tell apart from the default";
  const std::string last = std::to_string(cpus - 1);
  engine::EngineOptions o = node_options(server(), 2);
  o.housekeeping_cpus = {static_cast<int>(cpus - 1)};
  auto e = start_node(o, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("x"))});
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->get("quotes", fresh_id("AST").view()));  // a loader ran
  std::vector<std::string> seen;
  DIR* dir = ::opendir("/proc/self/task");
  ASSERT_NE(dir, nullptr);
  while (const dirent* d = ::readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::string comm;
    std::getline(std::ifstream(std::string("/proc/self/task/") + d->d_name + "/comm") >> std::ws,
                 comm);
    const std::string allowed = cpus_allowed(d->d_name);
    if (comm == "echo-house" || comm == "echo-load") {
      seen.push_back(comm);
      EXPECT_EQ(allowed, last) << comm << " runs on " << allowed;
    } else if (comm.rfind("echo-io", 0) == 0 || comm.rfind("echo-w:", 0) == 0) {
      EXPECT_NE(allowed, last) << comm << " inherited the housekeeping set";
    }
  }
  ::closedir(dir);
  EXPECT_NE(std::find(seen.begin(), seen.end(), "echo-house"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "echo-load"), seen.end());
  EXPECT_EQ(e->stats().housekeeping_pin_failures, 0u);
}

// The names of this process's threads an engine started (each is named echo-*), sorted.
std::vector<std::string> engine_threads() {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return names;
  while (const dirent* d = ::readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::string comm;
    std::getline(std::ifstream(std::string("/proc/self/task/") + d->d_name + "/comm") >> std::ws,
                 comm);
    if (comm.rfind("echo-", 0) == 0) names.push_back(comm);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// An engine with one broadcast table runs its io thread, the table's writer and one chores
// thread (the lease's renewal and, here, stats publishing too); a loader thread starts only with
// the first miss that reaches the loader.
TEST_F(QuietGuest, OneTableRunsIoWriterAndOneMoreThread) {
  engine::EngineOptions o = node_options(server(), 3);
  o.stats_publish = std::chrono::milliseconds(100);
  auto e = start_node(o, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("x"))});
  ASSERT_TRUE(e);
  const std::vector<std::string> idle = {"echo-house", "echo-io:0", "echo-w:quotes"};
  // A thread names itself as it begins: give a loaded machine the moment to run that line.
  EXPECT_TRUE(eventually([&] { return engine_threads() == idle; }));
  EXPECT_EQ(engine_threads(), idle);
  // The stats key shows the publisher ran (on the chores thread: no echo-stats thread).
  EXPECT_TRUE(eventually([&] {
    return l2_raw(client(), engine::stats_key("quotes", "3")) != "(nil)";
  })) << "no stats published";
  ASSERT_TRUE(e->get("quotes", fresh_id("AST").view()));
  const std::vector<std::string> loading = {"echo-house", "echo-io:0", "echo-load",
                                            "echo-w:quotes"};
  EXPECT_TRUE(eventually([&] { return engine_threads() == loading; }));
  EXPECT_EQ(engine_threads(), loading);
  e.reset();
  EXPECT_TRUE(engine_threads().empty());
}

}  // namespace
}  // namespace echo::test
