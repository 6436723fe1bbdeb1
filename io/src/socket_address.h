// SPDX-License-Identifier: MIT
// Where a socket dials, resolved: a Unix socket's path, or host:port through getaddrinfo (its
// first answer). The connection (once at construction, again on a Sentinel's retarget) and the
// blocking link share it.
#pragma once

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace echo::io {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const noexcept { return get()->sa_family; }
};

// nullopt when the path does not fit sun_path.
inline std::optional<SocketAddress> unix_address(std::string_view path) {
  sockaddr_un un{};
  if (path.size() >= sizeof un.sun_path) return std::nullopt;
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, path.data(), path.size());
  SocketAddress a;
  std::memcpy(&a.storage, &un, sizeof un);
  a.len = sizeof un;
  return a;
}

// nullopt when it does not resolve. `numeric`: literals only (AI_NUMERICHOST | AI_NUMERICSERV),
// so the call never waits on DNS (the loop thread's retarget).
inline std::optional<SocketAddress> resolve_address(const std::string& host, int port,
                                                    bool numeric = false) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (numeric) hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return std::nullopt;
  }
  SocketAddress a;
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return a;
}

}  // namespace echo::io
