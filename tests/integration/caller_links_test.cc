// SPDX-License-Identifier: MIT
// A broadcast publish on the calling thread's own link (EngineOptions::caller_links) against a
// real redis-server: the thread dials one connection at its first publish and writes and reads
// its publishes there; the other node hears them as before. The limit holds (a thread beyond it
// goes through io thread 0), 0 turns the links off, a link the server closed while idle is
// dialled again before the next publish leaves, a script the server forgot is loaded and the call
// sent again, an unanswered publish_async is never overtaken, and stop() and a thread's end close
// their links.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using namespace std::chrono_literals;
using engine::CoherenceMode;
using engine::Engine;
using engine::EngineOptions;
using table::BrandedId;

class CallerLinks : public SingleServerTest {
 protected:
  // The server's clients named echostore-caller (the links), from CLIENT LIST.
  int links_on_server() {
    RedisReply list = command(client(), "CLIENT LIST");
    const std::string all = text(list.get());
    int n = 0;
    for (std::size_t at = 0; (at = all.find("name=echostore-caller ", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    return n;
  }
  // CLIENT KILL of every link (its id from CLIENT LIST), the engine's own connections left up.
  void kill_links() {
    RedisReply list = command(client(), "CLIENT LIST");
    const std::string all = text(list.get());
    for (std::size_t at = 0; at < all.size();) {
      const std::size_t end = std::min(all.find('\n', at), all.size());
      const std::string line = all.substr(at, end - at);
      at = end + 1;
      if (line.find("name=echostore-caller ") == std::string::npos) continue;
      const std::string id = line.substr(3, line.find(' ') - 3);  // "id=<n> addr=..."
      command(client(), "CLIENT KILL ID %s", id.c_str());
    }
  }
  std::unique_ptr<Engine> publisher(std::size_t caller_links, unsigned id = 2) {
    EngineOptions o = node_options(server(), id);
    o.caller_links = caller_links;
    return start_node(o, {spec()});
  }
  static engine::TableSpec spec() {
    return table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("l"));
  }
};

TEST_F(CallerLinks, APublishGoesOnTheCallersOwnLinkAndTheOtherNodeHearsIt) {
  auto a = publisher(16);
  auto b = node(1, {spec()});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(b->get("quotes", name.view()));  // b holds the loader's row
  for (int i = 0; i < 20; ++i) {
    auto v = a->publish("quotes", name.view(), "v" + std::to_string(i));
    ASSERT_TRUE(v) << v.error().message();
  }
  const engine::EngineStats s = a->stats();
  EXPECT_EQ(s.caller_link_calls, 20u);
  EXPECT_EQ(s.caller_link_opens, 1u);
  EXPECT_EQ(s.caller_links_held, 1u);
  EXPECT_EQ(s.caller_link_fallbacks, 0u);
  EXPECT_EQ(links_on_server(), 1);
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)).substr(14), "v19");
  ASSERT_TRUE(eventually([&] {
    auto got = b->get("quotes", name.view());
    return got && got->value == "v19";
  }));
}

TEST_F(CallerLinks, ZeroLinksSendsEveryPublishThroughTheIoThread) {
  auto a = publisher(0);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "v"));
  EXPECT_EQ(a->stats().caller_link_calls, 0u);
  EXPECT_EQ(links_on_server(), 0);
}

// Two threads under a limit of one: the first to publish holds the link; the second's publishes
// go through io thread 0; when the first thread ends its link closes and its place is free.
TEST_F(CallerLinks, TheLimitHoldsAndAThreadsEndFreesItsPlace) {
  auto a = publisher(1);
  ASSERT_TRUE(a);
  std::thread([&] { ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "first")); }).join();
  // The first thread ended: its link left the engine's list and the server's.
  EXPECT_EQ(a->stats().caller_links_held, 0u);
  EXPECT_TRUE(eventually([&] { return links_on_server() == 0; }));
  std::atomic<bool> second_in{false}, done{false};
  std::thread holder([&] {
    ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "holder"));
    second_in = true;
    while (!done) std::this_thread::sleep_for(1ms);
  });
  ASSERT_TRUE(eventually([&] { return second_in.load(); }));
  const std::uint64_t calls = a->stats().caller_link_calls;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "other"));
  EXPECT_EQ(a->stats().caller_link_calls, calls) << "a thread beyond the limit had a link";
  EXPECT_EQ(a->stats().caller_links_held, 1u);
  done = true;
  holder.join();
}

// The server drops the idle link (CLIENT KILL, as its idle timeout would): the next publish finds
// it closed before anything leaves, dials again and goes on the new link.
TEST_F(CallerLinks, ALinkTheServerClosedWhileIdleIsDialledAgainBeforeTheCall) {
  auto a = publisher(16);
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(a->publish("quotes", name.view(), "before"));
  kill_links();
  auto v = a->publish("quotes", name.view(), "after-kill");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)).substr(14), "after-kill");
  EXPECT_EQ(a->stats().caller_link_fallbacks, 0u);
  EXPECT_EQ(a->stats().caller_link_opens, 2u);
  EXPECT_EQ(a->stats().caller_link_calls, 2u);
  EXPECT_EQ(links_on_server(), 1);
}

// SCRIPT FLUSH: the link's EVALSHA is answered NOSCRIPT; the script is loaded (SCRIPT LOAD) and
// the call sent again.
TEST_F(CallerLinks, AScriptTheServerForgotIsLoadedAndTheCallSentAgain) {
  auto a = publisher(16);
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(a->publish("quotes", name.view(), "one"));
  command(client(), "SCRIPT FLUSH");
  auto v = a->publish("quotes", name.view(), "two");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)).substr(14), "two");
  EXPECT_EQ(a->stats().caller_link_calls, 2u);
  EXPECT_EQ(a->stats().caller_link_fallbacks, 0u);
}

// publish_async then publish of one key on one thread: the blocking publish waits its turn
// behind the unanswered async one (io thread 0, in order), so L2 ends at the later value.
TEST_F(CallerLinks, AnUnansweredPublishAsyncIsNeverOvertaken) {
  auto a = publisher(16);
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(a->publish("quotes", name.view(), "warm"));  // the link is open
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> answered{false};
    ASSERT_TRUE(a->publish_async("quotes", name.view(), "async" + std::to_string(i),
                                 [&](const engine::Result<BrandedId>&) { answered = true; }));
    ASSERT_TRUE(a->publish("quotes", name.view(), "sync" + std::to_string(i)));
    ASSERT_TRUE(eventually([&] { return answered.load(); }));
    ASSERT_EQ(l2_raw(client(), l2_key("quotes", name)).substr(14), "sync" + std::to_string(i));
  }
}

TEST_F(CallerLinks, StopClosesEveryLink) {
  auto a = publisher(16);
  ASSERT_TRUE(a);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] { ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "v")); });
  }
  ASSERT_TRUE(a->publish("quotes", fresh_id("AST").view(), "main"));
  for (auto& t : threads) t.join();
  EXPECT_EQ(a->stats().caller_links_held, 1u);  // the three threads ended; this one holds its own
  EXPECT_EQ(a->stats().caller_link_opens, 4u);
  a->stop();
  EXPECT_TRUE(eventually([&] { return links_on_server() == 0; }));
  EXPECT_FALSE(a->publish("quotes", fresh_id("AST").view(), "after-stop"));
}

}  // namespace
}  // namespace echo::test
