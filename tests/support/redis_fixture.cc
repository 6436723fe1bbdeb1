// SPDX-License-Identifier: MIT
#include "support/redis_fixture.h"

#include "support/engine_node.h"

#include <chrono>
#include <cstdarg>
#include <thread>

namespace echo::test {

std::unique_ptr<testing::LocalServer> SingleServerTest::server_;
std::string SingleServerTest::start_error_;

RedisClient connect_client(const testing::LocalServer& server) {
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

RedisReply command_argv(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> parts;
  std::vector<std::size_t> lens;
  for (const std::string& a : args) {
    parts.push_back(a.data());
    lens.push_back(a.size());
  }
  return RedisReply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), parts.data(), lens.data())));
}

std::string text(const redisReply* r) {
  if (r == nullptr) return "(no reply)";
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    default:
      return "(array of " + std::to_string(r->elements) + ")";
  }
}

void SingleServerTest::start_server(testing::LocalServerOptions options) {
  server_ = start_for_suite<testing::LocalServer>(start_error_, std::move(options));
}

void SingleServerTest::TearDownTestSuite() { server_.reset(); }

std::unique_ptr<engine::Engine> SingleServerTest::node(unsigned id,
                                                       std::vector<engine::TableSpec> tables,
                                                       engine::Journal* journal) {
  return start_node(*server_, id, std::move(tables), journal);
}

void SingleServerTest::SetUp() {
  ASSERT_NO_FATAL_FAILURE(connect());
  flush_all();
}

void SingleServerTest::connect() {
  ASSERT_TRUE(server_ && server_->running()) << "redis-server did not start: " << start_error_;
  client_ = connect_client(*server_);
  ASSERT_TRUE(client_ && !client_->err);
}

void SingleServerTest::flush_all() {
  RedisReply r = command(client(), "FLUSHALL");
  ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS) << text(r.get());
}

void OneNodeClusterTest::SetUpTestSuite() {
  start_server({.extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}});
}

void OneNodeClusterTest::SetUp() {
  ASSERT_NO_FATAL_FAILURE(connect());
  RedisReply added = command(client(), "CLUSTER ADDSLOTSRANGE 0 16383");
  ASSERT_TRUE(added) << "no reply";  // "already busy" after the first test is fine
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  bool ok = false;
  while (!ok && std::chrono::steady_clock::now() < deadline) {
    RedisReply info = command(client(), "CLUSTER INFO");
    ok = info && text(info.get()).find("cluster_state:ok") != std::string::npos;
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ok) << "the one-node cluster never reached cluster_state:ok";
  flush_all();
}

}  // namespace echo::test
