// SPDX-License-Identifier: MIT
// The metrics endpoint (EngineOptions::metrics_port) against a real server and plain sockets: the
// exposition after broadcast and job-lane traffic, with every histogram's _bucket/_sum/_count,
// checked by `promtool check metrics`; the 404/405/400/431/503 answers; a silent client dropped at
// the deadline while another is served; a client that never reads holding up nobody; a port in
// use failing start() with a typed error; the knobs' ConfigErrors.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <echo/io/unique_fd.h>

#include "engine_nodes.h"
#include "http_client.h"
#include "support/loopback.h"
#include "support/temp_dir.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Errc;

class MetricsEndpointTest : public SingleServerTest {
 protected:
  // Node 1 on the suite's server, its endpoint on `port`.
  static engine::EngineOptions with_metrics(int port) {
    auto o = node_options(server(), 1);
    o.metrics_port = port;
    return o;
  }
};

std::vector<engine::TableSpec> two_lanes() {
  return {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("px=100.00"), 60000),
          table_spec("orders", "ORD", CoherenceMode::kJob, answering("qty=1"), 60000)};
}

// The last sample value of `line_prefix` (a series' name and labels) in `text`, or -1.
double value_of(const std::string& text, const std::string& line_prefix) {
  const std::size_t at = text.find("\n" + line_prefix + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + 1 + line_prefix.size() + 1, nullptr);
}

TEST_F(MetricsEndpointTest, ServesHistogramsThatPromtoolAccepts) {
  const int port = testing::free_loopback_port();
  auto e = start_node(with_metrics(port), two_lanes());
  ASSERT_NE(e, nullptr);
  // Traffic on both lanes: 80 misses that load, then 320 hits (1 in 64 reads per thread is
  // timed: more than 64 of each, so both histograms caught some), broadcasts the writer
  // applies, a job-lane publish.
  std::vector<table::BrandedId> ids;
  for (int i = 0; i < 80; ++i) ids.push_back(fresh_id("AST"));
  for (int round = 0; round < 5; ++round) {
    for (const auto& id : ids) ASSERT_TRUE(e->get("quotes", id.view()));
  }
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(e->publish("quotes", ids[i].view(), "px=101.00"));
  ASSERT_TRUE(e->publish("orders", fresh_id("ORD").view(), "qty=2"));
  ASSERT_TRUE(eventually([&] { return ring_applied(*e, "quotes") >= 8; }));

  const Answer a = get(port);
  ASSERT_EQ(a.status, 200) << a.head;
  EXPECT_NE(a.head.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            std::string::npos);
  EXPECT_NE(a.head.find("Content-Length: " + std::to_string(a.body.size())), std::string::npos);
  EXPECT_NE(a.head.find("Connection: close"), std::string::npos);
  const std::string& text = a.body;
  const std::string quotes = "{node=\"1\",table=\"quotes\"";
  for (const std::string family :
       {"echostore_get_hit_latency_seconds", "echostore_get_miss_latency_seconds",
        "echostore_load_latency_seconds", "echostore_writer_lag_seconds"}) {
    EXPECT_NE(text.find("# TYPE " + family + " histogram\n"), std::string::npos) << family;
    EXPECT_NE(text.find(family + "_bucket" + quotes + ",le=\"+Inf\"}"), std::string::npos)
        << family;
    // Prometheus' contract: le="+Inf" equals _count, and there is a _sum.
    const double inf = value_of(text, family + "_bucket" + quotes + ",le=\"+Inf\"}");
    EXPECT_EQ(inf, value_of(text, family + "_count" + quotes + "}")) << family;
    EXPECT_GT(inf, 0) << family << " counted nothing";
    EXPECT_GT(value_of(text, family + "_sum" + quotes + "}"), 0) << family;
  }
  EXPECT_NE(text.find("echostore_ring_batch_size_sum{node=\"1\",table=\"quotes\",ring=\"0\"}"),
            std::string::npos);
  EXPECT_NE(text.find("echostore_l2_latency_seconds_sum{node=\"1\",connection="),
            std::string::npos);
  EXPECT_GE(value_of(text, "echostore_l1_size{node=\"1\",table=\"quotes\"}"), 1);  // memory gauges
  EXPECT_GE(value_of(text, "echostore_l1_bytes{node=\"1\",table=\"quotes\"}"), 1);
  EXPECT_GE(value_of(text, "echostore_l1_retired_pending{node=\"1\",table=\"quotes\"}"), 0);
  EXPECT_NE(text.find("echostore_consumer_claimed_total{node=\"1\",table=\"orders\"}"),
            std::string::npos);

  // promtool: Debian's `prometheus` package (scripts/setup.sh installs it).
  ASSERT_EQ(::access("/usr/bin/promtool", X_OK), 0)
      << "/usr/bin/promtool is missing: scripts/setup.sh installs it (Debian package prometheus)";
  TempDir dir;
  const std::string file = dir.path() / "metrics.txt";
  std::ofstream(file) << text;
  const std::string cmd = "/usr/bin/promtool check metrics < " + file + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) said += buf;
  const int rc = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "promtool check metrics: " << said;
  // The endpoint counts itself: this request is in the next answer.
  const Answer again = get(port, "/metrics?name[]=x");
  ASSERT_EQ(again.status, 200);
  EXPECT_GE(value_of(again.body, "echostore_metrics_ok_total{node=\"1\"}"), 1);
}

