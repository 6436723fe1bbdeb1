// SPDX-License-Identifier: MIT
// Shared by the engine's integration tests: table declarations with a loader that counts its runs,
// polling with a deadline, a few L2 inspections through the fixture's blocking client, and F2/F3
// staged for either server mode. Nodes are started by the mode's fixture (SingleServerTest::node,
// ClusterTest::node) or by start_node (support/engine_node.h). Every node of a test shares one
// process and one server or cluster; each has its own node id, io thread, connections and writers.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/l2_frame.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include "support/engine_node.h"
#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A loader that answers one value (its version minted by the engine).
inline engine::Loader answering(std::string value) {
  return [value = std::move(value)](const table::BrandedId&) -> engine::LoadResult {
    return engine::Loaded{value, std::nullopt};
  };
}

// A loader that counts its runs and answers one value (its version minted by the engine), for
// branded and text keys alike.
class LoaderProbe {
 public:
  engine::Loader answer(std::string value) const {
    return [runs = runs_, value = std::move(value)](const engine::Key&) -> engine::LoadResult {
      runs->fetch_add(1, std::memory_order_relaxed);
      return engine::Loaded{value, std::nullopt};
    };
  }
  int runs() const { return runs_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<int>> runs_ = std::make_shared<std::atomic<int>>(0);
};

inline engine::TableSpec table_spec(std::string name, std::string kind, engine::CoherenceMode mode,
                                    engine::Loader loader, std::int64_t ttl_ms = 60000) {
  engine::TableSpec s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  s.coherence = mode;
  s.loader = std::move(loader);
  s.ttl_ms = ttl_ms;
  return s;
}

// Names for test rows: one minter for the whole process on a node no engine uses.
inline table::BrandedId fresh_id(std::string_view ns) {
  static table::Minter minter(1000);
  return minter.mint(ns).value();
}

// A fresh id in `ns` that is newer than `than`. Ids minted on different nodes in the same
// millisecond order by node bits, not by time, so a version minted here is not necessarily newer
// than one a node minted a moment ago; this one is.
inline table::BrandedId newer_than(std::string_view ns, const table::BrandedId& than) {
  table::BrandedId v = fresh_id(ns);
  while (!table::newer(v, than)) v = fresh_id(ns);
  return v;
}

// Polls `pred` every 100 µs until it holds or `timeout` passes; true iff it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 5s) {
  return poll_until(pred, timeout, 100us);
}

inline const engine::TableWriter& writer_of(const engine::Engine& e, std::string_view table) {
  const engine::TableWriter* w = engine::internal::writer_of(e, table);
  EXPECT_NE(w, nullptr) << "no writer for " << table;
  return *w;
}

// The items of the table's first ring (a broadcast table's one ring, a job table's job ring)
// that the writer applied: drained from the ring, or, on a broadcast table, applied by the ring's
// producer itself under the writer's token (TableSpec::direct_apply, WriterStats::direct_applies).
inline std::uint64_t ring_applied(const engine::Engine& e, std::string_view table) {
  const engine::TableWriter& w = writer_of(e, table);
  const auto rings = w.ring_stats();
  const std::uint64_t direct =
      w.spec().coherence == engine::CoherenceMode::kBroadcast ? w.stats().direct_applies : 0;
  return (rings.empty() ? 0 : rings.front().applied) + direct;
}

// True iff the node's L1 holds a live row for `name` (a reader-side probe, counted as a read).
inline bool l1_holds(const engine::Engine& e, std::string_view table,
                     const table::BrandedId& name) {
  char buf[256];
  return writer_of(e, table).map().read(name.view(), std::span<char>(buf, sizeof buf)).status !=
         table::ReadStatus::kMiss;
}

inline std::string l2_key(std::string_view table, const table::BrandedId& name) {
  return table::l2_key(table, name.view()).value();
}

// The raw bytes under `key`, or "(nil)".
inline std::string l2_raw(redisContext* c, const std::string& key) {
  RedisReply r = command(c, "GET %b", key.data(), key.size());
  if (!r || r->type == REDIS_REPLY_NIL) return "(nil)";
  return std::string(r->str, r->len);
}

inline long long pttl(redisContext* c, const std::string& key) {
  RedisReply r = command(c, "PTTL %b", key.data(), key.size());
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -100;
}

inline std::size_t count_keys(redisContext* c, const char* pattern) {
  RedisReply r = command(c, "KEYS %s", pattern);
  return r && r->type == REDIS_REPLY_ARRAY ? r->elements : 999999;
}

