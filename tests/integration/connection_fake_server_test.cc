// SPDX-License-Identifier: MIT
// The connector against a hostile peer: a scripted fake server (a thread with a listening socket
// on 127.0.0.1) answers the boot correctly, then sends malformed, truncated, oversized or
// otherwise hostile replies. Every case must end in a typed error and a clean reconnect - never a
// crash, a hang or a leak (this suite runs under ASan+UBSan in CI). Scripted cluster nodes also
// show the exact commands a node receives where their order matters (ASKING before its command).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <echo/io/cluster_client.h>
#include <echo/io/connection.h>
#include <echo/io/unique_fd.h>
#include <echo/io/uring_loop.h>

#include "support/io_backend.h"
#include "support/loopback.h"
#include "support/on_loop.h"
#include "support/poll.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;

// What the fake does after answering one command.
struct Action {
  std::string bytes;
  enum Then { kKeep, kClose, kStall } then = kKeep;
};

// A one-connection-at-a-time scripted server. `respond(connection index, command)` decides the
// answer; commands are parsed from the client's RESP arrays of bulk strings.
class FakeServer {
 public:
  using Respond = std::function<Action(int conn, const std::vector<std::string>& cmd)>;

  explicit FakeServer(Respond respond) : respond_(std::move(respond)) {
    test::LoopbackSocket s = test::loopback_socket(8, SOCK_NONBLOCK, /*reuse=*/true);
    EXPECT_NE(s.port, 0);
    listener_ = std::move(s.fd);
    port_ = s.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_.store(true, std::memory_order_release);  // pairs with the acquire loads in serve()
    thread_.join();
  }
  int port() const { return port_; }
  int connections() const { return accepted_.load(std::memory_order_acquire); }

  // The well-behaved answers: a RESP3 HELLO map, the fence value, PONG, ECHO, OK.
  static Action good(const std::vector<std::string>& cmd) {
    const std::string& name = cmd.empty() ? std::string() : cmd[0];
    if (name == "HELLO") return {"%1\r\n$5\r\nproto\r\n:3\r\n"};
    if (name == "GET" && cmd.size() > 1 && cmd[1] == "{emq}:version") {
      return {"$12\r\nechomq:2.0.0\r\n"};
    }
    if (name == "PING") return {"+PONG\r\n"};
    if (name == "ECHO" && cmd.size() > 1) {
      return {"$" + std::to_string(cmd[1].size()) + "\r\n" + cmd[1] + "\r\n"};
    }
    return {"+OK\r\n"};
  }

 private:
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  void serve() {
    int index = 0;
    while (!stopping()) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      accepted_.fetch_add(1, std::memory_order_release);  // pairs with connections()
      talk(conn, index++);
    }
  }

  // Parses whole commands out of `in`; returns false on a half command.
  static bool take_command(std::string& in, std::vector<std::string>& cmd) {
    cmd.clear();
    std::size_t pos = 0;
    auto line = [&](std::size_t& out_value, char type) {
      if (pos >= in.size() || in[pos] != type) return false;
      const std::size_t cr = in.find("\r\n", pos);
      if (cr == std::string::npos) return false;
      out_value = std::stoul(in.substr(pos + 1, cr - pos - 1));
      pos = cr + 2;
      return true;
    };
    std::size_t argc = 0;
    if (!line(argc, '*')) return false;
    for (std::size_t i = 0; i < argc; ++i) {
      std::size_t len = 0;
      if (!line(len, '$') || pos + len + 2 > in.size()) return false;
      cmd.push_back(in.substr(pos, len));
      pos += len + 2;
    }
    in.erase(0, pos);
    return true;
  }

  void talk(UniqueFd& conn, int index) {
    std::string in;
    bool stalled = false;
    char buf[4096];
    while (!stopping()) {
      pollfd p{conn.get(), POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      const ssize_t n = ::recv(conn.get(), buf, sizeof buf, 0);
      if (n <= 0) return;  // the client went away: next connection
      if (stalled) continue;
      in.append(buf, static_cast<std::size_t>(n));
      std::vector<std::string> cmd;
      while (take_command(in, cmd)) {
        const Action a = respond_(index, cmd);
        std::size_t off = 0;
        while (off < a.bytes.size()) {
          const ssize_t w =
              ::send(conn.get(), a.bytes.data() + off, a.bytes.size() - off, MSG_NOSIGNAL);
          if (w <= 0) return;
          off += static_cast<std::size_t>(w);
        }
        if (a.then == Action::kClose) return;
        if (a.then == Action::kStall) {
          stalled = true;
          break;
        }
      }
    }
  }

  Respond respond_;
  UniqueFd listener_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
};

