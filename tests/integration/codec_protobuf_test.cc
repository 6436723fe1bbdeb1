// SPDX-License-Identifier: MIT
// Protocol Buffers messages as typed values (codec_protobuf.h), against a real redis-server: a
// message published by one node is read in place by another from L2; a rolling deploy that adds a
// field reads both ways by the format's own rules (the added field skipped and kept by the older
// release, defaulted by the newer); a message of another name is another schema (a miss for the
// loader); bytes that are no message are a typed, counted refusal.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <echo/engine/codec_protobuf.h>
#include <echo/engine/engine.h>
#include <echo/engine/l2_frame.h>

#include "quotes.pb.h"
#include "quotes_release2.pb.h"
#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using namespace std::chrono_literals;
using Release1 = echotest::release1::Quote;
using Release2 = echotest::release2::Quote;

template <class T>
engine::TableSpec quotes(std::shared_ptr<std::atomic<int>> loads) {
  engine::TableSpec s = engine::text_table("quotes");
  s.kind = "QTE";  // the versions this test mints for the rows it writes itself
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<T>([loads](const engine::Key&) {
    loads->fetch_add(1);
    T q;
    q.set_bid(500);
    q.set_venue("loader");
    return q;
  });
  return engine::typed<T>(s);
}

class CodecProtobufTest : public SingleServerTest {};

TEST_F(CodecProtobufTest, AMessageIsPublishedAndReadInPlaceOnAnotherNode) {
  auto loads = std::make_shared<std::atomic<int>>(0);
  auto n1 = node(1, {quotes<Release1>(loads)});
  auto n2 = node(2, {quotes<Release1>(loads)});
  ASSERT_TRUE(n1 && n2);
  Release1 q;
  q.set_bid(189.1);
  q.set_ask(189.2);
  q.set_venue("XNAS");
  ASSERT_TRUE(n1->table<Release1>("quotes").publish("AAPL", q));
  auto t2 = n2->table<Release1>("quotes");
  std::string venue;
  auto r = t2.read("AAPL", [&venue](const Release1& m, std::string_view) { venue = m.venue(); });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(venue, "XNAS");
  const Release1* first = nullptr;
  const Release1* second = nullptr;
  ASSERT_TRUE(t2.read("AAPL", [&first](const Release1& m, std::string_view) { first = &m; }));
  ASSERT_TRUE(t2.read("AAPL", [&second](const Release1& m, std::string_view) { second = &m; }));
  EXPECT_EQ(first, second) << "a hit reads the row's own message, parsed once";
  EXPECT_EQ(loads->load(), 0);
}

TEST_F(CodecProtobufTest, ARollingDeployThatAddsAFieldReadsBothWays) {
  auto loads = std::make_shared<std::atomic<int>>(0);
  auto n1 = node(1, {quotes<Release1>(loads)});
  ASSERT_TRUE(n1);
  auto t1 = n1->table<Release1>("quotes");
  // What release 2 (the same message, one field more) writes: its wire bytes under the message's
  // schema, which is its name's.
  Release2 newer;
  newer.set_bid(42.5);
  newer.set_ask(42.75);
  newer.set_venue("XLON");
  newer.set_size(300);
  const auto version = table::process_minter().mint("QTE", 7).value();
  ASSERT_TRUE(command_argv(
      client(), {"SET", "ecc:{quotes}:VOD",
                 engine::frame_l2_value(
                     version, engine::schema_header<Release1>() + newer.SerializeAsString())}));
  double bid = 0;
  std::string kept;
  auto r = t1.read("VOD", [&](const Release1& m, std::string_view) {
    bid = m.bid();
    kept = m.SerializeAsString();  // the unknown field rides along
  });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, engine::Source::kL2) << "release 1 reads release 2's row from L2";
  EXPECT_EQ(bid, 42.5);
  EXPECT_EQ(loads->load(), 0);
  Release2 round;
  ASSERT_TRUE(round.ParseFromString(kept));
  EXPECT_EQ(round.size(), 300) << "release 1 kept the field it does not know";
  // And release 1's bytes, read by release 2's codec: the added field at its default.
  Release1 older;
  older.set_bid(7);
  Release2 read{};
  std::string why;
  ASSERT_TRUE(engine::Codec<Release2>::decode(older.SerializeAsString(), read, why)) << why;
  EXPECT_EQ(read.bid(), 7);
  EXPECT_EQ(read.size(), 0);
}

TEST_F(CodecProtobufTest, AMessageOfAnotherNameIsAnotherSchemaAndGarbageIsATypedRefusal) {
  auto loads1 = std::make_shared<std::atomic<int>>(0);
  auto loads2 = std::make_shared<std::atomic<int>>(0);
  auto n1 = node(1, {quotes<Release1>(loads1)});
  auto n2 = node(2, {quotes<Release2>(loads2)});
  ASSERT_TRUE(n1 && n2);
  Release1 q;
  q.set_bid(1);
  ASSERT_TRUE(n1->table<Release1>("quotes").publish("AAPL", q));
  double bid = 0;
  auto r = n2->table<Release2>("quotes").read(
      "AAPL", [&bid](const Release2& m, std::string_view) { bid = m.bid(); });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, engine::Source::kLoader);
  EXPECT_EQ(bid, 500);
  EXPECT_GE(n2->stats().tables[0].writer.schema_mismatches, 1u);

  const auto version = table::process_minter().mint("QTE", 7).value();
  ASSERT_TRUE(command_argv(
      client(), {"SET", "ecc:{quotes}:BAD",
                 engine::frame_l2_value(version, engine::schema_header<Release1>() +
                                                     std::string("\xff\xff\xff\xff", 4))}));
  auto bad = n1->table<Release1>("quotes").get("BAD");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), make_error_code(engine::Errc::kBadValue));
  EXPECT_EQ(n1->stats().tables[0].l1.decode_errors, 1u);
}

}  // namespace
}  // namespace echo::test
