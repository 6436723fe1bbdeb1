// SPDX-License-Identifier: MIT
// Gates H1-H6 (docs/wire.md, "The gates"): the journal beside the bus. H1 files per group; H2 both
// crash seams closed by replay; H3 the applied memory across a full stop; H4 the bus's queue keys
// deleted and replayed back; H5 compaction by coverage; H6 the price, derived from a plain SQLite
// WAL commit and the bare job lane measured in the same run (gate_journal_price.cc; what the two
// files share, gate_journal.h). The journal files live in a temp dir the gates remove.
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/engine/l2_frame.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>
#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>

#include "drill/drill.h"
#include "drill/floors.h"
#include "drill/gate_journal.h"

namespace echo::cli {
namespace {

using engine::Applied;
using engine::CoherenceMode;
using engine::Engine;
using engine::Journal;
using engine::JournalOptions;
using engine::Loaded;
using engine::LoadResult;
using engine::TableSpec;
using floors::node_options;
using floors::Redis;
using floors::Reply;
using journal_gates::JournalDir;
using journal_gates::lane_enqueue;
using journal_gates::lane_table;
using journal_gates::member;
using journal_gates::mint;
using journal_gates::options;
using table::BrandedId;
namespace fs = std::filesystem;

// A consumer node whose lane consults `j`; nullptr when it does not start.
std::unique_ptr<Engine> remembering(const DrillTarget& target, unsigned node,
                                    const std::string& table, Journal& j) {
  auto e = std::make_unique<Engine>(node_options(target, node),
                                    std::vector<TableSpec>{lane_table(table, CoherenceMode::kJob)});
  e->use_journal(table, j);
  if (e->start()) return nullptr;
  return e;
}

std::string base_of(const std::string& table, unsigned node) {
  return engine::JobLaneKeys::for_table(table).member_base(std::to_string(node));
}

// By the gpause script (lane admin), which also takes the member's hand-off credits down
// (member_park.lua); a plain SADD would leave them to hand jobs off until the consumer's next beat.
bool pause(Redis& r, const std::string& table, unsigned node, const BrandedId& g) {
  const lua::Script* s = lua::find_script("gpause");
  if (s == nullptr) return false;
  const std::string b = base_of(table, node);
  Reply p = r.command("EVAL %b 2 %spaused %sring %s", s->source.data(), s->source.size(), b.c_str(),
                      b.c_str(), g.str().c_str());
  return p && p->type == REDIS_REPLY_INTEGER;
}

bool resume(Redis& r, const std::string& table, unsigned node, const BrandedId& g) {
  const lua::Script* s = lua::find_script("gresume");
  if (s == nullptr) return false;
  Reply loaded = r.command("SCRIPT LOAD %b", s->source.data(), s->source.size());
  const std::string b = base_of(table, node);
  Reply out = r.command("EVALSHA %s 5 %spaused %sring %sglimit %sgactive %swake %s %s",
                        std::string(s->sha1).c_str(), b.c_str(), b.c_str(), b.c_str(), b.c_str(),
                        b.c_str(), b.c_str(), g.str().c_str());
  return out && out->type == REDIS_REPLY_INTEGER;
}

long long depth(Redis& r, const std::string& table, unsigned node, const BrandedId& g) {
  Reply z = r.command("ZCARD %sg:%s:pending", base_of(table, node).c_str(), g.str().c_str());
  return z && z->type == REDIS_REPLY_INTEGER ? z->integer : -1;
}

std::string counts(const engine::ReplayResult& r) {
  return "{replayed: " + std::to_string(r.replayed) +
         ", deduplicated: " + std::to_string(r.deduplicated) + "}";
}

void h1_files(GateRun& run, const DrillTarget&) {
  run.stage(
      "two groups G1, G2 (PRT) open journals in one temp dir; a third with group "
      "'not-a-branded-id'");
  run.derive(
      "one file per group named by the group's branded id, so two groups make two files; "
      "the group is validated before any file exists; the schema carries the outbox "
      "(intents) and the last word (applied)");
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal files")) return;
  const BrandedId g1 = mint("PRT"), g2 = mint("PRT");
  std::uint64_t intents = 99;
  {
    Journal j1(options(dir.path(), g1)), j2(options(dir.path(), g2));
    intents = j1.stats().intents + j2.stats().intents;
    bool refused = false;
    try {
      JournalOptions bad;
      bad.dir = dir.path();
      bad.group = "not-a-branded-id";
      Journal j3(bad);
    } catch (const engine::ConfigError&) {
      refused = true;
    }
    run.expect(refused, "group 'not-a-branded-id' refused at the door (ConfigError)");
  }
  int files = 0, schemas = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.path().extension() != ".db") continue;
    ++files;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(e.path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_stmt* s = nullptr;
      sqlite3_prepare_v2(db,
                         "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                         "('intents', 'applied')",
                         -1, &s, nullptr);
      if (s != nullptr && sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == 2) ++schemas;
      sqlite3_finalize(s);
    }
    sqlite3_close(db);
  }
  run.expect(
      files == 2 && fs::exists(dir.path() / ("journal-" + g1.str() + ".db")) &&
          fs::exists(dir.path() / ("journal-" + g2.str() + ".db")),
      "exactly two files, journal-<G1>.db and journal-<G2>.db (" + std::to_string(files) + ")");
  run.expect(schemas == 2, "both files hold intents and applied");
  run.expect(intents == 0, "0 intents");
  run.figure("two groups, two files; not-a-branded-id refused; both tables in each; 0 intents");
}

