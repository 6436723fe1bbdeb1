// SPDX-License-Identifier: MIT
// The integration tests' real server: a redis-server started on a free loopback port (never
// 6379) with persistence off, stopped by its own pid. A test that needs it and cannot start it
// fails; it never skips. Also a plain blocking hiredis client for assertions.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

#include <echo/engine/local_server.h>

namespace echo::test {

struct RedisContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using RedisClient = std::unique_ptr<redisContext, RedisContextDeleter>;
struct RedisReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

// A blocking RESP2 client on the server; asserts (fatally) that it connected.
RedisClient connect_client(const engine::LocalServer& server);

// One command through a blocking client (hiredis printf-style format).
RedisReply command(redisContext* c, const char* format, ...);

// A test fixture whose suite shares one server, started in SetUpTestSuite and stopped in
// TearDownTestSuite. Start failures are fatal test failures.
class RedisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  static engine::LocalServer& server() { return *server_; }
  redisContext* client() { return client_.get(); }

 private:
  static std::unique_ptr<engine::LocalServer> server_;
  static std::string start_error_;
  RedisClient client_;
};

}  // namespace echo::test
