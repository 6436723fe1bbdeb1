// SPDX-License-Identifier: MIT
// The connection losing and regaining its server: the tick (call deadlines and the heartbeat),
// socket loss, failing what was pending, jittered reconnect and redial (to the target the
// options name now), a fatal stop, and a shutdown that waits until the ring holds no reference.
// The send/receive cycle is connection.cc's; the boot, connection_boot.cc's.
#include <echo/io/connection.h>

#include <echo/base/counter.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <stdexcept>

#include "connection_text.h"
#include "socket_address.h"
#include "tls_session.h"

namespace echo::io {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Deadlines and the heartbeat are checked on this period (or the heartbeat's, if shorter).
constexpr milliseconds kTickPeriod{100};
// The longest an idle, ready connection's tick sleeps (no heartbeat, or one further off).
constexpr milliseconds kIdleTickPeriod{60'000};

// ConnectionOptions::target's answer, applied when it names a new numeric address (loop thread:
// AI_NUMERICHOST never waits on DNS). Anything else keeps the last target.
void retarget(ConnectionOptions& o, sockaddr_storage& addr, socklen_t& len, const DialTarget& t) {
  if (t.host.empty() || t.port < 1 || t.port > 65535 || (t.host == o.host && t.port == o.port)) {
    return;
  }
  const std::optional<SocketAddress> a = resolve_address(t.host, t.port, /*numeric=*/true);
  if (!a) return;
  addr = a->storage;
  len = a->len;
  o.host = t.host;
  o.port = t.port;
}

}  // namespace

// --- Tick: deadlines and heartbeat ---------------------------------------------------------

void Connection::on_tick(IoOp& op, int) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  const ConnStatus s = self->status_.load(std::memory_order_relaxed);
  if (s == ConnStatus::kStopped) return;  // fatal: the tick ends with the connection
  const auto now = Clock::now();
  if (self->tls_handshaking_ && now - self->tls_began_ > self->options_.boot_timeout) {
    // A peer that never finishes the handshake (a plain port waits for a newline that a
    // ClientHello never sends): a loss like a silent boot step, retried.
    self->lose(make_error_code(IoErrc::kTimeout),
               self->where() + ": no TLS handshake within " +
                   std::to_string(self->options_.boot_timeout.count()) + " ms (is it a TLS port?)");
  }
  if ((s == ConnStatus::kBooting || s == ConnStatus::kReady) && !self->fifo_.empty()) {
    const milliseconds limit =
        s == ConnStatus::kBooting ? self->options_.boot_timeout : self->options_.call_timeout;
    if (now - self->fifo_.front().sent > limit) {
      std::string detail = self->where() + " did not answer ";
      detail += s == ConnStatus::kBooting ? "the boot's " + std::string(self->boot_step_)
                                          : std::string("a call");
      detail += " within " + std::to_string(limit.count()) + " ms";
      if (s == ConnStatus::kBooting && !self->first_bytes_.empty()) {
        detail += " (it sent \"" + escaped(self->first_bytes_) + "\" and then nothing)";
      }
      self->lose(make_error_code(IoErrc::kTimeout), std::move(detail));
    }
  }
  // The heartbeat: a PING when nothing was sent for `heartbeat` and no reply is awaited. last_io_
  // is the last send, never a receive: a subscriber only receives, and a link that trickles its
  // pushes (a congested path, a capped bandwidth) would otherwise never look idle, so no PING
  // would measure how far behind the pushes run. The PONG queues behind them, and a backlog past
  // call_timeout is a loss like a silent peer (fault_proxy_test, drill --chaos).
  if (self->status_.load(std::memory_order_relaxed) == ConnStatus::kReady &&
      self->options_.heartbeat.count() > 0 && self->fifo_.empty() &&
      now - self->last_io_ >= self->options_.heartbeat) {
    const std::string_view ping[] = {"PING"};
    self->enqueue_internal(ping, {});
    self->last_io_ = now;
  }
  const milliseconds period = self->tick_period(now);
  self->tick_idle_ = period > kTickPeriod;
  self->loop_.after(period, self->tick_op_);
}

milliseconds Connection::tick_period(Clock::time_point now) const noexcept {
  const milliseconds busy =
      options_.heartbeat.count() > 0 ? std::min(kTickPeriod, options_.heartbeat) : kTickPeriod;
  if (status_.load(std::memory_order_relaxed) != ConnStatus::kReady || !fifo_.empty() ||
      tls_handshaking_) {
    return busy;
  }
  // Idle and ready: nothing can expire before the heartbeat is due (a call entering the FIFO
  // brings the tick back: wake_tick). Each tick wakes the io thread: ten a second per
  // connection when it ticked at kTickPeriod whatever it had to watch.
  if (options_.heartbeat.count() == 0) return kIdleTickPeriod;
  const auto due = std::chrono::duration_cast<milliseconds>(last_io_ + options_.heartbeat - now);
  return std::clamp(due + milliseconds(1), busy, kIdleTickPeriod);
}

// --- Loss, reconnect, fatal stop, close ----------------------------------------------------

void Connection::drop_socket() {
  ++conn_gen_;
  if (tls_) {
    tls_goodbye();
    tls_.reset();
  }
  tls_out_.clear();  // keeps its storage: an in-flight send may still read it (see sending_)
  tls_sent_ = 0;
  tls_handshaking_ = false;
  if (fd_) {
    // shutdown() completes the pending recv/send at once (they hold their own file reference,
    // so closing alone would not); their late completions see !fd_ and are ignored.
    ::shutdown(fd_.get(), SHUT_RDWR);
    fd_.reset();
  }
  loop_.cancel(connect_op_);
  loop_.cancel(recv_op_);
  loop_.cancel(send_op_);
  decoder_.reset();
  out_.clear();
  out_commands_ = 0;
  // sending_ may still be read by an in-flight send: it is cleared (keeping its storage) and
  // never refilled until send_op_ has completed (on_backoff waits for that).
  sending_.clear();
}

void Connection::fail_pending(std::error_code ec) {
  base::Fifo<Pending> failed;
  failed.swap(fifo_);
  pending_.store(0, std::memory_order_relaxed);
  while (!failed.empty()) {
    Pending p = std::move(failed.front());
    failed.pop_front();
    if (p.done) p.done(ec, Resp3Value{});
  }
}

void Connection::lose(std::error_code cause, std::string detail) {
  {
    std::lock_guard lock(status_mu_);
    cause_ = detail.empty() ? where() + ": " + cause.message() : std::move(detail);
  }
  const bool was_ready = status_.load(std::memory_order_relaxed) == ConnStatus::kReady;
  drop_socket();
  set_status(ConnStatus::kBackoff);
  if (was_ready) lost_since_ready_ = true;
  fail_pending(make_error_code(IoErrc::kDisconnected));
  if (was_ready) tell(ConnEvent::kDisconnected, cause);
  if (!closing_ && status_.load(std::memory_order_relaxed) == ConnStatus::kBackoff) {
    schedule_reconnect();
  }
}

void Connection::schedule_reconnect() {
  // The reconnect delay (docs/wire.md, "The connector"): backoff + uniform(1 .. backoff/2 + 1),
  // then backoff = min(2·backoff, max).
  const long b = backoff_.count();
  std::uniform_int_distribution<long> jitter(1, b / 2 + 1);
  const milliseconds delay(b + jitter(rng_));
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  loop_.after(delay, backoff_op_);
}

void Connection::on_backoff(IoOp& op, int res) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  if (res == -ECANCELED) return;
  // The previous socket's operations must have completed before their IoOps are reused.
  if (self->connect_op_.armed || self->recv_op_.armed || self->send_op_.armed) {
    self->loop_.after(milliseconds(1), self->backoff_op_);
    return;
  }
  auto& o = self->options_;
  if (o.target && o.unix_path.empty()) retarget(o, self->addr_, self->addr_len_, o.target());
  self->begin_connect();
}

