// SPDX-License-Identifier: MIT
// io::BlockingLink, the connection a calling thread drives itself, against a real redis-server:
// it boots with HELLO 3 (AUTH, SETNAME) and answers calls on the calling thread; a server error
// keeps it open; NOSCRIPT loads the script and sends the call again; a link the server closed
// while idle is found before a call; wrong credentials, a refused connect, a
// server that does not answer by the deadline, a killed socket and bytes the decoder refuses each
// answer their own error and leave the link closed.
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <echo/io/blocking_link.h>
#include <echo/io/io_error.h>
#include <echo/io/unique_fd.h>

#include "support/loopback.h"
#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;
using test::command;
using test::SingleServerTest;
using test::text;
using Clock = std::chrono::steady_clock;

class BlockingLinkTest : public SingleServerTest {
 protected:
  LinkTarget target() const {
    LinkTarget t;
    t.host = server().host();
    t.port = server().port();
    t.client_name = "echo-link-test";
    return t;
  }
  static std::error_code call(BlockingLink& link, std::vector<std::string_view> words,
                              Resp3Owned& reply, const Script* script = nullptr,
                              std::chrono::milliseconds budget = 2s) {
    bool sent = false;
    return link.call(words, script, Clock::now() + budget, reply, sent);
  }
};

TEST_F(BlockingLinkTest, BootsNamedAndAnswersCallsOnTheCallingThread) {
  BlockingLink link;
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s)) << link.detail();
  ASSERT_TRUE(link.is_open());
  Resp3Owned r;
  ASSERT_FALSE(call(link, {"SET", "link-key", "v1"}, r));
  EXPECT_EQ(r.view().str(), "OK");
  ASSERT_FALSE(call(link, {"GET", "link-key"}, r));
  EXPECT_EQ(r.view().str(), "v1");
  ASSERT_FALSE(call(link, {"INCRBY", "link-n", "41"}, r));
  EXPECT_EQ(r.view().type(), Resp3Type::integer);
  EXPECT_EQ(r.view().integer(), 41);
  EXPECT_NE(text(command(client(), "CLIENT LIST").get()).find("name=echo-link-test"),
            std::string::npos);
}

TEST_F(BlockingLinkTest, AServerErrorIsTypedAndKeepsTheLinkOpen) {
  BlockingLink link;
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  Resp3Owned r;
  ASSERT_FALSE(call(link, {"SET", "link-text", "abc"}, r));
  EXPECT_EQ(call(link, {"INCR", "link-text"}, r), IoErrc::kServerError);
  EXPECT_NE(r.view().str().find("not an integer"), std::string_view::npos) << r.view().str();
  EXPECT_TRUE(link.is_open());
  ASSERT_FALSE(call(link, {"PING"}, r));
  EXPECT_EQ(r.view().str(), "PONG");
}

TEST_F(BlockingLinkTest, NoScriptLoadsTheScriptAndSendsTheCallAgain) {
  const Script s{text(command(client(), "SCRIPT LOAD %s", "return ARGV[1] .. KEYS[1]").get()),
                 "return ARGV[1] .. KEYS[1]"};
  ASSERT_EQ(s.sha.size(), 40u);
  BlockingLink link;
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  Resp3Owned r;
  ASSERT_FALSE(call(link, {"EVALSHA", s.sha, "1", "k", "a-"}, r, &s));
  EXPECT_EQ(r.view().str(), "a-k");
  command(client(), "SCRIPT FLUSH");
  ASSERT_FALSE(call(link, {"EVALSHA", s.sha, "1", "k2", "b-"}, r, &s));
  EXPECT_EQ(r.view().str(), "b-k2");
  // Without the script the NOSCRIPT is the answer, the server's words.
  command(client(), "SCRIPT FLUSH");
  EXPECT_EQ(call(link, {"EVALSHA", s.sha, "1", "k", "c"}, r), IoErrc::kServerError);
  EXPECT_TRUE(r.view().str().starts_with("NOSCRIPT")) << r.view().str();
}

