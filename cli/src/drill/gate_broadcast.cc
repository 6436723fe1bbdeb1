// SPDX-License-Identifier: MIT
// Gates F2-F4 and G5 (docs/wire.md, "The gates"): the broadcast lane end to end with
// several Engines in this process as nodes - newer-wins on both layers, push latency against a
// plain PUBLISH -> message floor measured in the same run and the cross-node round trip, the
// job-lane table the broadcast passes by, and a 500-message storm through the wire and the ring
// with a fill fired in its middle.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "drill/drill.h"
#include "drill/floors.h"

namespace echo::cli {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Loaded;
using engine::LoadResult;
using engine::Source;
using engine::TableSpec;
using floors::cached;
using floors::Clock;
using floors::counting_loader;
using floors::describe;
using floors::fmt;
using floors::grouped;
using floors::l2_key;
using floors::node_options;
using floors::Redis;
using harness::ast_table;
using table::BrandedId;
using table::Verdict;

// The drill's writer mints every version from one minter, so the gate's versions are in mint
// order by construction (docs/wire.md, "Branded ids": one node per concurrent minter).
constexpr unsigned kDrillNode = 200;

void f2_newer_wins(GateRun& run, const DrillTarget& target) {
  run.stage(
      "quotes (AST, broadcast) on one node; the writer mints v_old, then v_new, puts "
      "px=105.00 at v_new, and only then does v_old's invalidation arrive -- through the "
      "wire and through apply_coherence; then a fresh v_fresh; then both replayed");
  run.derive(
      "newer-wins is one comparison of payload bytes in two places (the writer's map, the "
      "drop_l2 script) -- expect v_old stale on L1 with the row still px=105.00, drop_l2 "
      "0 with L2 still at v_new, v_fresh applied on both layers, and every replay stale");
  std::atomic<int> loads{0};
  Engine node(node_options(target, 201),
              {ast_table("quotes", CoherenceMode::kBroadcast, counting_loader(loads))});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter writer(kDrillNode);
  const BrandedId name = writer.mint("AST").value();
  const BrandedId v_old = writer.mint("TXN").value();
  const BrandedId v_new = writer.mint("TXN").value();
  const std::string key = l2_key("quotes", name);
  Redis redis(target);
  auto wstats = [&] { return node.stats().tables.at(0).writer; };

  if (!run.expect(node.put("quotes", name.view(), "px=105.00", v_new).has_value(),
                  "put px=105.00 at v_new")) {
    return;
  }
  // The late stale message, through the wire and the ring.
  const auto stale_before = wstats().stale;
  auto heard = node.broadcast("quotes", name.view(), v_old);
  run.expect(heard && *heard == 1, "the late v_old broadcast reached 1 subscriber (this node)");
  run.expect(floors::eventually([&] { return wstats().stale == stale_before + 1; }),
             "the ring delivered it and the writer judged it stale");
  auto row = node.get("quotes", name.view());
  run.expect(
      row && row->source == Source::kL1 && row->value == "px=105.00" && row->version == v_new,
      "the L1 row survived holding px=105.00 at v_new (" + describe(row) + ")");
  // The same message as the job lane's handler would apply it.
  auto verdict = node.apply_coherence("quotes", name.view(), v_old);
  run.expect(verdict && *verdict == Verdict::kStale, "apply_coherence(v_old) answers stale");
  auto dropped = node.drop_l2("quotes", name.view(), v_old);
  std::string stored;
  const bool kept = redis.get(key, stored);
  run.expect(dropped && !*dropped, "drop_l2(v_old) answers 0");
  run.expect(kept && stored == std::string(v_new.view()) + "px=105.00",
             "L2 still holds v_new||px=105.00");

  // A genuinely newer version: applied on both layers.
  const BrandedId v_fresh = writer.mint("TXN").value();
  const auto applied_before = wstats().applied;
  heard = node.broadcast("quotes", name.view(), v_fresh);
  run.expect(heard && *heard == 1, "the v_fresh broadcast reached 1 subscriber");
  run.expect(floors::eventually([&] { return wstats().applied == applied_before + 1; }) &&
                 !cached(node, "quotes", name),
             "v_fresh applied: the L1 row is gone");
  auto dropped_fresh = node.drop_l2("quotes", name.view(), v_fresh);
  run.expect(dropped_fresh && *dropped_fresh && !redis.get(key, stored),
             "drop_l2(v_fresh) answers 1 and the L2 key is gone");

  // Replays: idempotence is a comparison, not a log.
  auto replay_old = node.apply_coherence("quotes", name.view(), v_old);
  auto replay_fresh = node.apply_coherence("quotes", name.view(), v_fresh);
  auto replay_l2 = node.drop_l2("quotes", name.view(), v_old);
  run.expect(replay_old && *replay_old == Verdict::kStale, "replay of v_old answers stale");
  run.expect(replay_fresh && *replay_fresh == Verdict::kStale, "replay of v_fresh answers stale");
  run.expect(replay_l2 && !*replay_l2, "drop_l2 replay of v_old answers 0");
  run.expect(loads.load() == 0, "the loader never ran");
  run.figure(
      "v_old -> stale, row still px=105.00, drop_l2 0; v_fresh -> applied, drop_l2 1; "
      "replay v_old -> stale");
}

// F3's receiving side: the time from PUBLISH sent to the row gone from `node`'s L1, one message
// at a time, for each of `names` (all cached at versions older than `versions`).
floors::Samples push_latency(const DrillTarget& target, const Engine& node,
                             const std::string& table, const std::vector<BrandedId>& names,
                             const std::vector<BrandedId>& versions, int warmup) {
  Redis pub(target);
  const std::string channel = table::coherence_channel(table).value();
  floors::Samples s;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto frame = table::make_frame(names[i], versions[i]);
    const std::string_view bytes = table::view(frame);
    const auto t0 = Clock::now();
    floors::Reply r =
        pub.command("PUBLISH %b %b", channel.data(), channel.size(), bytes.data(), bytes.size());
    if (!r || !floors::spin_until([&] { return !cached(node, table, names[i]); })) break;
    if (static_cast<int>(i) >= warmup) s.us.push_back(floors::since_us(t0));
  }
  s.sort();
  return s;
}

