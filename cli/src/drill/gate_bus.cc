// SPDX-License-Identifier: MIT
// The bus gates of docs/wire.md, "The gates" (3.2 J1-J5 admission, 3.3 L1-L6 leases and fencing,
// 3.4 G1-G8 lanes), printed by the drill as the integration tests (bus_scripts_*_test,
// job_lane_*_test) assert them. They run the embedded scripts by EVALSHA on a plain client, each
// gate on a fresh queue; 3.4 G5 and G6 park this project's own consumer (an engine node) rather
// than a raw BLPOP, since that is the consumer the lane ships. Ids are prefixed with their
// chapter: 3.4's G gates would otherwise clash with the ring's G1-G6 (4.3).
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drill/drill.h"
#include "drill/floors.h"

namespace echo::cli {
namespace {

using engine::Admission;
using engine::CoherenceMode;
using engine::Engine;
using engine::TableSpec;
using floors::Clock;
using floors::fmt;
using floors::Redis;
using floors::Reply;
using table::BrandedId;
using Args = std::vector<std::string>;

constexpr unsigned kGateNode = 206;

std::string text(const redisReply* r) {
  if (r == nullptr) return "(no reply)";
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  if (r->type == REDIS_REPLY_NIL) return "(nil)";
  if (r->str != nullptr) return std::string(r->str, r->len);
  return "(array)";
}
bool is_int(const Reply& r, long long n) {
  return r && r->type == REDIS_REPLY_INTEGER && r->integer == n;
}
bool is_error(const Reply& r, std::string_view msg) {
  return r && r->type == REDIS_REPLY_ERROR && text(r.get()) == msg;
}

struct Claimed {
  std::string id, payload, group;
  long long token = 0;
};

// One bus queue on a plain client: the scripts by EVALSHA (loaded once), and its keys.
class Bus {
 public:
  Bus(Redis& r, std::string queue) : r_(r), base_("emq:{" + queue + "}:") {}
  std::string key(std::string_view s) const { return base_ + std::string(s); }
  std::string job(std::string_view id) const { return base_ + "job:" + std::string(id); }
  std::string lane(std::string_view g) const { return base_ + "g:" + std::string(g) + ":pending"; }
  const std::string& base() const { return base_; }

  Reply run(std::string_view name, const Args& keys, const Args& argv) {
    return r_.eval(name, keys, argv);
  }
  Reply enqueue(const std::string& id, const std::string& p) {
    return run("enqueue", {job(id), key("pending")}, {id, p});
  }
  Reply genqueue(const std::string& id, const std::string& p, const std::string& g) {
    return run(
        "genqueue",
        {job(id), lane(g), key("ring"), key("paused"), key("glimit"), key("gactive"), key("wake")},
        {id, p, g});
  }
  Reply schedule(const std::string& id, const std::string& p) {
    return run("schedule", {job(id), key("schedule")}, {id, p, "in", "0"});
  }
  std::optional<Claimed> claim(long long lease) {
    return as_claim(
        run("claim", {key("pending"), key("active")}, {base_ + "job:", std::to_string(lease)}), 3);
  }
  std::optional<Claimed> gclaim(long long lease) {
    return as_claim(run("gclaim", {key("ring"), key("active")}, {base_, std::to_string(lease)}), 4);
  }
  Reply complete(const std::string& id, const std::string& token) {
    return run("complete", {key("active"), job(id)}, {id, token, base_});
  }
  Reply retry(const std::string& id, const std::string& token, long long max,
              const std::string& err) {
    return run("retry", {key("active"), key("schedule"), key("dead"), job(id)},
               {id, token, "0", std::to_string(max), err, base_});
  }
  Reply promote() { return run("promote", {key("schedule"), key("pending")}, {base_, "100"}); }
  Reply reap() { return run("reap", {key("active"), key("pending")}, {base_}); }
  Reply gpause(const std::string& g) { return run("gpause", {key("paused"), key("ring")}, {g}); }
  Reply glimit(const std::string& g, long long n) {
    return run("glimit", {key("glimit"), key("gactive"), key("ring"), key("paused"), key("wake")},
               {base_, g, std::to_string(n)});
  }
  std::string hget(const std::string& k, const std::string& f) {
    return text(r_.command("HGET %s %s", k.c_str(), f.c_str()).get());
  }
  long long num(const char* format, const std::string& k) {
    Reply r = r_.command(format, k.c_str());
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  }
  std::vector<std::string> list(const char* format, const std::string& k) {
    Reply r = r_.command(format, k.c_str());
    std::vector<std::string> out;
    if (r && r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
    }
    return out;
  }
  long long keys_left() { return static_cast<long long>(list("KEYS %s*", base_).size()); }

