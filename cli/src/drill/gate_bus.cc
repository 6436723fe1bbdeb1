// SPDX-License-Identifier: MIT
// The bus gates of docs/wire.md, "The gates" (3.2 J1-J5 admission, 3.3 L1-L6 leases and fencing,
// 3.4 G1-G8 lanes), printed by the drill as the integration tests (bus_scripts_*_test,
// job_lane_*_test) assert them. They run the embedded scripts by EVALSHA on a plain client, each
// gate on a fresh queue; 3.4 G5 and G6 park this project's own consumer (an engine node) rather
// than a raw BLPOP, since that is the consumer the lane ships. Ids are prefixed with their
// chapter: 3.4's G gates would otherwise clash with the ring's G1-G6 (4.3).
// This file: 3.2 and 3.3; 3.4's lanes are gate_bus_lanes.cc, the queue client both use gate_bus.h.
#include <string>
#include <vector>

#include "drill/drill.h"
#include "drill/gate_bus.h"

namespace echo::cli {
namespace {

using bus::Bus;
using bus::fresh;
using bus::is_error;
using bus::is_int;
using bus::text;
using floors::Redis;
using floors::Reply;

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
}

// Chapter 3 precedes the engine's chapters, but the drill's record runs 4.1-4.4 first: the bus
// gates follow them.
const GateGroup kGroup{4501, add_bus_gates};

}  // namespace
}  // namespace echo::cli
