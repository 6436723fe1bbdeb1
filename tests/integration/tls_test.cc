// SPDX-License-Identifier: MIT
// TLS end to end: engines against redis-server's own TLS listener (--tls-port, with a CA, server
// and client certificates made by `openssl` at test time): the broadcast and job lanes, a server
// that requires a client certificate, a wrong CA, a wrong name, a peer that is not TLS, the
// configuration checks, and a three-master cluster whose bus and topology speak TLS.
#include <echo/engine/engine.h>
#include <echo/engine/l2_frame.h>
#include <echo/io/cluster_map.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <echo/testing/local_cluster.h>
#include <echo/testing/local_server.h>
#include <echo/testing/local_tls.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "integration/engine_nodes.h"
#include "support/engine_node.h"
#include "support/loopback.h"
#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Source;
using table::BrandedId;

testing::LocalServerTls server_tls(const testing::LocalTlsFiles& f, std::string auth = "optional") {
  testing::LocalServerTls t;
  t.cert_file = f.server_cert();
  t.key_file = f.server_key();
  t.ca_file = f.ca_file();
  t.auth_clients = std::move(auth);
  return t;
}

io::TlsOptions client_tls(const testing::LocalTlsFiles& f) {
  io::TlsOptions t;
  t.enabled = true;
  t.ca_file = f.ca_file();
  return t;
}

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = start_for_suite<testing::LocalTlsFiles>(error_);
    if (!files_) return;
    testing::LocalServerOptions o;
    o.tls = server_tls(*files_);
    server_ = start_for_suite<testing::LocalServer>(error_, o);
  }
  static void TearDownTestSuite() {
    server_.reset();
    files_.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(files_ && server_) << "no TLS server: " << error_;
    ASSERT_GT(server_->tls_port(), 0);
  }

  // Node `id` dialling the suite server's TLS port, trusting the test CA.
  static engine::EngineOptions tls_node(unsigned id) {
    engine::EngineOptions o = node_options(server_->host(), server_->tls_port(), id);
    o.tls = client_tls(*files_);
    return o;
  }
  // One io::Connection's verdict on `tls` against `port`, and its cause().
  static std::pair<std::error_code, std::string> connect_once(int port, io::TlsOptions tls) {
    io::LoopThread loop;
    io::ConnectionOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.fence = false;
    o.tls = std::move(tls);
    auto c = std::make_unique<io::Connection>(loop.loop(), o);
    c->start();
    const std::error_code ec = c->wait_ready(std::chrono::seconds(5));
    std::string detail = c->cause();
    c.reset();
    loop.join();
    return {ec, detail};
  }

  static std::unique_ptr<testing::LocalTlsFiles> files_;
  static std::unique_ptr<testing::LocalServer> server_;
  static std::string error_;
};
std::unique_ptr<testing::LocalTlsFiles> Tls::files_;
std::unique_ptr<testing::LocalServer> Tls::server_;
std::string Tls::error_;

TEST_F(Tls, BroadcastLaneOverTlsDropsThePeersRowAndTheNewValueIsReadThrough) {
  LoaderProbe loader;
  const auto spec = quotes_spec(loader);
  auto a = start_node(tls_node(1), {spec});
  auto b = start_node(tls_node(2), {spec});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("AST");
  auto fill = a->get("quotes", name.view());
  ASSERT_TRUE(fill) << fill.error().message();
  EXPECT_EQ(fill->source, Source::kLoader);
  ASSERT_TRUE(l1_holds(*a, "quotes", name));

  auto v = b->publish("quotes", name.view(), "px=101.00");
  ASSERT_TRUE(v) << v.error().message();
  ASSERT_TRUE(eventually([&] { return !l1_holds(*a, "quotes", name); })) << "a kept its row";
  auto r = a->get("quotes", name.view());
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->source, Source::kL2);
  EXPECT_EQ(r->value, "px=101.00");
  EXPECT_EQ(r->version, *v);
  EXPECT_EQ(loader.runs(), 1);
  // Every connection spoke TLS: the plain port never saw these nodes' clients.
  for (const auto& c : a->stats().connections) EXPECT_GT(c.bytes_out, 0u) << c.label;
}