// The median of the writer's decode -> apply lag between two snapshots: the bucket [2^k, 2^(k+1))
// ns that holds the middle message, as its lower edge in microseconds.
double lag_median_us(const engine::WriterStats& before, const engine::WriterStats& after) {
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < engine::kLagBuckets; ++k) {
    total += after.lag_histogram[k] - before.lag_histogram[k];
  }
  std::uint64_t seen = 0;
  for (std::size_t k = 0; k < engine::kLagBuckets; ++k) {
    seen += after.lag_histogram[k] - before.lag_histogram[k];
    if (2 * seen >= total && total != 0) return static_cast<double>(std::uint64_t{1} << k) / 1000;
  }
  return 0;
}

// F3's band: half to four times the floor's median.
struct PushBand {
  floors::Samples floor;
  double lo = 0, hi = 0;
};

// The floor first: a plain PUBLISH -> message, measured on this run's server.
PushBand measure_push_floor(GateRun& run, const DrillTarget& target, int messages) {
  run.stage(
      "the floor first: 1,000 PUBLISHes of 29 bytes to a blocking hiredis subscriber on "
      "its own thread; then node B holds 1,050 rows of board and 1,050 newer invalidations "
      "are PUBLISHed one at a time (50 unmeasured); then writer A and subscribers B, C, D "
      "share one name");
  PushBand band;
  band.floor = floors::publish_floor(target, "echostore:drill:floor", messages);
  band.lo = 0.5 * band.floor.median();
  band.hi = 4.0 * band.floor.median();
  run.derive("floor: PUBLISH sent -> message counted, median " + fmt("%.0f", band.floor.median()) +
             " us (p99 " + fmt("%.0f", band.floor.pct(0.99)) +
             " us); the lane is the same hop plus a RESP3 decode, a ring publish and one writer "
             "wake, observed the same way (the sender waits, spinning then yielding) -- expect the "
             "median push (PUBLISH sent -> row gone from B's L1) between 0.5x and 4x the floor: " +
             fmt("%.0f", band.lo) + " to " + fmt("%.0f", band.hi) + " us");
  return band;
}

struct Pushed {
  floors::Samples lane;
  double lag = 0;  // the writer's decode -> apply lag, median bucket
};