 private:
  static std::optional<Claimed> as_claim(const Reply& r, std::size_t n) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < n) return std::nullopt;
    Claimed c{text(r->element[0]), text(r->element[1]), n > 3 ? text(r->element[3]) : "",
              r->element[2]->integer};
    return c;
  }
  Redis& r_;
  std::string base_;
};

// Each gate's queue and ids: minted, so a shared server's leftovers never collide.
struct Fresh {
  table::Minter minter{kGateNode};
  std::string queue() { return "drill.bus." + minter.mint("QUE").value().str(); }
  std::string job() { return minter.mint("JOB").value().str(); }
  std::string group() { return minter.mint("PRT").value().str(); }
};
Fresh& fresh() {
  static Fresh f;
  return f;
}

// ---- 3.2 J1-J5: admission ----

void j1(GateRun& run, const DrillTarget& target) {
  run.stage("enqueue one JOB id with payload p1 on a fresh flat queue");
  run.derive(
      "admission writes the row (state pending, attempts 0, payload) and one pending entry at "
      "score 0");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  run.expect(is_int(b.enqueue(id, "p1"), 1), "enqueue answers 1 (enqueued)");
  run.expect(b.hget(b.job(id), "state") == "pending" && b.hget(b.job(id), "attempts") == "0" &&
                 b.hget(b.job(id), "payload") == "p1",
             "the row: state pending, attempts 0, payload p1");
  Reply score = r.command("ZSCORE %s %s", b.key("pending").c_str(), id.c_str());
  run.expect(text(score.get()) == "0" && b.num("ZCARD %s", b.key("pending")) == 1,
             "pending holds it at score 0");
  run.figure("enqueued: state pending, attempts 0, pending 1");
}

void j2(GateRun& run, const DrillTarget& target) {
  run.stage("enqueue an id twice (payloads first, second), claim it, enqueue it a third time");
  run.derive(
      "dedup is on the row in any state: the duplicate answers 0 and writes nothing, so a "
      "replay can never reset a claimed job's fencing token");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  run.expect(is_int(b.enqueue(id, "first"), 1), "first admission answers 1");
  run.expect(is_int(b.enqueue(id, "second"), 0), "the duplicate answers 0");
  run.expect(b.hget(b.job(id), "payload") == "first" && b.num("ZCARD %s", b.key("pending")) == 1,
             "the row is unchanged and pending holds 1");
  run.expect(b.claim(30000).has_value(), "the job is claimed");
  run.expect(is_int(b.enqueue(id, "third"), 0) && b.hget(b.job(id), "attempts") == "1",
             "a replay after the claim is a duplicate and attempts stays 1");
  run.figure("duplicate -> 0, row unchanged, pending 1; after the claim still 0, token kept");
}

