// SPDX-License-Identifier: MIT
// Typed table handles over text keys (docs/wire.md, "Text keys"), against a real redis-server: a
// struct decoded once by the writer and read in place, keys like "AAPL" and "EUR:USD", the key
// gate, the codec's refusal, on_removal, and the text-key message crossing two processes (this
// binary re-executed as the second node, its L1 dropped by the first node's broadcast).
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/engine/l2_frame.h>
#include <echo/table/names.h>

#include "support/child_process.h"
#include "support/engine_node.h"
#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using namespace std::chrono_literals;
using engine::CoherenceMode;
using engine::Engine;
using engine::Errc;
using engine::KeyKind;
using engine::RemovalCause;
using engine::Source;
using engine::Table;
using engine::TableSpec;

struct Quote {
  double bid;
  double ask;
  std::int64_t size;
};

// The loader's answer for a symbol: bid = 100 + its length (so a test can tell it from a put).
TableSpec quotes_spec(
    std::shared_ptr<std::atomic<int>> loads = std::make_shared<std::atomic<int>>(),
    CoherenceMode lane = CoherenceMode::kBroadcast) {
  TableSpec s;
  s.name = "quotes";
  s.kind = "QTE";
  s.keys = KeyKind::kText;
  s.coherence = lane;
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<Quote>([loads](const engine::Key& k) {
    loads->fetch_add(1, std::memory_order_relaxed);
    return Quote{100.0 + static_cast<double>(k.view().size()), 200.0, 1};
  });
  return engine::typed<Quote>(s);
}

// ---- the second process: one node of the same table, answering lines on stdin ----
//   --typed-node <port> <node> [job]: the table on the broadcast lane, or on the job lane
//   read <key>  -> "<source> <bid>" (Table::read) or "error <code>"
int child_main(int argc, char** argv) {
  if (argc != 4 && argc != 5) return 2;
  const CoherenceMode lane = argc == 5 && std::string_view(argv[4]) == "job"
                                 ? CoherenceMode::kJob
                                 : CoherenceMode::kBroadcast;
  Engine e(node_options("127.0.0.1", std::atoi(argv[2]), static_cast<unsigned>(std::atoi(argv[3]))),
           {quotes_spec(std::make_shared<std::atomic<int>>(), lane)});
  if (e.start(10s)) return 3;
  Table<Quote> quotes = e.table<Quote>("quotes");
  write_line(1, "ready");
  while (auto line = read_line(0, std::chrono::hours(1))) {
    if (line->starts_with("read ")) {
      double bid = 0;
      auto r =
          quotes.read(line->substr(5), [&bid](const Quote& q, std::string_view) { bid = q.bid; });
      write_line(1, r ? std::string(engine::to_string(*r)) + " " + std::to_string(bid)
                      : "error " + r.error().message());
    } else if (*line == "stats") {
      const auto s = quotes.l1().stats();
      write_line(1, "coh_applied " + std::to_string(s.coh_applied));
    } else {
      break;
    }
  }
  e.stop();
  return 0;
}

class TypedTableTest : public SingleServerTest {};

// A version for node `node` newer than `seen`, a row's version another node minted. Versions
// minted in one millisecond order by node id first (docs/wire.md, "Branded ids"), so a write that
// must replace a row another node just filled is minted past that row's version (the fresh clone
// saw node 1's put, in the same millisecond as node 2's fill, lose to it: its message stale at
// node 2).
table::BrandedId newer_than(std::string_view seen, unsigned node) {
  return table::process_minter()
      .mint_after("QTE", node, table::BrandedId::parse(seen).value())
      .value();
}

// The version of `key`'s row in `quotes`' L1 (empty when it holds none).
std::string version_in_l1(const Table<Quote>& quotes, std::string_view key) {
  std::string out;
  (void)quotes.l1().visit(key, [&out](std::string_view, std::string_view v) { out = v; });
  return out;
}

