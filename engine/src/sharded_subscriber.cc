// SPDX-License-Identifier: MIT
// SSUBSCRIBE per owning master, resubscription driven by a 50 ms check on the loop thread.
#include "sharded_subscriber.h"

#include <echo/base/counter.h>

#include <cstdio>
#include <cstdlib>
#include <future>

namespace echo::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{50};
// A sent SSUBSCRIBE not confirmed within this is sent again (to the then-current owner).
constexpr milliseconds kRetry{250};

}  // namespace

struct ShardedSubscriber::Sub {
  io::NodeAddress addr;
  std::unique_ptr<io::Connection> conn;
};

ShardedSubscriber::ShardedSubscriber(io::ClusterClient& cluster, io::ConnectionOptions connection,
                                     std::vector<std::string> channels, Handlers handlers)
    : cluster_(cluster),
      loop_(cluster.loop()),
      connection_(std::move(connection)),
      handlers_(std::move(handlers)) {
  for (auto& name : channels) {
    Channel c;
    c.slot = io::hash_slot(name);
    c.name = std::move(name);
    channels_.push_back(std::move(c));
  }
  tick_op_.context = this;
  tick_op_.complete = &ShardedSubscriber::on_tick;
}

ShardedSubscriber::~ShardedSubscriber() {
  if (loop_.in_loop_thread()) {
    std::fprintf(stderr, "echo::engine::ShardedSubscriber: destroyed on its loop thread\n");
    std::abort();
  }
  auto shut = [this] {
    closing_ = true;
    if (tick_op_.armed) {
      loop_.cancel(tick_op_);
    } else if (auto finish = std::move(closed_)) {
      closed_ = nullptr;
      finish();
    }
  };
  if (!loop_.close_on_loop(
          [this, shut](std::function<void()> done) {
            closed_ = std::move(done);
            shut();
          },
          milliseconds(10000))) {
    std::fprintf(stderr,
                 "echo::engine::ShardedSubscriber: the tick was still armed 10 s after close\n");
    std::abort();
  }
  subs_.clear();
}

void ShardedSubscriber::start() {
  loop_.post([this] {
    if (closing_) return;
    check();
    loop_.after(kTick, tick_op_);
  });
}

std::vector<io::ConnectionStats> ShardedSubscriber::stats() const {
  std::lock_guard lock(mu_);
  std::vector<io::ConnectionStats> out;
  for (const auto& s : subs_) out.push_back(s->conn->stats());
  return out;
}

ShardedSubscriber::Sub& ShardedSubscriber::sub_for(const io::NodeAddress& addr) {
  for (auto& s : subs_) {
    if (s->addr == addr) return *s;
  }
  auto sub = std::make_unique<Sub>();
  sub->addr = addr;
  io::ConnectionOptions o = connection_;
  o.host = addr.host;
  o.port = addr.port;
  o.fence = false;  // the cluster client fenced once; a subscriber only listens
  o.label = connection_.label + "@" + addr.text();
  Sub* raw = sub.get();
  sub->conn = std::make_unique<io::Connection>(
      loop_, std::move(o), [this, raw](const io::Resp3Value& push) { on_push(*raw, push); },
      [this, raw](io::ConnEvent event, std::error_code) {
        if (closing_) return;
        if (event == io::ConnEvent::kDisconnected || event == io::ConnEvent::kStopped) {
          for (auto& c : channels_) {
            if (c.on == raw) lose(c);
          }
          cluster_.refresh();
        } else {
          check();  // (re)booted: subscribe what waits for this node at once
        }
      });
  {
    std::lock_guard lock(mu_);
    subs_.push_back(std::move(sub));
  }
  raw->conn->start();
  return *raw;
}

void ShardedSubscriber::lose(Channel& c) {
  const bool was = c.confirmed;
  c.confirmed = false;
  c.on = nullptr;
  c.last_attempt = {};
  if (was && handlers_.lost) handlers_.lost(c.name);
}

void ShardedSubscriber::check() {
  const auto now = Clock::now();
  for (auto& c : channels_) {
    if (c.confirmed || now - c.last_attempt < kRetry) continue;
    const io::NodeAddress owner = cluster_.address_of(c.slot);
    if (owner.host.empty()) {
      cluster_.refresh();
      continue;
    }
    Sub& sub = sub_for(owner);
    if (sub.conn->status() != io::ConnStatus::kReady) {
      cluster_.refresh();  // the owner may be gone for good (a failover): ask for a newer map
      continue;            // its kReady calls check()
    }
    // Sent to this node already and never confirmed: it may have refused it with a MOVED (an
    // error reply to a push verb reaches no handler: the connection counts it in push_refusals),
    // so the map that named it may be stale. Ask for a newer one as we resend.
    if (c.on == &sub) cluster_.refresh();
    const std::string_view cmd[] = {"SSUBSCRIBE", c.name};
    if (sub.conn->push_command(cmd)) continue;
    c.on = &sub;
    c.last_attempt = now;
  }
}

void ShardedSubscriber::on_push(Sub& from, const io::Resp3Value& push) {
  if (push.size() < 2) {
    if (handlers_.unrouted) handlers_.unrouted();
    return;
  }
  const std::string_view kind = push[0].str();
  const std::string_view name = push[1].str();
  Channel* c = nullptr;
  for (auto& ch : channels_) {
    if (ch.name == name) c = &ch;
  }
  if (c == nullptr) {
    if (handlers_.unrouted) handlers_.unrouted();
    return;
  }
  if (kind == "smessage" && push.size() == 3) {
    if (handlers_.message) handlers_.message(name, push[2].str());
  } else if (kind == "ssubscribe") {
    if (c->on != &from || c->confirmed) return;  // a late answer from a former owner
    if (c->ever_confirmed) base::shared_add(resubscribes_);
    c->confirmed = c->ever_confirmed = true;
    if (handlers_.confirmed) handlers_.confirmed(name);
  } else if (kind == "sunsubscribe") {
    // The server dropped us: the slot moved (a reshard or a failover demoted this node).
    if (c->on == &from) lose(*c);
    cluster_.refresh();
  } else if (handlers_.unrouted) {
    handlers_.unrouted();
  }
}

void ShardedSubscriber::on_tick(io::IoOp& op, int) noexcept {
  auto* self = static_cast<ShardedSubscriber*>(op.context);
  if (self->closing_) {
    if (auto finish = std::move(self->closed_)) {
      self->closed_ = nullptr;
      finish();
    }
    return;
  }
  self->check();
  self->loop_.after(kTick, self->tick_op_);
}

}  // namespace echo::engine