TEST_F(Tls, JobLaneOverTlsEveryMemberDropsTheRowAndReadsTheNewValue) {
  const std::string t = "tlslane";
  auto member = table_spec(t, "AST", CoherenceMode::kJob, answering("loaded"));
  member.job_lease_ms = 30000;
  member.job_beat_ms = 100;
  auto writer = table_spec(t, "AST", CoherenceMode::kNone, answering("loaded"));
  writer.job_lease_ms = 30000;
  auto m = start_node(tls_node(11), {member});
  auto w = start_node(tls_node(10), {writer});
  ASSERT_TRUE(m && w);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(w->put(t, name.view(), "px=100.00"));
  ASSERT_TRUE(m->get(t, name.view()));
  ASSERT_TRUE(l1_holds(*m, t, name));
  auto v = w->publish(t, fresh_id("PRT"), name.view(), "px=101.00");
  ASSERT_TRUE(v) << v.error().message();
  ASSERT_TRUE(eventually([&] { return !l1_holds(*m, t, name); }, 10s)) << "the member kept it";
  auto r = m->get(t, name.view());
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->source, Source::kL2);
  EXPECT_EQ(r->value, "px=101.00");
  EXPECT_EQ(r->version, *v);
  EXPECT_TRUE(eventually([&] { return m->stats().tables.at(0).consumer->completed >= 1; }));
}