TEST_F(TypedTableTest, TheL1ClockDecidesWhenAnExpiredRowStopsBeingServed) {
  // ttl 100 ms. Writer, coarse and exact: a hit past the expiry misses (the row comes again from
  // L2 or the loader; the writer's published time moves while the writer is idle). Sweep: the hit
  // reads no clock, so the row is served from L1 until the writer's sweep drops it (sweep_ms 1500
  // here), then misses too.
  for (const auto clock : {engine::L1Clock::kWriter, engine::L1Clock::kCoarse,
                           engine::L1Clock::kExact, engine::L1Clock::kSweep}) {
    SCOPED_TRACE(static_cast<int>(clock));
    TableSpec s = quotes_spec();
    s.ttl_ms = 100;
    s.jitter = 0;
    s.sweep_ms = 1500;
    s.l1_clock = clock;
    auto n = node(3, {s});
    ASSERT_TRUE(n);
    Table<Quote> quotes = n->table<Quote>("quotes");
    ASSERT_TRUE(quotes.put("MSFT", Quote{1.0, 2.0, 3}));
    const std::uint64_t swept_before = quotes.l1().stats().swept;
    auto first = quotes.read("MSFT", [](const Quote&, std::string_view) {});
    ASSERT_TRUE(first);
    EXPECT_EQ(*first, Source::kL1);
    std::this_thread::sleep_for(250ms);  // past the expiry by more than a coarse tick
    auto later = quotes.read("MSFT", [](const Quote&, std::string_view) {});
    ASSERT_TRUE(later);
    // Read after the hit: unchanged, no sweep had dropped the row before it (a loaded machine
    // may run the first sweep early in the test; the row then misses, as it should).
    const bool before_sweep = quotes.l1().stats().swept == swept_before;
    if (clock == engine::L1Clock::kSweep) {
      if (before_sweep) {
        EXPECT_EQ(*later, Source::kL1) << "a sweep-clock hit reads no clock";
      }
      // The sweep ends it: within two sweep periods the row is gone from L1.
      const auto give_up = std::chrono::steady_clock::now() + 5s;
      while (!version_in_l1(quotes, "MSFT").empty() && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(20ms);
      }
      EXPECT_TRUE(version_in_l1(quotes, "MSFT").empty()) << "the sweep never dropped the row";
    } else {
      EXPECT_NE(*later, Source::kL1) << "an expired row was served";
    }
    n->stop();
  }
}

TEST_F(TypedTableTest, ATextKeyStructRowIsReadInPlaceAndCrossesTwoProcesses) {
  auto loads = std::make_shared<std::atomic<int>>(0);
  auto a = node(1, {quotes_spec(loads)});
  ASSERT_TRUE(a);
  Table<Quote> quotes = a->table<Quote>("quotes");
  EXPECT_EQ(quotes.name(), "quotes");

  auto child = ChildProcess::spawn({"--typed-node", std::to_string(server().port()), "2"});
  ASSERT_TRUE(child);
  ASSERT_EQ(child->receive(20s).value_or("(nothing)"), "ready");
  const auto ask = [&child](const std::string& line) {
    child->send(line);
    return child->receive(10s).value_or("(no answer)");
  };

  // The second node loads AAPL (not in L2 yet: its loader runs), then serves it from L1.
  EXPECT_EQ(ask("read AAPL"), "loader 104.000000");
  EXPECT_EQ(ask("read AAPL"), "l1 104.000000");
  // L2 holds it under the text key, framed version(14) ‖ the schema header ‖ the struct's bytes.
  const std::string stored = text(command_argv(client(), {"GET", "ecc:{quotes}:AAPL"}).get());
  ASSERT_EQ(stored.size(), table::kIdSize + engine::kSchemaHeaderSize + sizeof(Quote));
  EXPECT_EQ(stored.substr(table::kIdSize, engine::kSchemaHeaderSize),
            engine::schema_header<Quote>());

  // This node reads it from L2, then in place: the same object, no copy, on this thread.
  const Quote* first = nullptr;
  std::string filled;  // the version the second node's loader wrote, read back from L2
  auto r = quotes.read("AAPL", [&first, &filled](const Quote& q, std::string_view version) {
    first = &q;
    filled = version;
    EXPECT_EQ(version.size(), table::kIdSize);
  });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, Source::kL2);
  const Quote* second = nullptr;
  r = quotes.read("AAPL", [&second](const Quote& q, std::string_view) { second = &q; });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, Source::kL1);
  EXPECT_EQ(first, second) << "a hit reads the row's own object";
  EXPECT_EQ(loads->load(), 0) << "L2 answered this node: its loader never ran";

  // A new quote, put and announced as key:version (docs/wire.md, "Text keys"): the other process
  // drops its row and reads the new one from L2.
  auto v = quotes.put("AAPL", Quote{189.5, 189.6, 300}, newer_than(filled, 1));
  ASSERT_TRUE(v) << v.error().message();
  auto heard = a->broadcast("quotes", "AAPL", *v);
  ASSERT_TRUE(heard) << heard.error().message();
  EXPECT_GE(*heard, 2);  // both nodes' subscribers
  EXPECT_TRUE(poll_until([&] { return ask("stats") == "coh_applied 1"; }, 10s, 5ms))
      << ask("stats");
  EXPECT_EQ(ask("read AAPL"), "l2 189.500000");
  // This node's own row survived its own message (equal version: not newer).
  auto got = quotes.get("AAPL");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->bid, 189.5);
  EXPECT_EQ(got->size, 300);
}

