// SPDX-License-Identifier: MIT
// Shared by the job bus's script-level tests (bus_scripts_*_test.cc): one queue's verbs sent as the
// wire contract orders their KEYS and ARGV (Bus), the claim answers read back, and the BusScripts
// fixture (a real redis-server, a Bus on queue "orders", a minter for job and group ids).
#pragma once

#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/script_client.h"

namespace echo::test {

using std::chrono::milliseconds;

inline ::testing::AssertionResult is_bulk(const RedisReply& r, std::string_view expected) {
  if (r && r->type == REDIS_REPLY_STRING && text(r.get()) == expected) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected bulk \"" << expected << "\", got " << text(r.get());
}

// A claim's answer: {id, payload, attempts[, group]}, attempts an integer (the fencing token).
struct Claimed {
  std::string id;
  std::string payload;
  long long token = 0;
  std::string group;
};

// nullopt for the empty answer; a malformed reply is a test failure (and nullopt).
inline std::optional<Claimed> as_claim(const RedisReply& r, std::size_t width) {
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 0) return std::nullopt;
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != width ||
      r->element[2]->type != REDIS_REPLY_INTEGER) {
    ADD_FAILURE() << "malformed claim reply: " << text(r.get());
    return std::nullopt;
  }
  Claimed c{text(r->element[0]), text(r->element[1]), r->element[2]->integer, {}};
  if (width == 4) c.group = text(r->element[3]);
  return c;
}

// A claim that must not be empty: an empty one fails the test and yields an empty Claimed.
inline Claimed claimed(const std::optional<Claimed>& c) {
  if (!c) {
    ADD_FAILURE() << "the claim was empty";
    return {};
  }
  return *c;
}

// One queue's verbs, each sending the KEYS and ARGV of docs/wire.md, "Scripts" in their order, plus
// plain reads of the queue's keys for the assertions. Load::kStrictSlot is for a cluster-enabled
// server (ScriptClient).
class Bus : public ScriptClient {
 public:
  Bus(redisContext* c, std::string queue, Load load = Load::kEvalsha)
      : ScriptClient(c, load),
        queue_(std::move(queue)),
        base_(table::bus_key(queue_, "").value()) {}

  const std::string& base() const { return base_; }
  std::string key(std::string_view suffix) const { return table::bus_key(queue_, suffix).value(); }
  std::string job(std::string_view id) const { return table::job_key(queue_, id).value(); }
  std::string lane(std::string_view g) const { return base_ + "g:" + std::string(g) + ":pending"; }

  RedisReply enqueue(const std::string& id, const std::string& payload) {
    return run("enqueue", {job(id), key("pending")}, {id, payload});
  }
  RedisReply genqueue(const std::string& id, const std::string& payload, const std::string& g) {
    return run(
        "genqueue",
        {job(id), lane(g), key("ring"), key("paused"), key("glimit"), key("gactive"), key("wake")},
        {id, payload, g});
  }
  RedisReply schedule(const std::string& id, const std::string& payload, const char* mode,
                      long long n) {
    return run("schedule", {job(id), key("schedule")}, {id, payload, mode, std::to_string(n)});
  }
  std::optional<Claimed> claim(long long lease_ms) {
    return as_claim(
        run("claim", {key("pending"), key("active")}, {base_ + "job:", std::to_string(lease_ms)}),
        3);
  }
  std::optional<Claimed> gclaim(long long lease_ms) {
    return as_claim(run("gclaim", {key("ring"), key("active")}, {base_, std::to_string(lease_ms)}),
                    4);
  }
  RedisReply complete(const std::string& id, const std::string& token) {
    return run("complete", {key("active"), job(id)}, {id, token, base_});
  }
  RedisReply retry(const std::string& id, const std::string& token, long long delay_ms,
                   long long max, const std::string& error) {
    return run("retry", {key("active"), key("schedule"), key("dead"), job(id)},
               {id, token, std::to_string(delay_ms), std::to_string(max), error, base_});
  }
  RedisReply promote(long long batch) {
    return run("promote", {key("schedule"), key("pending")}, {base_, std::to_string(batch)});
  }
  RedisReply reap() { return run("reap", {key("active"), key("pending")}, {base_}); }
  RedisReply gpause(const std::string& g) {
    return run("gpause", {key("paused"), key("ring")}, {g});
  }
  RedisReply gresume(const std::string& g) {
    return run("gresume", {key("paused"), key("ring"), key("glimit"), key("gactive"), key("wake")},
               {base_, g});
  }
  RedisReply glimit(const std::string& g, long long n) {
    return run("glimit", {key("glimit"), key("gactive"), key("ring"), key("paused"), key("wake")},
               {base_, g, std::to_string(n)});
  }

  long long zcard(const std::string& key) { return integer("ZCARD %s", key); }
  long long llen(const std::string& key) { return integer("LLEN %s", key); }
  bool exists(const std::string& key) { return integer("EXISTS %s", key) == 1; }
  bool hexists(const std::string& key, const std::string& field) {
    RedisReply r = command(context(), "HEXISTS %s %s", key.c_str(), field.c_str());
    EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << text(r.get());
    return r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  }
  std::vector<std::string> ring() {
    RedisReply r = command(context(), "LRANGE %s 0 -1", key("ring").c_str());
    std::vector<std::string> out;
    if (r && r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
    }
    return out;
  }
  bool in_ring(const std::string& g) {
    const auto r = ring();
    return std::find(r.begin(), r.end(), g) != r.end();
  }

 private:
  std::string queue_;
  std::string base_;
};

class BusScripts : public SingleServerTest {
 protected:
  void SetUp() override {
    SingleServerTest::SetUp();
    bus_.emplace(client(), "orders");
  }

  Bus& bus() { return *bus_; }
  std::string job_id() { return minter_.mint("JOB").value().str(); }
  std::string group_id() { return minter_.mint("PRT").value().str(); }
  long long dbsize() { return bus().dbsize(); }

  table::Minter minter_{7};
  std::optional<Bus> bus_;
};

}  // namespace echo::test
