// SPDX-License-Identifier: MIT
// The journal's gates against a real server (H1-H6, docs/wire.md, "The gates"): files per group,
// both crash seams closed by replay, the applied memory across a full restart, loss of the bus
// (queue keys deleted, then a real redis-server restart) replayed back to 50 of 50 names,
// compaction by coverage, and the price beside a plain SQLite WAL commit. A crash drill kills a
// writer process with SIGKILL at each seam; a restarted writer replays. Writer processes are this
// binary re-executed through /proc/self/exe with --journal-writer (main, at the bottom).
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_nodes.h"
#include "journal_lane.h"
#include "support/child_process.h"
#include "support/script_client.h"

namespace echo::test {
namespace {

using engine::Applied;
using engine::Engine;
using engine::Journal;
using engine::JournalOptions;
using table::BrandedId;
namespace fs = std::filesystem;

// ---- the server side ----

std::string member_base(const std::string& table, unsigned node) {
  return engine::JobLaneKeys::for_table(table).member_base(std::to_string(node));
}

// True once `node`'s beat has landed in `table`'s membership set (fanouts include it from then).
bool is_member(redisContext* c, const std::string& table, unsigned node) {
  RedisReply r = command_argv(
      c, {"ZSCORE", engine::JobLaneKeys::for_table(table).members, std::to_string(node)});
  return r && r->type == REDIS_REPLY_STRING;
}

// Pauses / resumes `group` in `node`'s member queue: jobs wait in its lane, unclaimed.
// By the gpause script (lane admin), which also takes the member's hand-off credits down
// (member_park.lua); a plain SADD would leave them to hand jobs off until the consumer's next beat.
void pause_group(redisContext* c, const std::string& table, unsigned node, const BrandedId& group) {
  const std::string b = member_base(table, node);
  RedisReply r = run_script(c, "gpause", {b + "paused", b + "ring"}, {group.str()});
  EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << text(r.get());
}
void resume_group(redisContext* c, const std::string& table, unsigned node,
                  const BrandedId& group) {
  const std::string b = member_base(table, node);
  RedisReply r =
      run_script(c, "gresume", {b + "paused", b + "ring", b + "glimit", b + "gactive", b + "wake"},
                 {b, group.str()});
  EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << text(r.get());
}

long long lane_depth(redisContext* c, const std::string& table, unsigned node,
                     const BrandedId& group) {
  RedisReply r =
      command_argv(c, {"ZCARD", member_base(table, node) + "g:" + group.str() + ":pending"});
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

// Deletes every key of the table's job lane (the bus losing its queues): the table's own tag
// {ecc.coh.<t>} and every member queue's {ecc.coh.<t>|<m>}.
std::size_t delete_lane_keys(redisContext* c, const std::string& table) {
  const std::string pattern = "emq:{ecc.coh." + table + "[}|]*";
  RedisReply keys = command_argv(c, {"KEYS", pattern});
  if (!keys || keys->type != REDIS_REPLY_ARRAY) return 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < keys->elements; ++i) {
    RedisReply d = command_argv(c, {"DEL", text(keys->element[i])});
    if (d && d->type == REDIS_REPLY_INTEGER) n += static_cast<std::size_t>(d->integer);
  }
  return n;
}

std::string describe(const engine::Result<engine::Got>& g) {
  if (!g) return "error " + g.error().message();
  return std::string(engine::to_string(g->source)) + " " + (g->version ? g->version->str() : "-") +
         " " + g->value;
}

engine::JobConsumerStats consumer_of(const Engine& e, const std::string& table) {
  for (const auto& t : e.stats().tables) {
    if (t.name == table && t.consumer) return *t.consumer;
  }
  return {};
}

table::L1Stats l1_of(const Engine& e, const std::string& table) {
  for (const auto& t : e.stats().tables) {
    if (t.name == table) return t.l1;
  }
  return {};
}

// ---- a writer in its own process ----

// The child: one writer Engine and the writer's Journal. argv: --journal-writer port dir group
// table node mode [name version]. Modes:
//   seam-a   put the L2 row, record the intent, say "recorded <job>", then wait to be killed;
//   seam-b   put, record, enqueue under the recorded id, say "enqueued <job> <0|1>", then wait to
//            be killed (the mark is never sent);
//   replay   replay, say "replayed <n> deduplicated <m> pending <p>", exit 0.
int writer_main(int argc, char** argv) {
  if (argc < 8) return 64;
  const int port = std::atoi(argv[2]);
  const fs::path dir = argv[3];
  const auto group = BrandedId::parse(argv[4]);
  const std::string table = argv[5];
  const unsigned node = static_cast<unsigned>(std::atoi(argv[6]));
  const std::string mode = argv[7];
  if (!group) return 65;
  Engine e(node_options("127.0.0.1", port, node), {writer_spec(table)});
  if (auto ec = e.start()) {
    write_line(1, "error start " + ec.message());
    return 2;
  }
  Journal j(journal_options(dir, *group, node));
  const auto enqueue = lane_enqueue(e, table, *group);
  if (mode == "replay") {
    auto r = j.replay(enqueue);
    if (!r) {
      write_line(1, "error replay " + r.error().message());
      return 3;
    }
    if (auto flushed = j.flush(); !flushed) {
      write_line(1, "error flush " + flushed.error().message());
      return 3;
    }
    write_line(1, "replayed " + std::to_string(r->replayed) + " deduplicated " +
                      std::to_string(r->deduplicated) + " pending " +
                      std::to_string(j.stats().pending_enqueue));
    e.stop();
    return 0;
  }
  if (argc != 10) return 64;
  const auto name = BrandedId::parse(argv[8]), version = BrandedId::parse(argv[9]);
  if (!name || !version) return 65;
  if (!e.put(table, name->view(), "v=" + version->str(), *version)) {
    write_line(1, "error put");
    return 4;
  }
  if (mode == "seam-a") {
    const auto job = j.record(*name, *version);
    if (!job) {
      write_line(1, "error record " + job.error().message());
      return 5;
    }
    write_line(1, "recorded " + job->str());
  } else if (mode == "seam-b") {
    auto r = j.intend_and_enqueue(
        *name, *version, [&](const BrandedId& job, std::string_view n, const BrandedId& v) {
          auto admitted = enqueue(job, n, v);
          write_line(1, "enqueued " + job.str() + " " + (admitted && *admitted ? "1" : "0"));
          read_line(0, std::chrono::hours(1));  // killed here, unmarked
          return admitted;
        });
    if (!r) return 5;
  } else {
    return 64;
  }
  read_line(0, std::chrono::hours(1));  // killed here
  return 0;
}

// This binary re-executed with --journal-writer and `tail` (see main()).
std::unique_ptr<ChildProcess> spawn_writer(const std::vector<std::string>& tail) {
  std::vector<std::string> args = {"--journal-writer"};
  args.insert(args.end(), tail.begin(), tail.end());
  return ChildProcess::spawn(args);
}

// The writer's next line, or "(nothing)" after `timeout`.
std::string line_of(ChildProcess& w, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return w.receive(timeout).value_or("(nothing)");
}

std::uint64_t us_since(Clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

class JournalGates : public SingleServerTest {};

// ---- H1: files ----

TEST_F(JournalGates,
       H1TwoGroupsMakeTwoFilesANonBrandedGroupIsRefusedAndTheSchemaHoldsBothMemories) {
  TempDir dir;
  const BrandedId g1 = fresh_id("PRT"), g2 = fresh_id("PRT");
  {
    Journal j1(journal_options(dir.path(), g1));
    Journal j2(journal_options(dir.path(), g2));
    EXPECT_EQ(j1.path(), dir.path() / ("journal-" + g1.str() + ".db"));
    EXPECT_EQ(j2.path(), dir.path() / ("journal-" + g2.str() + ".db"));
    EXPECT_EQ(j1.stats().intents, 0u);
    EXPECT_EQ(j2.stats().intents, 0u);
    JournalOptions bad;
    bad.dir = dir.path();
    bad.group = "not-a-branded-id";
    EXPECT_THROW(Journal{bad}, engine::ConfigError);
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".db") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> expected = {"journal-" + g1.str() + ".db",
                                       "journal-" + g2.str() + ".db"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files, expected) << "exactly one file per group, none for the refused one";
  for (const auto& f : files) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((dir.path() / f).c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                                 "('intents', 'applied') ORDER BY name",
                                 -1, &s, nullptr),
              SQLITE_OK);
    std::vector<std::string> tables;
    while (sqlite3_step(s) == SQLITE_ROW) {
      tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
    }
    sqlite3_finalize(s);
    sqlite3_prepare_v2(db, "SELECT count(*) FROM intents", -1, &s, nullptr);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(s, 0), 0) << f;
    sqlite3_finalize(s);
    sqlite3_close(db);
    EXPECT_EQ(tables, (std::vector<std::string>{"applied", "intents"})) << f;
  }
  std::printf("[ H1 ] two groups, two files (%s, %s); not-a-branded-id refused; intents 0\n",
              expected[0].c_str(), expected[1].c_str());
}