TEST_F(TypedTableTest, ATextKeyRidesTheJobLaneToAnotherProcess) {
  // The job lane carries a text key's message as its payload: publish writes L2 and admits the job
  // into every member queue in one call. A text-key table carries values by default (docs/wire.md,
  // "Carried values"): the other process's consumer parses "{key}version value" and its writer
  // decodes the Quote into the row in place (newer wins), then acks (the job completes); its next
  // read is an L1 hit of the new quote, no refill.
  auto a = node(1, {quotes_spec(std::make_shared<std::atomic<int>>(), CoherenceMode::kJob)});
  ASSERT_TRUE(a);
  Table<Quote> quotes = a->table<Quote>("quotes");
  auto child = ChildProcess::spawn({"--typed-node", std::to_string(server().port()), "2", "job"});
  ASSERT_TRUE(child);
  ASSERT_EQ(child->receive(20s).value_or("(nothing)"), "ready");
  const auto ask = [&child](const std::string& line) {
    child->send(line);
    return child->receive(10s).value_or("(no answer)");
  };
  // Keys with a colon and at the 200-byte limit parse from the right like any other.
  const std::string long_key = "EUR:USD:" + std::string(192, 'K');
  for (const std::string& key : {std::string("AAPL"), std::string("EUR:USD"), long_key}) {
    SCOPED_TRACE(key.substr(0, 16));
    EXPECT_EQ(ask("read " + key),
              "loader " + std::to_string(100.0 + static_cast<double>(key.size())));
    EXPECT_EQ(ask("read " + key), "l1 " + std::to_string(100.0 + static_cast<double>(key.size())));
  }
  const std::string before = ask("stats");
  for (const std::string& key : {std::string("AAPL"), std::string("EUR:USD"), long_key}) {
    auto v = quotes.publish(key, Quote{7.5, 7.6, 11});
    ASSERT_TRUE(v) << v.error().message();
  }
  EXPECT_TRUE(poll_until([&] { return ask("stats") == "coh_applied 3"; }, 10s, 5ms))
      << before << " then " << ask("stats");
  for (const std::string& key : {std::string("AAPL"), std::string("EUR:USD"), long_key}) {
    EXPECT_EQ(ask("read " + key), "l1 7.500000") << key.substr(0, 16);
  }
  // This node's writer applied its own jobs too (stale: its rows are the published ones).
  auto got = quotes.get("EUR:USD");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->bid, 7.5);
  // Every job completed (completion deletes the job's hash) in both member queues.
  EXPECT_TRUE(poll_until(
      [&] {
        return command_argv(client(), {"KEYS", "emq:{ecc.coh.quotes|*}:job:*"})->elements == 0;
      },
      10s, 10ms))
      << command_argv(client(), {"KEYS", "emq:{ecc.coh.quotes|*}:job:*"})->elements << " jobs left";
}

