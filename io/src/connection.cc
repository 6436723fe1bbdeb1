// SPDX-License-Identifier: MIT
// The connection's transport half: socket setup, the send/receive cycle on the UringLoop, reply
// dispatch through the FIFO (pushes bypass it) and the calls' admission. Losing and regaining
// the server (the tick, loss, reconnect, close) is connection_loss.cc's; the boot,
// connection_boot.cc's.
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

constexpr std::size_t kRecvChunk = std::size_t{16} * 1024;

[[noreturn]] void contract_violation(const char* what) {
  std::fprintf(stderr, "echo::io::Connection: %s\n", what);
  std::abort();
}

void check_ms(milliseconds v, long min, const char* knob) {
  if (v.count() < min) {
    throw std::invalid_argument(std::string("ConnectionOptions::") + knob + " must be >= " +
                                std::to_string(min) + " ms, got " + std::to_string(v.count()));
  }
}

Resp3Limits limits_for(const ConnectionOptions& o) {
  Resp3Limits l;
  l.max_frame_bytes = std::max<std::uint64_t>(o.max_reply_bytes, 16);
  l.max_bulk_len =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(o.max_reply_bytes, l.max_bulk_len));
  // The decoder's arena holds 24 bytes per element and an element may cost 3 wire bytes (a RESP3
  // null): one element per 8 bytes of reply keeps the arena within 3x max_reply_bytes (a frame of
  // nulls filling the default 64 MiB took ~626 MiB at the decoder's own 2^24 cap).
  l.max_frame_elements = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(o.max_reply_bytes / 8, 1024, l.max_frame_elements));
  return l;
}
}  // namespace

std::string_view to_string(ConnStatus s) noexcept {
  switch (s) {
    case ConnStatus::kIdle:
      return "idle";
    case ConnStatus::kConnecting:
      return "connecting";
    case ConnStatus::kBooting:
      return "booting";
    case ConnStatus::kReady:
      return "ready";
    case ConnStatus::kBackoff:
      return "backoff";
    case ConnStatus::kStopped:
      return "stopped";
  }
  return "unknown";
}

Connection::Connection(UringLoop& loop, ConnectionOptions options, PushFn on_push, EventFn on_event)
    : loop_(loop),
      options_(std::move(options)),
      on_push_(std::move(on_push)),
      on_event_(std::move(on_event)),
      decoder_(limits_for(options_)) {
  const auto& o = options_;
  if (o.unix_path.empty() && (o.port < 1 || o.port > 65535)) {
    throw std::invalid_argument("ConnectionOptions::port must be in 1..65535, got " +
                                std::to_string(o.port));
  }
  if (o.max_pending < 1) throw std::invalid_argument("ConnectionOptions::max_pending must be >= 1");
  if (o.db < 0) throw std::invalid_argument("ConnectionOptions::db must be >= 0");
  if (o.max_reply_bytes < 1024) {
    throw std::invalid_argument("ConnectionOptions::max_reply_bytes must be >= 1024");
  }
  check_ms(o.connect_timeout, 1, "connect_timeout");
  check_ms(o.boot_timeout, 1, "boot_timeout");
  check_ms(o.call_timeout, 1, "call_timeout");
  check_ms(o.heartbeat, 0, "heartbeat");
  check_ms(o.backoff_initial, 1, "backoff_initial");
  if (o.backoff_max < o.backoff_initial) {
    throw std::invalid_argument("ConnectionOptions::backoff_max must be >= backoff_initial");
  }
  if (o.fence && o.version_value.empty()) {
    throw std::invalid_argument("ConnectionOptions::version_value must be non-empty with fence on");
  }
  // Resolve once, here (any thread, may block on DNS), so reconnects never block the loop.
  const std::optional<SocketAddress> where =
      o.unix_path.empty() ? resolve_address(o.host, o.port) : unix_address(o.unix_path);
  if (!where && !o.unix_path.empty()) {
    throw std::invalid_argument("ConnectionOptions::unix_path is longer than sun_path");
  }
  if (!where) throw std::invalid_argument("ConnectionOptions::host does not resolve: " + o.host);
  addr_ = where->storage;
  addr_len_ = where->len;
  if (o.tls.enabled) {
    tls_ctx_ = TlsContext::for_options(o.tls);  // throws invalid_argument naming the file knob
    tls_in_.resize(kRecvChunk);
  }
  rng_.seed(o.jitter_seed != 0 ? o.jitter_seed : std::random_device{}());
  backoff_ = o.backoff_initial;
  IoOp* ops[] = {&connect_op_, &recv_op_, &send_op_, &flush_op_, &tick_op_, &backoff_op_};
  for (IoOp* op : ops) op->context = this;
  connect_op_.complete = &Connection::on_connect;
  recv_op_.complete = &Connection::on_recv;
  send_op_.complete = &Connection::on_send;
  flush_op_.complete = &Connection::on_flush;
  tick_op_.complete = &Connection::on_tick;
  backoff_op_.complete = &Connection::on_backoff;
}