void Connection::redial() {
  if (closing_ || status_.load(std::memory_order_relaxed) != ConnStatus::kReady) return;
  lose(make_error_code(IoErrc::kDisconnected));
}

void Connection::stop_fatal(std::error_code cause, std::string detail) {
  drop_socket();
  {
    std::lock_guard lock(status_mu_);
    fatal_ = cause;
    cause_ = detail.empty() ? where() + ": " + cause.message() : std::move(detail);
  }
  set_status(ConnStatus::kStopped);
  fail_pending(cause);
  loop_.cancel(tick_op_);
  loop_.cancel(backoff_op_);
  tell(ConnEvent::kStopped, cause);
}

void Connection::tell(ConnEvent event, std::error_code cause) {
  if (options_.observer) {
    const bool failed = event == ConnEvent::kDisconnected || event == ConnEvent::kStopped;
    const std::string words = failed ? this->cause() : std::string();
    options_.observer(event, options_.label, words);
  }
  if (on_event_) on_event_(event, cause);
}

void Connection::begin_close() {
  closing_ = true;
  drop_socket();
  loop_.cancel(tick_op_);
  loop_.cancel(backoff_op_);
  set_status(ConnStatus::kStopped);
  fail_pending(make_error_code(IoErrc::kClosed));
  maybe_finish_close();
}

bool Connection::quiescent() const noexcept {
  return !connect_op_.armed && !recv_op_.armed && !send_op_.armed && !flush_op_.armed &&
         !tick_op_.armed && !backoff_op_.armed;
}

void Connection::maybe_finish_close() {
  if (!closing_ || !quiescent() || !closed_) return;
  auto finish = std::move(closed_);
  closed_ = nullptr;
  finish();  // the destructor may run from here on: touch nothing after this call
}

}  // namespace echo::io
