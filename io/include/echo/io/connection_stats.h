// SPDX-License-Identifier: MIT
// A connection's state and counters (connection.h), apart from the connection itself so that a
// reader of stats (EngineStats::connections) need not see the connector.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <echo/io/latency_histogram.h>

namespace echo::io {

enum class ConnStatus : std::uint8_t { kIdle, kConnecting, kBooting, kReady, kBackoff, kStopped };
std::string_view to_string(ConnStatus s) noexcept;

// The connector's stats (docs/wire.md, "The connector"), a snapshot. Counters are single-writer
// (the loop thread), read relaxed: each is exact, a snapshot of several is approximate while the
// connection runs.
struct ConnectionStats {
  std::string label;
  ConnStatus status = ConnStatus::kIdle;
  int protocol = 0;  // 2 or 3 once booted, 0 before
  std::uint64_t pushes = 0;
  std::uint64_t pending = 0;
  std::uint64_t overloads = 0;
  std::uint64_t commands = 0;      // commands written (boot, heartbeat and script reloads included)
  std::uint64_t pipelines = 0;     // socket sends that carried at least one command
  std::uint64_t replies = 0;       // non-push replies received
  std::uint64_t reconnects = 0;    // successful boots after a loss
  std::uint64_t script_loads = 0;  // SCRIPT LOADs after NOSCRIPT
  std::uint64_t evalsha_calls = 0;  // EVALSHAs written
  std::uint64_t bytes_out = 0;      // bytes the socket took (TLS: ciphertext, handshakes included)
  std::uint64_t wire_errors = 0;    // replies with no caller, and bytes the decoder refused
  std::uint64_t boot_retries = 0;   // boots a server answered LOADING, BUSY or MASTERDOWN: retried
  std::uint64_t push_refusals = 0;  // (un)subscribe verbs the server refused (NOPERM, MOVED, ...)
  // A command's round trip: queued for the socket (the pass that writes it) → its reply decoded
  // on the loop thread. Every non-push reply with a place in the FIFO (boot, heartbeat and
  // script reloads included; a (un)subscribe's confirmations are pushes, not counted).
  LatencySnapshot reply_latency;
};

}  // namespace echo::io
