// SPDX-License-Identifier: MIT
// Hash slots, first-key routing, redirect text and the two topology replies (docs/wire.md,
// "Names, keys and channels").
#include <echo/io/cluster_map.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <stdexcept>

namespace echo::io {
namespace {

constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    t[i] = crc;
  }
  return t;
}
constexpr auto kCrc = make_crc_table();

std::uint16_t crc16(std::string_view s) noexcept {
  std::uint16_t crc = 0;
  for (unsigned char c : s) {
    crc = static_cast<std::uint16_t>((crc << 8) ^ kCrc[((crc >> 8) ^ c) & 0xFF]);
  }
  return crc;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<long long> to_int(std::string_view s) noexcept {
  long long v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// An integer reply, or a bulk/simple string holding one (RESP2 forms vary by server).
std::optional<long long> int_of(const Resp3Value& v) noexcept {
  if (v.type() == Resp3Type::integer) return v.integer();
  if (v.has_text() && !v.is_error()) return to_int(v.str());
  return std::nullopt;
}

// A field of a RESP3 map or of a RESP2 flat key/value array.
std::optional<Resp3Value> field(const Resp3Value& v, std::string_view key) noexcept {
  if (v.type() == Resp3Type::map) return v.find(key);
  if (v.type() != Resp3Type::array) return std::nullopt;
  // One walk: indexing a child walks from the first (Resp3Value::operator[]).
  for (auto it = v.begin(); it != v.end();) {
    const Resp3Value k = *it;
    if (++it == v.end()) break;
    if (k.has_text() && k.str() == key) return *it;
    ++it;
  }
  return std::nullopt;
}

bool valid_slot(long long s) noexcept { return s >= 0 && s < kClusterSlots; }

}  // namespace

std::uint16_t hash_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      return crc16(key.substr(open + 1, close - open - 1)) & (kClusterSlots - 1);
    }
  }
  return crc16(key) & (kClusterSlots - 1);
}

std::optional<std::uint16_t> command_slot(std::span<const std::string_view> args) noexcept {
  if (args.size() < 2) return std::nullopt;
  const std::string_view verb = args[0];
  if (iequals(verb, "EVAL") || iequals(verb, "EVALSHA") || iequals(verb, "EVAL_RO") ||
      iequals(verb, "EVALSHA_RO") || iequals(verb, "FCALL") || iequals(verb, "FCALL_RO")) {
    const auto n = args.size() >= 3 ? to_int(args[2]) : std::nullopt;
    if (!n || *n <= 0 || args.size() < 4) return std::nullopt;
    return hash_slot(args[3]);
  }
  static constexpr std::string_view kKeyless[] = {
      "PING", "INFO",    "CLUSTER",  "SCRIPT", "HELLO",    "AUTH",      "CLIENT", "CONFIG", "ECHO",
      "TIME", "COMMAND", "FUNCTION", "WAIT",   "READONLY", "READWRITE", "ASKING", "DBSIZE"};
  for (std::string_view k : kKeyless) {
    if (iequals(verb, k)) return std::nullopt;
  }
  return hash_slot(args[1]);
}

std::optional<NodeAddress> parse_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const auto port = to_int(text.substr(colon + 1));
  if (host.empty() || !port || *port < 1 || *port > 65535) return std::nullopt;
  return NodeAddress{std::string(host), static_cast<int>(*port)};
}