void j3(GateRun& run, const DrillTarget& target) {
  run.stage("admit a valid ORD id through enqueue, genqueue and schedule");
  run.derive(
      "every admission script checks the JOB namespace first and refuses with the EMQKIND class, "
      "nothing written");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string ord = fresh().minter.mint("ORD").value().str();
  const char* kind = "EMQKIND job id must be JOB-namespaced";
  run.expect(table::is_valid_id(ord),
             "the ORD id is a valid branded id (it passes the key builder)");
  run.expect(is_error(b.enqueue(ord, "p"), kind), "enqueue -> EMQKIND");
  run.expect(is_error(b.genqueue(ord, "p", fresh().group()), kind), "genqueue -> EMQKIND");
  run.expect(is_error(b.schedule(ord, "p"), kind), "schedule -> EMQKIND");
  run.expect(b.keys_left() == 0, "no key of the queue exists");
  run.figure(ord + " -> EMQKIND from all three admissions, 0 keys");
}

void j4(GateRun& run, const DrillTarget& target) {
  constexpr int kJobs = 301;
  run.stage(
      "enqueue 301 ids in mint order; browse ZRANGE pending + - BYLEX REV LIMIT 0 n for n = 10, "
      "301");
  run.derive(
      "all scores are 0, so lex order is mint order: browsing is newest first and the claim takes "
      "the oldest");
  Redis r(target);
  Bus b(r, fresh().queue());
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    ids.push_back(fresh().job());
    if (!is_int(b.enqueue(ids.back(), "p"), 1)) break;
  }
  run.expect(b.num("ZCARD %s", b.key("pending")) == kJobs, "301 pending");
  for (const int n : {10, kJobs}) {
    Reply page = r.command("ZRANGE %s + - BYLEX REV LIMIT 0 %d", b.key("pending").c_str(), n);
    bool newest_first =
        page && page->type == REDIS_REPLY_ARRAY && page->elements == static_cast<std::size_t>(n);
    for (int i = 0; newest_first && i < n; ++i)
      newest_first = text(page->element[i]) == ids[kJobs - 1 - i];
    run.expect(newest_first, "a page of " + std::to_string(n) + " is newest first");
  }
  const auto c = b.claim(30000);
  run.expect(c && c->id == ids.front(), "the claim takes the oldest");
  run.figure("301 pending browsed newest-first (pages of 10 and 301); claim took the oldest");
}

void j5(GateRun& run, const DrillTarget& target) {
  run.stage(
      "genqueue an id into lane g1, then the same id into lane g2, by enqueue and by schedule");
  run.derive(
      "admission dedup is per queue, across lanes and verbs: only the first lands, and the "
      "duplicates push no wake");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job(), g1 = fresh().group(), g2 = fresh().group();
  run.expect(is_int(b.genqueue(id, "first", g1), 1), "genqueue into g1 answers 1");
  run.expect(is_int(b.genqueue(id, "second", g2), 0) && is_int(b.enqueue(id, "third"), 0) &&
                 is_int(b.schedule(id, "fourth"), 0),
             "genqueue into g2, enqueue and schedule answer 0");
  run.expect(b.hget(b.job(id), "group") == g1 && b.num("ZCARD %s", b.lane(g2)) == 0 &&
                 b.num("ZCARD %s", b.key("pending")) == 0 &&
                 b.num("ZCARD %s", b.key("schedule")) == 0,
             "the row stays in g1's lane only");
  run.expect(b.num("LLEN %s", b.key("wake")) == 1, "one wake: the duplicates pushed none");
  run.figure("1 admission of 4, group g1, 1 wake");
}

// ---- 3.3 L1-L6: leases and fencing ----

void l1(GateRun& run, const DrillTarget& target) {
  run.stage("enqueue, claim with a 30000 ms lease, complete with the token");
  run.derive(
      "the claim hands token 1 (attempts) with a lease on the server clock; completion deletes the "
      "row");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  b.enqueue(id, "p1");
  const auto c = b.claim(30000);
  run.expect(c && c->id == id && c->token == 1 && b.hget(b.job(id), "state") == "active",
             "claimed with token 1, state active");
  run.expect(is_int(b.complete(id, "1"), 1), "complete with token 1 answers 1");
  run.expect(b.num("EXISTS %s", b.job(id)) == 0 && b.num("ZCARD %s", b.key("active")) == 0,
             "the row is gone and nothing is active");
  run.expect(!b.claim(30000), "the queue is empty");
  run.figure("token 1; completion deleted the row");
}

