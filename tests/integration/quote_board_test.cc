// SPDX-License-Identifier: MIT
// Runs the quote board example (examples/quote_board) against a real server started here, and
// checks its own verdict, that its readers read at L1, and that the reading node published a
// stats snapshot `echostore stats` can render. The example's source is compiled into this test
// so the test does not depend on ECHO_BUILD_EXAMPLES.
#include "../../examples/quote_board/quote_board.cc"

#include <echo/engine/local_server.h>
#include <echo/engine/stats_export.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <sstream>

namespace {

TEST(QuoteBoard, EveryReadersLastReadIsTheFinalPrice) {
  echo::engine::LocalServer server;
  echo::examples::QuoteBoardOptions o;
  o.server = server.host() + ":" + std::to_string(server.port());
  o.instruments = 8;
  o.readers = 3;
  o.reprices = 300;
  std::ostringstream out;
  const auto sum = echo::examples::run_quote_board(o, out);
  std::cout << out.str();
  EXPECT_TRUE(sum.ok) << out.str();
  EXPECT_EQ(sum.mismatches, 0u);
  EXPECT_EQ(sum.broadcasts, 300u);
  EXPECT_EQ(sum.enqueues, 75u);
  EXPECT_GT(sum.l1_hits, 0u);

  // The reading node (node 2) published its snapshot of `quotes` (PX 3 s, the last one at most
  // 1 s before it stopped).
  std::unique_ptr<redisContext, decltype(&redisFree)> c(
      redisConnect(server.host().c_str(), server.port()), &redisFree);
  ASSERT_TRUE(c && !c->err);
  const std::string key = echo::engine::stats_key("quotes", "2");
  auto* reply = static_cast<redisReply*>(redisCommand(c.get(), "GET %s", key.c_str()));
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_STRING) << key;
  const std::string snapshot(reply->str, reply->len);
  freeReplyObject(reply);
  const std::string text = echo::engine::prometheus_from_json({snapshot});
  EXPECT_NE(text.find("echostore_l1_hits_total{node=\"2\",table=\"quotes\"}"), std::string::npos);
  EXPECT_EQ(text.find("table=\"limits\""), std::string::npos) << "one table per key";
}

}  // namespace
