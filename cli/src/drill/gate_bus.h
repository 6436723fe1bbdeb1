// SPDX-License-Identifier: MIT
// What the bus gates' two files share (gate_bus.cc: 3.2 J1-J5 admission, 3.3 L1-L6 leases and
// fencing; gate_bus_lanes.cc: 3.4 G1-G8 lanes): a bus queue on a plain client, the embedded
// scripts by EVALSHA, and each gate's fresh queue and ids (one minter for both files).
#pragma once

#include <echo/table/branded_id.h>
#include <hiredis/hiredis.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drill/floors.h"

namespace echo::cli::bus {

using floors::Redis;
using floors::Reply;
using Args = std::vector<std::string>;

inline constexpr unsigned kGateNode = 206;

inline std::string text(const redisReply* r) {
  if (r == nullptr) return "(no reply)";
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  if (r->type == REDIS_REPLY_NIL) return "(nil)";
  if (r->str != nullptr) return std::string(r->str, r->len);
  return "(array)";
}
inline bool is_int(const Reply& r, long long n) {
  return r && r->type == REDIS_REPLY_INTEGER && r->integer == n;
}
inline bool is_error(const Reply& r, std::string_view msg) {
  return r && r->type == REDIS_REPLY_ERROR && text(r.get()) == msg;
}

struct Claimed {
  std::string id, payload, group;
  long long token = 0;
};

// One bus queue on a plain client: the scripts by EVALSHA (loaded once), and its keys.
class Bus {
 public:
  Bus(Redis& r, std::string queue) : r_(r), base_("emq:{" + queue + "}:") {}
  std::string key(std::string_view s) const { return base_ + std::string(s); }
  std::string job(std::string_view id) const { return base_ + "job:" + std::string(id); }
  std::string lane(std::string_view g) const { return base_ + "g:" + std::string(g) + ":pending"; }
  const std::string& base() const { return base_; }

  Reply run(std::string_view name, const Args& keys, const Args& argv) {
    return r_.eval(name, keys, argv);
  }
  Reply enqueue(const std::string& id, const std::string& p) {
    return run("enqueue", {job(id), key("pending")}, {id, p});
  }
  Reply genqueue(const std::string& id, const std::string& p, const std::string& g) {
    return run(
        "genqueue",
        {job(id), lane(g), key("ring"), key("paused"), key("glimit"), key("gactive"), key("wake")},
        {id, p, g});
  }
  Reply schedule(const std::string& id, const std::string& p) {
    return run("schedule", {job(id), key("schedule")}, {id, p, "in", "0"});
  }
  std::optional<Claimed> claim(long long lease) {
    return as_claim(
        run("claim", {key("pending"), key("active")}, {base_ + "job:", std::to_string(lease)}), 3);
  }
  std::optional<Claimed> gclaim(long long lease) {
    return as_claim(run("gclaim", {key("ring"), key("active")}, {base_, std::to_string(lease)}), 4);
  }
  Reply complete(const std::string& id, const std::string& token) {
    return run("complete", {key("active"), job(id)}, {id, token, base_});
  }
  Reply retry(const std::string& id, const std::string& token, long long max,
              const std::string& err) {
    return run("retry", {key("active"), key("schedule"), key("dead"), job(id)},
               {id, token, "0", std::to_string(max), err, base_});
  }
  Reply promote() { return run("promote", {key("schedule"), key("pending")}, {base_, "100"}); }
  Reply reap() { return run("reap", {key("active"), key("pending")}, {base_}); }
  Reply gpause(const std::string& g) { return run("gpause", {key("paused"), key("ring")}, {g}); }
  Reply glimit(const std::string& g, long long n) {
    return run("glimit", {key("glimit"), key("gactive"), key("ring"), key("paused"), key("wake")},
               {base_, g, std::to_string(n)});
  }
  std::string hget(const std::string& k, const std::string& f) {
    return text(r_.command("HGET %s %s", k.c_str(), f.c_str()).get());
  }
  long long num(const char* format, const std::string& k) {
    Reply r = r_.command(format, k.c_str());
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  }
  std::vector<std::string> list(const char* format, const std::string& k) {
    Reply r = r_.command(format, k.c_str());
    std::vector<std::string> out;
    if (r && r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
    }
    return out;
  }
  long long keys_left() { return static_cast<long long>(list("KEYS %s*", base_).size()); }

 private:
  static std::optional<Claimed> as_claim(const Reply& r, std::size_t n) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < n) return std::nullopt;
    Claimed c{text(r->element[0]), text(r->element[1]), n > 3 ? text(r->element[3]) : "",
              r->element[2]->integer};
    return c;
  }
  Redis& r_;
  std::string base_;
};

// Each gate's queue and ids: minted, so a shared server's leftovers never collide.
struct Fresh {
  table::Minter minter{kGateNode};
  std::string queue() { return "drill.bus." + minter.mint("QUE").value().str(); }
  std::string job() { return minter.mint("JOB").value().str(); }
  std::string group() { return minter.mint("PRT").value().str(); }
};
inline Fresh& fresh() {
  static Fresh f;
  return f;
}

}  // namespace echo::cli::bus