TEST_F(MetricsEndpointTest, AnswersOtherPathsMethodsAndGarbageWithTheirStatus) {
  const int port = testing::free_loopback_port();
  auto e = start_node(with_metrics(port), two_lanes());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(get(port, "/").status, 404);
  EXPECT_EQ(get(port, "/metricsx").status, 404);
  const Answer post = http_exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.head.find("Allow: GET"), std::string::npos);
  EXPECT_EQ(http_exchange(port, "hello there\r\n\r\n").status, 400);
  EXPECT_EQ(http_exchange(port, "GET /metrics SPDY/9\r\n\r\n").status, 400);
  EXPECT_EQ(
      http_exchange(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n")
          .status,
      431);
  const engine::MetricsCounters m = e->stats().metrics;
  EXPECT_EQ(m.client_errors, 6u);
  EXPECT_EQ(m.ok, 0u);
}

TEST_F(MetricsEndpointTest, MoreThanSixteenClientsGetA503) {
  const int port = testing::free_loopback_port();
  auto e = start_node(with_metrics(port), two_lanes());
  ASSERT_NE(e, nullptr);
  std::vector<io::UniqueFd> silent;
  for (int i = 0; i < 16; ++i) silent.push_back(dial(port));
  ASSERT_TRUE(eventually([&] { return e->stats().metrics.connected == 16; }));
  const Answer a = get(port);
  EXPECT_EQ(a.status, 503) << a.head;
  EXPECT_NE(a.head.find("Retry-After: 1"), std::string::npos);
  silent.clear();  // their slots free as they close
  ASSERT_TRUE(eventually([&] { return e->stats().metrics.connected == 0; }));
  EXPECT_EQ(get(port).status, 200);
  EXPECT_EQ(e->stats().metrics.server_errors, 1u);
}

TEST_F(MetricsEndpointTest, ASilentClientIsDroppedAtTheDeadlineWhileOthersAreServed) {
  const int port = testing::free_loopback_port();
  auto e = start_node(with_metrics(port), two_lanes());
  ASSERT_NE(e, nullptr);
  const auto t0 = Clock::now();
  io::UniqueFd silent = dial(port);                              // connects, never sends
  for (int i = 0; i < 5; ++i) EXPECT_EQ(get(port).status, 200);  // the loop is not blocked
  EXPECT_LT(Clock::now() - t0, 1500ms) << "others waited for the silent client";
  char c;
  ssize_t n = -1;
  do {
    n = ::recv(silent.get(), &c, 1, 0);
  } while (n < 0 && errno == EINTR);
  EXPECT_EQ(n, 0) << "the endpoint closes a silent client";
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, 1900ms);
  EXPECT_LT(waited, 4500ms);
  EXPECT_EQ(e->stats().metrics.dropped, 1u);
}

TEST_F(MetricsEndpointTest, AClientThatNeverReadsHoldsUpNobody) {
  const int port = testing::free_loopback_port();
  // Forty tables make an exposition far larger than the socket buffers of a reader whose
  // receive window is the kernel's least: its answer leaves in partial sends, and stalls.
  std::vector<engine::TableSpec> many;
  for (int i = 0; i < 40; ++i) {
    many.push_back(table_spec("t" + std::to_string(i), "AST", CoherenceMode::kBroadcast,
                              answering("v"), 60000));
  }
  auto e = start_node(with_metrics(port), many);
  ASSERT_NE(e, nullptr);
  io::UniqueFd stuck(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int tiny = 1;  // the kernel rounds it up to its minimum
  ASSERT_EQ(::setsockopt(stuck.get(), SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(stuck.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(stuck.get(), req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  const auto t0 = Clock::now();
  const Answer served = get(port);
  ASSERT_EQ(served.status, 200);
  EXPECT_GT(served.body.size(), 400u * 1024) << "the exposition must outgrow the buffers";
  EXPECT_LT(Clock::now() - t0, 1500ms) << "a reader waited behind the stuck one";
  // At the deadline the stuck client is dropped with its answer unsent: it got a part only.
  ASSERT_TRUE(eventually([&] { return e->stats().metrics.dropped == 1; }, 5s));
  // Freed once its cancelled ops came back (a loop pass after the drop was counted).
  EXPECT_TRUE(eventually([&] { return e->stats().metrics.connected == 0; }));
  timeval tv{5, 0};
  ::setsockopt(stuck.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string part = read_all(stuck.get());
  EXPECT_GT(part.size(), 0u);
  EXPECT_LT(part.size(), served.body.size()) << "the stuck client's answer was all sent";
}

TEST_F(MetricsEndpointTest, APortInUseFailsStartNamingTheAddress) {
  const test::LoopbackSocket taken = test::loopback_socket(1);  // listening: the port is in use
  ASSERT_GT(taken.port, 0) << "no loopback listener";
  const int port = taken.port;
  Engine e(with_metrics(port), two_lanes());
  const engine::Error err = e.start();
  EXPECT_EQ(err, Errc::kMetricsListen) << err.message();
  EXPECT_NE(err.detail.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << err.detail;
  EXPECT_NE(err.detail.find("Address already in use"), std::string::npos) << err.detail;
  EXPECT_FALSE(e.running());
}

TEST_F(MetricsEndpointTest, KnobsOutOfRangeAreConfigErrors) {
  auto o = with_metrics(70000);
  EXPECT_THROW({ Engine bad(o, two_lanes()); }, engine::ConfigError);
  o = with_metrics(-1);
  EXPECT_THROW({ Engine bad(o, two_lanes()); }, engine::ConfigError);
  o = with_metrics(9100);
  o.metrics_bind = "localhost";  // a name, not an IPv4 literal
  EXPECT_THROW({ Engine bad(o, two_lanes()); }, engine::ConfigError);
}

}  // namespace
}  // namespace echo::test
