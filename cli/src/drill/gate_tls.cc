// SPDX-License-Identifier: MIT
// Gate T1: the connector and the broadcast lane over TLS, against the server's TLS
// listener (the drill's own server listens on one with certificates made at run time; a given
// --server needs --tls-port and --tls-ca). Two engines over TLS: a publish drops the peer's row
// and the new value is read through; a connector trusting an unrelated CA stops with tls_verify
// naming X509's reason; 1,000 PINGs over TLS beside 1,000 plain, the ratio as the figure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/harness/stage.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <echo/table/branded_id.h>
#include <echo/testing/local_tls.h>

#include "drill/drill.h"

namespace echo::cli {
namespace {

using namespace std::chrono_literals;

// Median µs of 1,000 PINGs through `o`'s connection, or -1 when it did not boot or a PING failed.
double ping_median_us(io::UringLoop& loop, io::ConnectionOptions o) {
  io::Connection conn(loop, std::move(o));
  conn.start();
  if (conn.wait_ready(5s)) return -1;
  std::vector<double> us;
  for (int i = 0; i < 1000; ++i) {
    const auto s = std::chrono::steady_clock::now();
    if (conn.call_blocking({"PING"}).ec) return -1;
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

void tls_gate(GateRun& run, const DrillTarget& target) {
  if (target.tls_port == 0 || !target.tls.enabled) {
    run.stage("not run: the given --server has no TLS port named (--tls-port PORT --tls-ca FILE)");
    return;
  }
  run.stage("two engines over TLS on " + target.host + ':' + std::to_string(target.tls_port) +
            ": a publish drops the peer's row; a connector trusting an unrelated CA stops with "
            "tls_verify; 1,000 PINGs over TLS beside 1,000 plain");
  const std::string t = "drill_tls";
  auto node = [&](unsigned id, engine::CoherenceMode mode) {
    engine::EngineOptions o = harness::node_options(target.host, target.tls_port, id);
    o.tls = target.tls;
    return std::make_unique<engine::Engine>(
        o, std::vector<engine::TableSpec>{harness::ast_table(t, mode, harness::answering("px=1"))});
  };
  auto r = node(451, engine::CoherenceMode::kBroadcast);
  auto s = node(452, engine::CoherenceMode::kBroadcast);  // publish announces on its own lane
  const std::error_code rec = r->start(), sec = s->start();
  if (!run.expect(!rec && !sec,
                  "both engines start over TLS (" + rec.message() + ", " + sec.message() + ")")) {
    return;
  }
  table::Minter minter(453);
  const table::BrandedId name = minter.mint("AST").value();
  auto filled = r->get(t, name.view());
  run.expect(filled && harness::cached(*r, t, name), "R filled its row through TLS");
  auto v = s->publish(t, name.view(), "px=2");
  run.expect(v.has_value(), "S published over TLS");
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (harness::cached(*r, t, name) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100us);
  }
  run.expect(!harness::cached(*r, t, name), "R dropped its row on the message heard over TLS");
  auto read = r->get(t, name.view());
  run.expect(read && read->value == "px=2" && v && read->version == *v,
             "R reads the published value through TLS");
  r.reset();
  s.reset();

  io::LoopThread lt;
  {
    testing::LocalTlsFiles unrelated;  // a CA that signed nothing the server holds
    io::ConnectionOptions o;
    o.host = target.host;
    o.port = target.tls_port;
    o.username = harness::credentials().username;
    o.password = harness::credentials().password;
    o.fence = false;
    o.tls = target.tls;
    o.tls.ca_file = unrelated.other_ca_file();
    io::Connection conn(lt.loop(), o);
    conn.start();
    const std::error_code ec = conn.wait_ready(5s);
    const std::string why = conn.cause();
    run.expect(
        ec == io::IoErrc::kTlsVerify && why.find("certificate verify failed") != std::string::npos,
        "an unrelated CA stops the connector with tls_verify (" + ec.message() + ": " + why + ")");
  }
  io::ConnectionOptions plain;
  plain.host = target.host;
  plain.port = target.port;
  plain.username = harness::credentials().username;
  plain.password = harness::credentials().password;
  plain.fence = false;
  io::ConnectionOptions tls = plain;
  tls.port = target.tls_port;
  tls.tls = target.tls;
  const double p = ping_median_us(lt.loop(), plain), q = ping_median_us(lt.loop(), tls);
  if (run.expect(p > 0 && q > 0, "1,000 PINGs answered on each connection")) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "PING median over TLS %.0f us vs plain %.0f us (%.2fx)", q, p,
                  q / p);
    run.figure(buf);
  }
}

void add_tls_gates(std::vector<Gate>& gates) { gates.push_back({"T1", "TLS", tls_gate}); }

const GateGroup kGroup{4500, add_tls_gates};

}  // namespace
}  // namespace echo::cli
