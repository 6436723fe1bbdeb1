// SPDX-License-Identifier: MIT
// The metrics endpoint's loop-thread state machine: accept → (recv until the head's blank line,
// at most 8 KiB) → one answer sent in as many partial sends as the peer's window takes → close.
// Each client's deadline (an `after` op armed at accept) drops it wherever it is, so a client
// that sends nothing or never reads holds one slot for 2 s and never the loop.
#include "metrics_http.h"

#include <echo/base/counter.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <system_error>

namespace echo::engine {

namespace {

using namespace std::chrono_literals;

std::string_view reason_of(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Service Unavailable";
  }
}

}  // namespace

struct MetricsEndpoint::Client {
  MetricsEndpoint* owner = nullptr;
  io::UniqueFd fd;
  io::IoOp recv_op, send_op, deadline_op;
  std::string in;          // the request so far (at most kMaxRequestBytes)
  char chunk[1024];        // one recv's landing place
  std::string out;         // the whole answer
  std::size_t sent = 0;    // bytes of `out` the socket took
  bool refused = false;    // over kMaxClients: a /metrics request is answered 503
  bool answering = false;  // `out` is set (a request was answered)
  bool closing = false;    // finish() ran: waiting for armed ops to come back
};

void MetricsEndpoint::check_options(const EngineOptions& options) {
  if (options.metrics_port < 0 || options.metrics_port > 65535) {
    throw ConfigError("metrics_port must be 0 (off) or lie in 1..65535, got " +
                      std::to_string(options.metrics_port));
  }
  in_addr a{};
  if (::inet_pton(AF_INET, options.metrics_bind.c_str(), &a) != 1) {
    throw ConfigError("metrics_bind must be an IPv4 literal such as 127.0.0.1, got '" +
                      options.metrics_bind + "'");
  }
}

MetricsEndpoint::MetricsEndpoint(io::UringLoop& loop, Render render)
    : loop_(loop), render_(std::move(render)) {
  accept_op_.context = this;
  accept_op_.complete = &MetricsEndpoint::on_accept;
  retry_op_.context = this;
  retry_op_.complete = &MetricsEndpoint::on_retry;
}

MetricsEndpoint::~MetricsEndpoint() = default;

Error MetricsEndpoint::open(const std::string& bind, int port) {
  const std::string where = bind + ":" + std::to_string(port);
  const auto fail = [&where](int err) {
    return Error(Errc::kMetricsListen,
                 "metrics endpoint " + where + ": " + std::generic_category().message(err));
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, bind.c_str(), &addr.sin_addr) != 1) return fail(EINVAL);
  io::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail(errno);
  // A restarted process takes its port back while the last one's closed sockets sit in
  // TIME_WAIT; two live listeners on one port are still refused (no SO_REUSEPORT).
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) return fail(errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) < 0) {
    return fail(errno);
  }
  if (::listen(fd.get(), static_cast<int>(kMaxClients)) < 0) return fail(errno);
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) < 0) return fail(errno);
  port_.store(ntohs(addr.sin_port), std::memory_order_relaxed);
  listen_fd_ = std::move(fd);
  return {};
}

void MetricsEndpoint::start() {
  if (!listen_fd_ || started_) return;
  started_ = true;
  loop_.post([this] {
    if (!closing_) arm_accept();
  });
}

void MetricsEndpoint::close() {
  if (closed_ || !listen_fd_) return;
  closed_ = true;
  const bool quiet = loop_.close_on_loop(
      [this](std::function<void()> done) {
        closing_ = true;
        closed_done_ = std::move(done);
        loop_.cancel(accept_op_);
        loop_.cancel(retry_op_);
        // finish() may free a client (reap): walk a copy of the pointers.
        std::vector<Client*> all;
        for (auto& c : clients_) all.push_back(c.get());
        for (Client* c : all) finish(*c, /*answered=*/c->answering && c->sent == c->out.size());
        check_closed();
      },
      5s);
  if (!quiet) {
    // An op still armed would complete into freed memory: keep the object's clients alive for
    // the loop's lifetime instead (a leak, said once; io_uring and epoll both answer a cancel at
    // once, so this is not expected).
    std::fprintf(stderr, "echostore: metrics endpoint did not close within 5 s; leaking it\n");
    for (auto& c : clients_) static_cast<void>(c.release());  // the leak is the point
  }
  listen_fd_.reset();
}

