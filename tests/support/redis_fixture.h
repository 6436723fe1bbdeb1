// SPDX-License-Identifier: MIT
// The integration tests' single-server mode: a redis-server started on a free loopback port (never
// 6379) with persistence off, stopped by its own pid, shared by a suite (SingleServerTest), with a
// plain blocking hiredis client for assertions and engine nodes started on it. A test that needs
// the server and cannot start it fails; it never skips. Also a one-node cluster-enabled server for
// the tests that prove a script stays in one hash slot. The cluster mode is cluster_fixture.h.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/testing/local_server.h>

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
RedisClient connect_client(const testing::LocalServer& server);

// One command through a blocking client (hiredis printf-style format).
RedisReply command(redisContext* c, const char* format, ...);

// One command of binary-safe arguments (the first is the verb).
RedisReply command_argv(redisContext* c, const std::vector<std::string>& args);

// A reply for assertions and messages: a string, status or error as it is, an integer in decimal,
// "(nil)", "(array of N)", or "(no reply)" for nullptr.
std::string text(const redisReply* r);

// A suite's shared server or cluster: T built from `args`, or nullptr with the exception's message
// in `error` (SetUp then fails every test with it).
template <class T, class... A>
std::unique_ptr<T> start_for_suite(std::string& error, A&&... args) {
  try {
    return std::make_unique<T>(std::forward<A>(args)...);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

// The single-server mode's fixture: the suite shares one server, started in SetUpTestSuite and
// stopped in TearDownTestSuite. Start failures are fatal test failures. Each test gets its own
// client on an empty server, and starts its engine nodes on the server with node().
class SingleServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { start_server({}); }
  static void TearDownTestSuite();
  void SetUp() override;

  static testing::LocalServer& server() { return *server_; }
  redisContext* client() { return client_.get(); }
  // Node `id` of `tables` on the suite's server, its job lane consulting `journal` if one is
  // given (start_node, support/engine_node.h); a failure to start fails the test (nullptr).
  static std::unique_ptr<engine::Engine> node(unsigned id, std::vector<engine::TableSpec> tables,
                                              engine::Journal* journal = nullptr);

  // For a derived suite's SetUpTestSuite: the suite's server started with `options`.
  static void start_server(testing::LocalServerOptions options);
  // SetUp's parts: asserts the server runs and connects the test's client; FLUSHALL.
  void connect();
  void flush_all();

 private:
  static std::unique_ptr<testing::LocalServer> server_;
  static std::string start_error_;
  RedisClient client_;
};

// Like SingleServerTest, but the suite's server is cluster-enabled and owns all 16384 slots, so
// that a script run under `#!lua` is refused any key outside the slot of its first key (declared or
// built at run time), which a standalone server never checks. SetUp waits up to 15 s for
// cluster_state:ok, then flushes.
class OneNodeClusterTest : public SingleServerTest {
 protected:
  static void SetUpTestSuite();
  void SetUp() override;
};

}  // namespace echo::test
