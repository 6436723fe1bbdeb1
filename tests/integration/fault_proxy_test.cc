// SPDX-License-Identifier: MIT
// The fault proxy (tests/support/fault_proxy.h) against a real redis-server: first its own
// behaviours through plain sockets (delay measured, a stall holds, RST and FIN, one direction
// stopped, a trickle, a cap, refusal), then an engine node whose connections pass through it, each
// fault with the outcome the engine owes: the loss noticed by the heartbeat, the disconnect policy
// applied on resubscribe, nothing served stale once the fault heals, a call that fails typed within
// its bound rather than hanging.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/io/io_error.h>

#include "engine_nodes.h"
#include "support/fault_proxy.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::EventKind;
using table::BrandedId;

// A plain blocking socket on the proxy's port; closed on scope exit.
class Socket {
 public:
  explicit Socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Socket() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send_all(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until `want` bytes arrived or `timeout` passed; the bytes read. errno_out: the errno of a
  // failed recv (0: none), eof: the peer's FIN.
  std::string read(std::size_t want, std::chrono::milliseconds timeout) {
    std::string got;
    const auto deadline = Clock::now() + timeout;
    while (got.size() < want) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0) {
        errno_ = errno;
        break;
      }
      if (n == 0) {
        eof_ = true;
        break;
      }
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }
  int last_errno() const { return errno_; }
  bool eof() const { return eof_; }

 private:
  int fd_;
  bool connected_ = false;
  int errno_ = 0;
  bool eof_ = false;
};

std::string resp(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class FaultProxyTest : public SingleServerTest {
 protected:
  FaultProxyOptions to_server() const {
    FaultProxyOptions o;
    o.target_port = server().port();
    o.seed = 29;
    return o;
  }
};

TEST_F(FaultProxyTest, ForwardsBothWaysAndCountsTheBytes) {
  FaultProxy proxy(to_server());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.send_all(resp({"PING"})));
  EXPECT_EQ(s.read(7, 2s), "+PONG\r\n");
  // The proxy counts a write after send() returns, which may be after the reader saw the bytes.
  EXPECT_TRUE(eventually([&] { return proxy.stats().bytes_to_client == 7u; }, 2s));
  const FaultProxyStats st = proxy.stats();
  EXPECT_EQ(st.accepted, 1u);
  EXPECT_EQ(st.live, 1u);
  EXPECT_EQ(st.bytes_to_server, resp({"PING"}).size());
}

TEST_F(FaultProxyTest, RefusesATargetOffLoopbackAndKnobsOutOfRange) {
  FaultProxyOptions o = to_server();
  o.target_host = "10.0.0.1";
  EXPECT_THROW(FaultProxy{o}, std::invalid_argument);
  FaultProxy proxy(to_server());
  EXPECT_THROW(proxy.delay(-1ms), std::invalid_argument);
  EXPECT_THROW(proxy.stall(601s), std::invalid_argument);
}

TEST_F(FaultProxyTest, DelayHoldsEachWayAtLeastTheDelayAndKeepsOrder) {
  FaultProxy proxy(to_server());
  proxy.delay(150ms, 50ms);
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  const auto t0 = Clock::now();
  // Three commands in three writes: jitter must not reorder them.
  ASSERT_TRUE(s.send_all(resp({"SET", "fp:k", "1"})));
  ASSERT_TRUE(s.send_all(resp({"INCR", "fp:k"})));
  ASSERT_TRUE(s.send_all(resp({"GET", "fp:k"})));
  const std::string want = "+OK\r\n:2\r\n$1\r\n2\r\n";
  EXPECT_EQ(s.read(want.size(), 3s), want);
  EXPECT_GE(ms_since(t0), 300.0) << "150 ms each way, twice";
  proxy.heal();
  const auto t1 = Clock::now();
  ASSERT_TRUE(s.send_all(resp({"PING"})));
  EXPECT_EQ(s.read(7, 2s), "+PONG\r\n");
  EXPECT_LT(ms_since(t1), 150.0) << "heal() lifts the delay";
}

TEST_F(FaultProxyTest, StallHoldsBytesUntilItEndsThenDeliversThem) {
  FaultProxy proxy(to_server());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  const auto t0 = Clock::now();  // before the call: the stall runs from the call on
  proxy.stall(600ms);
  ASSERT_TRUE(s.send_all(resp({"PING"})));
  EXPECT_EQ(s.read(7, 300ms), "") << "nothing passes during the stall";
  EXPECT_EQ(s.read(7, 3s), "+PONG\r\n") << "the held command and its reply pass after it";
  EXPECT_GE(ms_since(t0), 600.0);
}

