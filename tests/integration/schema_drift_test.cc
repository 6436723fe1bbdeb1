// SPDX-License-Identifier: MIT
// A rolling deploy against a real redis-server: two nodes of one table, each on its own release of
// the value type, publish and read the same keys. Each drift a release can bring (a field added,
// two fields swapped, a field's size changed, a struct holding strings with its own codec) is
// tried both ways: a node reading the other release's row takes it as a miss for its own loader
// (WriterStats::schema_mismatches), never as a refusal and never as its own fields; the row stays
// in L2 for the nodes that read it; a carried value of the other release drops the row it reaches.
// Both nodes keep serving every read. A release that changed nothing but the type's name reads the
// other's rows from L2 as its own.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>

#include "support/poll.h"
#include "support/redis_fixture.h"

namespace release1 {
struct Quote {
  double bid, ask;
};
// A value holding strings: its own codec, its format's version declared (schema()).
struct Tick {
  std::string venue;
  double bid = 0;
};
}  // namespace release1
namespace renamed_type {
struct Price {  // release1::Quote under another name: the same schema
  double bid, ask;
};
}  // namespace renamed_type
namespace added {
struct Quote {
  double bid, ask;
  std::int64_t size;
};
}  // namespace added
namespace swapped {
struct Quote {
  double ask, bid;
};
}  // namespace swapped
namespace resized {
struct Quote {
  float bid, ask;
};
}  // namespace resized
namespace release2 {
struct Tick {
  std::string venue;
  double bid = 0;
  std::string trader;
};
}  // namespace release2

// "venue|bid" (release 1) and "venue|bid|trader" (release 2): formats a service owns.
template <>
struct echo::engine::Codec<release1::Tick> {
  static void encode(const release1::Tick& t, std::string& out) {
    out += t.venue + "|" + std::to_string(t.bid);
  }
  static bool decode(std::string_view bytes, release1::Tick& out, std::string& why) {
    const auto bar = bytes.find('|');
    if (bar == std::string_view::npos) {
      why = "want venue|bid";
      return false;
    }
    out.venue = std::string(bytes.substr(0, bar));
    out.bid = std::stod(std::string(bytes.substr(bar + 1)));
    return true;
  }
  static std::uint64_t schema() { return 1; }
};
template <>
struct echo::engine::Codec<release2::Tick> {
  static void encode(const release2::Tick& t, std::string& out) {
    out += t.venue + "|" + std::to_string(t.bid) + "|" + t.trader;
  }
  static bool decode(std::string_view bytes, release2::Tick& out, std::string& why) {
    const auto a = bytes.find('|'), b = bytes.rfind('|');
    if (a == std::string_view::npos || a == b) {
      why = "want venue|bid|trader";
      return false;
    }
    out.venue = std::string(bytes.substr(0, a));
    out.bid = std::stod(std::string(bytes.substr(a + 1, b - a - 1)));
    out.trader = std::string(bytes.substr(b + 1));
    return true;
  }
  static std::uint64_t schema() { return 2; }
};