struct Events {
  std::mutex mu;
  std::vector<std::pair<ConnEvent, std::error_code>> seen;
  EventFn fn() {
    return [this](ConnEvent e, std::error_code c) {
      std::lock_guard lock(mu);
      seen.emplace_back(e, c);
    };
  }
  std::error_code disconnect_cause() {
    std::lock_guard lock(mu);
    for (auto& [e, c] : seen) {
      if (e == ConnEvent::kDisconnected) return c;
    }
    return {};
  }
};

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 10s) {
  return test::poll_until(pred, timeout, 2ms);
}

ConnectionOptions fake_options(int port) {
  ConnectionOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.heartbeat = 0ms;
  o.call_timeout = 300ms;
  o.boot_timeout = 300ms;
  o.backoff_initial = 10ms;
  o.backoff_max = 40ms;
  o.max_reply_bytes = 1 << 20;
  return o;
}

struct HostileCase {
  const char* name;
  std::string bytes;
  Action::Then then;
  IoErrc cause;  // what the owner hears
  bool counts_wire_error;
};

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string random_garbage() {
  std::mt19937 rng(42);
  std::string g(1, '\0');  // not a RESP type byte
  for (int i = 0; i < 255; ++i) g.push_back(static_cast<char>(rng() & 0xff));
  return g;
}

std::vector<HostileCase> hostile_cases() {
  return {
      {"BadTypeByte", "?what\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"BinaryGarbage", random_garbage(), Action::kKeep, IoErrc::kProtocolError, true},
      {"TruncatedThenClosed", "$10\r\nabc", Action::kClose, IoErrc::kDisconnected, false},
      {"TruncatedThenSilent", "$10\r\nabc", Action::kStall, IoErrc::kTimeout, false},
      {"ClosedWithoutReply", "", Action::kClose, IoErrc::kDisconnected, false},
      {"SilentForever", "", Action::kStall, IoErrc::kTimeout, false},
      {"OversizedBulkHeader", "$99999999999\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"BulkBeyondTheReplyBound", "$2000000\r\n" + std::string(2000000, 'x') + "\r\n",
       Action::kKeep, IoErrc::kProtocolError, true},
      // 600 KB of nulls, under the 1 MiB reply bound but past its one element per 8 bytes
      // (131,072): the decoder's arena would take 24 bytes for each 3 on the wire.
      {"ElementsBeyondTheReplyBound", "*200000\r\n" + repeat("_\r\n", 200000), Action::kKeep,
       IoErrc::kProtocolError, true},
      {"NegativeLength", "$-7\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"HugeAggregateCount", "*2147483647\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"DeepNesting", repeat("*1\r\n", 100) + ":1\r\n", Action::kKeep, IoErrc::kProtocolError,
       true},
      {"EndlessLine", "+" + std::string(100000, 'a'), Action::kKeep, IoErrc::kProtocolError, true},
      {"CrWithoutLf", "+OK\rX\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"BadInteger", ":12a\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"BulkWithoutCrlf", "$3\r\nabcXY", Action::kKeep, IoErrc::kProtocolError, true},
      {"StreamedString", "$?\r\n;4\r\nHell\r\n;0\r\n", Action::kKeep, IoErrc::kProtocolError, true},
      {"IntegerOverflow", ":99999999999999999999999\r\n", Action::kKeep, IoErrc::kProtocolError,
       true},
  };
}

void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.name; }

