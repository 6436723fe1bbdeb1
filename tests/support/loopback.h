// SPDX-License-Identifier: MIT
// A TCP socket on 127.0.0.1 at a port the kernel picks: a listener for a stand-in peer, or, bound
// and closed, a port nobody listens on (a refused connect). The tests that need a socket of their
// own (the loop's connect, the connector's and the blocking link's refusals, peers that answer
// what no server would) take it from here.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <echo/io/unique_fd.h>

namespace echo::test {

struct LoopbackSocket {
  io::UniqueFd fd;
  sockaddr_in addr{};  // 127.0.0.1 and the port: what a client connects to
  int port = 0;        // 0 when the socket, its bind or its listen failed
  const sockaddr* where() const noexcept { return reinterpret_cast<const sockaddr*>(&addr); }
};

// Bound, and listening when `backlog` >= 0. `flags` go to socket() beside SOCK_STREAM |
// SOCK_CLOEXEC (SOCK_NONBLOCK for a polled listener); `reuse` sets SO_REUSEADDR before the bind.
inline LoopbackSocket loopback_socket(int backlog, int flags = 0, bool reuse = false) {
  LoopbackSocket s;
  s.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
  s.addr.sin_family = AF_INET;
  s.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  if (reuse) ::setsockopt(s.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof s.addr;
  if (!s.fd || ::bind(s.fd.get(), s.where(), sizeof s.addr) != 0 ||
      (backlog >= 0 && ::listen(s.fd.get(), backlog) != 0) ||
      ::getsockname(s.fd.get(), reinterpret_cast<sockaddr*>(&s.addr), &len) != 0) {
    return LoopbackSocket{};
  }
  s.port = ntohs(s.addr.sin_port);
  return s;
}

// A port nobody listens on: bound a moment ago, closed now (0 when it could not bind).
inline int closed_port() { return loopback_socket(-1).port; }

}  // namespace echo::test
