// SPDX-License-Identifier: MIT
// lanes_bench's reads (lanes_bench.cc says what the bench measures): an L1 hit through the
// engine, the typed handle and the map itself, against a plain hiredis GET and a miss that reads
// L2.
#include "lanes_bench.h"

namespace lanes_bench {

// ---- L1 hit vs L2 GET ----

// The mean microseconds per iteration of a loop, for the closing table's ratio line; the last
// call wins (Google Benchmark's final call is the one it reports, with the most iterations).
struct Mean {
  const char* bench;
  const Placement& p;
  benchmark::State& state;
  Clock::time_point t0 = Clock::now();
  ~Mean() {
    if (state.iterations() > 0) {
      g_results[bench][p.name].us.assign(1, since_us(t0) / static_cast<double>(state.iterations()));
    }
  }
};

void BM_Engine_GetL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(41, p.receiver_cpu), {lane_table("quotes", CoherenceMode::kNone, p.receiver_cpu)});
  start_or_throw(e);
  echo::table::Minter minter(103);
  const BrandedId name = minter.mint("AST").value();
  if (!e.put("quotes", name.view(), "px=106.00")) throw std::runtime_error("put failed");
  Mean mean{"l1_hit", p, state};
  for (auto _ : state) {
    auto got = e.get("quotes", name.view());
    benchmark::DoNotOptimize(got);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// The typed handle's hit (goal: at most 1.1x the map's own) against the same row read through the
// handle's map directly (L1Map::visit): a text key, a struct read in place.
struct BenchQuote {
  double bid, ask;
  std::int64_t size;
};
echo::engine::TableSpec typed_quotes(int cpu) {
  TableSpec s = lane_table("tquotes", CoherenceMode::kNone, cpu);
  s.keys = echo::engine::KeyKind::kText;
  return echo::engine::typed<BenchQuote>(std::move(s));
}
void BM_Table_ReadL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(43, p.receiver_cpu), {typed_quotes(p.receiver_cpu)});
  start_or_throw(e);
  const auto quotes = e.table<BenchQuote>("tquotes");
  if (!quotes.put("AAPL", BenchQuote{189.1, 189.2, 300})) throw std::runtime_error("put failed");
  double sum = 0;
  for (auto _ : state) {
    auto r = quotes.read("AAPL", [&sum](const BenchQuote& q, std::string_view) { sum += q.bid; });
    benchmark::DoNotOptimize(r);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}
void BM_Table_MapVisitL1Hit(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(44, p.receiver_cpu), {typed_quotes(p.receiver_cpu)});
  start_or_throw(e);
  const auto quotes = e.table<BenchQuote>("tquotes");
  if (!quotes.put("AAPL", BenchQuote{189.1, 189.2, 300})) throw std::runtime_error("put failed");
  const echo::table::L1Reader map = quotes.l1();
  double sum = 0;
  for (auto _ : state) {
    const bool hit = map.visit("AAPL", [&sum](std::string_view v, std::string_view) {
      sum += reinterpret_cast<const BenchQuote*>(v.data())->bid;
    });
    benchmark::DoNotOptimize(hit);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// A plain blocking hiredis GET of a framed row (the floor under a miss).
void BM_Hiredis_Get(benchmark::State& state, const Placement& p) {
  place(p);
  Context c = connect();
  Reply set = command(c.get(), "SET lanes_bench:get %s", "TXN0000000000000px=106.00");
  Mean mean{"l2_get", p, state};
  for (auto _ : state) {
    Reply r = command(c.get(), "GET lanes_bench:get");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

// An engine read whose row is in L2 only: the miss, the writer's flight, one GET on the io
// thread, the fill, the answer. Each name is read once (then it would hit).
void BM_Engine_GetL2(benchmark::State& state, const Placement& p) {
  place(p);
  Engine e(node(42, p.receiver_cpu), {lane_table("quotes2", CoherenceMode::kNone, p.receiver_cpu)});
  start_or_throw(e);
  echo::table::Minter minter(104);
  Context c = connect();
  const int n = 2000;
  std::vector<BrandedId> names;
  for (int i = 0; i < n; ++i) {
    names.push_back(minter.mint("AST").value());
    const std::string key = echo::table::l2_key("quotes2", names.back().view()).value();
    const std::string value = minter.mint("TXN").value().str() + "px=106.00";
    redisAppendCommand(c.get(), "SET %b %b", key.data(), key.size(), value.data(), value.size());
  }
  for (int i = 0; i < n; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c.get(), &raw) == REDIS_OK) freeReplyObject(raw);
  }
  std::size_t next = 0;
  Mean mean{"engine_l2", p, state};
  for (auto _ : state) {
    if (next == names.size()) {
      state.SkipWithError("out of cold names");
      break;
    }
    auto got = e.get("quotes2", names[next++].view());
    if (!got || got->source != echo::engine::Source::kL2) {
      state.SkipWithError("the read did not come from l2");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(p.name);
}

}  // namespace lanes_bench