// ---- H2: windows ----

TEST_F(JournalGates, H2BothCrashSeamsAreClosedByReplayOneReplayedOneDeduplicatedBothApplied) {
  TempDir dir;
  const std::string t = "h2";
  const BrandedId group = fresh_id("PRT");
  Journal j(journal_options(dir.path(), group, 201));
  auto w = node(200, {writer_spec(t)});
  auto c = node(202, {lane_spec(t)}, &j);
  ASSERT_TRUE(w && c);
  ASSERT_TRUE(eventually([&] { return is_member(client(), t, 202); }));
  // The consumer's lane holds what reaches it until the replay has answered.
  pause_group(client(), t, 202, group);
  const auto enqueue = lane_enqueue(*w, t, group);
  const BrandedId n1 = fresh_id("AST"), n2 = fresh_id("AST");
  const BrandedId v1 = w->mint("AST").value(), v2 = w->mint("AST").value();
  // Seam A: recorded, never enqueued.
  const BrandedId job1 = j.record(n1, v1).value();
  // Seam B: recorded and enqueued, the mark never sent.
  const BrandedId job2 = j.record(n2, v2).value();
  auto admitted = enqueue(job2, n2.view(), v2);
  ASSERT_TRUE(admitted && *admitted);
  EXPECT_EQ(j.stats().pending_enqueue, 2u);
  EXPECT_EQ(lane_depth(client(), t, 202, group), 1);

  auto r = j.replay(enqueue);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->replayed, 1u);
  EXPECT_EQ(r->deduplicated, 1u);
  EXPECT_EQ(lane_depth(client(), t, 202, group), 2) << "one job per intent, the duplicate absorbed";

  resume_group(client(), t, 202, group);
  ASSERT_TRUE(eventually([&] { return j.last_applied(n1) == v1 && j.last_applied(n2) == v2; }, 10s))
      << "the consumer never remembered both";
  ASSERT_TRUE(eventually([&] { return consumer_of(*c, t).completed == 2; }, 10s));
  ASSERT_TRUE(j.flush());
  EXPECT_EQ(j.stats().remembered, 2u);
  auto again = j.replay(enqueue);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->replayed, 0u);
  EXPECT_EQ(again->deduplicated, 0u);
  std::printf(
      "[ H2 ] seam A %s replayed, seam B %s deduplicated: {%llu, %llu}; both applied; after "
      "coverage {%llu, %llu}\n",
      job1.str().c_str(), job2.str().c_str(), static_cast<unsigned long long>(r->replayed),
      static_cast<unsigned long long>(r->deduplicated),
      static_cast<unsigned long long>(again->replayed),
      static_cast<unsigned long long>(again->deduplicated));
}