TEST_F(BlockingLinkTest, WrongCredentialsAreRefusedByName) {
  command(client(), "ACL SETUSER link-user on >right ~* +@all");
  LinkTarget t = target();
  t.username = "link-user";
  t.password = "wrong";
  BlockingLink link;
  EXPECT_EQ(link.open(t, Clock::now() + 2s), IoErrc::kAuthRefused);
  EXPECT_NE(link.detail().find("WRONGPASS"), std::string::npos) << link.detail();
  EXPECT_FALSE(link.is_open());
  t.password = "right";
  EXPECT_FALSE(link.open(t, Clock::now() + 2s)) << link.detail();
  command(client(), "ACL DELUSER link-user");
}

TEST_F(BlockingLinkTest, ARefusedConnectNamesTheAddress) {
  const int port = test::closed_port();
  ASSERT_NE(port, 0);
  LinkTarget t = target();
  t.port = port;
  BlockingLink link;
  EXPECT_EQ(link.open(t, Clock::now() + 2s), IoErrc::kConnectFailed);
  EXPECT_NE(link.detail().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << link.detail();
}

TEST_F(BlockingLinkTest, NoAnswerByTheDeadlineIsATimeoutAndClosesTheLink) {
  BlockingLink link;
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  command(client(), "CLIENT PAUSE 700 ALL");
  Resp3Owned r;
  const auto t0 = Clock::now();
  EXPECT_EQ(call(link, {"PING"}, r, nullptr, 100ms), IoErrc::kTimeout);
  EXPECT_LT(Clock::now() - t0, 600ms);
  EXPECT_FALSE(link.is_open());
  command(client(), "CLIENT UNPAUSE");
}

TEST_F(BlockingLinkTest, AKilledSocketIsDisconnected) {
  BlockingLink link;
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  ASSERT_TRUE(link.usable());
  command(client(), "CLIENT KILL TYPE normal SKIPME yes");
  // Found before a call leaves: the server's close is readable on the idle socket.
  ASSERT_TRUE(test::poll_until([&] { return !link.usable(); }, 2s, 1ms));
  EXPECT_FALSE(link.is_open());
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  command(client(), "CLIENT KILL TYPE normal SKIPME yes");
  Resp3Owned r;
  EXPECT_EQ(call(link, {"PING"}, r), IoErrc::kDisconnected);  // sent without the peek: no answer
  EXPECT_FALSE(link.is_open());
  EXPECT_EQ(call(link, {"PING"}, r), IoErrc::kDisconnected);  // closed until opened again
  ASSERT_FALSE(link.open(target(), Clock::now() + 2s));
  EXPECT_FALSE(call(link, {"PING"}, r));
}

// A peer that boots like a server and then answers bytes no RESP3 value starts with.
TEST_F(BlockingLinkTest, BytesTheDecoderRefusesAreAProtocolError) {
  const test::LoopbackSocket listener = test::loopback_socket(1);
  ASSERT_NE(listener.port, 0);
  std::thread peer([&] {
    UniqueFd c(::accept(listener.fd.get(), nullptr, nullptr));
    std::array<char, 512> buf{};
    (void)::recv(c.get(), buf.data(), buf.size(), 0);  // HELLO
    constexpr std::string_view kHello = "%1\r\n+server\r\n+redis\r\n";
    (void)::send(c.get(), kHello.data(), kHello.size(), MSG_NOSIGNAL);
    (void)::recv(c.get(), buf.data(), buf.size(), 0);  // the call
    constexpr std::string_view kGarbage = "?what\r\n";
    (void)::send(c.get(), kGarbage.data(), kGarbage.size(), MSG_NOSIGNAL);
    (void)::recv(c.get(), buf.data(), buf.size(), 0);  // until the link closes
  });
  LinkTarget t = target();
  t.port = listener.port;
  BlockingLink link;
  ASSERT_FALSE(link.open(t, Clock::now() + 2s)) << link.detail();
  Resp3Owned r;
  EXPECT_EQ(call(link, {"PING"}, r), IoErrc::kProtocolError);
  EXPECT_FALSE(link.is_open());
  EXPECT_NE(link.detail().find("the server's answer"), std::string::npos) << link.detail();
  peer.join();
}

}  // namespace
}  // namespace echo::io
