// SPDX-License-Identifier: MIT
// The floors the drill's latency gates measure in the same run, before they measure the engine
// (every figure is a ratio to a baseline taken on the same machine, in the same minute, since a
// shared machine's absolute figures mean little; docs/benchmarks.md): a plain blocking hiredis GET
// (the floor under a miss) and a plain hiredis PUBLISH -> message round trip to a blocking
// subscriber on its own thread (the floor under the broadcast lane). Plus the small things the
// gates share: node options, loaders, a plain map read, the L2 key, a read's description.
#pragma once

#include <echo/engine/engine.h>
#include <echo/harness/hiredis.h>
#include <echo/harness/lane.h>
#include <echo/harness/samples.h>
#include <echo/harness/stage.h>
#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>
#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drill/drill.h"

namespace echo::cli::floors {

// The measurement harness (echo::harness) under the names the gates use.
using harness::Clock;
using harness::consumer_of;
using harness::eventually;
using harness::JobLaneTurns;
using harness::lane_message;
using harness::Reply;
using harness::Samples;
using harness::since_us;
using harness::spin_until;

// A plain blocking hiredis connection (RESP2): the baseline client, and the drill's eyes on L2.
class Redis {
 public:
  explicit Redis(const DrillTarget& target) : c_(harness::connect(target.host, target.port)) {}
  // One command, printf-style as redisCommand (%s, %b with a length). Null on a transport error.
  Reply command(const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    void* r = redisvCommand(c_.get(), format, ap);
    va_end(ap);
    return Reply(static_cast<redisReply*>(r));
  }
  // The raw bytes stored under `key` into `out`; false when the key is missing.
  bool get(const std::string& key, std::string& out) {
    Reply r = command("GET %b", key.data(), key.size());
    if (!r || r->type != REDIS_REPLY_STRING) return false;
    out.assign(r->str, r->len);
    return true;
  }
  long long pttl(const std::string& key) {
    Reply r = command("PTTL %b", key.data(), key.size());
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
  }
  // How many keys match `pattern` (SCAN, so a shared server is not blocked).
  std::size_t count_keys(const std::string& pattern) {
    std::size_t n = 0;
    std::string cursor = "0";
    do {
      Reply r =
          command("SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size());
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return static_cast<std::size_t>(-1);
      cursor.assign(r->element[0]->str, r->element[0]->len);
      n += r->element[1]->elements;
    } while (cursor != "0");
    return n;
  }
  // EVALSHA of an embedded script (lua/scripts) the server already holds: one round trip.
  // Null when the script is unknown or on a transport error.
  Reply evalsha(std::string_view script, const std::vector<std::string>& keys,
                const std::vector<std::string>& argv) {
    const lua::Script* s = lua::find_script(script);
    if (s == nullptr) return nullptr;
    std::vector<const char*> parts{"EVALSHA"};
    std::vector<std::size_t> lens{7};
    const std::string sha(s->sha1), nkeys = std::to_string(keys.size());
    parts.push_back(sha.c_str());
    lens.push_back(sha.size());
    parts.push_back(nkeys.c_str());
    lens.push_back(nkeys.size());
    for (const auto* list : {&keys, &argv}) {
      for (const std::string& a : *list) {
        parts.push_back(a.data());
        lens.push_back(a.size());
      }
    }
    return Reply(static_cast<redisReply*>(
        redisCommandArgv(c_.get(), static_cast<int>(parts.size()), parts.data(), lens.data())));
  }
  // The same, loading the script first (a fresh server holds none).
  Reply eval(std::string_view script, const std::vector<std::string>& keys,
             const std::vector<std::string>& argv) {
    const lua::Script* s = lua::find_script(script);
    if (s == nullptr) return nullptr;
    Reply loaded = command("SCRIPT LOAD %b", s->source.data(), s->source.size());
    return evalsha(script, keys, argv);
  }
  redisContext* raw() const noexcept { return c_.get(); }

 private:
  harness::Context c_;
};

// The floor under a miss: `n` sequential plain GETs of `key` (after 50 unmeasured).
inline Samples get_floor(const DrillTarget& target, const std::string& key, int n) {
  Redis r(target);
  Samples s;
  s.us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n + 50; ++i) {
    const auto t0 = Clock::now();
    Reply reply = r.command("GET %b", key.data(), key.size());
    const double us = since_us(t0);
    if (!reply) throw std::runtime_error("the GET floor lost its connection");
    if (i >= 50) s.us.push_back(us);
  }
  s.sort();
  return s;
}

// Which pub/sub a PUBLISH floor rides: the classic one, or the sharded one of a cluster
// (SSUBSCRIBE / SPUBLISH on the channel's master).
struct PubSubVerbs {
  const char* subscribe;
  const char* publish;
};
inline constexpr PubSubVerbs kClassicPubSub{"SUBSCRIBE", "PUBLISH"};
inline constexpr PubSubVerbs kShardedPubSub{"SSUBSCRIBE", "SPUBLISH"};

// The floor under the broadcast lane: a blocking hiredis subscriber on its own thread counts
// messages; one() PUBLISHes one `payload_size`-byte payload and waits with spin_until for the
// count to move. Each sample is PUBLISH sent -> message counted. One message at a time, so a
// caller can interleave the floor's messages with the lane's it compares them with.
class PublishFloor {
 public:
  PublishFloor(const DrillTarget& target, const std::string& channel, std::size_t payload_size = 29,
               const PubSubVerbs& verbs = kClassicPubSub)
      : sub_(target),
        pub_(target),
        what_(std::string("the ") + verbs.publish + " floor"),
        channel_(channel),
        payload_(payload_size, 'x'),
        publish_(std::string(verbs.publish) + " %b %b") {
    Reply ok = sub_.command((std::string(verbs.subscribe) + " %b").c_str(), channel.data(),
                            channel.size());
    if (!ok) throw std::runtime_error(what_ + " could not subscribe");
    // The listener waits as long as the floor lives (a caller may pause between messages);
    // the destructor's shutdown ends its read, and so does a server that goes away.
    const timeval forever{0, 0};
    redisSetTimeout(sub_.raw(), forever);
    listener_ = std::jthread([this] {
      for (;;) {
        void* raw = nullptr;
        if (redisGetReply(sub_.raw(), &raw) != REDIS_OK) return;  // loss, or the destructor
        Reply m(static_cast<redisReply*>(raw));
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3) {
          heard_.fetch_add(1, std::memory_order_release);  // pairs with one()'s acquire
        }
      }
    });
  }
  ~PublishFloor() {
    ::shutdown(sub_.raw()->fd, SHUT_RDWR);  // the listener's read returns; join follows
  }
  PublishFloor(const PublishFloor&) = delete;
  PublishFloor& operator=(const PublishFloor&) = delete;