TEST_F(TypedTableTest, ApplyCoherenceAndApplyAndRememberTakeATextTablesKeys) {
  auto a = node(1, {quotes_spec(std::make_shared<std::atomic<int>>(), CoherenceMode::kJob)});
  ASSERT_TRUE(a);
  Table<Quote> quotes = a->table<Quote>("quotes");
  ASSERT_TRUE(quotes.get("EUR:USD"));  // loaded: a row at the loader's version
  const std::string loaded = version_in_l1(quotes, "EUR:USD");
  ASSERT_FALSE(loaded.empty());
  auto stale = a->apply_coherence("quotes", "EUR:USD", table::BrandedId::parse(loaded).value());
  ASSERT_TRUE(stale) << stale.error().message();
  EXPECT_EQ(*stale, table::Verdict::kStale);  // equal: the row survives
  auto applied = a->apply_coherence("quotes", "EUR:USD", newer_than(loaded, 1));
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(*applied, table::Verdict::kApplied);
  EXPECT_TRUE(version_in_l1(quotes, "EUR:USD").empty());
  // The journal's verb takes the key too (no journal bound here: the table's verdict alone).
  ASSERT_TRUE(quotes.get("AAPL"));
  auto remembered =
      a->apply_and_remember("quotes", "AAPL", newer_than(version_in_l1(quotes, "AAPL"), 1));
  ASSERT_TRUE(remembered) << remembered.error().message();
  EXPECT_EQ(*remembered, engine::Applied::kApplied);
  for (const std::string& bad : {std::string("AA PL"), std::string(201, 'K')}) {
    auto r = a->apply_coherence("quotes", bad, newer_than(loaded, 1));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, make_error_code(engine::Errc::kBadKey));
  }
  a->stop();
}

TEST_F(TypedTableTest, KeysMayHoldColonsAndBadKeysNeverReachTheWire) {
  auto a = node(1, {quotes_spec()});
  ASSERT_TRUE(a);
  auto b = node(2, {quotes_spec()});
  ASSERT_TRUE(b);
  Table<Quote> qa = a->table<Quote>("quotes");
  Table<Quote> qb = b->table<Quote>("quotes");
  ASSERT_TRUE(qb.get("EUR:USD"));  // loaded into b's L1
  auto v = qa.put("EUR:USD", Quote{1.08, 1.09, 5}, newer_than(version_in_l1(qb, "EUR:USD"), 1));
  ASSERT_TRUE(v);
  ASSERT_TRUE(a->broadcast("quotes", "EUR:USD", *v));
  EXPECT_TRUE(poll_until([&] { return qb.l1().stats().coh_applied == 1; }, 10s, 1ms));
  auto got = qb.get("EUR:USD");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->bid, 1.08);

  const long long keys_before = command_argv(client(), {"DBSIZE"})->integer;
  for (const std::string& bad : {std::string(), std::string("AA PL"), std::string("{x}"),
                                 std::string("A\nB"), std::string(201, 'K')}) {
    auto r = qa.get(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error(), make_error_code(Errc::kBadKey)) << bad;
    EXPECT_FALSE(qa.put(bad, Quote{1, 2, 3})) << bad;
  }
  EXPECT_EQ(command_argv(client(), {"DBSIZE"})->integer, keys_before);
  EXPECT_TRUE(qa.get(std::string(200, 'K')));  // the longest key is a key
}

TEST_F(TypedTableTest, AnotherSchemasRowIsAMissForTheLoaderAndStaysInL2) {
  // Bytes without this node's schema header: another release's value (or none of ours). The
  // loader answers, the read succeeds, the row in L2 is left for the nodes that read it.
  auto loads = std::make_shared<std::atomic<int>>(0);
  auto a = node(1, {quotes_spec(loads)});
  ASSERT_TRUE(a);
  Table<Quote> quotes = a->table<Quote>("quotes");
  const auto version = table::process_minter().mint("QTE", 1).value();
  const std::string foreign = engine::frame_l2_value(version, "3 bytes? no: 7");
  ASSERT_TRUE(command_argv(client(), {"SET", "ecc:{quotes}:OLD", foreign}));
  auto r = quotes.get("OLD");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->bid, 103.0);  // the loader's
  EXPECT_EQ(loads->load(), 1);
  EXPECT_EQ(a->stats().tables[0].writer.schema_mismatches, 1u);
  EXPECT_EQ(quotes.l1().stats().decode_errors, 0u);
  EXPECT_EQ(text(command_argv(client(), {"GET", "ecc:{quotes}:OLD"}).get()), foreign);
  bool ran = false;
  EXPECT_TRUE(quotes.read("OLD", [&ran](const Quote&, std::string_view) { ran = true; }));
  EXPECT_TRUE(ran) << "the loader's value is this node's row";
}