void h2_windows(GateRun& run, const DrillTarget& target) {
  const std::string t = "jh2";
  constexpr unsigned kC = 442;
  run.stage("writer W (none) and consumer C (member " + std::to_string(kC) +
            ", job lane with "
            "the journal) on " +
            t +
            "; C's lane paused for the group; intent 1 recorded only "
            "(seam A), intent 2 recorded and enqueued but never marked (seam B)");
  run.derive(
      "replay re-enqueues every uncovered intent under its recorded id: the never-enqueued "
      "one is admitted (replayed 1), the other is already on the bus and answers duplicate "
      "(deduplicated 1); once C has applied both, coverage is total and replay is {0, 0}");
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal file")) return;
  const BrandedId group = mint("PRT");
  Journal j(options(dir.path(), group));
  Engine w(node_options(target, 441), {lane_table(t, CoherenceMode::kNone)});
  if (!run.expect(!w.start(), "writer W starts")) return;
  auto c = remembering(target, kC, t, j);
  if (!run.expect(c != nullptr, "consumer C starts with the journal")) return;
  Redis r(target);
  run.expect(floors::eventually([&] { return member(r, t, kC); }), "C's first beat registered it");
  run.expect(pause(r, t, kC, group), "C's lane paused for the group");
  const auto enqueue = lane_enqueue(w, t, group);
  const BrandedId n1 = mint("AST"), n2 = mint("AST"), v1 = mint("AST"), v2 = mint("AST");
  const auto job1 = j.record(n1, v1);
  const auto recorded2 = j.record(n2, v2);
  if (!run.expect(job1 && recorded2, "intents 1 and 2 recorded")) return;
  const BrandedId job2 = *recorded2;
  auto admitted = enqueue(job2, n2.view(), v2);
  run.expect(admitted && *admitted, "intent 2 admitted under its recorded id, never marked");
  auto first = j.replay(enqueue);
  run.expect(
      first && first->replayed == 1 && first->deduplicated == 1,
      "replay answers {replayed: 1, deduplicated: 1} (" + (first ? counts(*first) : "error") + ")");
  run.expect(depth(r, t, kC, group) == 2, "C's lane holds one job per intent");
  run.expect(resume(r, t, kC, group), "C's lane resumed");
  const bool both =
      floors::eventually([&] { return j.last_applied(n1) == v1 && j.last_applied(n2) == v2; },
                         std::chrono::seconds(5));
  run.expect(both, "both intents applied and remembered");
  run.expect(j.flush().has_value(), "the applied rows are in the file");
  auto again = j.replay(enqueue);
  run.expect(
      again && again->replayed == 0 && again->deduplicated == 0,
      "after full coverage replay answers {0, 0} (" + (again ? counts(*again) : "error") + ")");
  run.figure("seam A replayed, seam B deduplicated: " + (first ? counts(*first) : "error") +
             "; both applied; after coverage " + (again ? counts(*again) : "error"));
}