class HostileReply : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileReply, EndsInATypedErrorAndACleanReconnect) {
  const HostileCase& c = GetParam();
  FakeServer fake([&](int conn, const std::vector<std::string>& cmd) {
    if (conn == 0 && cmd.size() == 2 && cmd[0] == "GET" && cmd[1] == "hostile") {
      return Action{c.bytes, c.then};
    }
    return FakeServer::good(cmd);
  });
  Events events;
  {
    LoopThread lt(test::test_loop_options());
    Connection conn(lt.loop(), fake_options(fake.port()), {}, events.fn());
    conn.start();
    ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
    const auto r = conn.call_blocking({"GET", "hostile"});
    EXPECT_EQ(r.ec, IoErrc::kDisconnected)
        << "the caller in flight is failed, never answered garbage";
    // The owner hears on the loop thread, just after the callers were failed.
    EXPECT_TRUE(eventually([&] { return events.disconnect_cause() == c.cause; }))
        << events.disconnect_cause().message();
    EXPECT_EQ(conn.stats().wire_errors, c.counts_wire_error ? 1u : 0u);
    ASSERT_TRUE(eventually([&] { return conn.status() == ConnStatus::kReady; }));
    EXPECT_EQ(conn.stats().reconnects, 1u);
    EXPECT_EQ(fake.connections(), 2);
    const auto pong = conn.call_blocking({"PING"});
    ASSERT_FALSE(pong.ec) << pong.ec.message();
    EXPECT_EQ(pong.reply.view().str(), "PONG");
  }
}

INSTANTIATE_TEST_SUITE_P(FakeServer, HostileReply, ::testing::ValuesIn(hostile_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(FakeServer, AReplyWithNoCallerIsCountedAndDropped) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd.size() == 2 && cmd[1] == "twice") return Action{"+OK\r\n+EXTRA\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto r = conn.call_blocking({"GET", "twice"});
  ASSERT_FALSE(r.ec);
  EXPECT_EQ(r.reply.view().str(), "OK");
  ASSERT_TRUE(eventually([&] { return conn.stats().wire_errors == 1; }));
  auto pong = conn.call_blocking({"PING"});
  ASSERT_FALSE(pong.ec);
  EXPECT_EQ(pong.reply.view().str(), "PONG") << "the stray reply did not shift the FIFO";
  EXPECT_EQ(conn.stats().reconnects, 0u);
}

TEST(FakeServer, AReplyOfManyElementsWithinTheBoundIsAnswered) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd.size() == 2 && cmd[1] == "many") {
      return Action{"*100000\r\n" + repeat("_\r\n", 100000)};  // 131,072 allowed at 1 MiB
    }
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto r = conn.call_blocking({"GET", "many"});
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.reply.view().size(), 100000u);
  EXPECT_EQ(conn.stats().wire_errors, 0u);
}

TEST(FakeServer, PushesBeforeAReplyGoToThePushHandler) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd.size() == 2 && cmd[1] == "pushy") {
      return Action{repeat(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n", 3) +
                    "$5\r\nreply\r\n"};
    }
    return FakeServer::good(cmd);
  });
  std::atomic<int> pushes{0};
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()), [&](const Resp3Value& v) {
    if (v.size() == 3 && v[2].str() == "x") pushes.fetch_add(1, std::memory_order_relaxed);
  });
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto r = conn.call_blocking({"GET", "pushy"});
  ASSERT_FALSE(r.ec);
  EXPECT_EQ(r.reply.view().str(), "reply");
  EXPECT_EQ(pushes.load(std::memory_order_relaxed), 3);
  EXPECT_EQ(conn.stats().pushes, 3u);
}