MetricsCounters MetricsEndpoint::counters() const noexcept {
  const auto ld = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  return MetricsCounters{ld(requests_),      ld(ok_),      ld(client_errors_),
                         ld(server_errors_), ld(dropped_), ld(connected_)};
}

void MetricsEndpoint::arm_accept() { loop_.accept(listen_fd_.get(), accept_op_); }

void MetricsEndpoint::on_accept(io::IoOp& op, int res) noexcept {
  auto* self = static_cast<MetricsEndpoint*>(op.context);
  if (self->closing_) {
    if (res >= 0) ::close(res);
    return self->check_closed();
  }
  if (res >= 0) {
    self->admit(res);
    return self->arm_accept();
  }
  // EMFILE, ENFILE, ENOMEM, ...: accepting again at once would spin; try again in 100 ms.
  self->loop_.after(100ms, self->retry_op_);
}

void MetricsEndpoint::on_retry(io::IoOp& op, int /*res*/) noexcept {
  auto* self = static_cast<MetricsEndpoint*>(op.context);
  if (self->closing_) return self->check_closed();
  self->arm_accept();
}

void MetricsEndpoint::admit(int fd) {
  auto c = std::make_unique<Client>();
  c->owner = this;
  c->fd.reset(fd);
  for (io::IoOp* op : {&c->recv_op, &c->send_op, &c->deadline_op}) op->context = c.get();
  c->recv_op.complete = &MetricsEndpoint::on_recv;
  c->send_op.complete = &MetricsEndpoint::on_send;
  c->deadline_op.complete = &MetricsEndpoint::on_deadline;
  // Beyond twice the limit a client is not even answered: the 503s themselves are bounded.
  if (clients_.size() >= 2 * kMaxClients) {
    base::shared_add(dropped_);
    return;  // `c` closes the socket
  }
  // A fixed send buffer: the kernel's autotuning would let each client pin up to tcp_wmem's
  // maximum (4 MiB by default) of an answer it does not read; the rest waits in `out`.
  const int sndbuf = static_cast<int>(kSendBuffer);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  Client& ref = *c;
  clients_.push_back(std::move(c));
  connected_.store(clients_.size(), std::memory_order_relaxed);
  loop_.after(kDeadline, ref.deadline_op);
  // Over the limit: still read (closing a socket with its request unread would reset it before
  // the peer reads the 503), but answer without rendering.
  ref.refused = serving_ >= kMaxClients;
  if (!ref.refused) ++serving_;
  ref.in.reserve(1024);
  read_more(ref);
}

void MetricsEndpoint::read_more(Client& c) {
  loop_.recv(c.fd.get(), c.chunk, sizeof c.chunk, c.recv_op);
}

void MetricsEndpoint::on_recv(io::IoOp& op, int res) noexcept {
  auto& c = *static_cast<Client*>(op.context);
  MetricsEndpoint& self = *c.owner;
  if (c.closing) return self.reap(c);
  if (res <= 0) return self.finish(c, false);  // closed or failed before a whole request
  const std::size_t room = kMaxRequestBytes - c.in.size();
  c.in.append(c.chunk, std::min<std::size_t>(static_cast<std::size_t>(res), room));
  if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) {
    return self.respond_to_request(c);
  }
  if (c.in.size() >= kMaxRequestBytes) return self.answer(c, 431, "request larger than 8 KiB\n");
  self.read_more(c);
}