// Replies far larger than one TLS record (16 KiB) arrive in partial records across many receives;
// the decoder sees the same bytes as on a plain socket.
TEST_F(Tls, AValueOfManyRecordsRoundTripsThroughTheConnector) {
  io::LoopThread loop;
  io::ConnectionOptions o;
  o.port = server_->tls_port();
  o.fence = false;
  o.tls = client_tls(*files_);
  {
    io::Connection c(loop.loop(), o);
    c.start();
    ASSERT_FALSE(c.wait_ready(5s));
    std::string big(3u << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
    const std::string key = "tls:big:" + fresh_id("AST").str();
    ASSERT_FALSE(c.call_blocking({"SET", key, big}).ec);
    for (int i = 0; i < 3; ++i) {
      auto r = c.call_blocking({"GET", key});
      ASSERT_FALSE(r.ec) << r.ec.message();
      ASSERT_EQ(r.reply.view().str().size(), big.size());
      EXPECT_TRUE(r.reply.view().str() == big) << "the value came back changed";
    }
    for (int i = 0; i < 200; ++i) ASSERT_FALSE(c.call_blocking({"PING"}).ec) << i;
    EXPECT_EQ(c.stats().wire_errors, 0u);
    (void)c.call_blocking({"DEL", key});
  }
  loop.join();
}

// A server restart is a socket loss like any other: the connector dials again, runs a fresh
// handshake (a new session on the same context) and boots.
TEST_F(Tls, AServerRestartIsALossAndTheConnectorHandshakesAgain) {
  testing::LocalServerOptions so;
  so.tls = server_tls(*files_);
  testing::LocalServer own(so);
  io::LoopThread loop;
  io::ConnectionOptions o;
  o.port = own.tls_port();
  o.fence = false;
  o.tls = client_tls(*files_);
  {
    io::Connection c(loop.loop(), o);
    c.start();
    ASSERT_FALSE(c.wait_ready(5s));
    own.restart();
    ASSERT_TRUE(eventually([&] { return c.stats().reconnects >= 1; }, 15s)) << "never reconnected";
    EXPECT_FALSE(c.call_blocking({"PING"}).ec);
    EXPECT_EQ(c.status(), io::ConnStatus::kReady);
  }
  loop.join();
}

TEST_F(Tls, AWrongCaIsRefusedAtStartWithTlsVerifyNamingTheFailure) {
  io::TlsOptions wrong = client_tls(*files_);
  wrong.ca_file = files_->other_ca_file();
  const auto [ec, detail] = connect_once(server_->tls_port(), wrong);
  EXPECT_EQ(ec, io::IoErrc::kTlsVerify) << ec.message();
  EXPECT_NE(detail.find("certificate verify failed"), std::string::npos) << detail;
  // The server sends its chain with the test CA in it (OpenSSL builds it), so X509 names the
  // untrusted root; a server sending its leaf alone is "unable to get local issuer certificate".
  EXPECT_TRUE(detail.find("self-signed certificate in certificate chain") != std::string::npos ||
              detail.find("unable to get local issuer certificate") != std::string::npos)
      << detail;

  engine::EngineOptions o = tls_node(3);
  o.tls = wrong;
  Engine e(o, {quotes_spec(LoaderProbe{})});
  const auto began = Clock::now();
  const engine::Error refused = e.start();
  EXPECT_EQ(refused, io::IoErrc::kTlsVerify) << refused.message();
  EXPECT_NE(refused.detail.find("certificate verify failed"), std::string::npos) << refused.detail;
  EXPECT_LT(Clock::now() - began, 4s) << "a verification failure must not wait for a timeout";
}

// TLS 1.2 as well as 1.3: a server that offers only 1.2 serves the connector (no renegotiation
// either way), and verify off accepts a certificate no trusted CA signed (the transport alone).
TEST_F(Tls, ATls12OnlyServerServesAndVerifyOffAcceptsAnUntrustedChain) {
  testing::LocalServerOptions so;
  so.tls = server_tls(*files_);
  so.extra_args = {"--tls-protocols", "TLSv1.2"};
  testing::LocalServer v12(so);
  EXPECT_FALSE(connect_once(v12.tls_port(), client_tls(*files_)).first);
  io::TlsOptions unverified = client_tls(*files_);
  unverified.ca_file = files_->other_ca_file();
  unverified.verify = false;
  EXPECT_FALSE(connect_once(server_->tls_port(), unverified).first);
}

TEST_F(Tls, AServerNameTheCertificateDoesNotCarryIsRefused) {
  io::TlsOptions named = client_tls(*files_);
  named.server_name = "localhost";  // in the certificate's SAN: accepted
  EXPECT_FALSE(connect_once(server_->tls_port(), named).first);
  named.server_name = "cache.echostore.invalid";
  const auto [ec, detail] = connect_once(server_->tls_port(), named);
  EXPECT_EQ(ec, io::IoErrc::kTlsVerify) << ec.message();
  EXPECT_NE(detail.find("hostname mismatch"), std::string::npos) << detail;
}

// A peer on 127.0.0.1 that answers whatever it reads with `reply` and keeps the socket open.
class GarbagePeer {
 public:
  explicit GarbagePeer(std::string reply)
      : reply_(std::move(reply)), listener_(test::loopback_socket(4)) {
    EXPECT_GT(listener_.port, 0) << "no loopback listener";
    thread_ = std::thread([this] {
      const int c = ::accept(listener_.fd.get(), nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      if (::recv(c, buf, sizeof buf, 0) > 0) {
        (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      }
      while (::recv(c, buf, sizeof buf, 0) > 0) {
      }
      ::close(c);
    });
  }
  ~GarbagePeer() {
    ::shutdown(listener_.fd.get(), SHUT_RDWR);  // the accept returns; closed after the join
    thread_.join();
  }
  int port() const noexcept { return listener_.port; }

 private:
  std::string reply_;
  test::LoopbackSocket listener_;
  std::thread thread_;
};

TEST_F(Tls, APeerThatAnswersGarbageInsteadOfAHandshakeFailsItAtOnce) {
  GarbagePeer peer("-ERR unknown command\r\nHTTP/1.1 400 Bad Request\r\n\r\n");
  const auto began = Clock::now();
  const auto [ec, detail] = connect_once(peer.port(), client_tls(*files_));
  EXPECT_EQ(ec, io::IoErrc::kTlsHandshake) << ec.message();
  EXPECT_NE(detail.find("TLS handshake failed"), std::string::npos) << detail;
  EXPECT_LT(Clock::now() - began, 2s) << "a garbage answer must not wait for the boot timeout";
}

TEST_F(Tls, AServerRequiringAClientCertificateServesOnlyAClientWithOne) {
  testing::LocalServerOptions so;
  so.tls = server_tls(*files_, "yes");
  testing::LocalServer strict(so);
  const auto [ec, detail] = connect_once(strict.tls_port(), client_tls(*files_));
  EXPECT_EQ(ec, io::IoErrc::kTlsHandshake) << ec.message();
  EXPECT_NE(detail.find("certificate required"), std::string::npos) << detail;

  engine::EngineOptions o = node_options(strict.host(), strict.tls_port(), 5);
  o.tls = client_tls(*files_);
  {
    Engine refused(o, {quotes_spec(LoaderProbe{})});
    const engine::Error err = refused.start();
    EXPECT_EQ(err, io::IoErrc::kTlsHandshake) << err.message();
    EXPECT_NE(err.detail.find("certificate required"), std::string::npos) << err.detail;
  }
  o.tls.cert_file = files_->client_cert();
  o.tls.key_file = files_->client_key();
  auto e = start_node(o, {quotes_spec(LoaderProbe{})});
  ASSERT_TRUE(e);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(e->put("quotes", name.view(), "px=7.00"));
  auto r = e->get("quotes", name.view());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->value, "px=7.00");
}

TEST_F(Tls, TheConstructorRefusesTlsFilesThatAreMissingOrHalfGiven) {
  auto refusal = [&](io::TlsOptions t) -> std::string {
    engine::EngineOptions o = tls_node(6);
    o.tls = std::move(t);
    try {
      Engine e(o, {quotes_spec(LoaderProbe{})});
    } catch (const engine::ConfigError& err) {
      return err.what();
    }
    return "(accepted)";
  };
  io::TlsOptions half = client_tls(*files_);
  half.cert_file = files_->client_cert();
  EXPECT_NE(refusal(half).find("tls.key_file"), std::string::npos) << refusal(half);
  io::TlsOptions missing = client_tls(*files_);
  missing.ca_file = (files_->dir() / "no-such-ca.crt").string();
  EXPECT_NE(refusal(missing).find("tls.ca_file"), std::string::npos) << refusal(missing);
  io::TlsOptions off = missing;  // TLS off: its files are not looked at
  off.enabled = false;
  off.ca_file = "/nonexistent";
  engine::EngineOptions o = node_options(server_->host(), server_->port(), 6);
  o.tls = off;
  EXPECT_NO_THROW(Engine(o, {quotes_spec(LoaderProbe{})}));
  // At the connector too: a file that is not PEM is refused naming the knob.
  io::LoopThread loop;
  io::ConnectionOptions co;
  co.port = server_->tls_port();
  co.tls = client_tls(*files_);
  co.tls.ca_file = files_->server_key();  // a key, not a certificate
  try {
    io::Connection c(loop.loop(), co);
    ADD_FAILURE() << "a CA file holding no certificate was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TlsOptions::ca_file"), std::string::npos) << e.what();
  }
  loop.join();
}

