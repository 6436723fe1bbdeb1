// SPDX-License-Identifier: MIT
// The fault proxy's socket owner (fault_proxy.cc): move-only, closed on scope exit with FIN, or
// with abort() as an RST (SO_LINGER 0) -- the two ways the proxy ends a connection on purpose.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace echo::harness::detail {

// A socket closed on scope exit; abort() closes it with RST instead of FIN.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void abort() {
    if (fd < 0) return;
    const linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    reset();
  }
};

}  // namespace echo::harness::detail