void l2(GateRun& run, const DrillTarget& target) {
  run.stage("claim a job, complete it with token 99, then with 01, then with 1");
  run.derive(
      "tokens compare as strings: anything but the row's attempts is EMQSTALE and changes nothing");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  b.enqueue(id, "p");
  b.claim(30000);
  run.expect(is_error(b.complete(id, "99"), "EMQSTALE complete token mismatch"),
             "token 99 -> EMQSTALE");
  run.expect(is_error(b.complete(id, "01"), "EMQSTALE complete token mismatch"),
             "token 01 -> EMQSTALE");
  run.expect(b.hget(b.job(id), "state") == "active" && b.num("ZCARD %s", b.key("active")) == 1,
             "still active");
  run.expect(is_int(b.complete(id, "1"), 1) && is_int(b.complete(id, "1"), 0),
             "token 1 completes; a second completion finds it gone (0)");
  run.figure("99 and 01 -> EMQSTALE, nothing changed; 1 -> ok; again -> gone");
}

void l3(GateRun& run, const DrillTarget& target) {
  run.stage("claim, retry with delay 0, promote, claim again");
  run.derive(
      "only claims increment attempts: the retried job comes back with token 2 and token 1 is "
      "fenced off");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  b.enqueue(id, "p");
  b.claim(30000);
  run.expect(text(b.retry(id, "1", 3, "first failure").get()) == "scheduled", "retry -> scheduled");
  run.expect(is_int(b.promote(), 1), "promote moves it back (1)");
  const auto c = b.claim(30000);
  run.expect(c && c->id == id && c->token == 2, "the next claim hands token 2");
  run.expect(is_error(b.complete(id, "1"), "EMQSTALE complete token mismatch") &&
                 is_int(b.complete(id, "2"), 1),
             "token 1 -> EMQSTALE, token 2 completes");
  run.figure("retry -> promote -> token 2");
}

void l4(GateRun& run, const DrillTarget& target) {
  run.stage("max attempts 2: claim, retry, promote, claim, retry");
  run.derive("the retry at attempts 2 of max 2 goes dead with its last_error and counts a failure");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  b.enqueue(id, "p");
  b.claim(30000);
  b.retry(id, "1", 2, "boom 1");
  b.promote();
  const auto c = b.claim(30000);
  run.expect(c && c->token == 2, "second claim, token 2");
  run.expect(text(b.retry(id, "2", 2, "boom 2").get()) == "dead",
             "retry at attempts 2 of 2 -> dead");
  run.expect(b.hget(b.job(id), "state") == "dead" && b.hget(b.job(id), "last_error") == "boom 2" &&
                 b.hget(b.key("metrics:failed"), "count") == "1",
             "state dead, last_error boom 2, metrics:failed 1");
  run.expect(!b.claim(30000), "nothing left to claim");
  run.figure("attempts 2 of max 2 -> dead, last_error boom 2");
}

void l5(GateRun& run, const DrillTarget& target) {
  constexpr int kLeaseMs = 40, kWaitMs = 60;
  run.stage("two jobs; one claimed with a 40 ms lease, one with 60000 ms; wait 60 ms; reap");
  run.derive(
      "reap returns only leases past their deadline on the server clock (40 < 60 ms waited), "
      "attempts untouched, so the next claim hands token 2 and the lost holder is fenced off");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string lost = fresh().job(), held = fresh().job();
  b.enqueue(lost, "p");
  b.enqueue(held, "p");
  b.claim(kLeaseMs);
  b.claim(60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(kWaitMs));
  run.expect(is_int(b.reap(), 1), "reap returns 1 (the 40 ms lease only)");
  run.expect(b.hget(b.job(lost), "attempts") == "1" && b.hget(b.job(held), "state") == "active",
             "attempts untouched; the long lease still active");
  const auto c = b.claim(30000);
  run.expect(c && c->id == lost && c->token == 2, "the next claim hands token 2");
  run.expect(is_error(b.complete(lost, "1"), "EMQSTALE complete token mismatch") &&
                 is_int(b.complete(lost, "2"), 1),
             "the lost holder's token 1 is refused; token 2 completes");
  run.figure("40 ms lease reaped after 60 ms -> token 2");
}

