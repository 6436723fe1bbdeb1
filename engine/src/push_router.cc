// SPDX-License-Identifier: MIT
#include "push_router.h"

#include <echo/base/clock.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

namespace echo::engine {

std::string carried_marker(std::string_view channel) {
  constexpr std::string_view kCoh = ":coh";
  if (channel.ends_with(kCoh)) channel.remove_suffix(kCoh.size());
  return std::string(channel) + ":carried";
}

void PushRouter::add_broadcast(std::string channel, Target target) {
  by_marker_.emplace(carried_marker(channel), target);
  by_channel_.emplace(std::move(channel), target);
}

void PushRouter::add_lead(std::string channel, Target target) {
  by_lead_.emplace(std::move(channel), target);
}

void PushRouter::add_ask(std::string channel, Target target) {
  by_ask_.emplace(std::move(channel), target);
}

void PushRouter::add_tracking(std::string prefix, Target target) {
  by_prefix_.emplace(std::move(prefix), target);
}

void PushRouter::on_push(const io::Resp3Value& push) {
  if (push.size() < 2) return count_unrouted();
  const std::string_view kind = push[0].str();
  if (kind == "message" && push.size() == 3) {
    if (!route(push[1].str(), push[2].str())) count_unrouted();
  } else if (kind == "invalidate" && push.size() == 2 && tracking()) {
    on_invalidate(push[1]);
  } else if (kind == "subscribe") {
    const std::string_view channel = push[1].str();
    if (by_channel_.contains(channel)) {
      confirmed(channel);
    } else if (!by_lead_.contains(channel) && !by_marker_.contains(channel) &&
               !by_ask_.contains(channel)) {
      count_unrouted();
    }
  } else {
    count_unrouted();
  }
}

bool PushRouter::route(std::string_view channel, std::string_view payload) {
  if (auto it = by_channel_.find(channel); it != by_channel_.end()) {
    deliver(it->second, payload);
  } else if (auto lt = by_lead_.find(channel); lt != by_lead_.end()) {
    deliver(lt->second, payload);
  } else if (auto at = by_ask_.find(channel); at != by_ask_.end()) {
    ask(at->second, payload);
  } else {
    return false;
  }
  return true;
}

void PushRouter::confirmed(std::string_view channel) {
  if (auto it = by_channel_.find(channel); it != by_channel_.end()) {
    it->second.writer->subscription_confirmed();
  }
}

void PushRouter::lost(std::string_view channel) {
  if (auto it = by_channel_.find(channel); it != by_channel_.end()) {
    it->second.writer->subscription_lost();
  }
}

// A broadcast ring's items and a lead ring's are applied on this thread when the writer is
// parked (TableSpec::direct_apply: TableWriter::deliver; counted in its direct_applies), else
// published into the ring. A lead carries no ticket, so the drain applies it just so: no memory,
// no ack. A lead refused by a full ring costs nothing but its speed (the job follows): that ring
// drops and never flushes. Refusals are counted by the ring either way.
void PushRouter::deliver(const Target& target, std::string_view payload) {
  if (closed_.load(std::memory_order_relaxed)) return;  // stopping: nothing drains the rings
  base::solo_add(target.counters->pushes);
  if (table::is_carried(payload)) return deliver_carried(target, payload);
  if (target.keys == KeyKind::kText) {
    // A text key travels as its hash (L1Map::apply_hashed), not its bytes: docs/wire.md.
    auto text = table::parse_text_frame(payload);
    if (!text) return base::solo_add(target.counters->garbage);
    return deliver_drop(target, text->key, text->version);
  }
  auto message = table::parse_frame(payload);
  if (!message) return base::solo_add(target.counters->garbage);
  target.writer->deliver(*target.ring, CoherenceItem{*message, base::steady_ns(), 0});
}

// "{" key "}" version value (docs/wire.md, "Carried values"). The item points into the payload;
// deliver_carried copies what it keeps into the ring's arena. A table that does not carry values,
// or an arena with no room, gets the message as the drop it also is.
void PushRouter::deliver_carried(const Target& target, std::string_view payload) {
  auto carried = table::parse_carried_frame(payload);
  if (!carried) return base::solo_add(target.counters->garbage);
  if (target.keys == KeyKind::kBranded) {
    auto id = table::BrandedId::parse(carried->key);
    if (!id || id->ns() != target.kind) return base::solo_add(target.counters->garbage);
  }
  if (target.arena != nullptr) {
    CoherenceItem item{table::CoherenceMessage{carried->version, carried->version},
                       base::steady_ns(), 0};
    item.key = carried->key.data();
    item.key_size = static_cast<std::uint8_t>(carried->key.size());
    item.value_size = static_cast<std::uint32_t>(carried->value.size());
    item.kind = ItemKind::kCarried;
    if (target.writer->deliver_carried(*target.ring, *target.arena, CoherenceItem(item))) return;
    base::solo_add(target.counters->carry_degraded);
  }
  deliver_drop(target, carried->key, carried->version);
}

void PushRouter::deliver_drop(const Target& target, std::string_view key,
                              const table::BrandedId& version) {
  if (target.keys == KeyKind::kText) {
    CoherenceItem item{table::CoherenceMessage{version, version}, base::steady_ns(), 0};
    item.text_hash = table::hash_key(key);
    item.kind = ItemKind::kTextHash;
    target.writer->deliver(*target.ring, CoherenceItem(item));
    return;
  }
  // A branded key was parsed by the caller: it is an id.
  const auto name = table::BrandedId::parse(key).value();
  target.writer->deliver(
      *target.ring, CoherenceItem{table::CoherenceMessage{name, version}, base::steady_ns(), 0});
}

// Not the hot path: an ask is one publish_and_wait's, and its command allocates.
void PushRouter::ask(const Target& target, std::string_view payload) {
  if (closed_.load(std::memory_order_relaxed)) return;
  constexpr std::size_t kId = 14;
  if (payload.size() <= kId + 1 || payload[kId] != ':' ||
      !table::BrandedId::parse(payload.substr(0, kId))) {
    return base::solo_add(target.counters->garbage);
  }
  // key:version (a branded key's 29 bytes parse here too, the key as the id's text).
  auto message = table::parse_text_frame(payload.substr(kId + 1));
  if (!message) return base::solo_add(target.counters->garbage);
  if (target.keys == KeyKind::kBranded) {
    auto id = table::BrandedId::parse(message->key);
    if (!id || id->ns() != target.kind) return base::solo_add(target.counters->garbage);
  }
  target.writer->ask(message->key, message->version, std::string(payload.substr(0, kId)));
}

// A tracking invalidation for one tracking table (kForgetKey: the key, its prefix stripped).
void PushRouter::forget(const Target& target, ItemKind what, std::string_view key) {
  if (closed_.load(std::memory_order_relaxed)) return;
  base::solo_add(target.counters->pushes);
  // The item's message means nothing here (no version travels): any valid id fills it.
  static const table::BrandedId kUnversioned = table::BrandedId::parse("AST0KHTOWnGLuC").value();
  CoherenceItem item{table::CoherenceMessage{kUnversioned, kUnversioned}, base::steady_ns(), 0};
  item.kind = what;
  if (what == ItemKind::kForgetKey) item.text_hash = table::hash_key(key);
  target.ring->publish(CoherenceItem(item));  // refusals counted by the ring
}

// ["invalidate", [keys]] or ["invalidate", nil]. A key under no tracking table's prefix is
// unrouted (the server sends only the prefixes asked for).
void PushRouter::on_invalidate(const io::Resp3Value& keys) {
  if (keys.is_null()) {
    for (const auto& [prefix, target] : by_prefix_) forget(target, ItemKind::kForgetAll);
    return;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string_view key = keys[i].str();
    // ecc:{t}:key: the prefix ends at the first "}:" (a table name has no brace).
    const std::size_t close = key.find("}:");
    auto it = close == std::string_view::npos ? by_prefix_.end()
                                              : by_prefix_.find(key.substr(0, close + 2));
    if (it == by_prefix_.end() || key.size() == close + 2) {
      count_unrouted();
      continue;
    }
    forget(it->second, ItemKind::kForgetKey, key.substr(close + 2));
  }
}

std::vector<std::string> PushRouter::channels_of(int io_thread) const {
  std::vector<std::string> out;
  // The markers first: one connection's SUBSCRIBEs run in order, so a channel's confirmation
  // (what starts caching, and start()'s count of the carried readers) follows its marker's.
  for (const auto& [marker, target] : by_marker_) {
    if (target.io_thread == io_thread) out.push_back(marker);
  }
  // An ask channel confirmed before its table's: a table caches only with its asks heard.
  for (const auto& [channel, target] : by_ask_) {
    if (target.io_thread == io_thread) out.push_back(channel);
  }
  for (const auto& [channel, target] : by_channel_) {
    if (target.io_thread == io_thread) out.push_back(channel);
  }
  if (io_thread == 0) {
    for (const auto& [channel, target] : by_lead_) out.push_back(channel);
  }
  return out;
}

std::vector<std::string> PushRouter::tracking_command() const {
  if (by_prefix_.empty()) return {};
  std::vector<std::string> args{"CLIENT", "TRACKING", "ON", "BCAST"};
  for (const auto& [prefix, target] : by_prefix_) args.insert(args.end(), {"PREFIX", prefix});
  return args;
}

void PushRouter::tracking_confirmed() const {
  for (const auto& [prefix, target] : by_prefix_) target.writer->subscription_confirmed();
}

}  // namespace echo::engine