Connection::~Connection() {
  if (loop_.in_loop_thread()) {
    contract_violation("destroyed on its own loop thread (destroy it from another thread)");
  }
  const bool closed = loop_.close_on_loop(
      [this](std::function<void()> done) {
        closed_ = std::move(done);
        begin_close();
      },
      milliseconds(10000));
  if (closed) return;
  // A close that never ends aborts and says so, rather than hang: with no other thread running
  // the loop (this one ran it), name what is still armed.
  if (loop_.running()) {
    std::fprintf(stderr, "echo::io::Connection %s: still closing on the loop thread (%s)\n",
                 options_.label.c_str(), std::string(to_string(status())).c_str());
  } else {
    std::fprintf(stderr,
                 "echo::io::Connection %s: still armed after close: connect=%d recv=%d send=%d "
                 "flush=%d tick=%d backoff=%d status=%s\n",
                 options_.label.c_str(), connect_op_.armed, recv_op_.armed, send_op_.armed,
                 flush_op_.armed, tick_op_.armed, backoff_op_.armed,
                 std::string(to_string(status())).c_str());
  }
  contract_violation("operations still in flight 10 s after close");
}

void Connection::start() {
  loop_.post([this] {
    if (started_ || closing_) return;
    started_ = true;
    loop_.after(tick_period(Clock::now()), tick_op_);
    begin_connect();
  });
}

void Connection::set_status(ConnStatus s) {
  {
    std::lock_guard lock(status_mu_);
    // release: pairs with the acquire in status(); the mutex orders it for wait_ready.
    status_.store(s, std::memory_order_release);
  }
  status_cv_.notify_all();
}

std::error_code Connection::wait_ready(std::chrono::milliseconds timeout) {
  if (loop_.in_loop_thread()) contract_violation("wait_ready() on the loop thread would deadlock");
  std::unique_lock lock(status_mu_);
  const bool settled = status_cv_.wait_for(lock, timeout, [this] {
    const ConnStatus s = status_.load(std::memory_order_acquire);
    return s == ConnStatus::kReady || s == ConnStatus::kStopped;
  });
  if (!settled) return IoErrc::kTimeout;
  if (status_.load(std::memory_order_acquire) == ConnStatus::kReady) return {};
  return fatal_ ? fatal_ : make_error_code(IoErrc::kClosed);
}

std::string Connection::cause() const {
  std::lock_guard lock(status_mu_);
  return cause_;
}

std::string Connection::where() const {
  if (!options_.unix_path.empty()) return options_.unix_path;
  return options_.host + ":" + std::to_string(options_.port);
}

std::string escaped(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (b < 0x20 || b >= 0x7F || c == '"' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out += c;
    }
  }
  return out;
}

ConnectionStats Connection::stats() const {
  ConnectionStats s;
  s.label = options_.label;
  s.status = status();
  s.protocol = proto_snapshot_.load(std::memory_order_relaxed);
  s.pushes = pushes_.load(std::memory_order_relaxed);
  s.pending = pending_.load(std::memory_order_relaxed);
  s.overloads = overloads_.load(std::memory_order_relaxed);
  s.commands = commands_.load(std::memory_order_relaxed);
  s.pipelines = pipelines_.load(std::memory_order_relaxed);
  s.replies = replies_.load(std::memory_order_relaxed);
  s.reply_latency = reply_latency_.snapshot();
  s.reconnects = reconnects_.load(std::memory_order_relaxed);
  s.script_loads = script_loads_.load(std::memory_order_relaxed);
  s.evalsha_calls = evalsha_calls_.load(std::memory_order_relaxed);
  s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  s.wire_errors = wire_errors_.load(std::memory_order_relaxed);
  s.boot_retries = boot_retries_.load(std::memory_order_relaxed);
  s.push_refusals = push_refusals_.load(std::memory_order_relaxed);
  return s;
}

