// SPDX-License-Identifier: MIT
// Runs the quote board example (examples/quote_board) against a real server started here, and
// checks its own verdict, that its readers read at L1, and that the reading node published a
// stats snapshot `echostore stats` can render. The example's source is compiled into this test
// so the test does not depend on ECHO_BUILD_EXAMPLES.
#include "../../examples/quote_board/quote_board.cc"

#include <echo/engine/stats_export.h>
#include <echo/testing/local_server.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <thread>

namespace {

TEST(QuoteBoard, EveryReadersLastReadIsTheFinalPrice) {
  echo::testing::LocalServer server;
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
  EXPECT_EQ(sum.publishes, 300u);
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
  EXPECT_NE(text.find("echostore_l1_decode_errors_total"), std::string::npos)
      << "typed tables' counter exported";
}

TEST(QuoteBoard, ALostServerEndsTheRunWithAnErrorNotATerminate) {
  // The writer thread's put fails once the server is gone: the run must end with a thrown
  // runtime_error after its threads stopped (it was a throw out of a std::thread: terminate).
  echo::testing::LocalServer server;
  echo::examples::QuoteBoardOptions o;
  o.server = server.host() + ":" + std::to_string(server.port());
  o.instruments = 4;
  o.readers = 1;
  o.reprices = 100000000;  // far more than the time before the kill allows
  // Killed once the writer thread has published (its script runs the only PUBLISH), so the loss
  // meets that thread and not the setup.
  std::thread killer([&server] {
    std::unique_ptr<redisContext, decltype(&redisFree)> c(
        redisConnect(server.host().c_str(), server.port()), &redisFree);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (c && !c->err && std::chrono::steady_clock::now() < deadline) {
      auto* r = static_cast<redisReply*>(redisCommand(c.get(), "INFO commandstats"));
      bool published = false;
      if (r != nullptr && r->type == REDIS_REPLY_STRING) {
        published =
            std::string(r->str, r->len).find("cmdstat_publish:calls=") != std::string::npos ||
            std::string(r->str, r->len).find("cmdstat_evalsha:calls=") != std::string::npos;
      }
      if (r != nullptr) freeReplyObject(r);
      if (published) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.kill();
  });
  std::ostringstream out;
  try {
    (void)echo::examples::run_quote_board(o, out);
    ADD_FAILURE() << "the run finished although its server was killed";
  } catch (const std::runtime_error& e) {
    // One of the writer thread's calls met the loss (not the setup's).
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("publish: ")) << what;
  }
  killer.join();
}

TEST(QuoteBoard, BadArgumentsAreAUsageErrorNotAThrow) {
  using echo::examples::parse_quote_board_args;
  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "quote_board");
    return parse_quote_board_args(static_cast<int>(args.size()), args.data());
  };
  const auto good = parse(
      {"--server", "127.0.0.1:7000", "--instruments", "8", "--readers", "2", "--reprices", "300"});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->server, "127.0.0.1:7000");
  EXPECT_EQ(good->instruments, 8);
  EXPECT_EQ(good->readers, 2);
  EXPECT_EQ(good->reprices, 300);
  EXPECT_TRUE(parse({}));
  const std::vector<std::vector<const char*>> bad = {
      {"--readers", "x"},        {"--readers", "99999999999999"},
      {"--readers", "2x"},       {"--readers", "0"},
      {"--instruments", "1001"}, {"--reprices", "-1"},
      {"--server", "127.0.0.1"}, {"--server", "h:6379x"},
      {"--server", "h:0"},       {"--readers"},
      {"--bogus", "1"}};
  for (const auto& args : bad) {
    std::optional<echo::examples::QuoteBoardOptions> got;
    EXPECT_NO_THROW(got = parse(args)) << args[0];
    EXPECT_FALSE(got) << args[0] << ' ' << (args.size() > 1 ? args[1] : "");
  }
}

}  // namespace
