// SPDX-License-Identifier: MIT
// The node lease's acquire, renewal and release (node_lease.h).
#include "node_lease.h"

#include <cstdio>
#include <thread>

#include <echo/base/clock.h>
#include <echo/base/counter.h>
#include <echo/engine/errc.h>
#include <echo/engine/internal/job_consumer.h>

namespace echo::engine {

NodeLease::NodeLease(ScriptFn script, int wanted, std::chrono::milliseconds lease, LogSink log)
    : script_(std::move(script)),
      log_(std::move(log)),
      wanted_(wanted),
      lease_(lease),
      token_(owner_token()),
      lease_script_(embedded_script("node_lease")),
      renew_script_(embedded_script("node_renew")),
      release_script_(embedded_script("node_release")) {}

NodeLease::~NodeLease() { release(); }

int NodeLease::current() const noexcept {
  const std::int64_t until = valid_until_.load(std::memory_order_acquire);
  return until != 0 && base::steady_ns() < until ? node_.load(std::memory_order_relaxed) : -1;
}

NodeLeaseCounters NodeLease::stats() const {
  auto ld = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return {ld(renewals_), ld(lapses_), ld(taken_)};
}

Error NodeLease::acquire(std::chrono::steady_clock::time_point deadline) {
  std::int64_t sent = 0, got = -2;
  for (;;) {
    sent = base::steady_ns();
    auto r = script_(lease_script_, {"{ecc}:node:"},
                     {token_, std::to_string(lease_.count()), std::to_string(wanted_)});
    if (!r) return r.error();
    const io::Resp3Value v = r->view();
    if (v.type() != io::Resp3Type::integer) return make_error_code(Errc::kUnexpectedReply);
    got = v.integer();
    if (got == -1) return make_error_code(Errc::kNoFreeNode);
    if (got >= 0) break;
    // Held by another token: a live twin, or a crashed predecessor whose lease has yet to lapse.
    const auto pause =
        std::min<std::chrono::milliseconds>(lease_ / 10, std::chrono::milliseconds(100));
    if (std::chrono::steady_clock::now() + pause >= deadline)
      return make_error_code(Errc::kNodeTaken);
    std::this_thread::sleep_for(pause);
  }
  node_.store(static_cast<int>(got), std::memory_order_relaxed);
  key_ = "{ecc}:node:" + std::to_string(got);
  // Release: a thread that reads the time after this reads the node stored before it.
  valid_until_.store(sent + std::chrono::nanoseconds(lease_ - lease_ / 10).count(),
                     std::memory_order_release);
  // One renewal now: it loads node_renew into the server's script cache, so that every later
  // renewal is one round trip (EVALSHA), never the three of a NOSCRIPT reload on a connection
  // that may be dropping.
  (void)renew();
  if (chores_ != nullptr) chore_ = chores_->add(lease_ / 3, [this] { return keep(); });
  return {};
}

std::chrono::milliseconds NodeLease::keep() {
  // Every third of the lease; after a renewal that got no answer (a dropped connection, a
  // failover under way) every 100 ms, so that a blip costs no lapse.
  const auto retry =
      std::min<std::chrono::milliseconds>(lease_ / 3, std::chrono::milliseconds(100));
  return renew() ? lease_ / 3 : retry;
}

bool NodeLease::renew() {
  const std::int64_t sent = base::steady_ns();
  const bool was_held = current() >= 0;
  auto r = script_(renew_script_, {key_}, {token_, std::to_string(lease_.count())});
  const bool answered = r && r->view().type() == io::Resp3Type::integer;
  if (answered && r->view().integer() > 0) {
    base::shared_add(renewals_);
    if (r->view().integer() == 2) {
      log_line(log_, LogLevel::kInfo, "node_lease",
               "node " + std::to_string(node()) + ": the lease had lapsed and is held again");
    }
    lost_.store(false, std::memory_order_relaxed);
    valid_until_.store(sent + std::chrono::nanoseconds(lease_ - lease_ / 10).count(),
                       std::memory_order_relaxed);
  } else if (answered) {
    // Another process holds the node now: nothing of ours may mint under it.
    base::shared_add(taken_);
    valid_until_.store(0, std::memory_order_relaxed);
    if (!lost_.exchange(true, std::memory_order_relaxed)) {
      log_line(log_, LogLevel::kError, "node_lease",
               "node " + std::to_string(node()) +
                   ": the lease is held by another process; this engine mints nothing until it "
                   "can take the node back");
    }
  }
  // An error or no answer changes nothing here: the lease ends at valid_until on its own.
  if (was_held && current() < 0) base::shared_add(lapses_);
  return answered;
}

void NodeLease::release() {
  if (node() < 0 || key_.empty()) return;
  if (chore_ != 0) {
    chores_->remove(chore_);  // the renewal under way, if any, finishes first
    chore_ = 0;
  }
  if (current() >= 0) (void)script_(release_script_, {key_}, {token_});
  valid_until_.store(0, std::memory_order_relaxed);
  key_.clear();
}

}  // namespace echo::engine