TEST_F(TypedTableTest, BytesTheCodecRefusesAreATypedCountedError) {
  auto a = node(1, {quotes_spec()});
  ASSERT_TRUE(a);
  Table<Quote> quotes = a->table<Quote>("quotes");
  const auto version = table::process_minter().mint("QTE", 1).value();
  // This schema's header, then bytes of the wrong size: the codec refuses them.
  ASSERT_TRUE(command_argv(
      client(),
      {"SET", "ecc:{quotes}:BAD",
       engine::frame_l2_value(version, engine::schema_header<Quote>() + "3 bytes? no: 7")}));
  auto r = quotes.get("BAD");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(Errc::kBadValue));
  EXPECT_EQ(quotes.l1().stats().decode_errors, 1u);
  EXPECT_EQ(quotes.l1().size(), 0u);
  bool ran = false;
  EXPECT_FALSE(quotes.read("BAD", [&ran](const Quote&, std::string_view) { ran = true; }));
  EXPECT_FALSE(ran);
}

TEST_F(TypedTableTest, OnRemovalHearsEachDropOnTheWriterThread) {
  struct Heard {
    std::string key, version;
    RemovalCause cause;
    std::thread::id thread;
  };
  auto heard = std::make_shared<std::vector<Heard>>();
  auto mu = std::make_shared<std::mutex>();
  TableSpec spec = quotes_spec();
  spec.on_removal = [heard, mu](std::string_view key, std::string_view version,
                                RemovalCause cause) {
    std::lock_guard lock(*mu);
    heard->push_back({std::string(key), std::string(version), cause, std::this_thread::get_id()});
  };
  auto a = node(1, {spec});
  ASSERT_TRUE(a);
  auto b = node(2, {quotes_spec()});
  ASSERT_TRUE(b);
  Table<Quote> qa = a->table<Quote>("quotes");
  ASSERT_TRUE(qa.get("MSFT"));
  auto v = b->table<Quote>("quotes").put("MSFT", Quote{420, 421, 1},
                                         newer_than(version_in_l1(qa, "MSFT"), 2));
  ASSERT_TRUE(v);
  ASSERT_TRUE(b->broadcast("quotes", "MSFT", *v));
  const auto count = [&] {
    std::lock_guard lock(*mu);
    return heard->size();
  };
  ASSERT_TRUE(poll_until([&] { return count() == 1; }, 10s, 1ms));
  ASSERT_TRUE(qa.get("MSFT"));
  auto gone = qa.invalidate("MSFT");
  ASSERT_TRUE(gone);
  EXPECT_TRUE(*gone);
  ASSERT_EQ(count(), 2u);
  std::lock_guard lock(*mu);
  EXPECT_EQ((*heard)[0].key, "MSFT");
  EXPECT_EQ((*heard)[0].version, v->view());
  EXPECT_EQ((*heard)[0].cause, RemovalCause::kMessage);
  EXPECT_NE((*heard)[0].thread, std::this_thread::get_id());
  EXPECT_EQ((*heard)[1].key, "MSFT");
  EXPECT_EQ((*heard)[1].version, "");
  EXPECT_EQ((*heard)[1].cause, RemovalCause::kInvalidate);
  EXPECT_EQ((*heard)[0].thread, (*heard)[1].thread) << "both on the table's writer thread";
}

TEST_F(TypedTableTest, AHandleOfAnotherTypeOrAnUndeclaredTableIsAConfigError) {
  auto a = node(1, {quotes_spec()});
  ASSERT_TRUE(a);
  EXPECT_THROW(a->table<double>("quotes"), engine::ConfigError);
  EXPECT_THROW(a->table<std::string>("quotes"), engine::ConfigError);
  EXPECT_THROW(a->table<Quote>("trades"), engine::ConfigError);
  EXPECT_NO_THROW(a->table<Quote>("quotes"));
}

}  // namespace
}  // namespace echo::test

int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--typed-node", echo::test::child_main);
}