namespace echo::test {
namespace {

using namespace std::chrono_literals;

// Each release's value with a given bid (ask = bid + 1), and its bid back.
template <class T>
T with_bid(double bid) {
  if constexpr (requires(T t) { t.venue; }) {
    T t;
    t.venue = "XNAS";
    t.bid = bid;
    return t;
  } else {
    T t{};
    t.bid = static_cast<decltype(t.bid)>(bid);
    t.ask = static_cast<decltype(t.ask)>(bid + 1);
    return t;
  }
}

// The table on node `node`: text keys, the broadcast lane (values carried), and a loader that
// answers 500 + node for every key, so a test tells a loaded value from a published one.
template <class T>
engine::TableSpec quotes(unsigned node, std::shared_ptr<std::atomic<int>> loads) {
  engine::TableSpec s = engine::text_table("quotes");
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<T>([node, loads](const engine::Key&) {
    loads->fetch_add(1);
    return with_bid<T>(500.0 + node);
  });
  return engine::typed<T>(s);
}

class SchemaDriftTest : public SingleServerTest {
 protected:
  // Node 1 runs release A, node 2 release B.
  template <class A, class B>
  void roll(bool same_schema) {
    auto loads1 = std::make_shared<std::atomic<int>>(0);
    auto loads2 = std::make_shared<std::atomic<int>>(0);
    auto n1 = node(1, {quotes<A>(1, loads1)});
    auto n2 = node(2, {quotes<B>(2, loads2)});
    ASSERT_TRUE(n1 && n2);
    auto t1 = n1->template table<A>("quotes");
    auto t2 = n2->template table<B>("quotes");
    const auto mismatches = [](engine::Engine& n) {
      return n.stats().tables[0].writer.schema_mismatches;
    };
    const auto bid_of = [](auto& table, std::string_view key) {
      double bid = -1;
      auto r = table.read(
          key, [&bid](const auto& v, std::string_view) { bid = static_cast<double>(v.bid); });
      EXPECT_TRUE(r) << key << ": " << r.error().message();
      return bid;
    };

    // Release A publishes; release B reads it.
    ASSERT_TRUE(t1.publish("AAPL", with_bid<A>(101)));
    const std::string a_row = text(command_argv(client(), {"GET", "ecc:{quotes}:AAPL"}).get());
    if (same_schema) {
      EXPECT_EQ(bid_of(t2, "AAPL"), 101) << "the same schema under another name reads L2";
      EXPECT_EQ(mismatches(*n2), 0u);
      EXPECT_EQ(loads2->load(), 0);
      return;
    }
    // Release B hears the carried value first (applied as a drop: it held no row), then reads.
    EXPECT_TRUE(poll_until([&] { return mismatches(*n2) == 1; }, 10s, 5ms));
    EXPECT_EQ(bid_of(t2, "AAPL"), 502) << "another schema's row is a miss for this loader";
    EXPECT_EQ(loads2->load(), 1);
    EXPECT_EQ(mismatches(*n2), 2u) << "the carried value and the fill";
    EXPECT_EQ(n2->stats().tables[0].l1.decode_errors, 0u) << "never a refusal";
    EXPECT_EQ(text(command_argv(client(), {"GET", "ecc:{quotes}:AAPL"}).get()), a_row)
        << "release A's row stays in L2 for release A's nodes";
    EXPECT_EQ(bid_of(t2, "AAPL"), 502) << "then an L1 hit";
    EXPECT_EQ(loads2->load(), 1);
    EXPECT_EQ(bid_of(t1, "AAPL"), 101) << "release A still serves its own row";

    // Release B publishes: its carried value reaches release A's row, which drops it, and A's
    // next read finds B's row in L2: a miss for A's loader.
    const std::uint64_t a_before = mismatches(*n1);
    ASSERT_TRUE(t2.publish("AAPL", with_bid<B>(202)));
    EXPECT_TRUE(poll_until([&] { return mismatches(*n1) > a_before; }, 10s, 5ms))
        << "release A never heard release B's carried value";
    EXPECT_EQ(bid_of(t1, "AAPL"), 501);
    EXPECT_EQ(bid_of(t2, "AAPL"), 202) << "release B serves its own publish";
    EXPECT_GE(mismatches(*n1), a_before + 2) << "the carried value and the fill";

    // A key no node holds: release A's loader writes it into L2, release B reads it and loads.
    EXPECT_EQ(bid_of(t1, "MSFT"), 501);
    EXPECT_EQ(bid_of(t2, "MSFT"), 502);
    n1->stop();
    n2->stop();
  }
};

TEST_F(SchemaDriftTest, AFieldAddedBothWays) {
  roll<release1::Quote, added::Quote>(false);
  flush_all();
  roll<added::Quote, release1::Quote>(false);
}

TEST_F(SchemaDriftTest, TwoFieldsSwappedBothWaysNeverReadSwapped) {
  roll<release1::Quote, swapped::Quote>(false);
  flush_all();
  roll<swapped::Quote, release1::Quote>(false);
}

TEST_F(SchemaDriftTest, AFieldsSizeChangedBothWays) {
  roll<release1::Quote, resized::Quote>(false);
  flush_all();
  roll<resized::Quote, release1::Quote>(false);
}

TEST_F(SchemaDriftTest, AStructHoldingStringsWithItsCodecBothWays) {
  roll<release1::Tick, release2::Tick>(false);
  flush_all();
  roll<release2::Tick, release1::Tick>(false);
}

TEST_F(SchemaDriftTest, TheSameLayoutUnderAnotherNameIsTheSameSchema) {
  roll<release1::Quote, renamed_type::Price>(true);
}

}  // namespace
}  // namespace echo::test