TEST_F(FaultProxyTest, ResetAllGivesTheClientEconnreset) {
  FaultProxy proxy(to_server());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.send_all(resp({"PING"})));
  ASSERT_EQ(s.read(7, 2s), "+PONG\r\n");
  proxy.reset_all();
  EXPECT_EQ(s.read(1, 2s), "");
  EXPECT_EQ(s.last_errno(), ECONNRESET);
  EXPECT_EQ(proxy.stats().reset_by_fault, 1u);
  EXPECT_EQ(proxy.stats().live, 0u);
}

TEST_F(FaultProxyTest, CloseAllGivesTheClientAnOrderlyEof) {
  FaultProxy proxy(to_server());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.send_all(resp({"PING"})));
  ASSERT_EQ(s.read(7, 2s), "+PONG\r\n");
  proxy.close_all();
  EXPECT_EQ(s.read(1, 2s), "");
  EXPECT_TRUE(s.eof());
  EXPECT_EQ(s.last_errno(), 0);
  EXPECT_EQ(proxy.stats().closed_by_fault, 1u);
}

TEST_F(FaultProxyTest, HalfOpenStopsRepliesWhileCommandsStillReachTheServer) {
  FaultProxy proxy(to_server());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  proxy.half_open(Flow::kToClient);
  ASSERT_TRUE(s.send_all(resp({"SET", "fp:half", "yes"})));
  EXPECT_TRUE(eventually([&] { return l2_raw(client(), "fp:half") == "yes"; }, 2s))
      << "the command went through";
  EXPECT_EQ(s.read(5, 300ms), "") << "its reply did not";
  EXPECT_FALSE(s.eof());
  proxy.heal();
  EXPECT_EQ(s.read(5, 2s), "+OK\r\n") << "held, not dropped: the stream has no hole";
}

TEST_F(FaultProxyTest, TrickleDeliversEverythingOneByteAtATime) {
  FaultProxyOptions o = to_server();
  o.trickle_pause = 2ms;
  FaultProxy proxy(o);
  const std::string value(100, 'v');
  RedisReply set = command(client(), "SET fp:trickle %s", value.c_str());
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  proxy.trickle(true);
  const auto t0 = Clock::now();
  ASSERT_TRUE(s.send_all(resp({"GET", "fp:trickle"})));
  const std::string want = "$100\r\n" + value + "\r\n";
  EXPECT_EQ(s.read(want.size(), 5s), want);
  // (request + reply) bytes, 2 ms apart at least.
  const double floor_ms =
      2.0 * static_cast<double>(resp({"GET", "fp:trickle"}).size() + want.size());
  EXPECT_GE(ms_since(t0), floor_ms * 0.95);
}

TEST_F(FaultProxyTest, BandwidthCapBoundsTheRate) {
  FaultProxy proxy(to_server());
  const std::string value(40000, 'b');
  Socket s(proxy.port());
  ASSERT_TRUE(s.connected());
  proxy.cap_bandwidth(80000);  // 80 kB/s: 40 kB up and 40 kB down take >= 1 s together
  const auto t0 = Clock::now();
  ASSERT_TRUE(s.send_all(resp({"SET", "fp:cap", value})));
  ASSERT_EQ(s.read(5, 5s), "+OK\r\n");
  ASSERT_TRUE(s.send_all(resp({"GET", "fp:cap"})));
  const std::string want = "$40000\r\n" + value + "\r\n";
  EXPECT_EQ(s.read(want.size(), 5s), want);
  EXPECT_GE(ms_since(t0), 900.0);
}

TEST_F(FaultProxyTest, RefuseResetsNewConnectionsAndKeepsOpenOnes) {
  FaultProxy proxy(to_server());
  Socket open(proxy.port());
  ASSERT_TRUE(open.connected());
  // connect() returns once the kernel queued the connection; the proxy accepts it a moment later.
  ASSERT_TRUE(eventually([&] { return proxy.stats().accepted == 1u; }, 2s));
  proxy.refuse(true);
  Socket refused(proxy.port());
  ASSERT_TRUE(refused.connected()) << "the kernel completes the handshake";
  EXPECT_EQ(refused.read(1, 2s), "");
  EXPECT_EQ(refused.last_errno(), ECONNRESET);
  EXPECT_EQ(proxy.stats().refused, 1u);
  ASSERT_TRUE(open.send_all(resp({"PING"})));
  EXPECT_EQ(open.read(7, 2s), "+PONG\r\n");
}

// ---- An engine node through the proxy ----

// Heartbeat 200 ms and call timeout 600 ms: a silent connection is noticed within ~800 ms.
constexpr auto kHeartbeat = 200ms;
constexpr auto kCallTimeout = 600ms;
constexpr auto kNotice = kHeartbeat + kCallTimeout + 700ms;  // slack for a loaded machine

