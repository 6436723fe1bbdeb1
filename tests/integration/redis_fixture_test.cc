// SPDX-License-Identifier: MIT
// The test harness's own server: a real redis-server on a free loopback port (never 6379),
// persistence off, answering PING, stopped by its own pid, restartable on the same port.
#include <gtest/gtest.h>
#include <signal.h>

#include "support/redis_fixture.h"

namespace echo::test {
namespace {

class RedisFixture : public SingleServerTest {};

TEST_F(RedisFixture, ServerAnswersOnLoopbackNeverOn6379) {
  EXPECT_EQ(server().host(), "127.0.0.1");
  EXPECT_NE(server().port(), 6379);
  RedisReply r = command(client(), "PING");
  ASSERT_TRUE(r);
  EXPECT_EQ(std::string(r->str, r->len), "PONG");
  EXPECT_EQ(server().version().substr(0, 1), "7");
}

TEST_F(RedisFixture, PersistenceIsOff) {
  RedisReply save = command(client(), "CONFIG GET save");
  ASSERT_TRUE(save && save->type == REDIS_REPLY_ARRAY && save->elements == 2);
  EXPECT_EQ(std::string(save->element[1]->str, save->element[1]->len), "");
  RedisReply aof = command(client(), "CONFIG GET appendonly");
  ASSERT_TRUE(aof && aof->elements == 2);
  EXPECT_EQ(std::string(aof->element[1]->str), "no");
}

TEST(LocalServer, StopsByItsOwnPid) {
  pid_t pid;
  {
    testing::LocalServer s;
    pid = s.pid();
    ASSERT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid no longer names our child
}

TEST(LocalServer, RestartKeepsThePortAndLosesTheData) {
  testing::LocalServer s;
  const int port = s.port();
  {
    RedisClient c = connect_client(s);
    RedisReply r = command(c.get(), "SET k v");
    ASSERT_TRUE(r);
  }
  s.restart(/*hard=*/true);
  EXPECT_EQ(s.port(), port);
  RedisClient c = connect_client(s);
  RedisReply r = command(c.get(), "GET k");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, REDIS_REPLY_NIL);
}

TEST(LocalServer, PasswordIsRequired) {
  testing::LocalServer s({.password = "s3cret"});
  RedisClient c(redisConnect(s.host().c_str(), s.port()));
  ASSERT_TRUE(c && !c->err);
  RedisReply r = command(c.get(), "PING");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
  RedisReply a = command(c.get(), "AUTH s3cret");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->type, REDIS_REPLY_STATUS);
}

TEST(LocalServer, MissingBinaryIsAClearError) {
  try {
    testing::LocalServer s(
        {.binary = "/nonexistent/redis-server", .ready_timeout = std::chrono::milliseconds(300)});
    FAIL() << "a missing binary must not start";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/redis-server"), std::string::npos);
  }
}

}  // namespace
}  // namespace echo::test
