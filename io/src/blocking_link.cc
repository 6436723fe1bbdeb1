// SPDX-License-Identifier: MIT
// BlockingLink: a connection its calling thread drives (blocking_link.h).
#include <echo/io/blocking_link.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include <echo/io/io_error.h>

#include "socket_address.h"

namespace echo::io {

namespace {

// A blocked send or recv wakes this often to check its deadline: the fast path is one syscall
// each way, and a deadline is kept to within this much.
constexpr auto kSlice = std::chrono::milliseconds(50);

timeval to_timeval(std::chrono::microseconds us) {
  const auto n = std::max<std::int64_t>(us.count(), 1000);
  return timeval{static_cast<time_t>(n / 1'000'000), static_cast<suseconds_t>(n % 1'000'000)};
}

bool starts_with(std::string_view s, std::string_view head) {
  return s.substr(0, head.size()) == head;
}

}  // namespace

void BlockingLink::close() noexcept {
  fd_.reset();
  in_.reset();
  out_.clear();
}

std::error_code BlockingLink::fail(std::error_code ec, std::string detail) {
  close();
  detail_ = std::move(detail);
  return ec;
}

std::error_code BlockingLink::open(const LinkTarget& t, Clock::time_point deadline) {
  close();
  const std::string where = t.host + (t.host.starts_with('/') ? "" : ":" + std::to_string(t.port));
  const bool local = t.host.starts_with('/');
  const std::optional<SocketAddress> addr =
      local ? unix_address(t.host) : resolve_address(t.host, t.port);
  if (!addr) {
    return fail(make_error_code(IoErrc::kConnectFailed),
                where + (local ? ": longer than a socket's path may be" : " does not resolve"));
  }
  const int family = addr->family();
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return fail(make_error_code(IoErrc::kConnectFailed), std::system_category().message(errno));
  }
  const int one = 1;
  if (family != AF_UNIX) ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // connect() honours SO_SNDTIMEO: the whole time left; afterwards both ways wake every slice.
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  timeval tv = to_timeval(left);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd.get(), addr->get(), addr->len) != 0) {
    const int e = errno;
    const bool late = e == EINPROGRESS || e == EAGAIN || e == EWOULDBLOCK;
    return fail(make_error_code(late ? IoErrc::kTimeout : IoErrc::kConnectFailed),
                "connect to " + where + ": " + std::system_category().message(e));
  }
  tv = to_timeval(kSlice);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  fd_ = std::move(fd);

  std::array<std::string_view, 7> hello{"HELLO", "3"};
  std::size_t n = 2;
  if (!t.password.empty()) {
    hello[n++] = "AUTH";
    hello[n++] = t.username;
    hello[n++] = t.password;
  }
  if (!t.client_name.empty()) {
    hello[n++] = "SETNAME";
    hello[n++] = t.client_name;
  }
  Resp3Owned answer;
  bool sent = false;
  const std::error_code ec = call(std::span(hello.data(), n), nullptr, deadline, answer, sent);
  if (ec == IoErrc::kServerError) {
    const std::string_view why = answer.view().str();
    const bool auth = starts_with(why, "WRONGPASS") || starts_with(why, "NOAUTH");
    return fail(make_error_code(auth ? IoErrc::kAuthRefused : IoErrc::kBootRefused),
                "HELLO 3 on " + where + ": " + std::string(why));
  }
  if (ec) return ec;  // closed, detail_ set
  if (answer.view().type() != Resp3Type::map) {
    return fail(make_error_code(IoErrc::kBootRefused), "HELLO 3 on " + where + ": not a map");
  }
  return {};
}

std::error_code BlockingLink::call(std::span<const std::string_view> words, const Script* script,
                                   Clock::time_point deadline, Resp3Owned& reply, bool& sent) {
  sent = false;
  if (!fd_) return make_error_code(IoErrc::kDisconnected);
  out_.clear();
  out_.command_argv(words);
  if (std::error_code ec = send_all(deadline, sent)) return ec;
  if (std::error_code ec = read_one(deadline, reply)) return ec;
  if (!reply.view().is_error()) return {};
  if (script == nullptr || words.size() < 2 || !starts_with(reply.view().str(), "NOSCRIPT")) {
    return make_error_code(IoErrc::kServerError);
  }
  // The server lost its scripts (a restart, SCRIPT FLUSH): load it (SCRIPT LOAD, which a
  // least-privilege user may run where it may not EVAL), check its SHA, send the call again.
  out_.clear();
  out_.command("SCRIPT", "LOAD", script->source);
  if (std::error_code ec = send_all(deadline, sent)) return ec;
  if (std::error_code ec = read_one(deadline, reply)) return ec;
  if (reply.view().is_error()) return make_error_code(IoErrc::kServerError);
  if (reply.view().str() != script->sha) return make_error_code(IoErrc::kShaMismatch);
  out_.clear();
  out_.command_argv(words);
  if (std::error_code ec = send_all(deadline, sent)) return ec;
  if (std::error_code ec = read_one(deadline, reply)) return ec;
  return reply.view().is_error() ? make_error_code(IoErrc::kServerError) : std::error_code{};
}

bool BlockingLink::usable() noexcept {
  if (!fd_) return false;
  char b = 0;
  const ssize_t n = ::recv(fd_.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    (void)fail(make_error_code(IoErrc::kDisconnected), "the server closed the idle link");
    return false;
  }
  return true;
}

std::error_code BlockingLink::send_all(Clock::time_point deadline, bool& sent) {
  while (!out_.empty()) {
    const ssize_t n = ::send(fd_.get(), out_.bytes().data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent = true;
      out_.consume(static_cast<std::size_t>(n));
      continue;
    }
    if (std::error_code ec = stalled(n, deadline, "send")) return ec;
  }
  return {};
}

std::error_code BlockingLink::stalled(ssize_t n, Clock::time_point deadline, const char* what) {
  const int e = n < 0 ? errno : 0;
  const bool slice = e == EAGAIN || e == EWOULDBLOCK;  // a slice passed with nothing moved
  if (e == EINTR || (slice && Clock::now() < deadline)) return {};
  if (slice) {
    return fail(make_error_code(IoErrc::kTimeout),
                std::string(what) + ": nothing moved by the call's deadline");
  }
  return fail(make_error_code(IoErrc::kDisconnected),
              std::string(what) + ": " +
                  (n == 0 ? std::string("the server closed the socket")
                          : std::system_category().message(e)));
}

std::error_code BlockingLink::read_one(Clock::time_point deadline, Resp3Owned& reply) {
  for (;;) {
    const Resp3Next r = in_.next();
    if (r.status == Resp3Status::value) {
      if (r.value.type() == Resp3Type::push) continue;  // none is asked for; never an answer
      reply.assign(r.value);
      return {};
    }
    if (r.status == Resp3Status::error) {
      return fail(make_error_code(IoErrc::kProtocolError),
                  "the server's answer: " + std::string(to_string(r.error)));
    }
    const std::span<char> room = in_.prepare(4096);
    const ssize_t n = ::recv(fd_.get(), room.data(), room.size(), 0);
    if (n > 0) {
      in_.commit(static_cast<std::size_t>(n));
      continue;
    }
    if (std::error_code ec = stalled(n, deadline, "recv")) return ec;
  }
}

}  // namespace echo::io
