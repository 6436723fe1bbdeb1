// SPDX-License-Identifier: MIT
// The journal under concurrent load (run under TSan): writers recording one intent and many
// (intend_and_enqueue and record_many, their marks queued), appliers remembering versions of
// shared names out of order, and an operator thread flushing, compacting, replaying and reading
// stats, all on one journal whose connection passes between them (flat combining) and writes
// through the journal's WAL VFS. Checked at the end and in a reopened file: every intent once,
// under the id its caller got back, every one marked; each name's applied memory at the newest
// version any applier remembered, never moving back while it ran. Bounded: 1.5 s of traffic.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/journal.h>

#include "support/temp_dir.h"

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace std::chrono_literals;

BrandedId id(std::string_view ns, std::uint64_t s) { return BrandedId::encode(ns, s).value(); }

std::string query(const std::filesystem::path& file, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string out;
  sqlite3_exec(
      db, sql,
      [](void* o, int n, char** v, char**) {
        for (int i = 0; i < n; ++i)
          *static_cast<std::string*>(o) += std::string(v[i] ? v[i] : "NULL") + "\n";
        return 0;
      },
      &out, nullptr);
  sqlite3_close(db);
  return out;
}

TEST(JournalStress, WritersAppliersAndOperatorsShareOneJournal) {
  const test::TempDir temp("echostore-journal-stress-");
  const std::filesystem::path& dir = temp.path();
  JournalOptions options;
  options.dir = dir;
  options.group = "PRT0KHTOWnGLuC";
  constexpr int kWriters = 4, kAppliers = 2;
  constexpr std::uint64_t kAppliedNames = 16;
  const auto until = std::chrono::steady_clock::now() + 1500ms;

  std::mutex mu;
  std::set<std::string> answered;  // job|name, as each writer's caller got them back
  std::set<std::string> enqueued;  // job ids the enqueue callback saw (intend_and_enqueue, replay)
  std::array<std::atomic<std::uint64_t>, kAppliedNames>
      newest{};  // per applied name: max seq remembered
  std::atomic<int> went_back{0};
  {
    Journal j(options);
    const EnqueueFn enqueue = [&](const BrandedId& job, std::string_view, const BrandedId&) {
      std::lock_guard lock(mu);
      return Result<bool>(enqueued.insert(job.str()).second);
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        std::uint64_t n = 0;
        std::vector<std::string> mine;
        while (std::chrono::steady_clock::now() < until) {
          // Writers' names are their own (applied names are not), so compaction never covers them.
          const BrandedId name = id("AST", 100000 + static_cast<std::uint64_t>(w) * 10000 + n % 50);
          if (n % 4 == 3) {
            const std::vector<std::pair<BrandedId, BrandedId>> rows{{name, id("TXN", n + 1)},
                                                                    {name, id("TXN", n + 2)}};
            const auto jobs = j.record_many(rows);
            ASSERT_TRUE(jobs) << jobs.error().message();
            ASSERT_EQ(jobs->size(), 2u);
            for (const BrandedId& job : *jobs) {
              j.mark_enqueued(job);
              mine.push_back(job.str() + "|" + name.str());
            }
          } else {
            auto job = j.intend_and_enqueue(name, id("TXN", n + 1), enqueue);
            ASSERT_TRUE(job.has_value());
            mine.push_back(job->str() + "|" + name.str());
          }
          ++n;
        }
        std::lock_guard lock(mu);
        for (auto& m : mine)
          EXPECT_TRUE(answered.insert(std::move(m)).second) << "an id answered twice";
      });
    }
    for (int a = 0; a < kAppliers; ++a) {
      threads.emplace_back([&, a] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(a) + 7);
        while (std::chrono::steady_clock::now() < until) {
          const std::uint64_t k = rng() % kAppliedNames, seq = 1 + rng() % 100000;
          const BrandedId name = id("AST", k + 1);
          const auto before = j.last_applied(name);
          j.remember(name, id("TXN", seq));
          std::uint64_t seen = newest[k].load();
          while (seen < seq && !newest[k].compare_exchange_weak(seen, seq)) {
          }
          // The memory never moves back, and a remembered version is never newer than it.
          const auto after = j.last_applied(name);
          if (!after || (before && table::newer(*before, *after))) went_back.fetch_add(1);
          if (!j.remembered_stale(name, id("TXN", seq))) went_back.fetch_add(1);
          // Paced like appliers behind a job lane (bursts, not a flood), so the writers' records
          // are not all queued behind the flusher's upserts.
          if (rng() % 8 == 0) std::this_thread::sleep_for(200us);
        }
      });
    }
    threads.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until) {
        ASSERT_TRUE(j.flush());
        const auto retired = j.compact();
        ASSERT_TRUE(retired) << retired.error().message();
        EXPECT_EQ(*retired, 0u) << "compaction retired a writer's intent no applied row covers";
        auto replayed = j.replay(enqueue);  // every intent is uncovered: all deduplicated or new
        ASSERT_TRUE(replayed.has_value());
        (void)j.stats();
        std::this_thread::sleep_for(20ms);
      }
    });
    for (auto& t : threads) t.join();
    // A last replay reaches every intent the bus has not seen (record_many's, recorded since the
    // operator's last pass); the rest it finds deduplicated.
    auto last = j.replay(enqueue);
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->replayed + last->deduplicated, answered.size());
    for (const std::string& job_name : answered) {
      EXPECT_EQ(enqueued.count(job_name.substr(0, job_name.find('|'))), 1u)
          << job_name << " never reached the bus";
    }
    ASSERT_TRUE(j.flush());
    const auto s = j.stats();
    EXPECT_EQ(s.intents, answered.size());
    EXPECT_EQ(s.pending_enqueue, 0u) << "a mark was lost";
    EXPECT_EQ(s.remembered, kAppliedNames);
    EXPECT_EQ(went_back.load(), 0)
        << "the applied memory moved back or forgot a remembered version";
    std::printf(
        "[ journal ] %zu intents from %d writers (replayed %llu, deduplicated %llu at the end), "
        "%llu "
        "transactions carrying %llu requests\n",
        answered.size(), kWriters, static_cast<unsigned long long>(last->replayed),
        static_cast<unsigned long long>(last->deduplicated),
        static_cast<unsigned long long>(s.transactions),
        static_cast<unsigned long long>(s.grouped));
  }
  // Reopened: the file holds what the callers were told, and the memory its newest versions.
  EXPECT_EQ(query(dir / "journal-PRT0KHTOWnGLuC.db", "PRAGMA integrity_check"), "ok\n");
  std::set<std::string> in_file;
  const std::string rows =
      query(dir / "journal-PRT0KHTOWnGLuC.db", "SELECT job_id || '|' || name_id FROM intents");
  for (std::size_t at = 0, nl; (nl = rows.find('\n', at)) != std::string::npos; at = nl + 1) {
    in_file.insert(rows.substr(at, nl - at));
  }
  EXPECT_EQ(in_file, answered);
  Journal again(options);
  for (std::uint64_t k = 0; k < kAppliedNames; ++k) {
    const auto last = again.last_applied(id("AST", k + 1));
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->view(), id("TXN", newest[k].load()).view()) << "name " << k + 1;
  }
}

}  // namespace
}  // namespace echo::engine