void l6(GateRun& run, const DrillTarget& target) {
  run.stage("retry a job that does not exist; then claim one and retry it with token 2");
  run.derive("retry refuses a gone job and a stale token with EMQSTALE and writes nothing");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string id = fresh().job();
  run.expect(is_error(b.retry(id, "1", 3, "e"), "EMQSTALE job gone") && b.keys_left() == 0,
             "gone -> EMQSTALE job gone, nothing written");
  b.enqueue(id, "p");
  b.claim(30000);
  run.expect(is_error(b.retry(id, "2", 3, "e"), "EMQSTALE retry token mismatch"),
             "token 2 -> EMQSTALE");
  run.expect(b.hget(b.job(id), "last_error") == "(nil)" && b.hget(b.job(id), "state") == "active",
             "no last_error, still active");
  run.figure("gone and stale retries -> EMQSTALE, nothing written");
}

// ---- 3.4 G1-G8: lanes ----

void g1(GateRun& run, const DrillTarget& target) {
  run.stage("3 lanes of 4 jobs each, genqueued lane by lane; 12 gclaims");
  run.derive(
      "the ring rotates one lane per claim: 4 strict turns over the 3 lanes, oldest first in each");
  Redis r(target);
  Bus b(r, fresh().queue());
  std::vector<std::string> groups{fresh().group(), fresh().group(), fresh().group()};
  std::vector<std::vector<std::string>> jobs(3);
  for (std::size_t g = 0; g < 3; ++g) {
    for (int i = 0; i < 4; ++i) {
      jobs[g].push_back(fresh().job());
      b.genqueue(jobs[g].back(), "p", groups[g]);
    }
  }
  bool strict = true;
  for (int turn = 0; turn < 4; ++turn) {
    for (std::size_t g = 0; g < 3; ++g) {
      const auto c = b.gclaim(30000);
      strict = strict && c && c->group == groups[g] && c->id == jobs[g][turn];
    }
  }
  run.expect(strict, "12 claims in 4 strict turns, oldest first within each lane");
  run.expect(!b.gclaim(30000) && b.list("LRANGE %s 0 -1", b.key("ring")).empty(),
             "then empty, the ring drained");
  run.figure("12 claims = 4 strict turns over 3 lanes");
}

void g2(GateRun& run, const DrillTarget& target) {
  run.stage(
      "400 busy jobs then 20 quiet ones, into two lanes and into a flat queue; 420 claims each");
  run.derive(
      "lanes alternate, so the quiet lane's 20 jobs go at positions 2, 4, ..., 40; a flat queue "
      "serves them after the whole backlog, at 401 to 420");
  Redis r(target);
  Bus lanes(r, fresh().queue()), flat(r, fresh().queue());
  const std::string busy = fresh().group(), quiet = fresh().group();
  for (int i = 0; i < 400; ++i) {
    lanes.genqueue(fresh().job(), "busy", busy);
    flat.enqueue(fresh().job(), "busy");
  }
  for (int i = 0; i < 20; ++i) {
    lanes.genqueue(fresh().job(), "quiet", quiet);
    flat.enqueue(fresh().job(), "quiet");
  }
  int lanes_last = 0, flat_first = 0, flat_last = 0;
  for (int pos = 1; pos <= 420; ++pos) {
    const auto l = lanes.gclaim(30000);
    const auto f = flat.claim(30000);
    if (!l || !f) break;
    if (l->payload == "quiet") lanes_last = pos;
    if (f->payload == "quiet") {
      if (flat_first == 0) flat_first = pos;
      flat_last = pos;
    }
  }
  run.expect(lanes_last == 40,
             "the quiet lane's last job at 40 of 420 (" + std::to_string(lanes_last) + ")");
  run.expect(flat_first == 401 && flat_last == 420,
             "flat: " + std::to_string(flat_first) + ".." + std::to_string(flat_last));
  run.figure("quiet lane's last job at " + std::to_string(lanes_last) + "/420 vs flat " +
             std::to_string(flat_first) + ".." + std::to_string(flat_last));
}