// ---- H3: memory ----

TEST_F(JournalGates,
       H3TheMemorySurvivesAFullRestartAndAnOldVersionAnswersRememberedStaleUntouched) {
  TempDir dir;
  const std::string t = "h3";
  const BrandedId group = fresh_id("PRT"), name = fresh_id("AST");
  const BrandedId v_old = fresh_id("AST"), v5 = fresh_id("AST"), v6 = fresh_id("AST");
  const std::string key = l2_key(t, name);
  auto set_l2 = [&](const BrandedId& v) {
    const std::string f = engine::frame_l2_value(v, "px=" + v.str());
    ASSERT_TRUE(command_argv(client(), {"SET", key, f, "PX", "60000"}));
  };
  {
    Journal j(journal_options(dir.path(), group));
    auto c = node(210, {lane_spec(t)}, &j);
    ASSERT_TRUE(c);
    set_l2(v_old);
    ASSERT_EQ(describe(c->get(t, name.view())), "l2 " + v_old.str() + " px=" + v_old.str());
    auto a = c->apply_and_remember(t, name.view(), v5);
    ASSERT_TRUE(a);
    EXPECT_EQ(*a, Applied::kApplied);
    EXPECT_EQ(j.last_applied(name), v5);
    c->stop();
  }  // table (engine) and journal stopped
  Journal j(journal_options(dir.path(), group));
  EXPECT_EQ(j.last_applied(name), v5) << "the memory is in the file";
  auto c = node(210, {lane_spec(t)}, &j);
  ASSERT_TRUE(c);
  const engine::TableWriter& w = writer_of(*c, t);
  EXPECT_EQ(w.map().size(), 0u) << "a fresh node starts with an empty L1";
  const auto l1_before = l1_of(*c, t);
  const auto w_before = w.stats();
  auto stale = c->apply_and_remember(t, name.view(), v_old);
  ASSERT_TRUE(stale);
  EXPECT_EQ(*stale, Applied::kRememberedStale);
  const auto l1_after = l1_of(*c, t);
  const auto w_after = w.stats();
  EXPECT_EQ(l1_after.coh_applied, l1_before.coh_applied);
  EXPECT_EQ(l1_after.coh_stale, l1_before.coh_stale);
  EXPECT_EQ(w_after.applied, w_before.applied);
  EXPECT_EQ(w_after.stale, w_before.stale);
  EXPECT_EQ(w_after.remembered_stale, w_before.remembered_stale + 1);
  EXPECT_EQ(w.map().size(), 0u) << "no row appeared";
  EXPECT_FALSE(l1_holds(*c, t, name));
  EXPECT_EQ(j.last_applied(name), v5);

  // A genuinely newer version passes through (onto the row the L2 holds at v5) and is remembered.
  set_l2(v5);
  ASSERT_EQ(describe(c->get(t, name.view())), "l2 " + v5.str() + " px=" + v5.str());
  auto fresh = c->apply_and_remember(t, name.view(), v6);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, Applied::kApplied);
  EXPECT_EQ(j.last_applied(name), v6);
  EXPECT_FALSE(l1_holds(*c, t, name)) << "the newer version dropped the row";
  c.reset();
  ASSERT_TRUE(j.flush());
  EXPECT_EQ(j.stats().remembered, 1u);
  std::printf(
      "[ H3 ] v5 remembered across a full stop; v_old -> remembered_stale (coh_applied %llu, "
      "coh_stale %llu, rows 0); v6 -> applied and remembered\n",
      static_cast<unsigned long long>(l1_after.coh_applied),
      static_cast<unsigned long long>(l1_after.coh_stale));
}

