// SPDX-License-Identifier: MIT
#include "support/redis_fixture.h"

#include <cstdarg>

namespace echo::test {

std::unique_ptr<engine::LocalServer> RedisTest::server_;
std::string RedisTest::start_error_;

RedisClient connect_client(const engine::LocalServer& server) {
  RedisClient c(redisConnect(server.host().c_str(), server.port()));
  EXPECT_TRUE(c && !c->err) << "cannot connect to " << server.host() << ":" << server.port();
  return c;
}

RedisReply command(redisContext* c, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  RedisReply r(static_cast<redisReply*>(redisvCommand(c, format, ap)));
  va_end(ap);
  return r;
}

void RedisTest::SetUpTestSuite() {
  try {
    server_ = std::make_unique<engine::LocalServer>();
  } catch (const std::exception& e) {
    start_error_ = e.what();
  }
}

void RedisTest::TearDownTestSuite() { server_.reset(); }

void RedisTest::SetUp() {
  ASSERT_TRUE(server_ && server_->running()) << "redis-server did not start: " << start_error_;
  client_ = connect_client(*server_);
  ASSERT_TRUE(client_ && !client_->err);
  RedisReply r = command(client_.get(), "FLUSHALL");
  ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS);
}

}  // namespace echo::test