inline std::string frame_text(const table::BrandedId& name, const table::BrandedId& version) {
  const auto f = table::make_frame(name, version);
  return std::string(table::view(f));
}

// F2's and F3's broadcast table "quotes" (kind AST), its loader answering "px=100.00".
inline engine::TableSpec quotes_spec(const LoaderProbe& loader) {
  return table_spec("quotes", "AST", engine::CoherenceMode::kBroadcast, loader.answer("px=100.00"));
}

// F2 (docs/wire.md, "The gates") as both deployments stage it: nodes 1 and 2 of broadcast table
// "quotes" started by `node(id, tables)`; a puts "px=105.00" for a fresh name at v_new, minted
// after v_old; then b broadcasts v_old, late: a's writer counts it stale and a still serves v_new
// from L1. The nodes, the name, its L2 key and both versions are left in `out` for the caller's own
// checks. Fatal on a failed step (call under ASSERT_NO_FATAL_FAILURE).
struct F2Nodes {
  std::unique_ptr<engine::Engine> a, b;
  table::BrandedId name = fresh_id("AST");
  std::string key = l2_key("quotes", name);
  table::BrandedId v_old = name, v_new = name;  // minted by node a in f2_late_broadcast
};

template <class NodeFn>
void f2_late_broadcast(NodeFn&& node, const LoaderProbe& loader, F2Nodes& out) {
  const auto spec = quotes_spec(loader);
  out.a = node(1, {spec});
  out.b = node(2, {spec});
  ASSERT_TRUE(out.a && out.b);
  engine::Engine& a = *out.a;
  out.v_old = a.mint("TXN").value();
  out.v_new = a.mint("AST").value();
  ASSERT_TRUE(a.put("quotes", out.name.view(), "px=105.00", out.v_new));

  const auto stale_before = writer_of(a, "quotes").stats().stale;
  ASSERT_TRUE(out.b->broadcast("quotes", out.name.view(), out.v_old));
  ASSERT_TRUE(eventually([&] { return writer_of(a, "quotes").stats().stale > stale_before; }));
  auto still = a.get("quotes", out.name.view());
  ASSERT_TRUE(still);
  EXPECT_EQ(still->source, engine::Source::kL1);
  EXPECT_EQ(still->value, "px=105.00");
  EXPECT_EQ(still->version, out.v_new);
}

// F3 (docs/wire.md, "The gates") as both deployments stage it: nodes 1, 2 and 3 of broadcast table
// "quotes" started by `node(id, tables)`; a puts v1 of a fresh name and b and c read it, from L2
// then from L1; a puts v2 and broadcasts it (to at least the three subscribers); b and c apply the
// message and their next read is v2 from L2. The nodes and what the broadcast answered are left in
// `out` for the caller's own checks. Fatal on a failed step (call under ASSERT_NO_FATAL_FAILURE).
struct F3Nodes {
  std::unique_ptr<engine::Engine> a, b, c;
  long long heard = 0;
};

template <class NodeFn>
void f3_round_trip(NodeFn&& node, const LoaderProbe& loader, F3Nodes& out) {
  const auto spec = quotes_spec(loader);
  out.a = node(1, {spec});
  out.b = node(2, {spec});
  out.c = node(3, {spec});
  ASSERT_TRUE(out.a && out.b && out.c);
  engine::Engine& a = *out.a;
  const table::BrandedId name = fresh_id("AST");
  const table::BrandedId v1 = a.mint("AST").value();
  ASSERT_TRUE(a.put("quotes", name.view(), "px=100.00", v1));
  for (engine::Engine* e : {out.b.get(), out.c.get()}) {
    auto r = e->get("quotes", name.view());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->source, engine::Source::kL2);
    r = e->get("quotes", name.view());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->source, engine::Source::kL1);
    EXPECT_EQ(r->version, v1);
  }

  const table::BrandedId v2 = a.mint("AST").value();
  ASSERT_TRUE(a.put("quotes", name.view(), "px=106.00", v2));
  auto heard = a.broadcast("quotes", name.view(), v2);
  ASSERT_TRUE(heard) << heard.error().message();
  out.heard = *heard;
  EXPECT_GE(*heard, 3);
  for (engine::Engine* e : {out.b.get(), out.c.get()}) {
    ASSERT_TRUE(eventually([&] { return writer_of(*e, "quotes").stats().applied >= 1; }));
    auto r = e->get("quotes", name.view());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->source, engine::Source::kL2);
    EXPECT_EQ(r->value, "px=106.00");
    EXPECT_EQ(r->version, v2);
  }
}

// Percentile of a sample (sorts a copy); q in [0, 1].
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace echo::test