// --- Connect -------------------------------------------------------------------------------

void Connection::begin_connect() {
  set_status(ConnStatus::kConnecting);
  const int family = reinterpret_cast<const sockaddr*>(&addr_)->sa_family;
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    lose(std::error_code(errno, std::system_category()));
    return;
  }
  if (family != AF_UNIX) {
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  fd_ = std::move(fd);
  loop_.connect(fd_.get(), reinterpret_cast<const sockaddr*>(&addr_), addr_len_,
                options_.connect_timeout, connect_op_);
}

void Connection::on_connect(IoOp& op, int res) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  if (!self->fd_) return;  // a stale completion of a socket already dropped
  if (res < 0) {
    if (res == -ECANCELED) {
      self->lose(make_error_code(IoErrc::kTimeout),
                 "connect to " + self->where() + " did not finish within " +
                     std::to_string(self->options_.connect_timeout.count()) + " ms");
    } else {
      self->lose(make_error_code(IoErrc::kConnectFailed),
                 "connect to " + self->where() + ": " + std::system_category().message(-res));
    }
    return;
  }
  self->first_bytes_.clear();
  if (self->tls_ctx_) return self->start_tls();
  self->boot();
}

// --- Receive and dispatch ------------------------------------------------------------------

void Connection::arm_recv() {
  if (tls_) {
    // Ciphertext: the session decrypts it into the decoder (tls_received).
    recv_len_ = tls_in_.size();
    loop_.recv(fd_.get(), tls_in_.data(), tls_in_.size(), recv_op_,
               /*poll_first=*/!last_recv_full_);
    return;
  }
  std::span<char> room = decoder_.prepare(std::max(kRecvChunk, decoder_.wanted()));
  recv_len_ = room.size();
  recv_buf_ = room.data();
  // A receive that did not fill its buffer drained the socket: the next one can only wait.
  loop_.recv(fd_.get(), room.data(), room.size(), recv_op_, /*poll_first=*/!last_recv_full_);
}

void Connection::on_recv(IoOp& op, int res) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  if (!self->fd_) return;
  if (self->tls_) return self->tls_received(res);
  if (res <= 0) {
    std::string detail = self->where() + (res == 0 ? std::string(" closed the connection")
                                                   : ": " + std::system_category().message(-res));
    if (self->status_.load(std::memory_order_relaxed) == ConnStatus::kBooting) {
      detail += " during the boot's " + std::string(self->boot_step_);
      if (!self->first_bytes_.empty())
        detail += " after sending \"" + escaped(self->first_bytes_) + "\"";
    }
    self->lose(make_error_code(IoErrc::kDisconnected), std::move(detail));
    return;
  }
  self->last_recv_full_ = static_cast<std::size_t>(res) == self->recv_len_;
  if (self->first_bytes_.size() < kShownBytes) {
    const std::size_t take = std::min<std::size_t>(kShownBytes - self->first_bytes_.size(),
                                                   static_cast<std::size_t>(res));
    self->first_bytes_.append(self->recv_buf_, take);
  }
  self->decoder_.commit(static_cast<std::size_t>(res));
  // Receiving does not touch last_io_ (the heartbeat's clock, on_tick): see there why.
  const std::uint64_t gen = self->conn_gen_;
  self->dispatch();
  if (gen == self->conn_gen_ && self->fd_ && !self->closing_) self->arm_recv();
}