void g3(GateRun& run, const DrillTarget& target) {
  run.stage("3 jobs in one lane, glimit 2, three gclaims; then one completion");
  run.derive(
      "at its ceiling the lane leaves the ring: the third claim is empty with gactive 2; a "
      "completion frees a slot and puts it back with a wake");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string g = fresh().group();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(fresh().job());
    b.genqueue(ids.back(), "p", g);
  }
  run.expect(is_int(b.glimit(g, 2), 1), "glimit 2 answers 1");
  const bool two = b.gclaim(30000).has_value() && b.gclaim(30000).has_value();
  run.expect(two && !b.gclaim(30000), "two claims, the third empty");
  run.expect(b.hget(b.key("gactive"), g) == "2", "gactive 2");
  run.expect(is_int(b.complete(ids[0], "1"), 1), "one completes");
  const auto c = b.gclaim(30000);
  run.expect(c && c->id == ids[2], "the freed slot serves the third job");
  run.figure("limit 2 -> third claim empty, gactive 2; a completion reopened the lane");
}

void g4(GateRun& run, const DrillTarget& target) {
  run.stage("4 jobs in one lane, one claimed; gpause; claim; complete the claimed one");
  run.derive(
      "pause takes the lane out of the ring and keeps its backlog: depth 3, claims empty, "
      "in-flight runs on");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string g = fresh().group();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(fresh().job());
    b.genqueue(ids.back(), "p", g);
  }
  b.gclaim(30000);
  run.expect(is_int(b.gpause(g), 1), "gpause answers 1");
  run.expect(b.num("ZCARD %s", b.lane(g)) == 3 && !b.gclaim(30000), "depth 3, the claim is empty");
  run.expect(is_int(b.complete(ids[0], "1"), 1) && b.num("ZCARD %s", b.lane(g)) == 3 &&
                 b.list("LRANGE %s 0 -1", b.key("ring")).empty(),
             "the in-flight job completes; the lane stays out of the ring");
  run.figure("paused: depth 3, claims empty, in-flight completed");
}

TableSpec park_table(const std::string& name, std::int64_t beat_ms) {
  TableSpec t;
  t.name = name;
  t.kind = "AST";
  t.loader = [](const BrandedId&) -> engine::LoadResult {
    return engine::Loaded{"px=100.00", std::nullopt};
  };
  t.coherence = CoherenceMode::kJob;
  t.job_beat_ms = beat_ms;
  // The gate watches one member's park; a relay (docs/wire.md, "The job lane's member queues") is a
  // second parked consumer, of the shared queue, that claims and maintains once a beat: not part of
  // what is measured.
  t.job_relay = false;
  return t;
}

long long commands_served(Redis& r) {
  Reply info = r.command("INFO commandstats");
  std::istringstream in(text(info.get()));
  long long total = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("cmdstat_") || line.starts_with("cmdstat_info:")) continue;
    const auto at = line.find("calls=");
    if (at != std::string::npos) total += std::atoll(line.c_str() + at + 6);
  }
  return total;
}