void h3_memory(GateRun& run, const DrillTarget& target) {
  const std::string t = "jh3";
  run.stage("consumer C on " + t +
            " with the journal; L2 holds the name at v_old; C reads it, "
            "applies v5 and remembers it; C and the journal stop; both start again, empty L1");
  run.derive(
      "the applied table lives in the file, so it survives the table, the node and the "
      "bus: v_old must answer remembered_stale from the memory alone -- no counter moves, "
      "no row appears -- while v6 passes through and becomes the last word");
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal file")) return;
  const BrandedId group = mint("PRT"), name = mint("AST");
  const BrandedId v_old = mint("AST"), v5 = mint("AST"), v6 = mint("AST");
  Redis r(target);
  const std::string key = table::l2_key(t, name.view()).value();
  auto set_l2 = [&](const BrandedId& v) {
    const std::string f = engine::frame_l2_value(v, "px=1");
    Reply ok = r.command("SET %b %b PX 60000", key.data(), key.size(), f.data(), f.size());
  };
  set_l2(v_old);
  {
    Journal j(options(dir.path(), group));
    auto c = remembering(target, 443, t, j);
    if (!run.expect(c != nullptr, "C starts with the journal")) return;
    run.expect(c->get(t, name.view()).has_value(), "C caches the row at v_old");
    auto a = c->apply_and_remember(t, name.view(), v5);
    run.expect(a && *a == Applied::kApplied && j.last_applied(name) == v5,
               "v5 applied and remembered");
  }
  Journal j(options(dir.path(), group));
  auto c = remembering(target, 443, t, j);
  if (!run.expect(c != nullptr, "C starts again")) return;
  const engine::TableWriter* w = engine::internal::writer_of(*c, t);
  run.expect(w->map().size() == 0 && j.last_applied(name) == v5,
             "empty L1; the reopened file remembers v5");
  const auto l1 = c->stats().tables.at(0).l1;
  const auto ws = w->stats();
  auto stale = c->apply_and_remember(t, name.view(), v_old);
  const auto l1b = c->stats().tables.at(0).l1;
  const auto wsb = w->stats();
  run.expect(stale && *stale == Applied::kRememberedStale, "v_old answers remembered_stale");
  run.expect(l1b.coh_applied == l1.coh_applied && l1b.coh_stale == l1.coh_stale &&
                 wsb.applied == ws.applied && wsb.stale == ws.stale,
             "the table's verdict counters did not move");
  run.expect(w->map().size() == 0, "no row appeared");
  set_l2(v5);
  run.expect(c->get(t, name.view()).has_value(), "C caches the row at v5");
  auto fresh = c->apply_and_remember(t, name.view(), v6);
  run.expect(fresh && *fresh == Applied::kApplied && j.last_applied(name) == v6,
             "v6 passes through, applied and remembered");
  c.reset();
  run.figure("v5 remembered across a full stop; v_old -> remembered_stale with coh_applied " +
             std::to_string(l1b.coh_applied) + ", coh_stale " + std::to_string(l1b.coh_stale) +
             " unmoved and no row; v6 -> applied, the new last word");
}

