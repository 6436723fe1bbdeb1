// SPDX-License-Identifier: MIT
// The start sequence without a server: a stage that fails answers the cause in words and rolls
// back every stage before it (no thread, no connection left), an engine runs once, and stop() is
// safe at any point. (The stages that need a server are the integration tests'.)
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <echo/engine/engine.h>

#include "support/loopback.h"

namespace echo::engine {
namespace {

using namespace std::chrono_literals;

// This process's threads, by name, but the kernel's io_uring workers (iou-wrk-<tid>, iou-sqp-):
// they serve a ring's blocking operations (a connect among them) and leave on their own some time
// after the ring is gone, so they are not threads the engine could join.
std::vector<std::string> threads_now() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (!name.starts_with("iou-")) names.push_back(name);
  }
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

TableSpec quotes() {
  TableSpec s;
  s.name = "quotes";
  s.kind = "AST";
  s.coherence = CoherenceMode::kBroadcast;
  s.loader = [](const Key&) -> LoadResult { return Loaded{"v", {}}; };
  return s;
}

EngineOptions to(int port) {
  EngineOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.call_timeout = 200ms;
  return o;
}

TEST(EngineStart, NothingListeningAnswersTheCauseAndLeavesNoThreadBehind) {
  const int closed = test::closed_port();
  ASSERT_GT(closed, 0) << "no loopback port to bind";
  const std::vector<std::string> before = threads_now();
  Engine engine(to(closed), {quotes()});
  const auto t0 = std::chrono::steady_clock::now();
  const Error e = engine.start(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(closed)), std::string::npos)
      << e.message();
  EXPECT_FALSE(engine.running());
  const std::vector<std::string> after = threads_now();
  EXPECT_EQ(after.size(), before.size())
      << "the io thread, the writer and every other thread are joined; before: " << joined(before)
      << "; after: " << joined(after);
  EXPECT_TRUE(engine.stats().connections.empty());
}

TEST(EngineStart, AMetricsPortInUseFailsBeforeAnythingDials) {
  const test::LoopbackSocket busy = test::loopback_socket(4);  // listening: the port is in use
  ASSERT_GT(busy.port, 0) << "no loopback listener";
  const int closed = test::closed_port();
  ASSERT_GT(closed, 0) << "no loopback port to bind";
  EngineOptions o = to(closed);
  o.metrics_port = busy.port;
  Engine engine(o, {quotes()});
  const Error e = engine.start(2s);
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find(std::to_string(busy.port)), std::string::npos) << e.message();
  EXPECT_TRUE(engine.stats().connections.empty()) << "no command connection was opened";
  EXPECT_FALSE(engine.running());
}

TEST(EngineStart, AnEngineRunsOnceAndStopIsSafeAtAnyPoint) {
  const int closed = test::closed_port();
  ASSERT_GT(closed, 0) << "no loopback port to bind";
  Engine engine(to(closed), {quotes()});
  engine.stop();  // before start: nothing to undo
  EXPECT_TRUE(engine.start(300ms));
  engine.stop();  // after a failed start: undone already
  EXPECT_EQ(engine.start(300ms), make_error_code(Errc::kStopped)) << "an engine runs once";
  EXPECT_FALSE(engine.running());
}

TEST(EngineStart, VerbsBeforeStartAnswerStoppedOrNoLease) {
  const int closed = test::closed_port();
  ASSERT_GT(closed, 0) << "no loopback port to bind";
  Engine engine(to(closed), {quotes()});
  EXPECT_EQ(engine.get("quotes", "AST0KHTOWnGLuC").error(), make_error_code(Errc::kStopped));
  EXPECT_EQ(engine.mint("AST").error(), make_error_code(Errc::kNoNodeLease));
  EXPECT_EQ(engine.get("nope", "AST0KHTOWnGLuC").error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_EQ(engine.get("quotes", "bad").error(), make_error_code(Errc::kKind));
}

}  // namespace
}  // namespace echo::engine
