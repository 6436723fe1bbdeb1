// SPDX-License-Identifier: MIT
// Shared by the job bus's per-node delivery tests (bus_fanout_*_test.cc): a queue by its base
// (shared or a member's) with its verbs, the membership verbs run as the engine runs them
// (Members), the claim answers read back, and the BusFanout fixture on table "users".
#pragma once

#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/script_client.h"

namespace echo::test {

using std::chrono::milliseconds;

// The job lane's shared queue of table "users" (docs/wire.md, "Names, keys and channels"): bus keys
// emq:{ecc.coh.users}:…
inline const std::string kQueue = "ecc.coh.users";

// A claim: {id, payload, attempts, g}; attempts is the fencing token.
struct Claimed {
  std::string id;
  std::string payload;
  long long token = 0;
  std::string group;
  friend bool operator==(const Claimed&, const Claimed&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const Claimed& c) {
  return os << "{" << c.id << ", \"" << c.payload << "\", " << c.token << ", " << c.group << "}";
}

// Reads {id, payload, att, g} from r->element[first..first+3]; false (with a failure) if malformed.
inline bool read_claim(const redisReply* r, std::size_t first, Claimed& out) {
  if (r->elements != first + 4 || r->element[first]->type != REDIS_REPLY_STRING ||
      r->element[first + 1]->type != REDIS_REPLY_STRING ||
      r->element[first + 2]->type != REDIS_REPLY_INTEGER ||
      r->element[first + 3]->type != REDIS_REPLY_STRING) {
    ADD_FAILURE() << "malformed claim in a reply of " << r->elements << " elements";
    return false;
  }
  out = {text(r->element[first]), text(r->element[first + 1]), r->element[first + 2]->integer,
         text(r->element[first + 3])};
  return true;
}

// gclaim's answer: nullopt when empty (a malformed reply fails the test and is nullopt too).
inline std::optional<Claimed> as_gclaim(const RedisReply& r) {
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 0) return std::nullopt;
  Claimed c;
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    ADD_FAILURE() << "gclaim answered " << text(r.get());
    return std::nullopt;
  }
  if (!read_claim(r.get(), 0, c)) return std::nullopt;
  return c;
}

// complete_claim's answer: the completion verdict, and the next claim if there was one.
struct CompleteClaimed {
  long long verdict = LLONG_MIN;
  std::optional<Claimed> next;
};

inline CompleteClaimed as_complete_claim(const RedisReply& r) {
  CompleteClaimed out;
  if (!r || r->type != REDIS_REPLY_ARRAY || (r->elements != 1 && r->elements != 5) ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    ADD_FAILURE() << "complete_claim answered " << text(r.get())
                  << (r && r->type == REDIS_REPLY_ARRAY
                          ? " of " + std::to_string(r->elements) + " elements"
                          : "");
    return out;
  }
  out.verdict = r->element[0]->integer;
  if (r->elements == 5) {
    Claimed c;
    if (read_claim(r.get(), 1, c)) out.next = c;
  }
  return out;
}

// A fan-out's verdicts {member, r}, in membership order, then {"*", r} for the shared queue;
// members that answered -1 (not live) are left out, as the writer leaves them out.
using Fanned = std::vector<std::pair<std::string, long long>>;

// A deliver-list element: id "\n" att "\n" g "\n" payload, split at the first three "\n" (the
// payload, last, may hold "\n" itself). This is the whole parser a consumer needs.
inline std::optional<Claimed> parse_delivered(std::string_view s) {
  std::string_view parts[3];
  for (auto& p : parts) {
    const std::size_t nl = s.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    p = s.substr(0, nl);
    s.remove_prefix(nl + 1);
  }
  if (parts[1].empty() || parts[1].find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return Claimed{std::string(parts[0]), std::string(s), std::stoll(std::string(parts[1])),
                 std::string(parts[2])};
}

// ScriptClient with the reads the fan-out tests add: a string, a list, and SCAN.
class Scripts : public ScriptClient {
 public:
  using ScriptClient::ScriptClient;

  std::string str(const char* format, const std::string& key) {
    return text(command(context(), format, key.c_str()).get());
  }
  std::vector<std::string> list(const char* format, const std::string& key) {
    RedisReply r = command(context(), format, key.c_str());
    std::vector<std::string> out;
    EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << format << " " << key << ": " << text(r.get());
    if (r && r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
    }
    return out;
  }
  // Every key matching the glob, by SCAN (what an operator would run; KEYS blocks the server).
  std::vector<std::string> scan(const std::string& match) {
    std::vector<std::string> out;
    std::string cursor = "0";
    do {
      RedisReply r =
          command(context(), "SCAN %s MATCH %s COUNT 1000", cursor.c_str(), match.c_str());
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        ADD_FAILURE() << "SCAN answered " << text(r.get());
        return out;
      }
      cursor = text(r->element[0]);
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        out.push_back(text(r->element[1]->element[i]));
      }
    } while (cursor != "0");
    return out;
  }
};