// Every event the node heard, with when.
class Events {
 public:
  engine::EventSink sink() {
    return [this](const engine::Event& e) {
      const std::lock_guard lock(mu_);
      seen_.push_back({e.kind, std::string(e.subject), Clock::now()});
    };
  }
  int count(EventKind kind, const std::string& subject) const {
    const std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& s : seen_) n += s.kind == kind && s.subject == subject;
    return n;
  }
  // When the first `kind` of `subject` after `after` was heard (nullopt: not yet).
  std::optional<Clock::time_point> first(EventKind kind, const std::string& subject,
                                         Clock::time_point after) const {
    const std::lock_guard lock(mu_);
    for (const auto& s : seen_) {
      if (s.kind == kind && s.subject == subject && s.at >= after) return s.at;
    }
    return std::nullopt;
  }

 private:
  struct Seen {
    EventKind kind;
    std::string subject;
    Clock::time_point at;
  };
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
};

class EngineThroughProxy : public FaultProxyTest {
 protected:
  void SetUp() override {
    FaultProxyTest::SetUp();
    proxy_ = std::make_unique<FaultProxy>(to_server());
    engine::EngineOptions o = proxied_options(node_options(server(), 1), *proxy_);
    o.heartbeat = kHeartbeat;
    o.call_timeout = kCallTimeout;
    o.on_event = events_.sink();
    o.log = [](engine::LogLevel, std::string_view, std::string_view) {};
    a_ = start_node(o, {quotes()});
    w_ = node(2, {quotes()});
  }
  void TearDown() override {
    a_.reset();
    w_.reset();
    proxy_.reset();
  }
  engine::TableSpec quotes() const {
    return table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("px=0"));
  }
  // A's read of `name`, once it answers (a read may fail while the node reconnects).
  std::string read_at_a(const BrandedId& name) {
    std::string value;
    eventually(
        [&] {
          auto got = a_->get("quotes", name.view());
          if (got) value = got->value;
          return got.has_value();
        },
        5s);
    return value;
  }
  // Stages A holding v1 of a fresh name in L1; the name.
  BrandedId seeded() {
    const BrandedId name = fresh_id("AST");
    EXPECT_TRUE(w_->publish("quotes", name.view(), "px=1"));
    EXPECT_EQ(read_at_a(name), "px=1");
    EXPECT_TRUE(l1_holds(*a_, "quotes", name));
    return name;
  }
  // The outcome every fault owes once healed: A reconnected and resubscribed (the flush
  // policy dropped its rows), then serves the newest write.
  void expect_converges(const BrandedId& name, const std::string& newest) {
    EXPECT_TRUE(eventually([&] { return read_at_a(name) == newest; }, 5s))
        << "A still serves " << read_at_a(name) << " after the heal";
  }

  Events events_;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<engine::Engine> a_, w_;
};

TEST_F(EngineThroughProxy, StallPastTheHeartbeatIsNoticedAndTheRowIsNotServedStaleAfterHeal) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  const int resubscribed = events_.count(EventKind::kResubscribed, "sub");
  const auto t0 = Clock::now();
  proxy_->stall(5s);
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=2"));  // its message is held by the stall
  EXPECT_TRUE(
      eventually([&] { return events_.first(EventKind::kLost, "sub", t0).has_value(); }, kNotice))
      << "the heartbeat did not notice the silent subscriber";
  proxy_->heal();
  EXPECT_TRUE(eventually(
      [&] { return events_.count(EventKind::kResubscribed, "sub") > resubscribed; }, 5s));
  EXPECT_TRUE(
      eventually([&] { return events_.first(EventKind::kResumed, "quotes", t0).has_value(); }, 5s))
      << "the flush policy resumes the table after the resubscribe";
  expect_converges(name, "px=2");
}

TEST_F(EngineThroughProxy, APublishThroughAStallFailsTypedWithinItsBoundNotAHang) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  proxy_->stall(10s);
  const auto t0 = Clock::now();
  // publish, not put: its late landing (below) carries its own announcement.
  auto put = a_->publish("quotes", name.view(), "px=3");
  const double took = ms_since(t0);
  ASSERT_FALSE(put) << "a publish answered through a stalled proxy";
  // The reply overdue past call_timeout makes the connector declare the socket lost
  // (ConnectionOptions::call_timeout), and the calls in flight on it answer disconnected: the
  // publish is not known to have landed or not (engine.h, publish's contract).
  EXPECT_EQ(put.error(), io::IoErrc::kDisconnected) << put.error().message();
  EXPECT_GE(took, static_cast<double>(kCallTimeout.count()) * 0.9);
  EXPECT_LE(took, static_cast<double>((kCallTimeout + 1500ms).count()));
  EXPECT_TRUE(
      eventually([&] { return events_.first(EventKind::kLost, "cmd", t0).has_value(); }, 2s))
      << "the command connection's loss is told (on the io thread, possibly after the put "
         "returned)";
  // The stall held the call's bytes, and the socket A closed still had them in flight: once
  // healed the proxy delivers them and the script lands late -- the contract's "may have landed"
  // (a real network that recovers before TCP gives up does the same), with its message, so A
  // (resubscribed, or still subscribed) drops its row and agrees with L2.
  proxy_->heal();
  EXPECT_TRUE(
      eventually([&] { return l2_raw(client(), l2_key("quotes", name)).ends_with("px=3"); }, 3s))
      << "the publish's held script did not land after the heal";
  expect_converges(name, "px=3");
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=4"));
  expect_converges(name, "px=4");
}