// B's rows, each dropped by one newer invalidation PUBLISHed at a time.
Pushed push_to_b(GateRun& run, const DrillTarget& target, Engine& b, table::Minter& writer,
                 int messages, int warmup) {
  std::vector<BrandedId> names, versions;
  const int total = messages + warmup;
  for (int i = 0; i < total; ++i) names.push_back(writer.mint("AST").value());
  int put_ok = 0;
  for (const auto& n : names) {
    put_ok += b.put("board", n.view(), "px=105.00", writer.mint("TXN").value()).has_value() ? 1 : 0;
  }
  for (int i = 0; i < total; ++i) versions.push_back(writer.mint("TXN").value());
  run.expect(put_ok == total, "1,050 rows cached on B");
  const auto before = b.stats().tables.at(0);
  Pushed out{push_latency(target, b, "board", names, versions, warmup)};
  const auto after = b.stats().tables.at(0);
  out.lag = lag_median_us(before.writer, after.writer);
  run.expect(out.lane.us.size() == static_cast<std::size_t>(messages),
             "1,000 measured messages each dropped its row");
  run.expect(after.writer.applied - before.writer.applied == static_cast<std::uint64_t>(total),
             "the writer applied all 1,050 (none stale, none lost)");
  run.expect(after.rings.at(0).dropped == 0, "the ring dropped 0");
  return out;
}

struct RoundTrip {
  std::string heard;  // PUBLISH's receivers, "?" when it failed
  double everywhere_us = 0;
  std::string next;  // B's next read
};

// The cross-node round trip: A writes, B, C and D hold the old row. nullopt when A, C or D did
// not start.
std::optional<RoundTrip> round_trip(GateRun& run, const DrillTarget& target, Engine& b,
                                    table::Minter& writer, std::atomic<int>& loads) {
  Engine a(node_options(target, 211),
           {ast_table("board", CoherenceMode::kNone, counting_loader(loads))});
  Engine c(node_options(target, 213),
           {ast_table("board", CoherenceMode::kBroadcast, counting_loader(loads))});
  Engine d(node_options(target, 214),
           {ast_table("board", CoherenceMode::kBroadcast, counting_loader(loads))});
  if (!run.expect(!a.start() && !c.start() && !d.start(), "nodes A, C, D start")) {
    return std::nullopt;
  }
  const BrandedId name = writer.mint("AST").value();
  const bool seeded =
      a.put("board", name.view(), "px=105.00", writer.mint("TXN").value()).has_value();
  Engine* subscribers[] = {&b, &c, &d};
  int warm = 0;
  for (Engine* n : subscribers) {
    auto g = n->get("board", name.view());
    warm += (g && g->source == Source::kL2 && g->value == "px=105.00" && cached(*n, "board", name))
                ? 1
                : 0;
  }
  run.expect(seeded && warm == 3, "B, C, D read px=105.00 from l2 and cache it");
  const BrandedId v2 = writer.mint("TXN").value();
  const bool put = a.put("board", name.view(), "px=106.00", v2).has_value();
  const auto t0 = Clock::now();
  auto heard = a.broadcast("board", name.view(), v2);
  const bool dropped_everywhere = floors::spin_until([&] {
    return !cached(b, "board", name) && !cached(c, "board", name) && !cached(d, "board", name);
  });
  const double everywhere_us = floors::since_us(t0);
  RoundTrip out{heard ? std::to_string(*heard) : std::string("?"), everywhere_us, ""};
  run.expect(put, "A put px=106.00 at v2");
  run.expect(heard && *heard == 3, "PUBLISH reached 3 subscribers");
  run.expect(dropped_everywhere, "B, C and D each dropped their row");
  auto next = b.get("board", name.view());
  run.expect(
      next && next->source == Source::kL2 && next->value == "px=106.00" && next->version == v2,
      "B's next read fell through to l2 and answered px=106.00 at v2 (" + describe(next) + ")");
  auto next_c = c.get("board", name.view());
  run.expect(next_c && next_c->value == "px=106.00", "C's next read answered px=106.00 too");
  out.next = describe(next);
  return out;
}

