// SPDX-License-Identifier: MIT
// Gates E1-E6 (docs/wire.md, "The gates"): the cache-aside table end to end through the Engine
// against the drill's server - the directory and the kind gate, the three sources, the herd on
// one flight, L1 speed against a plain GET measured in the same run, jittered expiry against a
// zero-jitter control, and the size bound.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
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
using engine::Errc;
using engine::Loaded;
using engine::LoadResult;
using engine::Source;
using engine::TableSpec;
using floors::Clock;
using floors::counting_loader;
using floors::fmt;
using floors::grouped;
using floors::l2_key;
using floors::node_options;
using floors::Redis;
using table::BrandedId;

// Minting nodes of the E gates' engines and of the drill's own ids (distinct: docs/wire.md,
// "Branded ids").
constexpr unsigned kDrillNode = 100;

// E1's node: quotes (AST, ttl 300 ms, broadcast) and fills (FIL, ttl 5000 ms, job).
std::vector<TableSpec> declared_tables(std::atomic<int>& loads) {
  return {TableSpec{.name = "quotes",
                    .kind = "AST",
                    .loader = counting_loader(loads),
                    .ttl_ms = 300,
                    .coherence = CoherenceMode::kBroadcast},
          TableSpec{.name = "fills",
                    .kind = "FIL",
                    .loader = counting_loader(loads),
                    .ttl_ms = 5000,
                    .coherence = CoherenceMode::kJob}};
}

void expect_directory(GateRun& run, const Engine& node) {
  const auto dir = node.directory();
  const bool listed = dir.size() == 2 && dir[0].name == "quotes" && dir[0].kind == "AST" &&
                      dir[0].ttl_ms == 300 && dir[0].coherence == CoherenceMode::kBroadcast &&
                      dir[0].ring_capacity == 4096 && dir[1].name == "fills" &&
                      dir[1].kind == "FIL" && dir[1].ttl_ms == 5000 &&
                      dir[1].coherence == CoherenceMode::kJob && dir[1].ring_capacity == 0;
  run.expect(listed,
             "the directory lists quotes AST 300 ms broadcast (ring 4096) and fills FIL "
             "5000 ms job (no ring)");
}

struct Refusals {
  bool undeclared_ok = false, wrong_ok = false, garbage_ok = false;
  bool quiet = false, wire_ok = false;  // no command on the wire, in a window the consumer left
};