void MetricsEndpoint::respond_to_request(Client& c) {
  // The request line: METHOD SP target SP HTTP/1.x; the headers after it are not needed.
  const std::string_view head(c.in);
  const std::string_view line = head.substr(0, head.find_first_of("\r\n"));
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != line.npos ||
      !line.substr(sp2 + 1).starts_with("HTTP/1.") || sp2 == sp1 + 1) {
    return answer(c, 400, "malformed request line\n");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") return answer(c, 404, "not found; the metrics are at /metrics\n");
  if (method != "GET") return answer(c, 405, "only GET\n");
  if (c.refused) return answer(c, 503, "too many metrics clients; try again\n");
  std::string body;
  try {
    body = render_();
  } catch (const std::exception& e) {
    return answer(c, 503, std::string("metrics rendering failed: ") + e.what() + "\n");
  }
  answer(c, 200, body);
}

void MetricsEndpoint::answer(Client& c, int status, std::string_view body) {
  base::shared_add(requests_);
  base::shared_add(status < 400 ? ok_ : status < 500 ? client_errors_ : server_errors_);
  std::string& out = c.out;
  out = "HTTP/1.1 " + std::to_string(status) + ' ' + std::string(reason_of(status)) + "\r\n";
  out += status == 200 ? "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                       : "Content-Type: text/plain; charset=utf-8\r\n";
  if (status == 405) out += "Allow: GET\r\n";
  if (status == 503) out += "Retry-After: 1\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  out += body;
  c.answering = true;
  c.sent = 0;
  send_rest(c);
}

void MetricsEndpoint::send_rest(Client& c) {
  loop_.send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, c.send_op);
}

void MetricsEndpoint::on_send(io::IoOp& op, int res) noexcept {
  auto& c = *static_cast<Client*>(op.context);
  MetricsEndpoint& self = *c.owner;
  if (c.closing) return self.reap(c);
  if (res < 0) return self.finish(c, false);
  c.sent += static_cast<std::size_t>(res);
  if (c.sent < c.out.size()) return self.send_rest(c);  // partial: the rest when it is taken
  self.finish(c, true);
}

void MetricsEndpoint::on_deadline(io::IoOp& op, int res) noexcept {
  auto& c = *static_cast<Client*>(op.context);
  MetricsEndpoint& self = *c.owner;
  if (c.closing || res == -ECANCELED) return self.reap(c);
  self.finish(c, false);  // still reading or still sending at 2 s: dropped
}

void MetricsEndpoint::finish(Client& c, bool answered) {
  if (c.closing) return;
  c.closing = true;
  if (!answered) base::shared_add(dropped_);
  if (!c.refused) --serving_;
  // The answer is all in the socket: FIN after it, so the peer reads it to the end.
  // What the peer sent past its request head (a body nobody asked for) would turn the close
  // into a reset that can destroy the answer in flight: take what is there without waiting.
  if (answered) {
    ::shutdown(c.fd.get(), SHUT_WR);
    for (int i = 0; i < 8 && ::recv(c.fd.get(), c.chunk, sizeof c.chunk, MSG_DONTWAIT) > 0; ++i) {
    }
  }
  loop_.cancel(c.recv_op);
  loop_.cancel(c.send_op);
  loop_.cancel(c.deadline_op);
  reap(c);
}

void MetricsEndpoint::reap(Client& c) {
  if (!c.closing || c.recv_op.armed || c.send_op.armed || c.deadline_op.armed) return;
  std::erase_if(clients_, [&c](const std::unique_ptr<Client>& p) { return p.get() == &c; });
  connected_.store(clients_.size(), std::memory_order_relaxed);
  if (closing_) check_closed();
}

void MetricsEndpoint::check_closed() {
  if (!closing_ || accept_op_.armed || retry_op_.armed || !clients_.empty() || !closed_done_) {
    return;
  }
  auto done = std::move(closed_done_);
  closed_done_ = nullptr;
  done();
}

}  // namespace echo::engine
