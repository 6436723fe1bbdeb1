// SPDX-License-Identifier: MIT
// The chaos drill's fault kinds (chaos_faults.h): drawn from the run's seed, applied through the
// node's proxy or the server's own commands, healed together.
#include "drill/chaos_faults.h"

#include <thread>
#include <utility>

namespace echo::cli::chaos {

using std::chrono::milliseconds;

std::string_view to_string(FaultKind kind) noexcept {
  switch (kind) {
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kStall:
      return "stall";
    case FaultKind::kClose:
      return "close";
    case FaultKind::kReset:
      return "reset";
    case FaultKind::kHalfOpen:
      return "half_open_down";
    case FaultKind::kHalfOpenUp:
      return "half_open_up";
    case FaultKind::kTrickle:
      return "trickle";
    case FaultKind::kCap:
      return "bandwidth_cap";
    case FaultKind::kKillPubsub:
      return "kill_pubsub";
    case FaultKind::kKillNormal:
      return "kill_normal";
    case FaultKind::kPauseWrite:
      return "pause_write";
    case FaultKind::kDebugSleep:
      return "debug_sleep";
  }
  return "?";
}

std::vector<std::int64_t> client_ids(redisContext* c, std::string_view name) {
  std::vector<std::int64_t> ids;
  harness::Reply r = harness::command(c, "CLIENT LIST TYPE normal");
  if (!r || r->type != REDIS_REPLY_STRING) return ids;
  const std::string list(r->str, r->len);
  const std::string want = " name=" + std::string(name) + " ";
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t end = list.find('\n', at);
    const std::string line =
        list.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? list.size() : end + 1;
    if (line.find(want) == std::string::npos || line.rfind("id=", 0) != 0) continue;
    ids.push_back(std::stoll(line.substr(3, line.find(' ') - 3)));
  }
  return ids;
}

FaultInjector::FaultInjector(std::vector<harness::FaultProxy*> proxies, std::string host, int port,
                             std::uint64_t seed, bool debug_allowed)
    : proxies_(std::move(proxies)),
      host_(std::move(host)),
      port_(port),
      rng_(seed),
      debug_allowed_(debug_allowed),
      admin_(harness::connect(host_, port_)) {}

Fault FaultInjector::draw() {
  Fault f;
  for (;;) {
    f.kind = static_cast<FaultKind>(uniform(0, kFaultKinds - 1));
    if (f.kind != FaultKind::kDebugSleep || debug_allowed_) break;
  }
  const bool network = f.kind <= FaultKind::kCap;
  f.node =
      network ? static_cast<int>(uniform(0, static_cast<std::int64_t>(proxies_.size()) - 1)) : -1;
  switch (f.kind) {
    case FaultKind::kDelay:
      f.hold = milliseconds(uniform(1000, 3000));
      break;
    case FaultKind::kStall:
      f.hold = milliseconds(uniform(300, 2500));
      break;
    case FaultKind::kReset:
      f.hold = milliseconds(uniform(200, 1000));
      break;
    case FaultKind::kHalfOpen:
    case FaultKind::kHalfOpenUp:
      f.hold = milliseconds(uniform(1500, 3000));
      break;
    case FaultKind::kTrickle:
      f.hold = milliseconds(uniform(500, 2000));
      break;
    case FaultKind::kCap:
      f.hold = milliseconds(uniform(1000, 3000));
      break;
    default:
      break;  // the rest end by themselves
  }
  return f;
}

void FaultInjector::apply(Fault& f) {
  harness::FaultProxy* p = f.node >= 0 ? proxies_[static_cast<std::size_t>(f.node)] : nullptr;
  const auto ms = [](milliseconds d) { return std::to_string(d.count()) + " ms"; };
  switch (f.kind) {
    case FaultKind::kDelay: {
      const milliseconds d(uniform(30, 200)), j(uniform(0, 80));
      p->delay(d, j);
      f.detail = "delay " + ms(d) + " jitter " + ms(j) + " for " + ms(f.hold);
      break;
    }
    case FaultKind::kStall:
      p->stall(f.hold);
      f.detail = "stall " + ms(f.hold);
      break;
    case FaultKind::kClose:
      p->close_all();
      f.detail = "FIN on every connection";
      break;
    case FaultKind::kReset:
      p->refuse(true);
      p->reset_all();
      f.detail = "RST on every connection, redials refused for " + ms(f.hold);
      break;
    case FaultKind::kHalfOpen:
      p->half_open(harness::Flow::kToClient);
      f.detail = "server -> node stopped for " + ms(f.hold);
      break;
    case FaultKind::kHalfOpenUp:
      p->half_open(harness::Flow::kToServer);
      f.detail = "node -> server stopped for " + ms(f.hold);
      break;
    case FaultKind::kTrickle:
      p->trickle(true);
      f.detail = "one byte per write for " + ms(f.hold);
      break;
    case FaultKind::kCap: {
      const auto cap = static_cast<std::uint64_t>(uniform(4, 32)) * 1000;
      p->cap_bandwidth(cap);
      f.detail = "cap " + std::to_string(cap / 1000) + " kB/s for " + ms(f.hold);
      break;
    }
    case FaultKind::kKillPubsub: {
      harness::Reply r = harness::command(admin_.get(), "CLIENT KILL TYPE pubsub");
      f.applied = r && r->type == REDIS_REPLY_INTEGER;
      f.detail = "CLIENT KILL TYPE pubsub: " +
                 (f.applied ? std::to_string(r->integer) + " killed" : std::string("refused"));
      break;
    }
    case FaultKind::kKillNormal: {
      const auto ids = client_ids(admin_.get(), "echostore-cmd");
      f.applied = !ids.empty();
      if (!f.applied) {
        f.detail = "CLIENT KILL ID: no echostore-cmd connection listed";
        break;
      }
      const std::int64_t id =
          ids[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(ids.size()) - 1))];
      harness::Reply r =
          harness::command(admin_.get(), "CLIENT KILL ID %lld", static_cast<long long>(id));
      f.applied = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      f.detail = "CLIENT KILL ID " + std::to_string(id) + " (a node's command connection)";
      break;
    }
    case FaultKind::kPauseWrite: {
      const auto pause = uniform(200, 500);
      harness::Reply r =
          harness::command(admin_.get(), "CLIENT PAUSE %lld WRITE", static_cast<long long>(pause));
      f.applied = r && r->type == REDIS_REPLY_STATUS;
      f.hold = milliseconds(pause);
      f.detail = "CLIENT PAUSE " + std::to_string(pause) + " WRITE";
      break;
    }
    case FaultKind::kDebugSleep: {
      harness::Reply r = harness::command(admin_.get(), "DEBUG SLEEP 0.3");
      f.applied = r && r->type == REDIS_REPLY_STATUS;
      f.detail = f.applied ? "DEBUG SLEEP 0.3" : "DEBUG SLEEP refused";
      break;
    }
  }
}

void FaultInjector::heal_all() {
  for (harness::FaultProxy* p : proxies_) p->heal();
}

}  // namespace echo::cli::chaos
