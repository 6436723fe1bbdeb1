// SPDX-License-Identifier: MIT
// The chaos drill's faults: each kind, how it is drawn (which node, how long, how hard), applied
// and healed. Network faults go through the node's FaultProxy; server-side faults through a plain
// hiredis client on the server itself (CLIENT KILL, CLIENT PAUSE WRITE, DEBUG SLEEP).
#pragma once

#include <echo/harness/fault_proxy.h>
#include <echo/harness/hiredis.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace echo::cli::chaos {

enum class FaultKind : std::uint8_t {
  kDelay,       // proxy: 30-200 ms each way, jitter 0-80 ms, for 1-3 s
  kStall,       // proxy: nothing either way for 0.3-2.5 s (below and beyond the heartbeat's notice)
  kClose,       // proxy: FIN on every connection of the node
  kReset,       // proxy: RST on every connection, then new connections refused for 0.2-1 s
  kHalfOpen,    // proxy: server -> node stops for 1.5-3 s (a peer that neither answers nor closes)
  kHalfOpenUp,  // proxy: node -> server stops for 1.5-3 s
  kTrickle,     // proxy: one byte per write, 1 ms apart, for 0.5-2 s
  kCap,         // proxy: 4-32 kB/s each way for 1-3 s
  kKillPubsub,  // server: CLIENT KILL TYPE pubsub (every node's subscriber)
  kKillNormal,  // server: CLIENT KILL ID of one node's command connection
  kPauseWrite,  // server: CLIENT PAUSE 200-500 WRITE
  kDebugSleep,  // server: DEBUG SLEEP 0.3 (the whole server, every connection)
};
inline constexpr int kFaultKinds = 12;
std::string_view to_string(FaultKind kind) noexcept;

// One fault as drawn and applied.
struct Fault {
  FaultKind kind = FaultKind::kDelay;
  int node = -1;                      // the node whose proxy carries it; -1: server-wide
  std::chrono::milliseconds hold{0};  // how long it lasts before heal
  std::string detail;                 // "stall 1200 ms", "CLIENT KILL ID 41", ...
  bool applied = true;                // false: the server refused it (said in detail)
};

// Draws, applies and heals faults. The scheduler's thread only.
class FaultInjector {
 public:
  // `proxies[n]` carries node n's connections; `host:port` is the server; `debug_allowed`: the
  // server takes DEBUG (a started server runs with enable-debug-command local; a --server may
  // not, and then DEBUG SLEEP is not drawn).
  FaultInjector(std::vector<harness::FaultProxy*> proxies, std::string host, int port,
                std::uint64_t seed, bool debug_allowed);

  // Draws one fault (kind, node, hold) from the seeded source.
  Fault draw();
  // Applies it now (a server-side fault completes within this call; DEBUG SLEEP blocks ~0.3 s).
  void apply(Fault& fault);
  // Clears every network fault on every proxy (server-side faults end by themselves).
  void heal_all();

 private:
  std::vector<harness::FaultProxy*> proxies_;
  std::string host_;
  int port_;
  std::mt19937_64 rng_;
  bool debug_allowed_;
  harness::Context admin_;

  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
};

// What CLIENT LIST says of `name`'s connections: their ids (the drill's own client excluded).
std::vector<std::int64_t> client_ids(redisContext* c, std::string_view name);

}  // namespace echo::cli::chaos