TEST_F(EngineThroughProxy, ResetReconnectsResubscribesAndFlushes) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  const auto t0 = Clock::now();
  proxy_->refuse(true);  // the write below lands while A cannot be back yet
  proxy_->reset_all();
  EXPECT_TRUE(
      eventually([&] { return events_.first(EventKind::kLost, "sub", t0).has_value(); }, 2s));
  EXPECT_TRUE(eventually([&] { return proxy_->stats().refused >= 1u; }, 3s))
      << "A redials (after its backoff) and meets the refusing listener";
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=5"));  // A hears nothing of it
  proxy_->heal();
  EXPECT_TRUE(eventually(
      [&] { return events_.first(EventKind::kResubscribed, "sub", t0).has_value(); }, 5s));
  EXPECT_TRUE(eventually(
      [&] { return events_.first(EventKind::kReconnected, "cmd", t0).has_value(); }, 5s));
  expect_converges(name, "px=5");
}

TEST_F(EngineThroughProxy, HalfOpenServerToClientIsNoticedByTheHeartbeat) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  const auto t0 = Clock::now();
  proxy_->half_open(Flow::kToClient);
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=6"));
  EXPECT_TRUE(
      eventually([&] { return events_.first(EventKind::kLost, "sub", t0).has_value(); }, kNotice))
      << "a peer that neither answers nor closes went unnoticed";
  proxy_->heal();
  expect_converges(name, "px=6");
}

TEST_F(EngineThroughProxy, TrickledPushesFallingBehindAreNoticedByTheHeartbeat) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  // A trickle passes ~1 kB/s while W publishes ~7 kB/s of pushes to A: A's subscriber keeps
  // receiving bytes, ever further behind. Its heartbeat PING (sent every heartbeat, whatever
  // arrives) queues behind the backlog, and a PONG overdue past call_timeout is a loss.
  const auto t0 = Clock::now();
  proxy_->trickle(true);
  int n = 10;
  const bool noticed = eventually(
      [&] {
        EXPECT_TRUE(w_->publish("quotes", name.view(), "px=" + std::to_string(++n)));
        std::this_thread::sleep_for(10ms);
        return events_.first(EventKind::kLost, "sub", t0).has_value();
      },
      5s);
  EXPECT_TRUE(noticed) << "a subscriber falling behind a trickle went unnoticed";
  if (const auto lost = events_.first(EventKind::kLost, "sub", t0)) {
    const double took = std::chrono::duration<double, std::milli>(*lost - t0).count();
    EXPECT_LE(took, static_cast<double>(kNotice.count()) + 500.0);
  }
  proxy_->heal();
  expect_converges(name, "px=" + std::to_string(n));
}

TEST_F(EngineThroughProxy, DelayTrickleAndCapDeliverEverythingAndLeaveNothingStale) {
  ASSERT_TRUE(a_ && w_);
  const BrandedId name = seeded();
  // Each slows the wire below the heartbeat's bound: messages arrive late, but arrive.
  proxy_->delay(100ms, 50ms);
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=7"));
  EXPECT_TRUE(eventually([&] { return read_at_a(name) == "px=7"; }, 3s));
  proxy_->heal();
  proxy_->trickle(true);
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=8"));
  EXPECT_TRUE(eventually([&] { return read_at_a(name) == "px=8"; }, 5s));
  proxy_->heal();
  proxy_->cap_bandwidth(20000);
  ASSERT_TRUE(w_->publish("quotes", name.view(), "px=9"));
  EXPECT_TRUE(eventually([&] { return read_at_a(name) == "px=9"; }, 5s));
  proxy_->heal();
  expect_converges(name, "px=9");
  EXPECT_EQ(events_.count(EventKind::kLost, "sub"), 0) << "a slow wire is not a lost one";
}

}  // namespace
}  // namespace echo::test