// ---- H4: loss ----

// Stages H4 on table t2: 50 intents enqueued into a paused lane of a remembering consumer, 20
// applied directly, then `lose` erases the bus; replay must re-enqueue exactly the 30 uncovered
// intents in seq order, and the consumer drains them to 50 of 50 names at their final versions.
void loss_then_replay(const std::function<redisContext*()>& client_now,
                      const testing::LocalServer& server, const char* label,
                      const std::function<void()>& lose) {
  TempDir dir;
  const std::string t = "t2";
  constexpr unsigned kConsumer = 222;
  const BrandedId group = fresh_id("PRT");
  Journal j(journal_options(dir.path(), group, 221));
  auto w = start_node(server, 220, {writer_spec(t)});
  auto c = start_node(server, kConsumer, {lane_spec(t)}, &j);
  ASSERT_TRUE(w && c);
  ASSERT_TRUE(eventually([&] { return is_member(client_now(), t, kConsumer); }));
  pause_group(client_now(), t, kConsumer, group);
  constexpr int kNames = 50, kApplied = 20;
  Intents in;
  const auto enqueue = lane_enqueue(*w, t, group);
  ASSERT_NO_FATAL_FAILURE(record_intents(j, *w, kNames, enqueue, in));
  EXPECT_EQ(lane_depth(client_now(), t, kConsumer, group), kNames);
  ASSERT_NO_FATAL_FAILURE(apply_directly(*c, t, in, kApplied));
  ASSERT_TRUE(j.flush());
  lose();
  // The consumer's next beat registers it again: replay admits into live members' queues.
  ASSERT_TRUE(eventually([&] { return is_member(client_now(), t, kConsumer); }, 10s))
      << "the consumer never re-registered after the loss";
  // The writer's connection answers again (a restart drops it until its reconnect).
  ASSERT_TRUE(eventually(
      [&] { return w->drop_l2(t, in.names[0].view(), in.versions[0]).has_value(); }, 10s));
  engine::ReplayResult r;
  ASSERT_NO_FATAL_FAILURE(replay_and_drain(j, enqueue, in, kApplied, r));
  ASSERT_TRUE(j.flush());
  const auto s = j.stats();
  EXPECT_EQ(s.remembered, static_cast<std::uint64_t>(kNames));
  const int final_versions = at_final_versions(j, in);
  EXPECT_EQ(final_versions, kNames);
  std::printf(
      "[ H4 %s ] 50 enqueued, 20 applied directly, bus lost -> replay {%llu, %llu} in seq order; "
      "%d of 50 names at their final versions, remembered %llu\n",
      label, static_cast<unsigned long long>(r.replayed),
      static_cast<unsigned long long>(r.deduplicated), final_versions,
      static_cast<unsigned long long>(s.remembered));
}