void h4_loss(GateRun& run, const DrillTarget& target) {
  const std::string t = "t2";
  constexpr unsigned kC = 445;
  constexpr int kNames = 50, kDirect = 20;
  run.stage("consumer C (member " + std::to_string(kC) + ", journal) on " + t +
            " with its lane "
            "paused; W intends 50 names (record, enqueue, mark); C applies 20 directly; every "
            "emq:{ecc.coh.t2}:* and member queue emq:{ecc.coh.t2|<m>}:* key is deleted; C's "
            "next beat registers it again");
  run.derive(
      "the bus is volatile, so the 50 queued jobs are gone; coverage leaves exactly the 30 "
      "intents C never applied -- replay must enqueue 30 in seq order under their recorded "
      "ids and deduplicate none, and C must drain them to 50 of 50 names remembered at "
      "their final versions");
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal file")) return;
  const BrandedId group = mint("PRT");
  Journal j(options(dir.path(), group));
  Engine w(node_options(target, 444), {lane_table(t, CoherenceMode::kNone)});
  if (!run.expect(!w.start(), "writer W starts")) return;
  auto c = remembering(target, kC, t, j);
  if (!run.expect(c != nullptr, "consumer C starts with the journal")) return;
  Redis r(target);
  run.expect(floors::eventually([&] { return member(r, t, kC); }), "C registered");
  run.expect(pause(r, t, kC, group), "C's lane paused");
  const auto enqueue = lane_enqueue(w, t, group);
  std::vector<BrandedId> names, versions, jobs;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(mint("AST"));
    versions.push_back(mint("AST"));
    auto job = j.intend_and_enqueue(names.back(), versions.back(), enqueue);
    if (!run.expect(job.has_value(), "intent " + std::to_string(i) + " enqueued")) return;
    jobs.push_back(*job);
  }
  run.expect(depth(r, t, kC, group) == kNames, "C's lane holds 50 jobs");
  int direct = 0;
  for (int i = 0; i < kDirect; ++i)
    direct += c->apply_and_remember(t, names[i].view(), versions[i]).has_value();
  run.expect(direct == kDirect, "20 applied directly through apply_and_remember");
  std::size_t deleted = 0;
  std::string cursor = "0";
  do {
    Reply s = r.command("SCAN %s MATCH emq:{ecc.coh.t2[}|]* COUNT 1000", cursor.c_str());
    if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 2) break;
    cursor.assign(s->element[0]->str, s->element[0]->len);
    for (std::size_t i = 0; i < s->element[1]->elements; ++i) {
      Reply d = r.command("DEL %b", s->element[1]->element[i]->str, s->element[1]->element[i]->len);
      if (d && d->type == REDIS_REPLY_INTEGER) deleted += static_cast<std::size_t>(d->integer);
    }
  } while (cursor != "0");
  run.expect(deleted > 0 && r.count_keys("emq:{ecc.coh.t2|*}:job:*") == 0,
             "the lane's queue keys deleted (" + std::to_string(deleted) + " keys)");
  run.expect(floors::eventually([&] { return member(r, t, kC); }, std::chrono::seconds(3)),
             "C re-registered on its next beat");
  std::vector<BrandedId> order;
  auto rep = j.replay([&](const BrandedId& job, std::string_view n, const BrandedId& v) {
    order.push_back(job);
    return enqueue(job, n, v);
  });
  run.expect(
      rep && rep->replayed == kNames - kDirect && rep->deduplicated == 0,
      "replay answers {replayed: 30, deduplicated: 0} (" + (rep ? counts(*rep) : "error") + ")");
  run.expect(order == std::vector<BrandedId>(jobs.begin() + kDirect, jobs.end()),
             "the 30 uncovered intents in seq order under their recorded ids");
  int final_versions = 0;
  floors::eventually(
      [&] {
        final_versions = 0;
        for (int i = 0; i < kNames; ++i) final_versions += j.last_applied(names[i]) == versions[i];
        return final_versions == kNames;
      },
      std::chrono::seconds(5));
  run.expect(j.flush().has_value(), "the applied rows are in the file");
  const auto s = j.stats();
  run.expect(final_versions == kNames && s.remembered == kNames,
             "50 of 50 names at their final versions, remembered " + std::to_string(s.remembered));
  run.figure("queue keys deleted; replay " + (rep ? counts(*rep) : "error") + " in seq order; " +
             std::to_string(final_versions) + " of 50 names at their final versions");
}

