// SPDX-License-Identifier: MIT
// start() answers the server's first definitive answer at once, with its words: a wrong password,
// an ACL denial, a foreign {emq}:version fence, a peer that is not Redis at all (the bytes it
// sent), and timeout only when nothing answered (naming the last attempt). probe_server, which
// `echostore drill --server` runs before its gates, answers the same. Real redis-server for the
// server's refusals; a listener of this test's own for the peer that is not Redis.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <echo/io/io_error.h>
#include <echo/io/unique_fd.h>

#include "engine_nodes.h"
#include "support/loopback.h"

namespace echo::test {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::Errc;
using engine::Error;
using io::IoErrc;

// A loopback listener that answers every connection with `bytes` and keeps it open: a peer that
// is not Redis (an HTTP server, a TLS port, a stray service).
class NotRedis {
 public:
  explicit NotRedis(std::string bytes) : bytes_(std::move(bytes)) {
    LoopbackSocket s = loopback_socket(8);
    EXPECT_NE(s.port, 0);
    listener_ = std::move(s.fd);
    port_ = s.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~NotRedis() {
    stop_.store(true, std::memory_order_release);  // pairs with serve()'s acquire
    thread_.join();
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(std::memory_order_acquire); }

 private:
  void serve() {
    std::vector<io::UniqueFd> open;
    while (!stop_.load(std::memory_order_acquire)) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      io::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      accepted_.fetch_add(1, std::memory_order_release);  // pairs with accepted()
      (void)!::write(conn.get(), bytes_.data(), bytes_.size());
      open.push_back(std::move(conn));
    }
  }

  std::string bytes_;
  io::UniqueFd listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class StartCauses : public SingleServerTest {
 protected:
  // start() of a node with `o` and one broadcast table, timed: its answer and how long it took.
  struct Started {
    Error error;
    std::chrono::milliseconds took;
  };
  static Started start(EngineOptions o, std::chrono::milliseconds timeout = 10s) {
    Engine e(std::move(o),
             {table_spec("quotes", "AST", engine::CoherenceMode::kBroadcast, answering("px"))});
    const auto t0 = Clock::now();
    Error err = e.start(timeout);
    return {std::move(err),
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0)};
  }
  EngineOptions options(unsigned node) const { return node_options(server(), node); }
};

TEST_F(StartCauses, AWrongPasswordIsAuthRefusedAtOnceInTheServersWords) {
  command(client(), "ACL SETUSER alice on >right ~* &* +@all");
  EngineOptions o = options(1);
  o.username = "alice";
  o.password = "wrong";
  const auto s = start(o);
  EXPECT_EQ(s.error, IoErrc::kAuthRefused) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "WRONGPASS")) << s.error.detail;
  EXPECT_TRUE(contains(s.error.detail, "HELLO 3 AUTH alice")) << s.error.detail;
  EXPECT_LT(s.took, 2s) << "a definitive answer ends start() at once, not at its timeout";
  EXPECT_EQ(engine::probe_server(o, 2s), IoErrc::kAuthRefused);
  // The right one boots, as the named user.
  o.password = "right";
  EXPECT_EQ(start(o).error, Error{}) << "alice with her password";
  command(client(), "ACL DELUSER alice");
}

TEST_F(StartCauses, AnAclDenialIsNoPermissionNamingTheRefusedCommand) {
  // Allowed to log in, not to name its connection (the boot's CLIENT SETNAME).
  command(client(), "ACL SETUSER bob on >pw ~* &* +@all -client|setname");
  EngineOptions o = options(2);
  o.username = "bob";
  o.password = "pw";
  const auto s = start(o);
  EXPECT_EQ(s.error, IoErrc::kNoPermission) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "CLIENT SETNAME")) << s.error.detail;
  EXPECT_TRUE(contains(s.error.detail, "NOPERM")) << s.error.detail;
  EXPECT_LT(s.took, 2s);
  command(client(), "ACL DELUSER bob");
}

TEST_F(StartCauses, AForeignFenceIsVersionFenceNamingTheValueHeld) {
  command(client(), "SET {emq}:version otherbus:9.9");
  const auto s = start(options(3));
  EXPECT_EQ(s.error, IoErrc::kVersionFence) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "otherbus:9.9")) << s.error.detail;
  EXPECT_TRUE(contains(s.error.detail, "echomq:2.0.0")) << "what it accepts: " << s.error.detail;
  EXPECT_LT(s.took, 2s);
  const Error probed = engine::probe_server(options(3), 2s);
  EXPECT_EQ(probed, IoErrc::kVersionFence);
  EXPECT_TRUE(contains(probed.detail, "otherbus:9.9")) << probed.detail;
}

TEST_F(StartCauses, APeerThatIsNotRedisIsProtocolErrorNamingWhatItSent) {
  NotRedis http("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  const auto s = start(node_options("127.0.0.1", http.port(), 4));
  EXPECT_EQ(s.error, IoErrc::kProtocolError) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "HTTP/1.1 400")) << s.error.detail;
  EXPECT_TRUE(contains(s.error.detail, "HELLO")) << "the boot step it answered: " << s.error.detail;
  EXPECT_LT(s.took, 2s);
  EXPECT_EQ(http.accepted(), 1) << "a definitive answer is not dialled again";
  const Error probed = engine::probe_server(node_options("127.0.0.1", http.port(), 4), 2s);
  EXPECT_EQ(probed, IoErrc::kProtocolError);
  EXPECT_TRUE(contains(probed.detail, "HTTP/1.1 400")) << probed.detail;
}

TEST_F(StartCauses, BinaryGarbageIsProtocolErrorShownEscaped) {
  NotRedis garbage(std::string("\x16\x03\x01\x00\xa5\x01", 6));  // a TLS ClientHello's start
  const auto s = start(node_options("127.0.0.1", garbage.port(), 5));
  EXPECT_EQ(s.error, IoErrc::kProtocolError) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "\\x16\\x03\\x01")) << s.error.detail;
}

TEST_F(StartCauses, NothingListeningIsTimeoutNamingTheRefusedConnect) {
  const int port = closed_port();
  const auto s = start(node_options("127.0.0.1", port, 6), 1500ms);
  EXPECT_EQ(s.error, IoErrc::kTimeout) << s.error;
  EXPECT_TRUE(contains(s.error.detail, "Connection refused")) << s.error.detail;
  EXPECT_TRUE(contains(s.error.detail, "127.0.0.1:" + std::to_string(port))) << s.error.detail;
  const Error probed = engine::probe_server(node_options("127.0.0.1", port, 6), 1s);
  EXPECT_EQ(probed, IoErrc::kTimeout);
  EXPECT_TRUE(contains(probed.detail, "Connection refused")) << probed.detail;
}

TEST_F(StartCauses, ASilentPeerIsTimeoutNamingTheUnansweredBootStep) {
  NotRedis silent("");
  EngineOptions o = node_options("127.0.0.1", silent.port(), 7);
  const Error probed = engine::probe_server(o, 1500ms);
  EXPECT_EQ(probed, IoErrc::kTimeout);
  EXPECT_TRUE(contains(probed.detail, "did not answer the boot's HELLO")) << probed.detail;
}

TEST_F(StartCauses, AHealthyServerProbesClean) {
  EXPECT_EQ(engine::probe_server(options(8), 2s), Error{});
}

}  // namespace
}  // namespace echo::test