TEST_F(JournalGates, H4DeletedQueueKeysAreReplayedBackThirtyInSeqOrderToFiftyOfFiftyNames) {
  loss_then_replay([&] { return client(); }, server(), "keys deleted",
                   [&] {
                     EXPECT_GT(delete_lane_keys(client(), "t2"), 0u);
                     EXPECT_EQ(count_keys(client(), "emq:{ecc.coh.t2[}|]*g:*"), 0u);
                   });
}

TEST_F(JournalGates, H4ARealServerRestartIsReplayedBackThirtyInSeqOrderToFiftyOfFiftyNames) {
  RedisClient fresh;  // the fixture's client does not survive the restart
  loss_then_replay([&] { return fresh ? fresh.get() : client(); }, server(), "server restarted",
                   [&] {
                     server().restart(true);
                     fresh = connect_client(server());
                     EXPECT_EQ(count_keys(fresh.get(), "emq:*"), 0u)
                         << "the restart kept queue keys";
                   });
}

// ---- H5: compaction ----

TEST_F(JournalGates, H5CompactionRetiresAllFiftyCoveredIntentsAndTheMemoryStaysAcrossAReopen) {
  TempDir dir;
  const std::string t = "h5";
  const BrandedId group = fresh_id("PRT");
  constexpr int kNames = 50;
  Intents in;
  {
    Journal j(journal_options(dir.path(), group, 231));
    auto w = node(230, {writer_spec(t)});
    auto c = node(232, {lane_spec(t)}, &j);
    ASSERT_TRUE(w && c);
    ASSERT_TRUE(eventually([&] { return is_member(client(), t, 232); }));
    const auto enqueue = lane_enqueue(*w, t, group);
    ASSERT_NO_FATAL_FAILURE(record_intents(j, *w, kNames, enqueue, in));
    ASSERT_TRUE(eventually([&] { return consumer_of(*c, t).completed == kNames; }, 20s));
    c.reset();
    ASSERT_TRUE(j.flush());
    auto before = j.stats();
    EXPECT_EQ(before.intents, static_cast<std::uint64_t>(kNames));
    EXPECT_EQ(before.remembered, static_cast<std::uint64_t>(kNames));
    EXPECT_EQ(j.compact().value(), static_cast<std::uint64_t>(kNames));
    auto after = j.stats();
    EXPECT_EQ(after.intents, 0u);
    EXPECT_EQ(after.remembered, static_cast<std::uint64_t>(kNames));
    auto r = j.replay(enqueue);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->replayed, 0u);
    EXPECT_EQ(r->deduplicated, 0u);
    EXPECT_EQ(j.compact().value(), 0u) << "compaction is idempotent";
  }
  Journal reopened(journal_options(dir.path(), group));
  const int answered = at_final_versions(reopened, in);
  EXPECT_EQ(answered, kNames);
  EXPECT_EQ(reopened.stats().intents, 0u);
  std::printf(
      "[ H5 ] 50 retired by coverage, intents 0, remembered 50, replay {0, 0}; the reopened file "
      "answers %d of 50\n",
      answered);
}