// One queue by its base: the shared queue emq:{q}: or a member queue emq:{q|<m>}:. The verbs of
// docs/wire.md, "Scripts", with their keys built from the base, so the existing scripts run on
// member keys unchanged.
class Queue {
 public:
  Queue(Scripts& s, std::string base) : s_(&s), base_(std::move(base)) {}

  const std::string& base() const { return base_; }
  std::string key(std::string_view suffix) const { return base_ + std::string(suffix); }
  std::string job(std::string_view id) const { return key("job:") + std::string(id); }
  std::string lane(std::string_view g) const { return key("g:") + std::string(g) + ":pending"; }

  RedisReply genqueue(const std::string& id, const std::string& payload, const std::string& g) {
    return s_->run(
        "genqueue",
        {job(id), lane(g), key("ring"), key("paused"), key("glimit"), key("gactive"), key("wake")},
        {id, payload, g});
  }
  RedisReply enqueue(const std::string& id, const std::string& payload) {
    return s_->run("enqueue", {job(id), key("pending")}, {id, payload});
  }
  std::optional<Claimed> gclaim(long long lease_ms) {
    return as_gclaim(
        s_->run("gclaim", {key("ring"), key("active")}, {base_, std::to_string(lease_ms)}));
  }
  RedisReply complete(const std::string& id, const std::string& token) {
    return s_->run("complete", {key("active"), job(id)}, {id, token, base_});
  }
  RedisReply retry(const std::string& id, const std::string& token, long long delay_ms,
                   long long max) {
    return s_->run("retry", {key("active"), key("schedule"), key("dead"), job(id)},
                   {id, token, std::to_string(delay_ms), std::to_string(max), "e", base_});
  }
  RedisReply promote() {
    return s_->run("promote", {key("schedule"), key("pending")}, {base_, "100"});
  }
  RedisReply reap() { return s_->run("reap", {key("active"), key("pending")}, {base_}); }
  RedisReply gpause(const std::string& g) {
    return s_->run("gpause", {key("paused"), key("ring")}, {g});
  }
  RedisReply gresume(const std::string& g) {
    return s_->run("gresume",
                   {key("paused"), key("ring"), key("glimit"), key("gactive"), key("wake")},
                   {base_, g});
  }
  RedisReply glimit(const std::string& g, long long n) {
    return s_->run("glimit",
                   {key("glimit"), key("gactive"), key("ring"), key("paused"), key("wake")},
                   {base_, g, std::to_string(n)});
  }
  CompleteClaimed complete_claim(const std::string& id, const std::string& token,
                                 long long lease_ms) {
    return as_complete_claim(s_->run("complete_claim", {key("active"), job(id), key("ring")},
                                     {id, token, base_, std::to_string(lease_ms)}));
  }

  // What the consumer does while it blocks (member_enqueue.lua's header): member_park lists as
  // many credits as it can take, each good for one hand-off; the queue must be in a state that
  // allows hand-offs.
  void park(long long px_ms, long long credits = 8) {
    RedisReply r = member_park(std::to_string(credits), std::to_string(px_ms));
    ASSERT_TRUE(is_integer(r, credits)) << text(r.get());
  }
  // member_park.lua: the credits listed from the consumer's free credits (returns the count).
  RedisReply member_park(const std::string& free, const std::string& px_ms) {
    return s_->run("member_park", {key("parked"), key("deliver")}, {free, px_ms, base_});
  }
  // Staging only: credits listed regardless of the queue's state (as if member_park had run
  // before the state changed by a way that does not take them down).
  void list_credits(long long n, long long px_ms) {
    for (long long i = 0; i < n; ++i)
      command(s_->context(), "RPUSH %s %s", key("parked").c_str(), "");
    command(s_->context(), "PEXPIRE %s %lld", key("parked").c_str(), px_ms);
  }
  long long credits() { return s_->integer("LLEN %s", key("parked")); }
  void unpark() { command(s_->context(), "DEL %s", key("parked").c_str()); }

  std::string hget(std::string_view k, const char* field) { return s_->hget(key(k), field); }
  std::string jobf(const std::string& id, const char* field) { return s_->hget(job(id), field); }
  long long zcard(const std::string& k) { return s_->integer("ZCARD %s", k); }
  long long llen(std::string_view k) { return s_->integer("LLEN %s", key(k)); }
  bool exists(const std::string& k) { return s_->integer("EXISTS %s", k) == 1; }
  std::vector<std::string> ring() { return s_->list("LRANGE %s 0 -1", key("ring")); }
  std::vector<std::string> deliver() { return s_->list("LRANGE %s 0 -1", key("deliver")); }

 private:
  Scripts* s_;
  std::string base_;
};

// The membership verbs of one shared queue, and its member queues, run as the engine runs them:
// a beat sets the member queue's live key, then member_beat; a fan-out sends member_enqueue to
// every listed member; a reap runs member_reap, then member_drop on each member it removed.
class Members {
 public:
  Members(Scripts& s, std::string queue)
      : s_(&s),
        queue_(std::move(queue)),
        qbase_(table::bus_key(queue_, "").value()),
        members_(qbase_ + "members"),
        epoch_(qbase_ + "mepoch") {}