void h5_compaction(GateRun& run, const DrillTarget& target) {
  const std::string t = "jh5";
  constexpr unsigned kC = 447;
  constexpr int kNames = 50;
  run.stage("consumer C (member " + std::to_string(kC) +
            ", journal) drains 50 intents W "
            "recorded, enqueued and marked; then compact, replay, and a fresh open of the file");
  run.derive(
      "an intent is retired when its name carries an applied version at least as new -- "
      "coverage, not acknowledgment -- so all 50 go, the applied memory keeps 50 names, "
      "replay finds nothing, and a reopen still answers the last word");
  JournalDir dir;
  if (!run.expect(dir.ok(), "a temp dir for the journal file")) return;
  const BrandedId group = mint("PRT");
  std::vector<BrandedId> names, versions;
  {
    Journal j(options(dir.path(), group));
    Engine w(node_options(target, 446), {lane_table(t, CoherenceMode::kNone)});
    if (!run.expect(!w.start(), "writer W starts")) return;
    auto c = remembering(target, kC, t, j);
    if (!run.expect(c != nullptr, "consumer C starts with the journal")) return;
    Redis r(target);
    run.expect(floors::eventually([&] { return member(r, t, kC); }), "C registered");
    const auto enqueue = lane_enqueue(w, t, group);
    for (int i = 0; i < kNames; ++i) {
      names.push_back(mint("AST"));
      versions.push_back(mint("AST"));
      if (!run.expect(j.intend_and_enqueue(names.back(), versions.back(), enqueue).has_value(),
                      "intent enqueued"))
        return;
    }
    run.expect(
        floors::eventually([&] { return j.stats().remembered == kNames; }, std::chrono::seconds(5)),
        "C drained all 50");
    c.reset();
    run.expect(j.flush().has_value(), "the applied rows are in the file");
    const auto before = j.stats();
    const auto compacted = j.compact();
    const std::uint64_t retired = compacted.has_value() ? *compacted : 0;
    const auto after = j.stats();
    auto rep = j.replay(enqueue);
    run.expect(before.intents == kNames && retired == kNames,
               "50 retired by coverage in one pass (" +
                   (compacted ? std::to_string(retired) : compacted.error().message()) + ")");
    run.expect(after.intents == 0 && after.remembered == kNames,
               "intents 0, remembered " + std::to_string(after.remembered));
    run.expect(rep && rep->replayed == 0 && rep->deduplicated == 0,
               "replay over the compacted journal answers {0, 0}");
    const auto second = j.compact();
    run.expect(second && *second == 0, "a second compaction retires nothing");
  }
  Journal reopened(options(dir.path(), group));
  int answered = 0;
  for (int i = 0; i < kNames; ++i) answered += reopened.last_applied(names[i]) == versions[i];
  run.expect(answered == kNames,
             "a fresh open answers the last word for " + std::to_string(answered) + " of 50");
  run.figure("50 retired, intents 0, remembered 50, replay {0, 0}; the reopened file answers " +
             std::to_string(answered) + " of 50 -- the outbox empties, the memory does not");
}

void add_journal_gates(std::vector<Gate>& gates) {
  gates.push_back({"H1", "files", h1_files});
  gates.push_back({"H2", "windows", h2_windows});
  gates.push_back({"H3", "memory", h3_memory});
  gates.push_back({"H4", "loss", h4_loss});
  gates.push_back({"H5", "compaction", h5_compaction});
}

const GateGroup kGroup{4401, add_journal_gates};

}  // namespace
}  // namespace echo::cli