// ---- H6: price ----

TEST_F(JournalGates, H6ThePairCostIsPrintedBesideAPlainSqliteWalCommit) {
  TempDir dir;
  constexpr int kPairs = 400, kWriters = 4;
  // The baseline: one autocommitted INSERT per call into a WAL file at synchronous=NORMAL and
  // the journal's page size.
  double plain_us = 0;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir.path() / "plain.db").c_str(), &db), SQLITE_OK);
    const std::string schema = "PRAGMA page_size=" + std::to_string(engine::kJournalPageSize) +
                               "; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE "
                               "t(k INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL)";
    ASSERT_EQ(sqlite3_exec(db, schema.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO t(v) VALUES(?)", -1, &s, nullptr), SQLITE_OK);
    const auto t0 = Clock::now();
    for (int i = 0; i < kPairs; ++i) {
      const std::string v = fresh_id("AST").str();
      sqlite3_bind_text(s, 1, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
      ASSERT_EQ(sqlite3_step(s), SQLITE_DONE);
      sqlite3_reset(s);
    }
    plain_us = static_cast<double>(us_since(t0)) / kPairs;
    sqlite3_finalize(s);
    sqlite3_close(db);
  }
  Journal j(journal_options(dir.path(), fresh_id("PRT")));
  const BrandedId name = fresh_id("AST");
  auto t0 = Clock::now();
  for (int i = 0; i < kPairs; ++i) j.mark_enqueued(j.record(name, fresh_id("AST")).value());
  ASSERT_TRUE(j.flush());
  const double single_us = static_cast<double>(us_since(t0)) / kPairs;
  const auto before = j.stats();
  t0 = Clock::now();
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < kPairs / kWriters; ++i) {
        j.mark_enqueued(j.record(name, fresh_id("AST")).value());
      }
    });
  }
  for (auto& th : writers) th.join();
  ASSERT_TRUE(j.flush());
  const double loaded_us = static_cast<double>(us_since(t0)) / kPairs;
  const auto after = j.stats();
  EXPECT_EQ(after.intents, 2u * kPairs);
  EXPECT_EQ(after.pending_enqueue, 0u) << "every mark reached the file";
  const double per_commit =
      static_cast<double>(after.grouped - before.grouped) /
      static_cast<double>(std::max<std::uint64_t>(1, after.transactions - before.transactions));
  std::printf(
      "[ H6 ] record+mark pair: %.1f us single, %.1f us amortized under %d writers (%.1f requests "
      "per commit); plain SQLite WAL commit %.1f us; single pair = %.2fx the plain commit\n",
      single_us, loaded_us, kWriters, per_commit, plain_us, single_us / plain_us);
  // Loose sanity only: the benchmark owns the figures.
  EXPECT_GT(plain_us, 0.0);
  EXPECT_GT(single_us, 0.0);
  EXPECT_LT(single_us, 50000.0);
  EXPECT_LT(loaded_us, 50000.0);
}

// ---- the crash drill ----

