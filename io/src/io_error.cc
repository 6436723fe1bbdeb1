// SPDX-License-Identifier: MIT
// The "echo.io" error category: the names of the connector's typed errors (docs/wire.md,
// "The connector").
#include <echo/io/io_error.h>

#include <string>

namespace echo::io {
namespace {

class IoCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "echo.io"; }
  std::string message(int ev) const override {
    return std::string(to_string(static_cast<IoErrc>(ev)));
  }
};

}  // namespace

const std::error_category& io_category() noexcept {
  static const IoCategory category;
  return category;
}

std::string_view to_string(IoErrc e) noexcept {
  switch (e) {
    case IoErrc::kDisconnected:
      return "disconnected";
    case IoErrc::kOverloaded:
      return "overloaded";
    case IoErrc::kRequiresResp3:
      return "requires_resp3";
    case IoErrc::kAuthRefused:
      return "auth_refused";
    case IoErrc::kBootRefused:
      return "boot_refused";
    case IoErrc::kUnexpectedHello:
      return "unexpected_hello";
    case IoErrc::kVersionFence:
      return "version_fence";
    case IoErrc::kShaMismatch:
      return "sha_mismatch";
    case IoErrc::kServerError:
      return "server";
    case IoErrc::kClosed:
      return "closed";
    case IoErrc::kTimeout:
      return "timeout";
    case IoErrc::kConnectFailed:
      return "connect_failed";
    case IoErrc::kProtocolError:
      return "protocol_error";
    case IoErrc::kTooManyRedirects:
      return "too_many_redirects";
    case IoErrc::kClusterDown:
      return "cluster_down";
    case IoErrc::kTopologyRefused:
      return "topology_refused";
    case IoErrc::kClusterNode:
      return "cluster_node";
    case IoErrc::kNoPermission:
      return "no_permission";
    case IoErrc::kTlsHandshake:
      return "tls_handshake";
    case IoErrc::kTlsVerify:
      return "tls_verify";
  }
  return "unknown";
}

}  // namespace echo::io