void g5_g6(GateRun& run, const DrillTarget& target, bool wake) {
  constexpr std::int64_t kBeatMs = 5000;
  constexpr int kQuietMs = 400, kPollMs = 10;
  const std::string t = wake ? "busg6" : "busg5";
  run.stage(
      "node P consumes " + t + " (job lane, beat 5000 ms) and parks; " +
      (wake ? std::string("its hand-off credits are taken down, so writer W's enqueue goes to the "
                          "lane and pushes a wake; P is timed from the enqueue to the apply")
            : std::string("the server's command count is read over 400 ms against a plain "
                          "client polling every 10 ms in the same run")));
  run.derive(
      wake ? "a parked consumer blocks on its wake list: a wake answers it at once, not at its "
             "5000 ms beat -- expect the apply well under a tenth of the beat (500 ms)"
           : "a parked consumer is one blocked BLMPOP: no command until its beat; the poller "
             "sends one per 10 ms -- expect 0 against about 40");
  // No connection heartbeat: the only traffic is the lane's own.
  Engine p(harness::quiet_node_options(target.host, target.port, 281 + (wake ? 1 : 0), -1),
           {park_table(t, kBeatMs)});
  if (!run.expect(!p.start(), "node P starts")) return;
  auto consumer = [&] { return *p.stats().tables.at(0).consumer; };
  Redis r(target);
  const std::string mbase =
      engine::JobLaneKeys::for_table(t).member_base(std::to_string(281 + (wake ? 1 : 0)));
  run.expect(floors::eventually(
                 [&] {
                   Reply e = r.command("EXISTS %s", (mbase + "parked").c_str());
                   return consumer().parks >= 1 && is_int(e, 1);
                 },
                 std::chrono::seconds(5)),
             "P parked with its hand-off credits listed");
  std::this_thread::sleep_for(
      std::chrono::milliseconds(20));  // the credits' and the block's commands land
  if (!wake) {
    const long long before = commands_served(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(kQuietMs));
    const long long parked = commands_served(r) - before;  // INFO itself is not counted
    Redis poller(target);
    const long long p0 = commands_served(r);
    const auto end = Clock::now() + std::chrono::milliseconds(kQuietMs);
    while (Clock::now() < end) {
      Reply l = poller.command("LLEN %s", (mbase + "wake").c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
    const long long polled = commands_served(r) - p0;
    run.expect(parked == 0,
               "the parked consumer sent " + std::to_string(parked) + " commands in 400 ms");
    run.expect(polled >= 10, "the 10 ms poller sent " + std::to_string(polled));
    run.figure("parked consumer " + std::to_string(parked) + " commands in 400 ms vs " +
               std::to_string(polled) + " for a 10 ms poller");
    return;
  }
  Engine w(floors::node_options(target, 283), {});
  if (!run.expect(!w.start(), "writer W starts")) return;
  Reply down = r.command("DEL %s", (mbase + "parked").c_str());
  const BrandedId name = fresh().minter.mint("AST").value();
  const auto t0 = Clock::now();
  auto admitted = w.enqueue(t, fresh().minter.mint("PRT").value(), name.view(),
                            fresh().minter.mint("TXN").value());
  run.expect(
      admitted && admitted->size() == 1 && admitted->front().admission == Admission::kEnqueued,
      "W's enqueue went to P's lane (enqueued, not handed off)");
  // P holds no row of the name, so the writer answers stale: what shows the job ran is that it
  // was applied (either verdict) and completed.
  const bool applied = floors::eventually(
      [&] {
        const auto c = consumer();
        return c.applied + c.stale_applies >= 1 && c.completed >= 1;
      },
      std::chrono::seconds(6));
  const double ms = floors::since_us(t0) / 1000;
  const auto c = consumer();
  run.expect(applied && c.wakes >= 1 && c.claimed >= 1 && c.handed_off == 0,
             "P was woken, claimed it from its lane, applied and completed it");
  run.expect(ms < kBeatMs / 10.0,
             "applied " + fmt("%.2f", ms) + " ms after the enqueue (beat 5000 ms)");
  run.figure("wake answered and applied " + fmt("%.2f", ms) +
             " ms after the enqueue against a 5000 ms beat");
}

void g5(GateRun& run, const DrillTarget& target) { g5_g6(run, target, false); }
void g6(GateRun& run, const DrillTarget& target) { g5_g6(run, target, true); }

void g7(GateRun& run, const DrillTarget& target) {
  run.stage("one lane job claimed with a 60 ms lease; wait 90 ms; reap; gclaim");
  run.derive(
      "the lane's lease runs out on the server clock; reap returns it to its lane with a ring "
      "insert and a wake, gactive back to 0, and the next claim hands token 2");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string g = fresh().group(), id = fresh().job();
  b.genqueue(id, "p", g);
  const auto first = b.gclaim(60);
  run.expect(first && first->token == 1, "claimed with token 1, lease 60 ms");
  std::this_thread::sleep_for(std::chrono::milliseconds(90));
  const long long wakes = b.num("LLEN %s", b.key("wake"));
  run.expect(is_int(b.reap(), 1), "reap returns 1");
  run.expect(b.hget(b.key("gactive"), g) == "(nil)" && b.num("LLEN %s", b.key("wake")) == wakes + 1,
             "gactive cleared, one wake");
  const auto c = b.gclaim(30000);
  run.expect(c && c->id == id && c->token == 2 && c->group == g, "the next claim hands token 2");
  run.figure("60 ms lane lease reaped -> token 2");
}

void g8(GateRun& run, const DrillTarget& target) {
  run.stage(
      "two lane jobs; the first claimed with a 40 ms lease, reaped, then completed with its old "
      "token 1");
  run.derive(
      "a holder whose job was reaped but not yet re-claimed retires it everywhere: row gone, "
      "out of the lane, gactive not decremented twice, the lane still in the ring for the second "
      "job");
  Redis r(target);
  Bus b(r, fresh().queue());
  const std::string g = fresh().group(), first = fresh().job(), second = fresh().job();
  b.genqueue(first, "p", g);
  b.genqueue(second, "p", g);
  b.gclaim(40);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  run.expect(is_int(b.reap(), 1) && b.num("ZCARD %s", b.lane(g)) == 2, "reaped: the lane holds 2");
  run.expect(is_int(b.complete(first, "1"), 1),
             "the old holder's completion with token 1 answers 1");
  run.expect(b.num("EXISTS %s", b.job(first)) == 0 && b.num("ZCARD %s", b.lane(g)) == 1 &&
                 b.hget(b.key("gactive"), g) == "(nil)",
             "row gone, out of the lane, gactive not decremented twice");
  const auto c = b.gclaim(30000);
  run.expect(c && c->id == second && c->token == 1, "the second job is next, token 1");
  run.figure("reaped-but-unclaimed holder retired its job with token 1");
}

void add_bus_gates(std::vector<Gate>& gates) {
  gates.push_back({"3.2-J1", "enqueue", j1});
  gates.push_back({"3.2-J2", "duplicate", j2});
  gates.push_back({"3.2-J3", "kind", j3});
  gates.push_back({"3.2-J4", "browse", j4});
  gates.push_back({"3.2-J5", "dedup across lanes", j5});
  gates.push_back({"3.3-L1", "token 1", l1});
  gates.push_back({"3.3-L2", "stale token", l2});
  gates.push_back({"3.3-L3", "retry", l3});
  gates.push_back({"3.3-L4", "dead", l4});
  gates.push_back({"3.3-L5", "lease reaped", l5});
  gates.push_back({"3.3-L6", "stale retry", l6});
  gates.push_back({"3.4-G1", "turns", g1});
  gates.push_back({"3.4-G2", "quiet lane", g2});
  gates.push_back({"3.4-G3", "limit", g3});
  gates.push_back({"3.4-G4", "pause", g4});
  gates.push_back({"3.4-G5", "parked", g5});
  gates.push_back({"3.4-G6", "wake", g6});
  gates.push_back({"3.4-G7", "lane lease reaped", g7});
  gates.push_back({"3.4-G8", "old holder retires", g8});
}

// Chapter 3 precedes the engine's chapters, but the drill's record runs 4.1-4.4 first: the bus
// gates follow them.
const GateGroup kGroup{4501, add_bus_gates};

}  // namespace
}  // namespace echo::cli
