// SPDX-License-Identifier: MIT
// Gate F1, connector part (docs/wire.md, "The connector"): the connector boots on RESP3 and passes
// the version fence (claims an unclaimed fence, refuses a foreign one), and gate F1's last clause -
// push_command on a RESP2 connection answers requires_resp3 and sends nothing.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>

#include "drill/drill.h"

namespace echo::cli {
namespace {

using namespace std::chrono_literals;
using io::Connection;
using io::ConnectionOptions;
using io::IoErrc;

// A fence key of the drill's own, so the gate never disturbs {emq}:version on a shared server.
constexpr const char* kDrillFenceKey = "{emq}:drill-fence";

ConnectionOptions drill_options(const DrillTarget& target) {
  ConnectionOptions o;
  o.host = target.host;
  o.port = target.port;
  o.username = harness::credentials().username;
  o.password = harness::credentials().password;
  o.label = "drill";
  o.version_key = kDrillFenceKey;
  return o;
}

void plain(redisContext* c, const char* format, const char* arg) {
  if (auto* r = static_cast<redisReply*>(redisCommand(c, format, arg))) freeReplyObject(r);
}

void connector(GateRun& run, const DrillTarget& target) {
  run.stage(
      "a RESP3 connection claims an unclaimed fence and reads it back; a foreign fence "
      "stops the connector; a RESP2 connection refuses push_command with requires_resp3 "
      "and sends nothing; 1,000 PING round trips through the connection");
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(
      redisConnect(target.host.c_str(), target.port), redisFree);
  if (!run.expect(c && !c->err && harness::authenticate(c.get()).empty(),
                  "connected to the drill's server")) {
    return;
  }
  plain(c.get(), "DEL %s", kDrillFenceKey);

  io::LoopThread lt;
  // Boot and fence.
  {
    Connection conn(lt.loop(), drill_options(target));
    const auto t0 = std::chrono::steady_clock::now();
    conn.start();
    const std::error_code ec = conn.wait_ready(5s);
    const double boot_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (run.expect(!ec, "RESP3 boot: ready (" + ec.message() + ")")) {
      run.expect(conn.stats().protocol == 3, "HELLO 3 negotiated protocol 3");
      auto* v = static_cast<redisReply*>(redisCommand(c.get(), "GET %s", kDrillFenceKey));
      run.expect(
          v && v->type == REDIS_REPLY_STRING && std::string(v->str, v->len) == "echomq:2.0.0",
          "an unclaimed fence is claimed with echomq:2.0.0");
      if (v) freeReplyObject(v);
      // Round trips: the median is the gate's figure.
      std::vector<double> us;
      for (int i = 0; i < 1000; ++i) {
        const auto s = std::chrono::steady_clock::now();
        auto r = conn.call_blocking({"PING"});
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s)
                         .count());
        if (r.ec) break;
      }
      run.expect(us.size() == 1000, "1,000 PINGs answered");
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      char buf[96];
      std::snprintf(buf, sizeof buf, "boot %.1f ms; PING via call_blocking median %.0f us", boot_ms,
                    us[us.size() / 2]);
      run.figure(buf);
    }
  }
  plain(c.get(), "SET %s echomq:0.0.0-foreign", kDrillFenceKey);
  {
    Connection conn(lt.loop(), drill_options(target));
    conn.start();
    run.expect(conn.wait_ready(5s) == IoErrc::kVersionFence,
               "a foreign fence value stops the connector with version_fence");
    run.expect(conn.status() == io::ConnStatus::kStopped, "the connector is stopped, not retrying");
  }
  plain(c.get(), "DEL %s", kDrillFenceKey);

  // F1's last clause.
  {
    ConnectionOptions o = drill_options(target);
    o.protocol = io::Protocol::kResp2;
    Connection conn(lt.loop(), o);
    conn.start();
    if (!run.expect(!conn.wait_ready(5s), "RESP2 boot: ready")) return;
    run.expect(conn.stats().protocol == 2, "explicit protocol 2 negotiated RESP2");
    const auto before = conn.stats();
    const std::error_code ec = conn.push_command_blocking({"SUBSCRIBE", "ecc:{drill}:coh"});
    run.expect(ec == IoErrc::kRequiresResp3,
               "push_command on RESP2 answers requires_resp3 (" + ec.message() + ")");
    const auto after = conn.stats();
    run.expect(after.bytes_out == before.bytes_out && after.commands == before.commands,
               "nothing was sent (bytes_out and commands unchanged)");
    auto* n = static_cast<redisReply*>(redisCommand(c.get(), "PUBSUB NUMSUB ecc:{drill}:coh"));
    run.expect(n && n->type == REDIS_REPLY_ARRAY && n->elements == 2 && n->element[1]->integer == 0,
               "the server saw no subscriber");
    if (n) freeReplyObject(n);
  }
  plain(c.get(), "DEL %s", kDrillFenceKey);
}

void add_connector_gates(std::vector<Gate>& gates) {
  gates.push_back({"F1", "surface (connector)", connector});
}

const GateGroup kGroup{4202, add_connector_gates};

}  // namespace
}  // namespace echo::cli