// The three refused gets. The fills consumer shares the command connection (its beat, claim
// and park refresh), so they are counted in a window where the consumer sent nothing: it has
// parked once, and its activity counters did not move across the window (else the window is
// re-run).
Refusals refused_gets(Engine& node) {
  const auto consumer_moves = [&node] {
    const auto c = node.stats().tables.at(1).consumer.value_or(engine::JobConsumerStats{});
    return c.beats + c.parks + c.wakes + c.empty_claims + c.claimed + c.reaped + c.promoted;
  };
  floors::eventually([&node] {
    const auto c = node.stats().tables.at(1).consumer;
    return c && c->parks > 0;
  });
  Refusals r;
  for (int window = 0; window < 5 && !r.quiet; ++window) {
    const auto moves_before = consumer_moves();
    const auto commands_before = node.stats().connections.at(0).commands;
    auto undeclared = node.get("nosuch", "AST0KHTOWnGLuC");
    r.undeclared_ok = !undeclared && undeclared.error() == Errc::kNoSuchCache;
    auto wrong = node.get("quotes", "ORD0KHTOWnGLuC");
    r.wrong_ok = !wrong && wrong.error() == Errc::kKind;
    auto garbage = node.get("quotes", "AST0KHTOWnGL!C");
    r.garbage_ok = !garbage && garbage.error() == Errc::kKind;
    const auto commands_after = node.stats().connections.at(0).commands;
    r.wire_ok = commands_after == commands_before;
    // A consumer command sent in the window moves its counter by its reply: give that time.
    if (!r.wire_ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.quiet = r.wire_ok || consumer_moves() == moves_before;
  }
  return r;
}

// A third declaration with jitter 0.7: what the engine's refusal said ("" if it took it).
std::string jitter_refusal(const DrillTarget& target, std::atomic<int>& loads) {
  std::string refusal;
  try {
    Engine bad(
        node_options(target, 102),
        {TableSpec{.name = "bad", .kind = "BAD", .loader = counting_loader(loads), .jitter = 0.7}});
  } catch (const engine::ConfigError& e) {
    refusal = e.what();
  }
  return refusal;
}

void e1_declared(GateRun& run, const DrillTarget& target) {
  run.stage(
      "one node declares quotes (AST, ttl 300 ms, broadcast) and fills (FIL, ttl 5000 ms, "
      "job); then asks an undeclared table, asks quotes for the wrong-kind ORD0KHTOWnGLuC, "
      "and offers a third declaration with jitter 0.7");
  run.derive(
      "the kind gate runs before the map, the writer and the wire -- expect error kind, 0 "
      "loader runs, 0 commands on the connection and 0 ecc:{quotes}:* keys");
  std::atomic<int> loads{0};
  Engine node(node_options(target, 101), declared_tables(loads));
  const std::error_code started = node.start();
  if (!run.expect(!started, "the node starts (" + started.message() + ")")) return;
  expect_directory(run, node);

  Redis redis(target);
  const std::size_t keys_before = redis.count_keys("ecc:{quotes}:*");
  const auto l1_before = node.stats().tables.at(0).l1;
  const Refusals refused = refused_gets(node);
  run.expect(refused.undeclared_ok, "an undeclared table answers no_such_cache");
  run.expect(refused.wrong_ok, "ORD0KHTOWnGLuC on quotes answers kind");
  run.expect(refused.garbage_ok, "a malformed AST id answers kind");

  const auto l1_after = node.stats().tables.at(0).l1;
  const std::size_t keys_after = redis.count_keys("ecc:{quotes}:*");
  run.expect(loads.load() == 0, "0 loader runs");
  run.expect(refused.quiet && refused.wire_ok,
             "0 commands on the wire (in a window the job consumer left quiet)");
  run.expect(l1_after.hits == l1_before.hits && l1_after.misses == l1_before.misses,
             "the map was not consulted (hits and misses unmoved)");
  run.expect(keys_after == keys_before && keys_after == 0, "0 ecc:{quotes}:* keys");

  const std::string refusal = jitter_refusal(target, loads);
  run.expect(
      refusal.find("jitter") != std::string::npos && refusal.find("0.0..0.5") != std::string::npos,
      "jitter 0.7 refused at declaration, naming the knob and its range");
  run.figure("2 tables listed; undeclared -> no_such_cache; ORD0KHTOWnGLuC -> kind, " +
             std::to_string(loads.load()) + " loader runs, " + std::to_string(keys_after) +
             " keys; jitter 0.7 -> \"" + refusal + "\"");
}

void e2_sources(GateRun& run, const DrillTarget& target) {
  run.stage(
      "quotes (AST, ttl 300 ms); one cold name read three times: cold, warm, and after a "
      "newer coherence message dropped its L1 row (L2 untouched)");
  run.derive(
      "the cold read runs the loader and writes L2 framed with PX 300; the warm read never "
      "leaves L1; the third falls through to L2 -- expect sources loader, l1, l2, one "
      "loader run, one version, PTTL in (0, 300]");
  std::atomic<int> loads{0};
  Engine node(
      node_options(target, 103),
      {TableSpec{
          .name = "quotes", .kind = "AST", .loader = counting_loader(loads), .ttl_ms = 300}});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter drill(kDrillNode);
  const BrandedId name = drill.mint("AST").value();
  const std::string key = l2_key("quotes", name);
  Redis redis(target);

  auto cold = node.get("quotes", name.view());
  auto warm = node.get("quotes", name.view());
  const long long pttl = redis.pttl(key);
  std::string stored;
  const bool in_l2 = redis.get(key, stored);
  // A version newer than the row's (the fill's was minted on the node's own minter).
  BrandedId newer_version = drill.mint("TXN").value();
  while (cold && cold->version && !table::newer(newer_version, *cold->version)) {
    newer_version = drill.mint("TXN").value();
  }
  const auto drop = node.apply_coherence("quotes", name.view(), newer_version);
  auto third = node.get("quotes", name.view());

  if (!run.expect(cold && warm && third, "three reads answered")) return;
  run.expect(cold->source == Source::kLoader && cold->value == "px=100.00",
             "cold read: px=100.00 from the loader");
  run.expect(warm->source == Source::kL1 && warm->value == "px=100.00", "warm read: hit in l1");
  run.expect(drop && *drop == table::Verdict::kApplied, "the newer message dropped the L1 row");
  run.expect(third->source == Source::kL2 && third->value == "px=100.00",
             "after the drop: px=100.00 from l2");
  run.expect(cold->version && warm->version == cold->version && third->version == cold->version &&
                 cold->version->ns() == "AST",
             "one AST version across the three sources");
  run.expect(loads.load() == 1, "the loader ran once");
  run.expect(in_l2 && cold->version && stored == std::string(cold->version->view()) + "px=100.00",
             "L2 holds version||value (14 + 9 bytes)");
  run.expect(pttl > 0 && pttl <= 300, "PTTL in (0, 300]");
  const auto s = node.stats().tables.at(0);
  run.expect(s.writer.fills == 1 && s.writer.l2_hits == 1, "writer counts fills 1, l2_hits 1");
  run.figure(std::string("loader -> l1 -> l2; loader ran ") + std::to_string(loads.load()) +
             "; PTTL " + std::to_string(pttl) + " ms of 300");
}

void e3_herd(GateRun& run, const DrillTarget& target) {
  constexpr int kReaders = 200;
  run.stage(
      "quotes (AST, ttl 5000 ms); 200 threads read one cold name at once; the loader holds "
      "its answer until every reader has entered get, then 50 ms more");
  run.derive(
      "misses of one name share one flight on the writer -- expect loader 1, coalesced "
      "199, and one value in 200 hands");
  std::atomic<int> loads{0}, entered{0};
  engine::Loader slow = [&](const BrandedId&) -> LoadResult {
    loads.fetch_add(1, std::memory_order_relaxed);
    floors::eventually([&] { return entered.load(std::memory_order_acquire) == kReaders; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Loaded{"px=101.00", std::nullopt};
  };
  Engine node(node_options(target, 104),
              {TableSpec{.name = "quotes", .kind = "AST", .loader = slow, .ttl_ms = 5000}});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter drill(kDrillNode);
  const BrandedId name = drill.mint("AST").value();

  std::vector<engine::Result<engine::Got>> answers(kReaders, table::Unexpected{std::error_code{}});
  std::latch go(1);
  const auto t0 = Clock::now();
  {
    std::vector<std::jthread> readers;
    readers.reserve(kReaders);
    for (int i = 0; i < kReaders; ++i) {
      readers.emplace_back([&, i] {
        go.wait();
        entered.fetch_add(1, std::memory_order_release);
        answers[static_cast<std::size_t>(i)] = node.get("quotes", name.view());
      });
    }
    go.count_down();
  }
  const double herd_ms = floors::since_us(t0) / 1000;
  int served = 0;
  bool one_value = true;
  std::optional<BrandedId> version;
  for (const auto& a : answers) {
    if (!a) continue;
    ++served;
    if (!version) version = a->version;
    one_value = one_value && a->value == "px=101.00" && a->version == version;
  }
  const auto w = node.stats().tables.at(0).writer;
  run.expect(served == kReaders, "200 of 200 readers served");
  run.expect(one_value, "one value, one version in every hand");
  run.expect(loads.load() == 1, "loader ran 1 time");
  run.expect(w.coalesced == kReaders - 1, "coalesced 199");
  run.expect(w.fills == 1, "one fill");
  run.figure("200 readers -> loader " + std::to_string(loads.load()) + ", coalesced " +
             std::to_string(w.coalesced) + ", one value, herd answered in " + fmt("%.0f", herd_ms) +
             " ms");
}

void e4_speed(GateRun& run, const DrillTarget& target) {
  constexpr int kHits = 500'000;
  run.stage(
      "speed (AST, ttl 60 s), one row put; the floor first: 2,000 plain hiredis GETs of "
      "that row's L2 key; then 500,000 Engine::get hits on the same name");
  std::atomic<int> loads{0};
  Engine node(
      node_options(target, 105),
      {TableSpec{
          .name = "speed", .kind = "AST", .loader = counting_loader(loads), .ttl_ms = 60000}});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter drill(kDrillNode);
  const BrandedId name = drill.mint("AST").value();
  if (!run.expect(node.put("speed", name.view(), "px=102.00").has_value(), "the row is put"))
    return;

  const floors::Samples get = floors::get_floor(target, l2_key("speed", name), 2000);
  const double get_rate = 1e6 / get.median();
  run.derive("floor: plain GET median " + fmt("%.1f", get.median()) + " us (p99 " +
             fmt("%.1f", get.pct(0.99)) + " us) = " + grouped(get_rate) +
             " GETs/s; a hit is a lock-free lookup and a copy on the caller's thread, no "
             "syscall -- expect hits/s above 10x that (" +
             grouped(10 * get_rate) + "/s) and above the original's 250,000/s");

  std::size_t ok = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < kHits; ++i) {
    auto g = node.get("speed", name.view());
    ok += (g && g->source == Source::kL1) ? 1 : 0;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double rate = kHits / secs;
  const double ns = secs * 1e9 / kHits;

  // The map's own read, under the façade: how much of a hit is the façade's.
  std::string value;
  const auto& map = engine::internal::writer_of(node, "speed")->map();
  std::size_t raw_ok = 0;
  const auto t1 = Clock::now();
  for (int i = 0; i < kHits; ++i) raw_ok += map.get(name.view(), value) ? 1 : 0;
  const double raw_ns = std::chrono::duration<double, std::nano>(Clock::now() - t1).count() / kHits;

  run.expect(ok == static_cast<std::size_t>(kHits), "500,000 of 500,000 reads were l1 hits");
  run.expect(raw_ok == static_cast<std::size_t>(kHits), "500,000 raw map reads hit");
  run.expect(rate > 250'000, "hits/s > 250,000");
  run.expect(rate > 10 * get_rate, "hits/s > 10x the plain GET rate");
  run.expect(loads.load() == 0, "the loader never ran");
  run.figure(grouped(rate) + " hits/s (" + fmt("%.0f", ns) + " ns; map read " +
             fmt("%.0f", raw_ns) + " ns) vs " + fmt("%.1f", get.median()) + " us per L2 GET, " +
             fmt("%.0f", rate / get_rate) + "x");
}

// E5: fills `count` names of `table` at once (get_async) and reports the map-clock window
// [t0, t1] that brackets every insert.
struct FillWindow {
  std::int64_t t0 = 0, t1 = 0;
  int served = 0;
};

FillWindow fill_all(Engine& node, const std::string& table, const std::vector<BrandedId>& names) {
  const auto& map = engine::internal::writer_of(node, table)->map();
  FillWindow w;
  std::atomic<int> answered{0}, served{0};
  w.t0 = map.now();
  for (const auto& n : names) {
    node.get_async(table, n.view(), [&](engine::Result<engine::Got> r) {
      if (r && r->source == Source::kLoader) served.fetch_add(1, std::memory_order_relaxed);
      answered.fetch_add(1, std::memory_order_release);
    });
  }
  floors::eventually(
      [&] { return answered.load(std::memory_order_acquire) == static_cast<int>(names.size()); },
      std::chrono::seconds(5));
  w.t1 = map.now();
  w.served = served.load();
  return w;
}

struct Spread {
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  int rows = 0;
};

Spread expiry_spread(const Engine& node, const std::string& table,
                     const std::vector<BrandedId>& names) {
  const auto& map = engine::internal::writer_of(node, table)->map();
  Spread s;
  table::ReadGuard guard;
  for (const auto& n : names) {
    if (auto row = map.find(guard, n.view())) {
      ++s.rows;
      s.lo = std::min(s.lo, row->expires_at);
      s.hi = std::max(s.hi, row->expires_at);
    }
  }
  return s;
}

void e5_jitter(GateRun& run, const DrillTarget& target) {
  constexpr int kRows = 400;
  run.stage(
      "jit (ttl 300 ms, jitter 0.2, sweep 100 ms) and the control flat (ttl 300 ms, "
      "jitter 0, sweep 100 ms); 400 cold names filled at once in each; expiry read off "
      "every row, then the sweeper left to run");
  std::atomic<int> loads{0};
  Engine node(node_options(target, 106), {TableSpec{.name = "jit",
                                                    .kind = "AST",
                                                    .loader = counting_loader(loads),
                                                    .ttl_ms = 300,
                                                    .jitter = 0.2,
                                                    .sweep_ms = 100},
                                          TableSpec{.name = "flat",
                                                    .kind = "AST",
                                                    .loader = counting_loader(loads),
                                                    .ttl_ms = 300,
                                                    .jitter = 0.0,
                                                    .sweep_ms = 100}});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter drill(kDrillNode);
  std::vector<BrandedId> jit_names, flat_names;
  for (int i = 0; i < kRows; ++i) jit_names.push_back(drill.mint("AST").value());
  for (int i = 0; i < kRows; ++i) flat_names.push_back(drill.mint("AST").value());

  // The fills come first: their windows are the floor the spreads are judged against.
  const FillWindow jw = fill_all(node, "jit", jit_names);
  const FillWindow fw = fill_all(node, "flat", flat_names);
  const std::int64_t jfill = jw.t1 - jw.t0, ffill = fw.t1 - fw.t0;
  run.derive(
      "s = trunc(300 x 0.2) = 60, so each row expires at insert + 300 + r, r uniform in "
      "[-60, 60]; 400 draws span at least 100 ms of r (odds against below 1e-31) and the "
      "inserts span at most the fill -- expect the jittered spread in [99 - fill, 121 + "
      "fill] = [" +
      std::to_string(std::max<std::int64_t>(0, 99 - jfill)) + ", " + std::to_string(121 + jfill) +
      "] ms for its " + std::to_string(jfill) +
      " ms fill (1 ms of clock grain each side), and the control's no wider than its own " +
      std::to_string(ffill) + " ms fill + 1");
  const Spread js = expiry_spread(node, "jit", jit_names);
  const Spread fs = expiry_spread(node, "flat", flat_names);
  const std::int64_t jspread = js.hi - js.lo, fspread = fs.hi - fs.lo;

  run.expect(jw.served == kRows && fw.served == kRows, "400 + 400 rows filled from the loader");
  run.expect(js.rows == kRows && fs.rows == kRows, "400 + 400 rows live after the fill");
  run.expect(js.lo >= jw.t0 + 240 && js.hi <= jw.t1 + 360,
             "every jittered expiry lies in [fill start + 240, fill end + 360]");
  run.expect(fs.lo >= fw.t0 + 300 && fs.hi <= fw.t1 + 300,
             "every control expiry lies in [fill start + 300, fill end + 300]");
  run.expect(jspread >= 99 - jfill && jspread <= 121 + jfill,
             "jittered spread inside the derived band");
  run.expect(fspread <= ffill + 1, "control spread within its fill");

  const auto swept_all = [&] {
    const auto s = node.stats();
    return s.tables.at(0).l1.swept >= kRows && s.tables.at(1).l1.swept >= kRows;
  };
  const bool swept = floors::eventually(swept_all, std::chrono::seconds(2));
  const auto s = node.stats();
  run.expect(swept && s.tables.at(0).l1.swept == kRows && s.tables.at(1).l1.swept == kRows,
             "the sweeper removed 400 + 400 (swept counts them)");
  run.expect(s.tables.at(0).l1.size == 0 && s.tables.at(1).l1.size == 0, "size 0 in both");
  run.figure(std::to_string(kRows) + " rows filled in " + std::to_string(jfill) + " ms expire " +
             std::to_string(jspread) + " ms apart; zero-jitter control " + std::to_string(fspread) +
             " ms over a " + std::to_string(ffill) + " ms fill; swept " +
             std::to_string(s.tables.at(0).l1.swept) + " in " +
             std::to_string(s.tables.at(0).l1.sweeps) + " sweeps, size " +
             std::to_string(s.tables.at(0).l1.size));
}

void e6_bound(GateRun& run, const DrillTarget& target) {
  run.stage(
      "bound (AST, max_size 100, eviction skip: the original's policy, ttl 60 s); 51 names "
      "filled and live, then 150 more cold "
      "names read; then a put on a live name");
  run.derive(
      "the first 49 of the 150 fit; with nothing expired the other 101 are full skips, "
      "yet every reader still gets its value -- expect size 100, full_skips 101, 150 of "
      "150 served; the put replaces a row (no growth) and lands one value in both layers");
  std::atomic<int> loads{0};
  engine::Loader by_name = [&loads](const BrandedId& n) -> LoadResult {
    loads.fetch_add(1, std::memory_order_relaxed);
    return Loaded{"v-" + n.str(), std::nullopt};
  };
  Engine node(node_options(target, 107), {TableSpec{.name = "bound",
                                                    .kind = "AST",
                                                    .loader = by_name,
                                                    .ttl_ms = 60000,
                                                    .max_size = 100,
                                                    .eviction = engine::Eviction::kSkip}});
  if (!run.expect(!node.start(), "the node starts")) return;
  table::Minter drill(kDrillNode);
  std::vector<BrandedId> live, late;
  for (int i = 0; i < 51; ++i) live.push_back(drill.mint("AST").value());
  for (int i = 0; i < 150; ++i) late.push_back(drill.mint("AST").value());
  int live_ok = 0, late_ok = 0;
  for (const auto& n : live) {
    auto g = node.get("bound", n.view());
    live_ok += (g && g->value == "v-" + n.str()) ? 1 : 0;
  }
  for (const auto& n : late) {
    auto g = node.get("bound", n.view());
    late_ok += (g && g->value == "v-" + n.str()) ? 1 : 0;
  }
  const auto l1 = node.stats().tables.at(0).l1;
  run.expect(live_ok == 51, "51 live rows filled");
  run.expect(late_ok == 150, "150 of 150 late readers served their own value");
  run.expect(l1.size == 100, "size 100");
  run.expect(l1.full_skips == 101, "full_skips 101");
  run.expect(loads.load() == 201, "the loader ran once per name (201)");

  const BrandedId& target_name = live.front();
  auto put = node.put("bound", target_name.view(), "px=103.00");
  auto read = node.get("bound", target_name.view());
  Redis redis(target);
  std::string stored;
  const bool in_l2 = redis.get(l2_key("bound", target_name), stored);
  const auto after = node.stats().tables.at(0).l1;
  run.expect(put.has_value(), "the put answered its version");
  run.expect(read && read->source == Source::kL1 && read->value == "px=103.00" && put &&
                 read->version == *put,
             "L1 serves the put's value and version");
  run.expect(in_l2 && put && stored == std::string(put->view()) + "px=103.00",
             "L2 holds the same version||value");
  run.expect(after.size == 100 && after.full_skips == 101, "size still 100, full_skips still 101");
  run.figure("max_size 100: 51 live + 150 fills -> size " + std::to_string(l1.size) +
             ", full_skips " + std::to_string(l1.full_skips) + ", " + std::to_string(late_ok) +
             " of 150 served; put px=103.00 in L1 and L2 under one version");
}

void add_cache_gates(std::vector<Gate>& gates) {
  gates.push_back({"E1", "declared", e1_declared});
  gates.push_back({"E2", "sources", e2_sources});
  gates.push_back({"E3", "herd", e3_herd});
  gates.push_back({"E4", "speed", e4_speed});
  gates.push_back({"E5", "jitter", e5_jitter});
  gates.push_back({"E6", "bound", e6_bound});
}

const GateGroup kGroup{4101, add_cache_gates};

}  // namespace
}  // namespace echo::cli