  const std::string& qbase() const { return qbase_; }
  const std::string& key() const { return members_; }
  const std::string& epoch_key() const { return epoch_; }
  Queue shared() const { return Queue(*s_, qbase_); }
  Queue member(const std::string& m) const {
    return Queue(*s_, table::bus_key(queue_ + "|" + m, "").value());
  }

  // member_beat alone (its contract: validation, the zset, the epoch).
  RedisReply beat(const std::string& m, const std::string& ttl_ms) {
    return s_->run("member_beat", {members_, epoch_}, {m, ttl_ms});
  }
  // The consumer's beat: the live key (its value the declared lease; "-" declares none, so a
  // hand-off gets the writer's lease), then member_beat. Returns member_beat's now_ms.
  long long beat(const std::string& m, long long ttl_ms, const std::string& lease_ms = "-") {
    RedisReply set = command(s_->context(), "SET %s %s PX %lld", member(m).key("live").c_str(),
                             lease_ms.c_str(), ttl_ms);
    EXPECT_TRUE(set && set->type == REDIS_REPLY_STATUS) << "SET live: " << text(set.get());
    RedisReply r = beat(m, std::to_string(ttl_ms));
    const bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                    r->element[0]->type == REDIS_REPLY_INTEGER &&
                    r->element[1]->type == REDIS_REPLY_INTEGER;
    EXPECT_TRUE(ok) << "member_beat: " << text(r.get());
    return ok ? r->element[0]->integer : LLONG_MIN;
  }
  RedisReply enqueue_reply(const std::string& m, const std::string& id, const std::string& payload,
                           const std::string& g, const std::string& lease_ms = "30000") {
    Queue q = member(m);
    return s_->run("member_enqueue", {q.key("live")}, {q.base(), id, payload, g, lease_ms});
  }
  Fanned fanout(const std::string& id, const std::string& payload, const std::string& g,
                bool shared = false, long long lease_ms = 30000) {
    Fanned out;
    for (const std::string& m : listed()) {
      RedisReply r = enqueue_reply(m, id, payload, g, std::to_string(lease_ms));
      if (!r || r->type != REDIS_REPLY_INTEGER) {
        ADD_FAILURE() << "member_enqueue " << m << " answered " << text(r.get());
        return {};
      }
      if (r->integer >= 0) out.emplace_back(m, r->integer);
    }
    if (shared) {
      RedisReply r = this->shared().genqueue(id, payload, g);
      if (!r || r->type != REDIS_REPLY_INTEGER) {
        ADD_FAILURE() << "genqueue answered " << text(r.get());
        return {};
      }
      out.emplace_back("*", r->integer);
    }
    return out;
  }
  // The members member_reap removed; each one's queue is then dropped.
  long long reap(long long batch) {
    RedisReply r = s_->run("member_reap", {members_, epoch_}, {std::to_string(batch)});
    if (!r || r->type != REDIS_REPLY_ARRAY) {
      ADD_FAILURE() << "member_reap answered " << text(r.get());
      return LLONG_MIN;
    }
    for (std::size_t i = 0; i < r->elements; ++i) {
      Queue q = member(text(r->element[i]));
      RedisReply d = s_->run("member_drop", {q.key("live")}, {q.base()});
      EXPECT_TRUE(is_integer(d, 1)) << "member_drop " << q.base();
    }
    return static_cast<long long>(r->elements);
  }
  // Every listed member, live or not, in expiry order (what the writer reads).
  std::vector<std::string> listed() { return s_->list("ZRANGE %s 0 -1", members_); }
  std::vector<std::string> live() { return listed(); }
  long long epoch() {
    const std::string e = s_->str("GET %s", epoch_);
    return e == "(nil)" ? 0 : std::stoll(e);
  }
  void del_epoch() { s_->str("DEL %s", epoch_); }

 private:
  Scripts* s_;
  std::string queue_;
  std::string qbase_;
  std::string members_;
  std::string epoch_;
};

class BusFanout : public SingleServerTest {
 protected:
  void SetUp() override {
    SingleServerTest::SetUp();
    scripts_.emplace(client());
    members_.emplace(*scripts_, kQueue);
  }

  Scripts& s() { return *scripts_; }
  Members& mem() { return *members_; }
  std::string job_id() { return minter_.mint("JOB").value().str(); }
  std::string group_id() { return minter_.mint("PRT").value().str(); }
  long long dbsize() { return s().dbsize(); }
  std::vector<std::string> keys_of(const Queue& q) { return s().scan(q.base() + "*"); }

  table::Minter minter_{9};
  std::optional<Scripts> scripts_;
  std::optional<Members> members_;
};

inline Fanned all(std::initializer_list<std::string> ms, long long r) {
  Fanned out;
  for (const std::string& m : ms) out.emplace_back(m, r);
  return out;
}

// Claims everything q serves by gclaim and completes each with its token; returns the count.
inline std::size_t drain(Queue& q) {
  std::size_t n = 0;
  while (const auto c = q.gclaim(30000)) {
    EXPECT_TRUE(is_integer(q.complete(c->id, std::to_string(c->token)), 1)) << c->id;
    ++n;
  }
  return n;
}

}  // namespace echo::test
