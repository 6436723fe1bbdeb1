// SPDX-License-Identifier: MIT
// The connector's typed errors (docs/wire.md, "The connector"): one enum, one std::error_category,
// so every failure a caller can see is a std::error_code that names what went wrong and compares by
// value.
#pragma once

#include <string_view>
#include <system_error>

namespace echo::io {

enum class IoErrc : int {
  kDisconnected = 1,  // no socket, or the socket was lost while the call was in flight
  kOverloaded,        // max_pending calls are already waiting for replies
  kRequiresResp3,     // a push verb on a connection that negotiated RESP2; nothing was sent
  kAuthRefused,       // NOAUTH / WRONGPASS at boot (fatal: the connector stops)
  kBootRefused,       // SELECT, CLIENT SETNAME, AUTH or PING refused at boot (fatal; LOADING,
                      // BUSY and MASTERDOWN are retried as a loss: ConnectionStats::boot_retries)
  kUnexpectedHello,   // explicit protocol 3 and HELLO 3 failed (fatal)
  kVersionFence,      // {emq}:version holds another value (fatal)
  kShaMismatch,       // SCRIPT LOAD answered a different SHA than the one we call
  kServerError,       // the server answered an error reply (the reply carries its text)
  kClosed,            // the connection was shut down while the call waited
  kTimeout,           // connect, boot step or blocking call ran past its deadline
  kConnectFailed,     // the TCP/Unix connect itself failed
  kProtocolError,     // the server sent bytes the decoder refused (counted in wire_errors)
  kTooManyRedirects,  // cluster: MOVED/ASK/TRYAGAIN more than max_redirects times for one call
  kClusterDown,       // cluster: no reachable master served the call's slot within route_timeout
  kTopologyRefused,   // cluster: no seed answered CLUSTER SHARDS / SLOTS with a usable map
  kClusterNode,       // a single-server connection's boot was answered MOVED: a cluster (fatal)
  kNoPermission,      // the server's ACL refused a boot command (NOPERM): the user lacks a
                      // command or key the connection needs (fatal)
  kTlsHandshake,      // the TLS handshake failed, or the server refused us right after it (an
                      // alert: a client certificate required, a protocol version refused, a peer
                      // that is not TLS). Fatal before the first ready; later a socket loss.
                      // Connection::cause() carries OpenSSL's reason.
  kTlsVerify,         // the server's certificate failed verification (chain or name): fatal.
                      // Connection::cause() names X509's reason.
};

const std::error_category& io_category() noexcept;

inline std::error_code make_error_code(IoErrc e) noexcept {
  return {static_cast<int>(e), io_category()};
}

// A short stable name ("disconnected", "requires_resp3", ...), spelled as in docs/wire.md,
// "The connector".
std::string_view to_string(IoErrc e) noexcept;

}  // namespace echo::io

template <>
struct std::is_error_code_enum<echo::io::IoErrc> : std::true_type {};