void f3_broadcast(GateRun& run, const DrillTarget& target) {
  constexpr int kMessages = 1000, kWarmup = 50;
  const PushBand band = measure_push_floor(run, target, kMessages);
  std::atomic<int> loads{0};
  Engine b(node_options(target, 212),
           {ast_table("board", CoherenceMode::kBroadcast, counting_loader(loads))});
  if (!run.expect(!b.start(), "node B starts and subscribes")) return;
  table::Minter writer(kDrillNode);
  const Pushed pushed = push_to_b(run, target, b, writer, kMessages, kWarmup);
  const double median = pushed.lane.median();
  run.expect(median >= band.lo && median <= band.hi,
             "median push " + fmt("%.0f", median) + " us inside the derived band");
  const std::optional<RoundTrip> trip = round_trip(run, target, b, writer, loads);
  if (!trip) return;
  run.expect(loads.load() == 0, "no loader ran (L2 always held the row)");
  const floors::Samples& floor = band.floor;
  run.figure(
      "median push " + fmt("%.0f", median) + " us (p99 " + fmt("%.0f", pushed.lane.pct(0.99)) +
      ") over " + grouped(static_cast<double>(pushed.lane.us.size())) + " messages vs floor " +
      fmt("%.0f", floor.median()) + " us, " + fmt("%.2f", median / floor.median()) + "x (band " +
      fmt("%.0f", band.lo) + "-" + fmt("%.0f", band.hi) + "), decode -> apply lag median " +
      fmt("%.0f", pushed.lag) + "-" + fmt("%.0f", 2 * pushed.lag) + " us; PUBLISH reached " +
      trip->heard + ", all 3 dropped within " + fmt("%.0f", trip->everywhere_us) +
      " us; B's next read " + trip->next);
}

void f4_loss(GateRun& run, const DrillTarget& target) {
  run.stage(
      "qc on three nodes: writer A (none), B (broadcast) and J (job lane: not subscribed to "
      "the broadcast channel; its one subscription is its lane's lead channel); B and J cache "
      "px=100.00; A puts px=101.00 and broadcasts");
  run.derive(
      "the broadcast is at-most-once and reaches only subscribers -- expect 1 heard (B), "
      "B's row gone, and J still serving px=100.00 from l1 until its own lane delivers "
      "(here: the job handler's apply_coherence), after which J reads px=101.00 from l2");
  std::atomic<int> loads{0};
  Engine a(node_options(target, 221),
           {ast_table("qc", CoherenceMode::kNone, counting_loader(loads, "-"))});
  Engine b(node_options(target, 222),
           {ast_table("qc", CoherenceMode::kBroadcast, counting_loader(loads, "-"))});
  Engine j(node_options(target, 223),
           {ast_table("qc", CoherenceMode::kJob, counting_loader(loads, "-"))});
  if (!run.expect(!a.start() && !b.start() && !j.start(), "nodes A, B, J start")) return;
  table::Minter writer(kDrillNode);
  const BrandedId name = writer.mint("AST").value();
  const BrandedId v1 = writer.mint("TXN").value();
  const bool seeded = a.put("qc", name.view(), "px=100.00", v1).has_value();
  auto gb = b.get("qc", name.view());
  auto gj = j.get("qc", name.view());
  run.expect(seeded && gb && gj && gb->value == "px=100.00" && gj->value == "px=100.00",
             "B and J cache px=100.00");
  run.expect(j.directory().at(0).coherence == CoherenceMode::kJob, "J's directory says job");

  const BrandedId v2 = writer.mint("TXN").value();
  const bool put = a.put("qc", name.view(), "px=101.00", v2).has_value();
  auto heard = a.broadcast("qc", name.view(), v2);
  const bool b_dropped = floors::spin_until([&] { return !cached(b, "qc", name); });
  run.expect(put && heard && *heard == 1, "the broadcast reached 1 subscriber (B)");
  run.expect(b_dropped, "B dropped its row");
  // J cannot have heard anything: give a stray delivery the time B needed, many times over.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto stale = j.get("qc", name.view());
  run.expect(
      stale && stale->source == Source::kL1 && stale->value == "px=100.00" && stale->version == v1,
      "J still serves px=100.00 from l1 at v1 (" + describe(stale) + ")");
  run.expect(j.stats().tables.at(0).writer.applied == 0 && j.stats().tables.at(0).pushes == 0 &&
                 j.stats().unrouted_pushes == 0,
             "J's writer applied nothing and J received no push");

  auto late = j.apply_coherence("qc", name.view(), v2);
  auto healed = j.get("qc", name.view());
  run.expect(late && *late == Verdict::kApplied, "the job lane's apply answers applied");
  run.expect(healed && healed->source == Source::kL2 && healed->value == "px=101.00",
             "J's next read answers px=101.00 from l2 (" + describe(healed) + ")");
  run.figure("broadcast heard by 1; job-lane J still served " + describe(stale) +
             " after it; its own lane's apply then healed it to " + describe(healed));
}

