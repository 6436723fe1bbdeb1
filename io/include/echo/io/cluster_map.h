// SPDX-License-Identifier: MIT
// The pure half of cluster support (the slots of docs/wire.md, "Names, keys and channels"): a key's
// hash slot, the slot of a command's first key, the MOVED/ASK redirect text, and the CLUSTER SHARDS
// / CLUSTER SLOTS replies as a slot map. No I/O, no threads: the ClusterClient feeds these, the
// unit tests pin them. io/ keeps its own CRC16 rather than calling table::hash_slot, because io/
// and table/ know nothing of each other (docs/architecture.md, "Folders"); a unit test holds the
// two to the same answers.
#pragma once

#include <echo/io/resp3_value.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace echo::io {

inline constexpr std::uint16_t kClusterSlots = 16384;

// CRC16-XMODEM of the key's hash tag (the text between the first '{' and the next '}', when
// non-empty; else the whole key) mod 16384. Any thread; no allocation.
std::uint16_t hash_slot(std::string_view key) noexcept;

// The slot a command must run on: its first key's. EVAL/EVALSHA/EVALSHA_RO/FCALL take the key
// after numkeys (none when numkeys is 0); commands the cluster serves anywhere (PING, INFO,
// CLUSTER, SCRIPT, HELLO, ...) and calls with no argument after the verb have none.
std::optional<std::uint16_t> command_slot(std::span<const std::string_view> args) noexcept;

struct NodeAddress {
  std::string host;
  int port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const NodeAddress&, const NodeAddress&) = default;
};

// One "host:port" (IPv6 as [addr]:port), strictly: nullopt when the host is empty or the port is
// not whole decimal digits in 1..65535 ("6379x", " 6379", "+6379" are refused). The one parser of
// a HOST:PORT argument (the CLI's --server, the examples).
std::optional<NodeAddress> parse_address(std::string_view text);

// "host:port[,host:port...]" (IPv6 as [addr]:port), each entry as parse_address reads it. Throws
// std::invalid_argument naming the bad entry (empty, no port, port outside 1..65535).
std::vector<NodeAddress> parse_seeds(std::string_view text);

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" (an empty host means the node that
// answered, which the caller fills in). Anything else: nullopt.
struct Redirect {
  enum class Kind : std::uint8_t { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  std::uint16_t slot = 0;
  NodeAddress to;
};
std::optional<Redirect> parse_redirect(std::string_view error_text);

// One contiguous run of slots and the master serving it.
struct SlotRange {
  std::uint16_t first = 0, last = 0;
  NodeAddress master;
  std::string master_id;  // empty when the reply did not carry it
};

// CLUSTER SHARDS (Redis 7+, Valkey): per shard the slot ranges and the one node whose role is
// master and health online (a shard whose master is failed contributes no ranges). Works on the
// RESP3 map form and the RESP2 flat-array form. nullopt when the reply has not that shape.
// `tls`: the client speaks TLS, so a node's "tls-port" is the one to dial (a node listing none
// has its "port" taken: under tls-cluster that is its TLS port).
std::optional<std::vector<SlotRange>> parse_cluster_shards(const Resp3Value& reply,
                                                           bool tls = false);
// CLUSTER SLOTS (every version): [first, last, [host, port, id?, ...], replicas...]...
std::optional<std::vector<SlotRange>> parse_cluster_slots(const Resp3Value& reply);

}  // namespace echo::io
