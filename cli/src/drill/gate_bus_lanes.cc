// SPDX-License-Identifier: MIT
// The bus gates of docs/wire.md, "The gates", 3.4 G1-G8 (lanes), as gate_bus.cc says for the bus
// gates: the embedded scripts by EVALSHA on a plain client (gate_bus.h), each gate on a fresh
// queue; G5 and G6 park this project's own consumer (an engine node) rather than a raw BLPOP,
// since that is the consumer the lane ships. Ids keep their chapter's prefix (3.4-).
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/table/branded_id.h>
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
#include "drill/gate_bus.h"

namespace echo::cli {
namespace {

using bus::Bus;
using bus::fresh;
using bus::is_int;
using bus::text;
using engine::Admission;
using engine::CoherenceMode;
using engine::Engine;
using engine::TableSpec;
using floors::Clock;
using floors::fmt;
using floors::Redis;
using floors::Reply;
using table::BrandedId;

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

void add_bus_lane_gates(std::vector<Gate>& gates) {
  gates.push_back({"3.4-G1", "turns", g1});
  gates.push_back({"3.4-G2", "quiet lane", g2});
  gates.push_back({"3.4-G3", "limit", g3});
  gates.push_back({"3.4-G4", "pause", g4});
  gates.push_back({"3.4-G5", "parked", g5});
  gates.push_back({"3.4-G6", "wake", g6});
  gates.push_back({"3.4-G7", "lane lease reaped", g7});
  gates.push_back({"3.4-G8", "old holder retires", g8});
}

// After gate_bus.cc's 3.2 and 3.3 gates (4501), before the cluster gates.
const GateGroup kGroup{4502, add_bus_lane_gates};

}  // namespace
}  // namespace echo::cli