constexpr int kStorm = 500;

// R's 500 stormed rows and their newer versions, and the cold name only L2 holds.
struct StormRows {
  std::vector<BrandedId> names, versions;
  BrandedId cold;
};

StormRows cache_storm_rows(GateRun& run, Engine& w, Engine& r, table::Minter& writer) {
  std::vector<BrandedId> names, versions;
  for (int i = 0; i < kStorm; ++i) names.push_back(writer.mint("AST").value());
  int put_ok = 0;
  for (const auto& n : names) {
    put_ok += r.put("storm", n.view(), "px=108.00", writer.mint("TXN").value()).has_value() ? 1 : 0;
  }
  const BrandedId cold = writer.mint("AST").value();
  const bool cold_put = w.put("storm", cold.view(), "px=200.00").has_value();
  for (int i = 0; i < kStorm; ++i) versions.push_back(writer.mint("TXN").value());
  run.expect(put_ok == kStorm && cold_put && !cached(r, "storm", cold),
             "500 rows cached on R; the cold name only in L2");
  return {std::move(names), std::move(versions), cold};
}

// Appends the invalidations [from, to) to `pub`'s pipeline and writes them out; false when the
// write failed.
bool append_storm(Redis& pub, const std::string& channel, const StormRows& rows, int from, int to) {
  for (int i = from; i < to; ++i) {
    const auto frame = table::make_frame(rows.names[static_cast<std::size_t>(i)],
                                         rows.versions[static_cast<std::size_t>(i)]);
    const std::string_view bytes = table::view(frame);
    redisAppendCommand(pub.raw(), "PUBLISH %b %b", channel.data(), channel.size(), bytes.data(),
                       bytes.size());
  }
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(pub.raw(), &done) != REDIS_OK) return false;
  }
  return true;
}

// The storm and the fill fired in its middle: what the storm's sender and R's writer saw.
struct Storm {
  std::future<std::pair<engine::Result<engine::Got>, double>> fill_done;
  std::atomic<std::uint64_t> applied_at_fill{0};  // R's writer's applies when the fill answered
  bool sent = false;
  std::int64_t replies = 0;
  bool all_applied = false;
  double ms = 0;
  bool fill_answered = false;
};

// The first half PUBLISHed, the cold name's fill posted, the second half; then every reply read
// and R's writer given 2 s to apply all 500.
void run_storm(const DrillTarget& target, Engine& r, const StormRows& rows, Storm& storm) {
  Redis pub(target);
  const std::string channel = table::coherence_channel("storm").value();
  auto& r_writer = *engine::internal::writer_of(r, "storm");
  const auto base = r_writer.stats().applied;
  auto fill = std::make_shared<std::promise<std::pair<engine::Result<engine::Got>, double>>>();
  storm.fill_done = fill->get_future();
  std::atomic<std::uint64_t>& applied_at_fill = storm.applied_at_fill;

  const auto t0 = Clock::now();
  const bool first = append_storm(pub, channel, rows, 0, kStorm / 2);
  const auto tf = Clock::now();
  r.get_async("storm", rows.cold.view(),
              [fill, tf, &applied_at_fill, &r_writer, base](engine::Result<engine::Got> g) {
                applied_at_fill.store(r_writer.stats().applied - base, std::memory_order_relaxed);
                fill->set_value({std::move(g), floors::since_us(tf)});
              });
  const bool second = append_storm(pub, channel, rows, kStorm / 2, kStorm);
  for (int i = 0; i < kStorm; ++i) {
    void* raw = nullptr;
    if (redisGetReply(pub.raw(), &raw) != REDIS_OK) break;
    floors::Reply reply(static_cast<redisReply*>(raw));
    storm.replies += reply->type == REDIS_REPLY_INTEGER && reply->integer == 1 ? 1 : 0;
  }
  storm.all_applied = floors::spin_until(
      [&] { return r_writer.stats().applied - base == static_cast<std::uint64_t>(kStorm); },
      std::chrono::seconds(2));
  storm.ms = floors::since_us(t0) / 1000;
  storm.fill_answered =
      storm.fill_done.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  storm.sent = first && second;
}