std::vector<NodeAddress> parse_seeds(std::string_view text) {
  std::vector<NodeAddress> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = text.find(',', at);
    const std::string_view entry =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    auto address = parse_address(entry);
    if (!address) {
      throw std::invalid_argument("cluster seed '" + std::string(entry) +
                                  "' is not host:port (port 1..65535)");
    }
    out.push_back(std::move(*address));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

std::optional<Redirect> parse_redirect(std::string_view text) {
  Redirect r;
  std::string_view rest;
  if (text.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    rest = text.substr(6);
  } else if (text.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    rest = text.substr(4);
  } else {
    return std::nullopt;
  }
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto slot = to_int(rest.substr(0, space));
  if (!slot || !valid_slot(*slot)) return std::nullopt;
  r.slot = static_cast<std::uint16_t>(*slot);
  const std::string_view addr = rest.substr(space + 1);
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto port = to_int(addr.substr(0, addr.find(' ')).substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  std::string_view host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  r.to = NodeAddress{std::string(host), static_cast<int>(*port)};
  return r;
}

std::optional<std::vector<SlotRange>> parse_cluster_shards(const Resp3Value& reply, bool tls) {
  if (reply.type() != Resp3Type::array) return std::nullopt;
  std::vector<SlotRange> out;
  for (const Resp3Value shard : reply) {
    const auto slots = field(shard, "slots");
    const auto nodes = field(shard, "nodes");
    if (!slots || !nodes || slots->type() != Resp3Type::array ||
        nodes->type() != Resp3Type::array || slots->size() % 2 != 0) {
      return std::nullopt;
    }
    std::optional<SlotRange> master;
    for (const Resp3Value node : *nodes) {
      const auto role = field(node, "role");
      const auto health = field(node, "health");
      if (!role || role->str() != "master" || !health || health->str() != "online") continue;
      const auto tls_port = tls ? field(node, "tls-port") : std::nullopt;
      const auto port = tls_port ? tls_port : field(node, "port");
      const auto endpoint = field(node, "endpoint");
      const auto ip = field(node, "ip");
      const auto id = field(node, "id");
      const auto p = port ? int_of(*port) : std::nullopt;
      if (!p || *p < 1 || *p > 65535) return std::nullopt;
      SlotRange r;
      // The endpoint is what clients should dial; "?" means unknown, then the ip.
      if (endpoint && !endpoint->str().empty() && endpoint->str() != "?") {
        r.master.host = std::string(endpoint->str());
      } else if (ip) {
        r.master.host = std::string(ip->str());
      }
      if (r.master.host.empty()) return std::nullopt;
      r.master.port = static_cast<int>(*p);
      if (id) r.master_id = std::string(id->str());
      master = std::move(r);
      break;
    }
    if (!master) continue;
    // One walk over the pairs (a shard may list thousands of ranges: indexing each would walk
    // from the first, quadratic on the loop thread).
    for (auto it = slots->begin(); it != slots->end();) {
      const auto first = int_of(*it++);
      const auto last = int_of(*it++);
      if (!first || !last || !valid_slot(*first) || !valid_slot(*last) || *first > *last) {
        return std::nullopt;
      }
      SlotRange r = *master;
      r.first = static_cast<std::uint16_t>(*first);
      r.last = static_cast<std::uint16_t>(*last);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::optional<std::vector<SlotRange>> parse_cluster_slots(const Resp3Value& reply) {
  if (reply.type() != Resp3Type::array) return std::nullopt;
  std::vector<SlotRange> out;
  for (const Resp3Value range : reply) {
    if (range.type() != Resp3Type::array || range.size() < 3) return std::nullopt;
    const auto first = int_of(range[0]);
    const auto last = int_of(range[1]);
    const Resp3Value master = range[2];
    if (!first || !last || !valid_slot(*first) || !valid_slot(*last) || *first > *last ||
        master.type() != Resp3Type::array || master.size() < 2) {
      return std::nullopt;
    }
    const auto port = int_of(master[1]);
    if (!port || *port < 1 || *port > 65535 || !master[0].has_text()) return std::nullopt;
    SlotRange r;
    r.first = static_cast<std::uint16_t>(*first);
    r.last = static_cast<std::uint16_t>(*last);
    r.master.host = std::string(master[0].str());
    r.master.port = static_cast<int>(*port);
    if (master.size() >= 3 && master[2].has_text()) r.master_id = std::string(master[2].str());
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace echo::io
