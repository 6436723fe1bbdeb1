// SPDX-License-Identifier: MIT
// The start sequence without a server: a stage that fails answers the cause in words and rolls
// back every stage before it (no thread, no connection left), an engine runs once, and stop() is
// safe at any point. (The stages that need a server are the integration tests'.)
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <echo/engine/engine.h>

namespace echo::engine {
namespace {

using namespace std::chrono_literals;

// A loopback TCP socket bound to a free port: listening (a port in use) or not (nothing
// answers there once it is closed).
struct Port {
  explicit Port(bool listen_on) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    number = ntohs(a.sin_port);
    if (listen_on) {
      EXPECT_EQ(::listen(fd, 4), 0);
    } else {
      ::close(fd);
      fd = -1;
    }
  }
  ~Port() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  int number = 0;
};

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
  const Port closed(false);
  const std::vector<std::string> before = threads_now();
  Engine engine(to(closed.number), {quotes()});
  const auto t0 = std::chrono::steady_clock::now();
  const Error e = engine.start(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(closed.number)), std::string::npos)
      << e.message();
  EXPECT_FALSE(engine.running());
  const std::vector<std::string> after = threads_now();
  EXPECT_EQ(after.size(), before.size())
      << "the io thread, the writer and every other thread are joined; before: " << joined(before)
      << "; after: " << joined(after);
  EXPECT_TRUE(engine.stats().connections.empty());
}

TEST(EngineStart, AMetricsPortInUseFailsBeforeAnythingDials) {
  const Port busy(true);
  const Port closed(false);
  EngineOptions o = to(closed.number);
  o.metrics_port = busy.number;
  Engine engine(o, {quotes()});
  const Error e = engine.start(2s);
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find(std::to_string(busy.number)), std::string::npos) << e.message();
  EXPECT_TRUE(engine.stats().connections.empty()) << "no command connection was opened";
  EXPECT_FALSE(engine.running());
}

TEST(EngineStart, AnEngineRunsOnceAndStopIsSafeAtAnyPoint) {
  const Port closed(false);
  Engine engine(to(closed.number), {quotes()});
  engine.stop();  // before start: nothing to undo
  EXPECT_TRUE(engine.start(300ms));
  engine.stop();  // after a failed start: undone already
  EXPECT_EQ(engine.start(300ms), make_error_code(Errc::kStopped)) << "an engine runs once";
  EXPECT_FALSE(engine.running());
}

TEST(EngineStart, VerbsBeforeStartAnswerStoppedOrNoLease) {
  const Port closed(false);
  Engine engine(to(closed.number), {quotes()});
  EXPECT_EQ(engine.get("quotes", "AST0KHTOWnGLuC").error(), make_error_code(Errc::kStopped));
  EXPECT_EQ(engine.mint("AST").error(), make_error_code(Errc::kNoNodeLease));
  EXPECT_EQ(engine.get("nope", "AST0KHTOWnGLuC").error(), make_error_code(Errc::kNoSuchCache));
  EXPECT_EQ(engine.get("quotes", "bad").error(), make_error_code(Errc::kKind));
}

}  // namespace
}  // namespace echo::engine