void g5_storm(GateRun& run, const DrillTarget& target) {
  run.stage(
      "storm (AST, broadcast, ring 4096, max batch 256) on node R holding 500 rows; a "
      "pipelined storm of 500 newer invalidations on the wire; after the first 250 are "
      "sent, R reads a cold name that L2 holds; then a writer re-puts one stormed name");
  std::atomic<int> loads{0};
  Engine w(node_options(target, 301),
           {ast_table("storm", CoherenceMode::kNone, counting_loader(loads, "-"))});
  Engine r(node_options(target, 302),
           {ast_table("storm", CoherenceMode::kBroadcast, counting_loader(loads, "-"))});
  if (!run.expect(!w.start() && !r.start(), "nodes W and R start")) return;
  table::Minter writer(kDrillNode);
  const StormRows rows = cache_storm_rows(run, w, r, writer);

  const floors::Samples get = floors::get_floor(target, l2_key("storm", rows.cold), 1000);
  run.derive("floor: plain GET median " + fmt("%.0f", get.median()) +
             " us; R's writer alternates ring drains capped at 256 with its inbox, so a fill "
             "posted mid-storm waits behind at most one ring batch before its GET leaves, never "
             "behind the whole storm -- expect the fill under 50 ms (the original's limit) and "
             "all 500 applied, 0 dropped, within 2 s (ring capacity 4096 > 500)");
  Storm storm;
  run_storm(target, r, rows, storm);
  run.expect(storm.sent && storm.replies == kStorm, "500 PUBLISHes each reached R (1 receiver)");
  run.expect(storm.all_applied, "all 500 applied within 2 s");
  const auto s = r.stats().tables.at(0);
  // A message that found R's writer parked was applied by R's io thread (direct_apply), not
  // published into the ring.
  run.expect(
      s.rings.at(0).published + s.writer.direct_applies == kStorm && s.rings.at(0).dropped == 0,
      "the ring (or the io thread, direct) took 500, dropped 0");
  int gone = 0;
  for (const auto& n : rows.names) gone += cached(r, "storm", n) ? 0 : 1;
  run.expect(gone == kStorm, "all 500 rows gone from R's L1");
  if (!run.expect(storm.fill_answered, "the mid-storm fill answered")) return;
  auto [got, fill_us] = storm.fill_done.get();
  run.expect(got && got->source == Source::kL2 && got->value == "px=200.00",
             "the mid-storm fill answered px=200.00 from l2 (" + describe(got) + ")");
  run.expect(fill_us < 50'000,
             "the mid-storm fill took " + fmt("%.0f", fill_us / 1000) + " ms, under 50 ms");

  const BrandedId v_re = writer.mint("TXN").value();
  const bool reput = w.put("storm", rows.names.front().view(), "px=109.00", v_re).has_value();
  auto back = r.get("storm", rows.names.front().view());
  run.expect(reput && back && back->source == Source::kL2 && back->value == "px=109.00",
             "the re-put name reads px=109.00 from l2 (" + describe(back) + ")");
  run.expect(loads.load() == 0, "no loader ran");
  run.figure(std::to_string(kStorm) + " invalidations through the wire and the ring in " +
             fmt("%.1f", storm.ms) + " ms, " + std::to_string(s.rings.at(0).batches) +
             " batches (largest " + std::to_string(s.rings.at(0).max_batch) + "), " +
             std::to_string(s.rings.at(0).dropped) + " dropped; all rows gone; re-put " +
             describe(back) + "; mid-storm fill " + fmt("%.2f", fill_us / 1000) + " ms (" +
             fmt("%.1f", fill_us / get.median()) + "x the GET floor; R's writer had applied " +
             std::to_string(storm.applied_at_fill.load()) + " of 500 when it answered)");
}

void add_broadcast_f_gates(std::vector<Gate>& gates) {
  gates.push_back({"F2", "newer-wins", f2_newer_wins});
  gates.push_back({"F3", "broadcast", f3_broadcast});
  gates.push_back({"F4", "loss", f4_loss});
}

void add_broadcast_g_gates(std::vector<Gate>& gates) { gates.push_back({"G5", "storm", g5_storm}); }

const GateGroup kFGroup{4203, add_broadcast_f_gates};
const GateGroup kGGroup{4305, add_broadcast_g_gates};

}  // namespace
}  // namespace echo::cli