void Connection::dispatch() {
  const std::uint64_t gen = conn_gen_;
  for (;;) {
    Resp3Next r = decoder_.next();
    if (r.status == Resp3Status::need_more) return;
    if (r.status == Resp3Status::error) {
      base::solo_add(wire_errors_);
      std::string detail =
          where() + " sent bytes that are not RESP (" + std::string(to_string(r.error)) + ")";
      if (!ever_ready_) {
        detail += " in answer to the boot's " + std::string(boot_step_) + "; its first bytes: \"" +
                  escaped(first_bytes_) + "\": is this a Redis/Valkey server?";
        stop_fatal(make_error_code(IoErrc::kProtocolError), std::move(detail));
      } else {
        lose(make_error_code(IoErrc::kProtocolError), std::move(detail));
      }
      return;
    }
    if (r.value.type() == Resp3Type::push) {
      base::solo_add(pushes_);
      // A confirmation of the push verb at the front of the FIFO counts down its place (it still
      // goes to the handler: subscribers wait for it).
      if (!fifo_.empty() && fifo_.front().confirms > 0 && r.value.size() >= 1 &&
          r.value[0].str() == fifo_.front().kind && --fifo_.front().confirms == 0) {
        fifo_.pop_front();
        pending_.store(fifo_.size(), std::memory_order_relaxed);
      }
      if (on_push_) on_push_(r.value);
    } else {
      base::solo_add(replies_);
      if (fifo_.empty()) {
        // A reply nobody asked for: dropped (docs/wire.md, "The connector").
        base::solo_add(wire_errors_);
        continue;
      }
      if (fifo_.front().confirms > 0) {
        // A push verb answered by a reply: the server refused it (NOPERM, MOVED on a cluster, an
        // error in MULTI). Counted; the caller behind it gets its own reply.
        fifo_.pop_front();
        pending_.store(fifo_.size(), std::memory_order_relaxed);
        base::solo_add(push_refusals_);
        continue;
      }
      Pending p = std::move(fifo_.front());
      fifo_.pop_front();
      pending_.store(fifo_.size(), std::memory_order_relaxed);
      reply_latency_.record(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - p.sent).count());
      if (p.done) {
        if (r.value.is_error()) {
          p.done(make_error_code(IoErrc::kServerError), r.value);
        } else {
          p.done({}, r.value);
        }
      }
    }
    // A callback may have dropped the socket (a fatal boot answer) or begun closing.
    if (gen != conn_gen_ || closing_) return;
  }
}

// --- Send ----------------------------------------------------------------------------------

void Connection::schedule_flush() {
  if (!flush_op_.armed) loop_.defer(flush_op_);
}

void Connection::on_flush(IoOp& op, int) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  if (!self->fd_ || self->send_op_.armed) return;  // on_send will continue with out_
  self->send_some();
}

void Connection::send_some() {
  if (tls_ctx_) {
    if (tls_) tls_send_some();  // before the session exists nothing can be queued
    return;
  }
  if (sending_.empty()) {
    if (out_.empty()) return;
    std::swap(out_, sending_);
    base::solo_add(pipelines_);
    base::solo_add(commands_, out_commands_);
    out_commands_ = 0;
  }
  loop_.send(fd_.get(), sending_.bytes().data(), sending_.size(), send_op_);
}

void Connection::on_send(IoOp& op, int res) noexcept {
  auto* self = static_cast<Connection*>(op.context);
  if (self->closing_) return self->maybe_finish_close();
  if (!self->fd_) return;
  if (res < 0) {
    self->lose(make_error_code(IoErrc::kDisconnected));
    return;
  }
  base::solo_add(self->bytes_out_, static_cast<std::uint64_t>(res));
  self->last_io_ = Clock::now();
  if (self->tls_ctx_) {
    self->tls_sent_ += static_cast<std::size_t>(res);
  } else {
    self->sending_.consume(static_cast<std::size_t>(res));
  }
  self->send_some();
}

void Connection::enqueue_internal(std::span<const std::string_view> args, ReplyFn done) {
  out_.command_argv(args);
  ++out_commands_;
  if (fifo_.empty()) wake_tick();
  fifo_.push_back(Pending{std::move(done), Clock::now()});
  pending_.store(fifo_.size(), std::memory_order_relaxed);
  schedule_flush();
}

std::error_code Connection::admit() {
  if (status_.load(std::memory_order_relaxed) != ConnStatus::kReady) {
    return IoErrc::kDisconnected;
  }
  if (fifo_.size() >= options_.max_pending) {
    base::solo_add(overloads_);
    return IoErrc::kOverloaded;
  }
  return {};
}

std::error_code Connection::call(std::span<const std::string_view> args, ReplyFn done) {
  if (std::error_code ec = admit()) return ec;
  enqueue_internal(args, std::move(done));
  return {};
}

std::error_code Connection::call_asking(std::span<const std::string_view> args, ReplyFn done) {
  // One verdict for both: an ASKING written while its command was refused would grant the next
  // caller's command instead.
  if (std::error_code ec = admit()) return ec;
  enqueue_asking();
  enqueue_internal(args, std::move(done));
  return {};
}

void Connection::enqueue_asking() {
  const std::string_view asking[] = {"ASKING"};
  // Its +OK (or error) is dropped: the command right behind it carries the verdict.
  enqueue_internal(asking, {});
}

}  // namespace echo::io