TEST_F(JournalGates,
       CrashDrillAWriterKilledAtEachSeamIsReplayedByItsRestartNothingLostTheDuplicateCounted) {
  TempDir writer_dir, consumer_dir;
  const std::string t = "crash";
  constexpr unsigned kConsumer = 242, kWriter = 241;
  const BrandedId group = fresh_id("PRT");
  const BrandedId a = fresh_id("AST"), b = fresh_id("AST");
  const BrandedId a0 = fresh_id("AST"), b0 = fresh_id("AST");
  // The consumer node caches both names at their first versions.
  for (const auto& [n, v] : {std::pair{a, a0}, std::pair{b, b0}}) {
    ASSERT_TRUE(command_argv(
        client(), {"SET", l2_key(t, n), engine::frame_l2_value(v, "v=" + v.str()), "PX", "60000"}));
  }
  Journal memory(journal_options(consumer_dir.path(), group));
  auto c = node(kConsumer, {lane_spec(t)}, &memory);
  ASSERT_TRUE(c);
  ASSERT_TRUE(eventually([&] { return is_member(client(), t, kConsumer); }));
  EXPECT_EQ(describe(c->get(t, a.view())), "l2 " + a0.str() + " v=" + a0.str());
  EXPECT_EQ(describe(c->get(t, b.view())), "l2 " + b0.str() + " v=" + b0.str());
  // Until the replay has answered, the lane holds what reaches it (so the bus still holds the
  // seam-B job when the restarted writer replays it).
  pause_group(client(), t, kConsumer, group);
  const std::vector<std::string> common = {std::to_string(server().port()),
                                           writer_dir.path().string(), group.str(), t,
                                           std::to_string(kWriter)};
  const BrandedId a1 = fresh_id("AST"), b1 = fresh_id("AST");
  auto args = [&](std::vector<std::string> tail) {
    std::vector<std::string> out = common;
    out.insert(out.end(), tail.begin(), tail.end());
    return out;
  };

  auto w1 = spawn_writer(args({"seam-a", a.str(), a1.str()}));
  ASSERT_TRUE(w1);
  const std::string recorded = line_of(*w1);
  ASSERT_TRUE(recorded.starts_with("recorded JOB")) << recorded;
  ASSERT_TRUE(w1->kill_now()) << "the writer did not die of SIGKILL at seam A";

  auto w2 = spawn_writer(args({"seam-b", b.str(), b1.str()}));
  ASSERT_TRUE(w2);
  const std::string enqueued = line_of(*w2);
  ASSERT_TRUE(enqueued.starts_with("enqueued JOB") && enqueued.ends_with(" 1")) << enqueued;
  ASSERT_TRUE(w2->kill_now()) << "the writer did not die of SIGKILL at seam B";
  EXPECT_EQ(lane_depth(client(), t, kConsumer, group), 1) << "only the seam-B job reached the bus";
  {
    Journal dead(journal_options(writer_dir.path(), group));
    const auto s = dead.stats();
    EXPECT_EQ(s.intents, 2u);
    EXPECT_EQ(s.pending_enqueue, 2u) << "neither intent was marked";
  }

  auto w3 = spawn_writer(args({"replay"}));
  ASSERT_TRUE(w3);
  const std::string replayed = line_of(*w3);
  EXPECT_EQ(replayed, "replayed 1 deduplicated 1 pending 1");
  EXPECT_EQ(w3->wait_exit(), 0);
  EXPECT_EQ(lane_depth(client(), t, kConsumer, group), 2) << "one job per intent";

  resume_group(client(), t, kConsumer, group);
  ASSERT_TRUE(
      eventually([&] { return memory.last_applied(a) == a1 && memory.last_applied(b) == b1; }, 10s))
      << "a name never reached its final version";
  ASSERT_TRUE(eventually([&] { return consumer_of(*c, t).completed == 2; }, 10s));
  EXPECT_EQ(describe(c->get(t, a.view())), "l2 " + a1.str() + " v=" + a1.str());
  EXPECT_EQ(describe(c->get(t, b.view())), "l2 " + b1.str() + " v=" + b1.str());
  const auto s = consumer_of(*c, t);
  EXPECT_EQ(s.completed, 2u) << "each intent applied once";
  EXPECT_EQ(s.complete_stale + s.complete_gone + s.complete_errors + s.dead, 0u);
  std::printf(
      "[ crash ] SIGKILL after record (%s) and after enqueue (%s); the restarted writer: %s; both "
      "names at their final versions on the consumer node\n",
      recorded.substr(9).c_str(), enqueued.substr(9, 14).c_str(), replayed.c_str());
}

}  // namespace
}  // namespace echo::test

// A writer process when re-executed with --journal-writer (see spawn_writer); otherwise the tests.
int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--journal-writer", echo::test::writer_main);
}