// ---- A cluster over TLS: three masters, bus and topology on TLS ----

class TlsCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = start_for_suite<testing::LocalTlsFiles>(error_);
    if (!files_) return;
    testing::LocalClusterOptions o;
    o.masters = 3;
    o.replicas = 0;
    o.tls = server_tls(*files_);
    cluster_ = start_for_suite<testing::LocalCluster>(error_, o);
  }
  static void TearDownTestSuite() {
    cluster_.reset();
    files_.reset();
  }
  void SetUp() override { ASSERT_TRUE(files_ && cluster_) << "no TLS cluster: " << error_; }

  static engine::EngineOptions tls_node(unsigned id) {
    engine::EngineOptions o = node_options(*cluster_, id);
    o.cluster_seeds = cluster_->tls_seeds();
    o.tls = client_tls(*files_);
    return o;
  }

  static std::unique_ptr<testing::LocalTlsFiles> files_;
  static std::unique_ptr<testing::LocalCluster> cluster_;
  static std::string error_;
};
std::unique_ptr<testing::LocalTlsFiles> TlsCluster::files_;
std::unique_ptr<testing::LocalCluster> TlsCluster::cluster_;
std::string TlsCluster::error_;

TEST_F(TlsCluster, PutGetAndPublishAcrossSlotsGoOverTlsToEveryMaster) {
  // Three tables whose keys hash to three different masters.
  std::vector<std::string> names;
  std::vector<int> owners;
  for (int i = 0; names.size() < 3 && i < 200; ++i) {
    const std::string t = "tq" + std::to_string(i);
    const int owner = cluster_->master_of(io::hash_slot(t));
    if (std::find(owners.begin(), owners.end(), owner) != owners.end()) continue;
    names.push_back(t);
    owners.push_back(owner);
  }
  ASSERT_EQ(names.size(), 3u);
  std::vector<engine::TableSpec> specs;
  for (const auto& t : names) {
    specs.push_back(table_spec(t, "AST", CoherenceMode::kBroadcast, answering("loaded")));
  }
  auto start = [&](unsigned id) {
    engine::EngineOptions o = tls_node(id);
    auto e = std::make_unique<Engine>(o, specs);
    const std::error_code ec = e->start(std::chrono::seconds(20));
    EXPECT_FALSE(ec) << "node " << id << ": " << ec.message();
    return ec ? nullptr : std::move(e);
  };
  auto a = start(21);
  auto b = start(22);
  ASSERT_TRUE(a && b);
  for (const auto& t : names) {
    const BrandedId name = fresh_id("AST");
    ASSERT_TRUE(a->put(t, name.view(), "one")) << t;
    auto got = b->get(t, name.view());
    ASSERT_TRUE(got) << t << ": " << got.error().message();
    EXPECT_EQ(got->value, "one");
    ASSERT_TRUE(l1_holds(*b, t, name));
    auto v = a->publish(t, name.view(), "two");
    ASSERT_TRUE(v) << t << ": " << v.error().message();
    ASSERT_TRUE(eventually([&] { return !l1_holds(*b, t, name); }, 10s)) << t << " kept its row";
    auto r = b->get(t, name.view());
    ASSERT_TRUE(r) << t;
    EXPECT_EQ(r->source, Source::kL2);
    EXPECT_EQ(r->value, "two");
  }
  const auto s = a->stats();
  ASSERT_TRUE(s.cluster);
  EXPECT_EQ(s.cluster->masters, 3u);
  // Every node connection dialled a TLS port (the plain ports are not in the map).
  for (const auto& c : s.connections) {
    for (int i = 0; i < static_cast<int>(cluster_->size()); ++i) {
      const std::string plain = "@127.0.0.1:" + std::to_string(cluster_->server(i).port());
      EXPECT_EQ(c.label.find(plain), std::string::npos) << c.label;
    }
  }
}

TEST_F(TlsCluster, AWrongCaIsRefusedAtStartWithTlsVerify) {
  engine::EngineOptions o = tls_node(23);
  o.tls.ca_file = files_->other_ca_file();
  Engine e(o, {table_spec("tqwrong", "AST", CoherenceMode::kBroadcast, answering("l"))});
  const auto began = Clock::now();
  const engine::Error refused = e.start(std::chrono::seconds(10));
  EXPECT_EQ(refused, io::IoErrc::kTlsVerify) << refused.message();
  EXPECT_NE(refused.detail.find("certificate verify failed"), std::string::npos) << refused.detail;
  EXPECT_LT(Clock::now() - began, 5s) << "a verification failure must not wait for a timeout";
}

}  // namespace
}  // namespace echo::test
