// SPDX-License-Identifier: MIT
// Data-flow step 2: a subscriber's RESP3 push → the table it names → a parsed frame → that
// table's writer (applied under a parked writer's token, or published into the io thread's
// ring). Built by the engine's constructor, then read by the io threads only: the maps never
// change after the first push. Knows nothing of connections, so a test feeds it pushes directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <echo/base/counter.h>
#include <echo/engine/internal/table_writer.h>
#include <echo/engine/table_spec.h>
#include <echo/io/resp3_value.h>

namespace echo::engine {

// The channel every broadcast subscriber of this version also subscribes, beside the table's
// `ecc:{t}:coh`: it says "this subscriber reads carried messages" (nothing is ever published
// there). start() compares the two channels' subscriber counts: a node that would send carried
// messages to a subscriber that reads only the 29-byte form (the original's, an older
// EchoStore's) refuses to start (Errc::kMixedFrames). The same hash tag as the channel.
std::string carried_marker(std::string_view channel);

class PushRouter {
 public:
  // A table's push counters (TableStats::pushes, garbage), kept by the table; written by the one
  // io thread that routes to it, read by stats() anywhere.
  struct Counters {
    std::atomic<std::uint64_t> pushes{0}, garbage{0};
    // Carried messages applied as drops: their ring's arena had no room (TableStats).
    std::atomic<std::uint64_t> carry_degraded{0};
  };
  // Where a channel's (or a tracking prefix's) pushes go: the table's writer, the ring this
  // route's io thread produces into, the table's key kind and its counters. All outlive the router.
  struct Target {
    TableWriter* writer = nullptr;
    CoherenceRing* ring = nullptr;
    KeyKind keys = KeyKind::kBranded;
    Counters* counters = nullptr;
    int io_thread = 0;  // the io thread whose subscriber carries the channel
    // The ring's ByteArena when the table carries values (TableSpec::carry), else null: a
    // carried message is then applied as a drop of its key.
    ring::ByteArena* arena = nullptr;
    std::string_view kind;  // a branded table's kind: a carried message's key must be of it
  };

  // ---- Owner thread, before any push. ----
  void add_broadcast(std::string channel, Target target);  // ecc:{t}:coh
  void add_lead(std::string channel, Target target);       // a job lane's lead channel
  void add_tracking(std::string prefix, Target target);    // ecc:{t}: (CLIENT TRACKING BCAST)
  // ecc:{t}:ask, a broadcast table's receipt asks (docs/wire.md, "Receipts"): on the table's
  // io thread, so an ask follows the message it names through one connection.
  void add_ask(std::string channel, Target target);

  // ---- The io thread that owns the target's ring. Never blocks (but as a ring's block policy
  // does), never allocates on the message path. ----
  // One push of any kind: ["message", channel, payload], ["invalidate", keys | nil],
  // ["subscribe", channel, n]. Anything else, or a message for no table, counts as unrouted.
  void on_push(const io::Resp3Value& push);
  // A message on `channel` (the sharded subscriber's path): false when no table listens there.
  bool route(std::string_view channel, std::string_view payload);
  // The broadcast table on `channel` confirmed its subscription, or lost it (a lead channel's
  // subscription is not the job lane's delivery: its confirmation and loss change nothing).
  void confirmed(std::string_view channel);
  void lost(std::string_view channel);
  void count_unrouted() noexcept { base::shared_add(unrouted_); }

  // From stop(): no push enters a ring after this (the writers are about to stop draining); a
  // closure each io thread runs afterwards makes sure none is under way. reopen() undoes it.
  void close() noexcept { closed_.store(true, std::memory_order_relaxed); }
  void reopen() noexcept { closed_.store(false, std::memory_order_relaxed); }

  // ---- Any thread. ----
  // The channels io thread `io_thread` subscribes: its broadcast tables' (their markers and ask
  // channels first), then on io thread 0 every lead channel.
  std::vector<std::string> channels_of(int io_thread) const;
  // CLIENT TRACKING ON BCAST PREFIX ecc:{t}: ... for every tracking table (empty: none).
  std::vector<std::string> tracking_command() const;
  // Each tracking table's subscription is confirmed (its CLIENT TRACKING answered +OK).
  void tracking_confirmed() const;
  bool tracking() const noexcept { return !by_prefix_.empty(); }
  std::uint64_t unrouted() const noexcept { return unrouted_.load(std::memory_order_relaxed); }

 private:
  // Looked up by a push's channel as it lies in the decoder's buffer: no string built per push.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using Routes = std::unordered_map<std::string, Target, Hash, std::equal_to<>>;

  void deliver(const Target& target, std::string_view payload);
  void deliver_carried(const Target& target, std::string_view payload);
  // A message's drop of `key` at `version` (a text key by its hash; a branded key as itself).
  void deliver_drop(const Target& target, std::string_view key, const table::BrandedId& version);
  void forget(const Target& target, ItemKind what, std::string_view key = {});
  // receipt(14) ":" message: to the table's writer (TableWriter::ask); garbage if it parses not.
  void ask(const Target& target, std::string_view payload);
  void on_invalidate(const io::Resp3Value& keys);

  Routes by_channel_;  // broadcast lanes
  Routes by_lead_;     // job lanes' lead channels
  Routes by_prefix_;   // tracking lanes' key prefixes
  Routes by_marker_;   // broadcast lanes' carried_marker channels (subscribed, never routed)
  Routes by_ask_;      // broadcast lanes' receipt ask channels
  std::atomic<bool> closed_{false};
  std::atomic<std::uint64_t> unrouted_{0};
};

}  // namespace echo::engine
