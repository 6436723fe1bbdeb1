// SPDX-License-Identifier: MIT
// A loopback TCP proxy with faults on demand: a node's connections dial it instead of the server,
// and a test or the chaos drill makes the network between them misbehave -- delay and jitter, a
// stall, a FIN or an RST on every connection, one direction stopped, one byte at a time, a
// bandwidth cap, new connections refused. One implementation for the integration tests (through
// tests/support/fault_proxy.h) and `echostore drill --chaos`; loopback only, both ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace echo::harness {

// Which way bytes flow through a pair: the node (client) toward the server, or back.
enum class Flow : std::uint8_t { kToServer, kToClient };

struct FaultProxyOptions {
  // Where every accepted connection is forwarded: a numeric IPv4 address in 127.0.0.0/8 (anything
  // else is refused with std::invalid_argument: the proxy never reaches beyond the machine) and a
  // port 1..65535.
  std::string target_host = "127.0.0.1";
  int target_port = 0;
  // The jitter's random source; 0 = seeded from std::random_device. Same seed, same jitter draws.
  std::uint64_t seed = 0;
  // Bytes held per direction of a pair (delay, stall, half-open, cap) before the proxy stops
  // reading that side and TCP's own flow control holds the rest: 4 KiB .. 1 GiB, default 1 MiB.
  std::size_t max_held = 1u << 20;
  // trickle: the pause after each one-byte write: 0 .. 1 s, default 1 ms.
  std::chrono::microseconds trickle_pause{1000};
};

// Every counter is exact; a snapshot of several is approximate while traffic flows.
struct FaultProxyStats {
  std::uint64_t accepted = 0;       // connections accepted and forwarded
  std::uint64_t refused = 0;        // connections accepted under refuse(true) and reset at once
  std::uint64_t dial_failures = 0;  // accepted, but the target refused or failed (client reset)
  std::uint64_t live = 0;           // pairs open now
  std::uint64_t bytes_to_server = 0, bytes_to_client = 0;  // bytes written to each side
  std::uint64_t faults = 0;  // fault calls applied (delay, stall, half_open, trickle, cap,
                             // refuse(true), close_all, reset_all); heal() not counted
  std::uint64_t closed_by_fault = 0, reset_by_fault = 0;  // pairs ended by close_all/reset_all
};

// Thread contract: one internal thread (poll(2) over non-blocking sockets) owns the listener and
// every pair; every public member may be called from any other thread at any time, is
// thread-safe, and never blocks on network I/O. Each fault call returns once the proxy's thread
// has taken it (a wait of one turn of its loop, at most ~1 s): bytes sent after it returns are
// subject to it. close_all and reset_all return once every pair has been closed, so a caller may
// assert on their effect. Each fault replaces the previous setting of the same fault and leaves
// the others in place.
class FaultProxy {
 public:
  // Binds 127.0.0.1:0 (an ephemeral port) and starts the thread. Throws std::invalid_argument for
  // a target outside 127.0.0.0/8 or a knob out of range (naming it), std::runtime_error naming the
  // failing call for a socket the kernel refuses.
  explicit FaultProxy(FaultProxyOptions options);
  ~FaultProxy();  // stop()
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // The port to dial instead of the target's (on 127.0.0.1).
  int port() const noexcept;

  // Every chunk read is forwarded no sooner than delay + a uniform draw in [0, jitter] after it
  // arrived, and never before the chunk ahead of it (order kept). 0, 0 = no delay. Each 0..60 s.
  void delay(std::chrono::milliseconds delay, std::chrono::milliseconds jitter = {});
  // Nothing forwarded either way for `duration` from now (bytes held, connections stay open). A
  // later stall replaces this one's end. 0..600 s.
  void stall(std::chrono::milliseconds duration);
  // One direction stops (held, never dropped: no hole in the stream) while the other flows and
  // both sockets stay open: a peer that neither answers nor closes. Until heal().
  void half_open(Flow stopped);
  // One byte per write, trickle_pause after each. Until heal() or trickle(false).
  void trickle(bool on);
  // At most `bytes_per_s` forwarded per second in each direction of each pair; 0 = no cap.
  void cap_bandwidth(std::uint64_t bytes_per_s);
  // New connections are accepted and reset at once (connect succeeds, the first read answers
  // ECONNRESET): a listener that will not serve. Pairs already open are untouched.
  void refuse(bool on);
  // Ends every open pair: close_all with FIN on both sides (held bytes dropped), reset_all with
  // RST on both sides (SO_LINGER 0). New connections are accepted as before.
  void close_all();
  void reset_all();
  // Clears every fault: no delay (held chunks released now), no stall, both directions flowing,
  // no trickle, no cap, connections accepted.
  void heal();

  FaultProxyStats stats() const;
  // Closes the listener and every pair (RST) and joins the thread. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace echo::harness