// Before the first boot finished, bytes that are not RESP are the server's definitive answer (a
// port that is not Redis): the connector stops with protocol_error at once, dials no more, and
// cause() shows what came and which boot step it answered.
class HostileFirstBoot : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileFirstBoot, EndsWaitReadyWithTheCauseInWords) {
  const HostileCase& c = GetParam();
  FakeServer fake([&](int, const std::vector<std::string>& cmd) {
    if (cmd[0] == "HELLO") return Action{c.bytes, c.then};
    return FakeServer::good(cmd);
  });
  LoopThread lt;
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  const auto t0 = std::chrono::steady_clock::now();
  if (c.counts_wire_error) {
    EXPECT_EQ(conn.wait_ready(5s), IoErrc::kProtocolError);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "at once, not at a timeout";
    EXPECT_EQ(conn.status(), ConnStatus::kStopped);
    EXPECT_EQ(fake.connections(), 1) << "a definitive answer is not dialled again";
    EXPECT_NE(conn.cause().find("not RESP"), std::string::npos) << conn.cause();
    EXPECT_NE(conn.cause().find("HELLO"), std::string::npos) << conn.cause();
    EXPECT_NE(conn.cause().find("first bytes"), std::string::npos) << conn.cause();
  } else {
    // A close or silence is also what a restarting server shows: it keeps dialling, and the
    // caller's timeout comes with the last attempt's cause.
    EXPECT_EQ(conn.wait_ready(1500ms), IoErrc::kTimeout);
    EXPECT_TRUE(eventually([&] { return fake.connections() >= 2; })) << "it keeps trying";
    const std::string cause = conn.cause();
    EXPECT_NE(cause.find("HELLO"), std::string::npos) << cause;
    if (c.then == Action::kClose) {
      EXPECT_NE(cause.find("closed the connection"), std::string::npos) << cause;
    } else {
      EXPECT_NE(cause.find("did not answer"), std::string::npos) << cause;
    }
    if (!c.bytes.empty()) {
      EXPECT_NE(cause.find("$10\\r\\nabc"), std::string::npos) << cause;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FakeServer, HostileFirstBoot, ::testing::ValuesIn(hostile_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(FakeServer, GarbageDuringARebootIsALossAndItBootsAgain) {
  // Ready once; then the socket is lost, and the next boot's HELLO is answered with garbage: a
  // connection that was ready keeps its owner's promise to reconnect (the server was Redis).
  FakeServer fake([&](int conn, const std::vector<std::string>& cmd) {
    if (conn == 0 && cmd.size() == 2 && cmd[1] == "drop") return Action{"", Action::kClose};
    if (conn == 1 && cmd[0] == "HELLO") return Action{"!!!\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.call_blocking({"GET", "drop"}).ec, IoErrc::kDisconnected);
  ASSERT_TRUE(eventually([&] {
    return fake.connections() >= 3 && conn.status() == ConnStatus::kReady;
  })) << conn.cause();
  EXPECT_EQ(conn.stats().wire_errors, 1u);
  EXPECT_EQ(conn.stats().reconnects, 1u);
}

TEST(FakeServer, ASilentBootTimesOutAndRetries) {
  FakeServer fake([](int conn, const std::vector<std::string>& cmd) {
    if (conn == 0 && cmd[0] == "HELLO") return Action{"", Action::kStall};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(fake.connections(), 2);
}

TEST(FakeServer, HelloRefusedUnderAutoFallsBackToResp2) {
  std::vector<std::string> seen;
  std::mutex mu;
  FakeServer fake([&](int, const std::vector<std::string>& cmd) {
    {
      std::lock_guard lock(mu);
      seen.push_back(cmd[0]);
    }
    if (cmd[0] == "HELLO") return Action{"-ERR unknown command 'HELLO'\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.stats().protocol, 2);
  std::lock_guard lock(mu);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0], "HELLO");
  EXPECT_EQ(seen[1], "PING");
  EXPECT_EQ(seen[2], "GET");
}

TEST(FakeServer, HelloRefusedUnderExplicitResp3IsUnexpectedHello) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd[0] == "HELLO") return Action{"-ERR unknown command 'HELLO'\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  ConnectionOptions o = fake_options(fake.port());
  o.protocol = Protocol::kResp3;
  Connection conn(lt.loop(), o);
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kUnexpectedHello);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(fake.connections(), 1) << "a fatal boot error stops the connector";
}

TEST(FakeServer, ARefusedSelectIsFatalBootRefused) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd[0] == "SELECT") return Action{"-ERR DB index is out of range\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  ConnectionOptions o = fake_options(fake.port());
  o.db = 99;
  Connection conn(lt.loop(), o);
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kBootRefused);
}

TEST(FakeServer, ANonStringFenceIsVersionFence) {
  FakeServer fake([](int, const std::vector<std::string>& cmd) {
    if (cmd[0] == "GET") return Action{":42\r\n"};
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(fake.port()));
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kVersionFence);
}

TEST(FakeServer, ARefusedConnectBacksOffAndKeepsTrying) {
  // Nobody listens on the port: connect fails and the connector waits in backoff, not stopped.
  const int port = test::closed_port();
  ASSERT_NE(port, 0);
  LoopThread lt(test::test_loop_options());
  Connection conn(lt.loop(), fake_options(port));
  conn.start();
  EXPECT_EQ(conn.wait_ready(150ms), IoErrc::kTimeout);
  // It cycles connecting -> backoff; a single look may land on either, never on stopped.
  EXPECT_NE(conn.status(), ConnStatus::kStopped);
  EXPECT_TRUE(eventually([&] { return conn.status() == ConnStatus::kBackoff; }))
      << to_string(conn.status());
  EXPECT_NE(conn.cause().find("Connection refused"), std::string::npos) << conn.cause();
}

// A cluster map or a MOVED naming a host that does not resolve (a hostname endpoint gone from DNS)
// must fail that call, not the process: the node connection is made on the loop thread, whose
// completions are noexcept, and a throw there was std::terminate (helper-29's repro).
TEST(FakeServer, AMapOrAMovedNamingAHostThatDoesNotResolveFailsTheCallNotTheProcess) {
  int port = 0;
  FakeServer fake([&port](int, const std::vector<std::string>& cmd) {
    if (!cmd.empty() && cmd[0] == "CLUSTER") {
      // CLUSTER SHARDS (RESP3): slots 0-8191 on this fake, 8192-16383 on a name that never
      // resolves (.invalid, RFC 2606).
      const auto node = [](const std::string& key, const std::string& host, int p) {
        return "%4\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
               "$4\r\nport\r\n:" +
               std::to_string(p) + "\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n$" +
               std::to_string(host.size()) + "\r\n" + host + "\r\n";
      };
      const auto shard = [&node](int first, int last, const std::string& key,
                                 const std::string& host, int p) {
        return "%2\r\n$5\r\nslots\r\n*2\r\n:" + std::to_string(first) +
               "\r\n:" + std::to_string(last) + "\r\n$5\r\nnodes\r\n*1\r\n" + node(key, host, p);
      };
      return Action{"*2\r\n" + shard(0, 8191, "ip", "127.0.0.1", port) +
                    shard(8192, 16383, "endpoint", "no-such-node.invalid", 7000)};
    }
    if (!cmd.empty() && cmd[0] == "GET") return Action{"-MOVED 5061 no-such-node.invalid:7000\r\n"};
    return FakeServer::good(cmd);
  });
  port = fake.port();
  LoopThread lt(test::test_loop_options());
  ClusterOptions o;
  o.seeds = {NodeAddress{"127.0.0.1", port}};
  o.connection = fake_options(port);
  o.connection.fence = false;
  o.route_timeout = 200ms;
  ClusterClient cc(lt.loop(), o);
  cc.start();
  ASSERT_EQ(cc.wait_ready(5s), std::error_code{});
  EXPECT_GE(cc.stats().unresolved, 1u) << "the map's second master";
  EXPECT_EQ(cc.address_of(12182).host, "") << "foo's slot has no master it can reach";
  auto moved = cc.call_blocking({"GET", "bar"});  // slot 5061: the fake answers MOVED
  EXPECT_EQ(moved.ec, make_error_code(IoErrc::kClusterDown));
  auto held = cc.call_blocking({"GET", "foo"});  // slot 12182: held, then cluster_down
  EXPECT_EQ(held.ec, make_error_code(IoErrc::kClusterDown));
  auto pong = cc.call_blocking({"PING"});
  ASSERT_FALSE(pong.ec) << pong.ec.message();
  EXPECT_EQ(pong.reply.view().str(), "PONG");
  EXPECT_GE(cc.stats().unresolved, 2u);
}

// Two scripted masters for the ASK cases. The source owns slots 0-8191 and answers every command
// naming "bar" (slot 5061) with ASK to the target, as a source mid-migration does for a key it no
// longer holds. The target owns 8192-16383 ("foo" is 12182) and imports slot 5061: a command
// naming "bar" runs there only right after ASKING (one-shot, as on a real node), else it is
// MOVED back. The target keeps every command it received but HELLO, in order.
class AskingPair {
 public:
  static constexpr const char* kSha = "0123456789abcdef0123456789abcdef01234567";

  AskingPair() {
    source_port_.store(source_.port(), std::memory_order_release);  // pairs with port()'s loads
    target_port_.store(target_.port(), std::memory_order_release);
  }

  ClusterOptions options() const {
    ClusterOptions o;
    o.seeds = {NodeAddress{"127.0.0.1", source_.port()}};
    o.connection = fake_options(source_.port());
    o.connection.fence = false;
    o.refresh_min_interval = 10ms;
    return o;
  }
  std::vector<std::string> received(std::size_t from = 0) {
    std::lock_guard lock(mu_);
    return {received_.begin() + static_cast<std::ptrdiff_t>(std::min(from, received_.size())),
            received_.end()};
  }

 private:
  static std::string port(const std::atomic<int>& p) {
    return std::to_string(p.load(std::memory_order_acquire));
  }
  static bool names_bar(const std::vector<std::string>& cmd) {
    return std::find(cmd.begin(), cmd.end(), "bar") != cmd.end();
  }
  std::string shards() const {
    const auto shard = [](int first, int last, const std::string& port) {
      return "%2\r\n$5\r\nslots\r\n*2\r\n:" + std::to_string(first) +
             "\r\n:" + std::to_string(last) +
             "\r\n$5\r\nnodes\r\n*1\r\n%4\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
             "$6\r\nhealth\r\n$6\r\nonline\r\n$4\r\nport\r\n:" +
             port + "\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    };
    return "*2\r\n" + shard(0, 8191, port(source_port_)) + shard(8192, 16383, port(target_port_));
  }
  Action source(const std::vector<std::string>& cmd) {
    if (cmd[0] == "CLUSTER") return {shards()};
    if (names_bar(cmd)) return {"-ASK 5061 127.0.0.1:" + port(target_port_) + "\r\n"};
    return FakeServer::good(cmd);
  }
  Action target(const std::vector<std::string>& cmd) {
    if (cmd[0] == "HELLO") return FakeServer::good(cmd);
    {
      std::lock_guard lock(mu_);
      std::string line = cmd[0];
      for (std::size_t i = 1; i < cmd.size(); ++i) line += " " + cmd[i];
      received_.push_back(std::move(line));
    }
    const bool asked = std::exchange(asking_, cmd[0] == "ASKING");
    if (cmd[0] == "CLUSTER") return {shards()};
    if (cmd[0] == "ASKING") return {"+OK\r\n"};
    if (cmd[0] == "SCRIPT") {
      loaded_ = true;
      return {"$40\r\n" + std::string(kSha) + "\r\n"};
    }
    if (names_bar(cmd) && !asked) return {"-MOVED 5061 127.0.0.1:" + port(source_port_) + "\r\n"};
    if (cmd[0] == "EVALSHA") {
      return {loaded_ ? "+ran\r\n" : "-NOSCRIPT No matching script. Please use EVAL.\r\n"};
    }
    if (cmd[0] == "GET") {
      return {"$" + std::to_string(cmd[1].size() + 2) + "\r\nb:" + cmd[1] + "\r\n"};
    }
    return FakeServer::good(cmd);
  }

  std::mutex mu_;
  std::vector<std::string> received_;  // guarded by mu_
  bool asking_ = false;                // the target's thread only
  bool loaded_ = false;                // the target's thread only
  std::atomic<int> source_port_{0}, target_port_{0};
  // Last: their threads call back into the members above, so they go first.
  FakeServer source_{[this](int, const std::vector<std::string>& cmd) { return source(cmd); }};
  FakeServer target_{[this](int, const std::vector<std::string>& cmd) { return target(cmd); }};
};

// Both node connections ready and quiet: a map refresh that the target's late boot asked for has
// been answered, and nothing more is sent unasked (no heartbeat, every master ready).
bool settled(const ClusterClient& cc) {
  const auto ready = [&cc] {
    const auto s = cc.stats();
    return s.nodes == 2 && std::all_of(s.connections.begin(), s.connections.end(),
                                       [](auto& c) { return c.status == ConnStatus::kReady; });
  };
  if (!eventually(ready)) return false;
  std::this_thread::sleep_for(200ms);  // past a tick (50 ms) and refresh_min_interval (10 ms)
  return eventually([&cc] {
    const auto s = cc.stats();
    return std::all_of(s.connections.begin(), s.connections.end(),
                       [](auto& c) { return c.pending == 0; });
  });
}

// ASKING is one-shot for the connection's next command. Written alone while the command behind it
// was refused (here by the target's one pending place, which ASKING took), it granted the next
// caller's command instead: a command on a migrating slot would run on the importing node
// without its caller having asked.
TEST(FakeServer, AnAskRedirectAtTheTargetsPendingBoundLeavesNoAskingForTheNextCaller) {
  AskingPair pair;
  LoopThread lt(test::test_loop_options());
  ClusterOptions o = pair.options();
  o.connection.max_pending = 1;
  ClusterClient cc(lt.loop(), o);
  cc.start();
  ASSERT_EQ(cc.wait_ready(5s), std::error_code{});
  ASSERT_TRUE(settled(cc));
  const std::size_t from = pair.received().size();
  auto asked = cc.call_blocking({"GET", "bar"});
  auto next = cc.call_blocking({"GET", "foo"});
  EXPECT_FALSE(asked.ec) << asked.ec.message();
  EXPECT_EQ(asked.reply.view().str(), "b:bar");
  ASSERT_FALSE(next.ec) << next.ec.message();
  EXPECT_EQ(next.reply.view().str(), "b:foo");
  EXPECT_EQ(pair.received(from), (std::vector<std::string>{"ASKING", "GET bar", "GET foo"}));
  EXPECT_EQ(cc.stats().ask, 1u);
}

using test::on_loop;  // a Connection verb runs on its loop thread

// call_asking gives ASKING and its command one verdict (the command's place under max_pending),
// so a refused command leaves no ASKING on the wire.
TEST(FakeServer, AskingAndItsCommandAreAdmittedTogetherOrRefusedTogether) {
  std::mutex mu;
  std::vector<std::string> got;
  std::promise<void> first_answered, third_answered;  // before conn: it may answer as it closes
  FakeServer fake([&](int, const std::vector<std::string>& cmd) {
    if (cmd[0] != "HELLO") {
      std::lock_guard lock(mu);
      got.push_back(cmd[0] + (cmd.size() > 1 ? " " + cmd[1] : ""));
    }
    return FakeServer::good(cmd);
  });
  LoopThread lt(test::test_loop_options());
  ConnectionOptions o = fake_options(fake.port());
  o.fence = false;
  o.max_pending = 1;
  Connection conn(lt.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  const auto [first, second] = on_loop(lt.loop(), [&] {
    const std::string_view get_first[] = {"GET", "first"};
    const std::string_view get_second[] = {"GET", "second"};
    auto ec1 = conn.call(get_first,
                         [&](std::error_code, const Resp3Value&) { first_answered.set_value(); });
    auto ec2 = conn.call_asking(get_second, [](std::error_code, const Resp3Value&) {
      ADD_FAILURE() << "a refused call is never answered";
    });
    return std::pair{ec1, ec2};
  });
  EXPECT_EQ(first, std::error_code{});
  EXPECT_EQ(second, IoErrc::kOverloaded) << "the one place is taken: neither is queued";
  ASSERT_EQ(first_answered.get_future().wait_for(5s), std::future_status::ready);
  // With the place free, the command takes it and ASKING goes along.
  const auto third = on_loop(lt.loop(), [&] {
    const std::string_view get_third[] = {"GET", "third"};
    return conn.call_asking(get_third, [&](std::error_code ec, const Resp3Value& v) {
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_EQ(v.str(), "OK") << "the command's own reply, not ASKING's";
      third_answered.set_value();
    });
  });
  EXPECT_EQ(third, std::error_code{});
  ASSERT_EQ(third_answered.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(conn.stats().overloads, 1u);
  std::lock_guard lock(mu);
  EXPECT_EQ(got, (std::vector<std::string>{"GET first", "ASKING", "GET third"}));
}

// On NOSCRIPT the connection loads the script and resends the EVALSHA. After an ASK the resend
// needs ASKING again (the first was spent on the EVALSHA that met NOSCRIPT), else the importing
// node sends it back with MOVED: two more redirects against max_redirects for one call.
TEST(FakeServer, AnAskRedirectedEvalshaResentAfterNoscriptIsAskedForAgain) {
  AskingPair pair;
  LoopThread lt(test::test_loop_options());
  ClusterClient cc(lt.loop(), pair.options());
  cc.start();
  ASSERT_EQ(cc.wait_ready(5s), std::error_code{});
  ASSERT_TRUE(settled(cc));
  const std::size_t from = pair.received().size();
  const Script script{AskingPair::kSha, "return 'ran'"};
  auto result = std::make_shared<std::promise<OwnedResult>>();
  auto future = result->get_future();
  lt.loop().post([&cc, &script, result] {
    const std::string_view keys[] = {"bar"};
    cc.evalsha(script, keys, {}, [result](std::error_code ec, const Resp3Value& v) {
      result->set_value(OwnedResult{ec, v.to_owned()});
    });
  });
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  const OwnedResult r = future.get();
  ASSERT_FALSE(r.ec) << r.ec.message() << " " << r.reply.view().to_debug_string();
  EXPECT_EQ(r.reply.view().str(), "ran");
  const std::string evalsha = std::string("EVALSHA ") + AskingPair::kSha + " 1 bar";
  EXPECT_EQ(
      pair.received(from),
      (std::vector<std::string>{"ASKING", evalsha, "SCRIPT LOAD return 'ran'", "ASKING", evalsha}));
  const auto s = cc.stats();
  EXPECT_EQ(s.ask, 1u);
  EXPECT_EQ(s.moved, 0u);
}

}  // namespace
}  // namespace echo::io