  // One message: microseconds from the PUBLISH sent to the subscriber's count moving.
  double one() {
    const auto t0 = Clock::now();
    Reply r = pub_.command(publish_.c_str(), channel_.data(), channel_.size(), payload_.data(),
                           payload_.size());
    ++sent_;
    if (!r || !spin_until([&] { return heard_.load(std::memory_order_acquire) >= sent_; })) {
      throw std::runtime_error(what_ + " lost message " + std::to_string(sent_));
    }
    return since_us(t0);
  }

 private:
  Redis sub_, pub_;
  std::string what_, channel_, payload_, publish_;
  std::atomic<std::uint64_t> heard_{0};
  std::uint64_t sent_ = 0;
  std::jthread listener_;  // last: joined before the connections close
};

// The floor as one block: 50 unmeasured messages, then `n` samples, sorted.
inline Samples publish_floor(const DrillTarget& target, const std::string& channel, int n,
                             std::size_t payload_size = 29,
                             const PubSubVerbs& verbs = kClassicPubSub) {
  PublishFloor floor(target, channel, payload_size, verbs);
  Samples s;
  s.us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < 50; ++i) (void)floor.one();
  for (int i = 0; i < n; ++i) s.us.push_back(floor.one());
  s.sort();
  return s;
}

// "1,311,621"
inline std::string grouped(double v) {
  std::string digits = std::to_string(static_cast<long long>(v + 0.5));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

inline std::string fmt(const char* format, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

// A node of the drill: the engine options for `target` with minting node `node`.
inline engine::EngineOptions node_options(const DrillTarget& target, unsigned node) {
  return harness::node_options(target.host, target.port, node);
}

// A node of the drill's cluster (drill --cluster): the same, through the seed list.
inline engine::EngineOptions cluster_node_options(const DrillTarget& target, unsigned node) {
  return harness::cluster_node_options(target.cluster_seeds, node);
}

using harness::cached;

// The L2 key of `id`'s row in `table` (ecc:{table}:id).
inline std::string l2_key(const std::string& table, const table::BrandedId& id) {
  return table::l2_key(table, id.view()).value();
}

// A loader that answers `value` and counts its runs in `runs`.
inline engine::Loader counting_loader(std::atomic<int>& runs, std::string value = "px=100.00") {
  return [&runs, value](const table::BrandedId&) -> engine::LoadResult {
    runs.fetch_add(1, std::memory_order_relaxed);
    return engine::Loaded{value, std::nullopt};
  };
}

// A read's answer for a gate's figure: "l1 px=100.00", or "error <message>".
inline std::string describe(const engine::Result<engine::Got>& g) {
  if (!g) return "error " + g.error().message();
  return std::string(engine::to_string(g->source)) + " " + g->value;
}

}  // namespace echo::cli::floors
