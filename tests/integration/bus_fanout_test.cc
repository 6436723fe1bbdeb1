// SPDX-License-Identifier: MIT
// Per-node delivery on the job bus, at the script level against a real redis-server: member_beat
// registers members on the server's clock and moves the membership epoch when one enters;
// member_enqueue admits one job into one member's queue (dedup per queue), hands it already claimed
// to a parked member through its deliver list, and skips a member whose live key expired; the
// Members helper below runs it over the membership the way the writer does (engine.cc fan_out). A
// member queue is a full WIRE §5 queue of its own hash tag (gclaim, complete, reap, retry, promote
// run on it unchanged); complete_claim cuts a hop; member_reap takes expired members out and
// member_drop deletes every key of their queues. Every script stays in one slot, checked by
// hash_slot on every call and by a cluster-enabled server that refuses otherwise.
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
namespace {

using std::chrono::milliseconds;

// The job lane's shared queue of table "users" (WIRE §2): bus keys emq:{ecc.coh.users}:…
const std::string kQueue = "ecc.coh.users";

// A claim: {id, payload, attempts, g}; attempts is the fencing token.
struct Claimed {
  std::string id;
  std::string payload;
  long long token = 0;
  std::string group;
  friend bool operator==(const Claimed&, const Claimed&) = default;
};

std::ostream& operator<<(std::ostream& os, const Claimed& c) {
  return os << "{" << c.id << ", \"" << c.payload << "\", " << c.token << ", " << c.group << "}";
}

// Reads {id, payload, att, g} from r->element[first..first+3]; false (with a failure) if malformed.
bool read_claim(const redisReply* r, std::size_t first, Claimed& out) {
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
std::optional<Claimed> as_gclaim(const RedisReply& r) {
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

CompleteClaimed as_complete_claim(const RedisReply& r) {
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
std::optional<Claimed> parse_delivered(std::string_view s) {
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

// One queue by its base: the shared queue emq:{q}: or a member queue emq:{q|<m>}:. The WIRE §5.3
// verbs, with the keys of the contract built from the base, so the existing scripts run on member
// keys unchanged.
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

Fanned all(std::initializer_list<std::string> ms, long long r) {
  Fanned out;
  for (const std::string& m : ms) out.emplace_back(m, r);
  return out;
}

// Claims everything q serves by gclaim and completes each with its token; returns the count.
std::size_t drain(Queue& q) {
  std::size_t n = 0;
  while (const auto c = q.gclaim(30000)) {
    EXPECT_TRUE(is_integer(q.complete(c->id, std::to_string(c->token)), 1)) << c->id;
    ++n;
  }
  return n;
}

// ---- member_beat ----------------------------------------------------------------------------

TEST_F(BusFanout, BeatRegistersOnTheServerClockAndAShortTtlExpires) {
  const long long t0 = s().now_ms();
  const long long now = mem().beat("7", 2000);
  const long long t1 = s().now_ms();
  EXPECT_GE(now, t0);
  EXPECT_LE(now, t1);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(now + 2000));
  const std::string g = group_id();
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"7"}, 1));
  // A renewal moves the expiry, later or (a short ttl) sooner.
  const long long renewed = mem().beat("7", 60000);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(renewed + 60000));
  const long long last = mem().beat("7", 30);
  EXPECT_EQ(s().zscore(mem().key(), "7"), std::to_string(last + 30));
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), Fanned{});               // expired: nobody is fed
  EXPECT_EQ(mem().member("7").zcard(mem().member("7").lane(g)), 1);  // only the first job
  EXPECT_EQ(mem().live(), std::vector<std::string>{"7"});  // still listed until member_reap
}

TEST_F(BusFanout, BeatRefusesAMemberThatWouldBreakAKeyAndABadTtlAndWritesNothing) {
  for (const char* bad : {"", "a:b", "{x}", "a}", "a|b", "a b", "a\tb", "a\nb"}) {
    EXPECT_TRUE(is_error(mem().beat(bad, "1000"),
                         "EMQMEMBER member must be a non-empty token without braces, colons, bars "
                         "or spaces"))
        << "member \"" << bad << "\"";
  }
  for (const char* bad : {"0", "-5", "1.5", "x", ""}) {
    EXPECT_TRUE(is_error(mem().beat("1", bad), "EMQARG ttl_ms must be a positive integer"))
        << "ttl \"" << bad << "\"";
  }
  EXPECT_EQ(dbsize(), 0);
  EXPECT_GT(mem().beat("node-A.1", 1000), 0);  // any other token is a member
  EXPECT_NE(s().zscore(mem().key(), "node-A.1"), "(nil)");
  EXPECT_GT(mem().beat("1023", 1000), 0);
}

TEST_F(BusFanout, AnEpochKeyLostWithTheServersDataNeverComesBackAtAValueItHadBefore) {
  // Before the loss: two members entered, one reaped (e0, e0 + 1, e0 + 2). A writer may hold any
  // of these beside the membership it read with it.
  mem().beat("1", "60000");
  const long long e0 = mem().epoch();
  mem().beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  ASSERT_EQ(mem().epoch(), e0 + 2);
  // The data is lost; members come back and new ones join, reaped ones leave: none of the epochs
  // after the loss is one from before it (a counter restarted from 1 would come back to the
  // values a writer may still hold).
  RedisReply flushed = command(client(), "FLUSHALL");
  ASSERT_EQ(text(flushed.get()), "OK");
  std::vector<long long> after;
  mem().beat("1", "60000");  // came back: a new key, seeded by member_beat
  after.push_back(mem().epoch());
  mem().beat("3", 1);  // a new member
  after.push_back(mem().epoch());
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);  // and it leaves
  after.push_back(mem().epoch());
  mem().del_epoch();  // the epoch key alone lost (evicted): the next entry seeds it again
  mem().beat("4", 1);
  after.push_back(mem().epoch());
  std::this_thread::sleep_for(milliseconds(10));
  mem().del_epoch();  // and again: the next reap seeds it
  EXPECT_EQ(mem().reap(10), 1);
  after.push_back(mem().epoch());
  for (const long long e : after) {
    EXPECT_GT(e, e0 + 2) << "an epoch after the loss is not past every epoch before it";
  }
  EXPECT_EQ(after[1], after[0] + 1);
  EXPECT_EQ(after[2], after[0] + 2);
  EXPECT_GT(after[3], after[2]);
  EXPECT_GT(after[4], after[3]);
}

TEST_F(BusFanout, TheEpochMovesWhenAMemberEntersOrIsReapedAndNotOnARenewal) {
  EXPECT_EQ(mem().epoch(), 0);
  const long long before_ms = s().now_ms();
  RedisReply first = mem().beat("1", "60000");
  ASSERT_TRUE(first && first->type == REDIS_REPLY_ARRAY && first->elements == 2) << text(first.get());
  EXPECT_EQ(first->element[1]->integer, 1);  // entered
  // A new epoch key starts at the server's time in microseconds, not at 1.
  const long long e0 = mem().epoch();
  EXPECT_GE(e0, before_ms * 1000);
  EXPECT_LE(e0, (s().now_ms() + 1) * 1000);
  RedisReply renewed = mem().beat("1", "60000");
  ASSERT_TRUE(renewed && renewed->type == REDIS_REPLY_ARRAY && renewed->elements == 2);
  EXPECT_EQ(renewed->element[1]->integer, 0);  // already listed
  EXPECT_EQ(mem().epoch(), e0);
  mem().beat("2", 1);
  EXPECT_EQ(mem().epoch(), e0 + 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);  // one INCR for the whole batch
  EXPECT_EQ(mem().epoch(), e0 + 2);
  EXPECT_EQ(mem().reap(10), 0);  // nothing removed: the epoch stays
  EXPECT_EQ(mem().epoch(), e0 + 2);
  // Back after member_reap removed it: it entered anew (its node must drop its L1 rows).
  RedisReply back = mem().beat("2", "60000");
  ASSERT_TRUE(back && back->type == REDIS_REPLY_ARRAY && back->elements == 2);
  EXPECT_EQ(back->element[1]->integer, 1);
  EXPECT_EQ(mem().epoch(), e0 + 3);
  for (const char* bad : {"0", "-1", "x"}) {
    RedisReply r = s().run("member_reap", {mem().key(), mem().epoch_key()}, {bad});
    EXPECT_TRUE(is_error(r, "EMQARG batch must be a positive integer")) << bad;
  }
}

// ---- member_enqueue -------------------------------------------------------------------------

TEST_F(BusFanout, FanoutToThreeLiveMembersEnqueuesThreeAndASecondCallIsThreeDuplicates) {
  for (const char* m : {"1", "2", "3"}) mem().beat(m, 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "first", g), all({"1", "2", "3"}, 1));
  for (const char* m : {"1", "2", "3"}) {
    Queue q = mem().member(m);
    EXPECT_EQ(q.jobf(id, "state"), "pending") << m;
    EXPECT_EQ(q.jobf(id, "attempts"), "0") << m;
    EXPECT_EQ(q.jobf(id, "payload"), "first") << m;
    EXPECT_EQ(q.jobf(id, "group"), g) << m;
    EXPECT_EQ(s().zscore(q.lane(g), id), "0") << m;
    EXPECT_EQ(q.ring(), std::vector<std::string>{g}) << m;  // ring insert with wake
    EXPECT_EQ(q.llen("wake"), 1) << m;
    EXPECT_EQ(s().list("SMEMBERS %s", q.key("groups")), std::vector<std::string>{g}) << m;
    EXPECT_EQ(q.llen("deliver"), 0) << m;
  }
  EXPECT_EQ(mem().fanout(id, "second", g), all({"1", "2", "3"}, 0));
  for (const char* m : {"1", "2", "3"}) {
    Queue q = mem().member(m);
    EXPECT_EQ(q.jobf(id, "payload"), "first") << m;
    EXPECT_EQ(q.zcard(q.lane(g)), 1) << m;
    EXPECT_EQ(q.llen("wake"), 1) << m;  // a duplicate pushes no wake
  }
  // Nothing in the shared queue when shared is "0".
  EXPECT_FALSE(mem().shared().exists(mem().shared().job(id)));
}

TEST_F(BusFanout, DedupIsPerMemberQueue) {
  mem().beat("1", 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "p", g), all({"1"}, 1));
  mem().beat("2", 60000);  // joins after the first fanout
  EXPECT_EQ(mem().fanout(id, "p", g), (Fanned{{"1", 0}, {"2", 1}}));
}

TEST_F(BusFanout, AnExpiredMemberIsSkippedAndAJoinerIsFedOnlyFromItsBeat) {
  mem().beat("1", 60000);
  mem().beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  const std::string before = job_id(), after = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(before, "p", g), all({"1"}, 1));
  EXPECT_EQ(keys_of(mem().member("2")), std::vector<std::string>{});  // not one key written
  mem().beat("3", 60000);
  EXPECT_EQ(mem().fanout(after, "p", g), all({"1", "3"}, 1));
  Queue joiner = mem().member("3");
  EXPECT_FALSE(joiner.exists(joiner.job(before)));
  EXPECT_TRUE(joiner.exists(joiner.job(after)));
  EXPECT_EQ(keys_of(mem().member("2")), std::vector<std::string>{});
}

TEST_F(BusFanout, SharedOneAlsoGenqueuesIntoTheSharedQueueUnderStar) {
  mem().beat("1", 60000);
  const std::string id = job_id(), g = group_id();
  EXPECT_EQ(mem().fanout(id, "p", g, true), (Fanned{{"1", 1}, {"*", 1}}));
  Queue shared = mem().shared();
  EXPECT_EQ(shared.jobf(id, "state"), "pending");
  EXPECT_EQ(shared.jobf(id, "group"), g);
  EXPECT_EQ(s().zscore(shared.lane(g), id), "0");
  EXPECT_EQ(shared.ring(), std::vector<std::string>{g});
  EXPECT_EQ(shared.llen("wake"), 1);
  EXPECT_FALSE(shared.exists(shared.key("groups")));  // the original's queue gains no new key
  EXPECT_EQ(mem().fanout(id, "p", g, true), (Fanned{{"1", 0}, {"*", 0}}));
  // With no live member, only the shared queue.
  Members none(s(), "ecc.coh.other");
  EXPECT_EQ(none.fanout(job_id(), "p", g, true), (Fanned{{"*", 1}}));
  // The original's consumer claims it from the shared queue unchanged.
  const auto c = shared.gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (Claimed{id, "p", 1, g}));
  EXPECT_TRUE(is_integer(shared.complete(id, "1"), 1));
}

TEST_F(BusFanout, AParkedMemberIsHandedTheJobClaimedAndAnUnparkedOneGetsALaneEntryAndAWake) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue unparked = mem().member("1"), parked = mem().member("2");
  parked.park(10000);
  const std::string id = job_id(), g = group_id();
  const std::string payload = "AST0KHTOWnGLuC:TXN0NgWEfAEJfs\nwith a newline";
  const long long t0 = s().now_ms();
  EXPECT_EQ(mem().fanout(id, payload, g, false, 5000), (Fanned{{"1", 1}, {"2", 2}}));
  const long long t1 = s().now_ms();

  // The hand-off: one deliver element, the job claimed as gclaim would (token 1, lease, gactive).
  const auto delivered = parked.deliver();
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0], id + "\n1\n" + g + "\n" + payload);
  EXPECT_EQ(parse_delivered(delivered[0]), (Claimed{id, payload, 1, g}));
  EXPECT_EQ(parked.jobf(id, "state"), "active");
  EXPECT_EQ(parked.jobf(id, "attempts"), "1");
  EXPECT_EQ(parked.jobf(id, "payload"), payload);
  EXPECT_EQ(parked.jobf(id, "group"), g);
  const long long deadline = std::stoll(s().zscore(parked.key("active"), id));
  EXPECT_GE(deadline, t0 + 5000);
  EXPECT_LE(deadline, t1 + 5000);
  EXPECT_EQ(parked.hget("gactive", g.c_str()), "1");
  EXPECT_EQ(parked.zcard(parked.lane(g)), 0);
  EXPECT_EQ(parked.ring(), std::vector<std::string>{});
  EXPECT_EQ(parked.llen("wake"), 0);  // the deliver push is what unblocks the consumer
  // No lane entry, so no groups entry: member_drop finds a hand-off through active.
  EXPECT_FALSE(parked.exists(parked.key("groups")));

  // The unparked member: a lane entry, the group in the ring, one wake.
  EXPECT_EQ(unparked.jobf(id, "state"), "pending");
  EXPECT_EQ(s().zscore(unparked.lane(g), id), "0");
  EXPECT_EQ(unparked.ring(), std::vector<std::string>{g});
  EXPECT_EQ(unparked.llen("wake"), 1);
  EXPECT_EQ(unparked.llen("deliver"), 0);

  // The handed-off job completes with its token like any claimed job, and a replay is a
  // duplicate (the row exists in any state).
  EXPECT_EQ(mem().fanout(id, payload, g), all({"1", "2"}, 0));
  EXPECT_TRUE(is_integer(parked.complete(id, "1"), 1));
  EXPECT_EQ(parked.hget("gactive", g.c_str()), "(nil)");
  // Once its credits are gone (here DELeted, as a consumer that stops does) the next job goes to
  // the lane.
  parked.unpark();
  const std::string next = job_id();
  EXPECT_EQ(mem().fanout(next, "p", g), all({"1", "2"}, 1));
  EXPECT_EQ(parked.llen("deliver"), 1);  // still the first element only (the test never popped)
  EXPECT_EQ(s().zscore(parked.lane(g), next), "0");
}

TEST_F(BusFanout, MemberParkListsNoCreditWhereAClaimWouldBeIllegalOrOutOfOrder) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), other = group_id(), limited = group_id();
  // Lane g already holds an older job: a handed-off newer one would overtake it.
  const std::string older = job_id(), newer = job_id();
  ASSERT_TRUE(is_integer(q.genqueue(older, "p", g), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(mem().fanout(newer, "p", g), all({"1"}, 1));
  EXPECT_EQ(q.llen("deliver"), 0);
  EXPECT_EQ(q.zcard(q.lane(g)), 2);
  ASSERT_EQ(drain(q), 2u);
  q.park(10000);  // the lanes ran dry: credits again
  q.unpark();
  // A group paused (its lane empty or not).
  ASSERT_TRUE(is_integer(q.gpause(other), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 1));  // any group: the lane
  ASSERT_TRUE(is_integer(q.gresume(other), 1));
  ASSERT_EQ(drain(q), 1u);
  // A ceiling: never more credits than the room under the lowest one, none at a ceiling.
  ASSERT_TRUE(is_integer(q.glimit(limited, 2), 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 2));
  EXPECT_EQ(q.hget("gactive", limited.c_str()), "2");  // at its ceiling, never past it
  EXPECT_EQ(mem().fanout(job_id(), "p", limited), all({"1"}, 1));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  for (const auto& handed : q.deliver()) {
    const auto c = parse_delivered(handed);
    ASSERT_TRUE(c);
    EXPECT_TRUE(is_integer(q.complete(c->id, std::to_string(c->token)), 1));
  }
  command(s().context(), "DEL %s", q.key("deliver").c_str());
  ASSERT_EQ(drain(q), 1u);
  ASSERT_TRUE(is_integer(q.glimit(limited, 1000), 1));  // WIRE lifts a ceiling by raising it
  q.park(10000);
  q.unpark();
  // The queue paused (meta paused): the host would not claim, so no hand-off either.
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  command(s().context(), "HDEL %s paused", q.key("meta").c_str());
  q.park(10000);
  q.unpark();
  // Not live.
  command(s().context(), "DEL %s", q.key("live").c_str());
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(q.llen("deliver"), 0);  // nothing was ever handed off
}

TEST_F(BusFanout, WhateverMakesAHandOffIllegalOrOutOfOrderTakesTheCreditsDown) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id();
  // A lane gains work (any ring entry: genqueue here; reap, promote and a completion that frees a
  // slot enter through the same ring insert): the next job must queue behind it.
  q.park(10000);
  const std::string older = job_id(), newer = job_id();
  ASSERT_TRUE(is_integer(q.genqueue(older, "p", g), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_EQ(mem().fanout(newer, "p", g), all({"1"}, 1));
  EXPECT_EQ(q.gclaim(30000)->id, older);
  EXPECT_EQ(q.gclaim(30000)->id, newer);
  // gpause, glimit.
  q.park(10000);
  ASSERT_TRUE(is_integer(q.gpause(group_id()), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  command(s().context(), "DEL %s", q.key("paused").c_str());
  q.park(10000);
  ASSERT_TRUE(is_integer(q.glimit(group_id(), 3), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  command(s().context(), "DEL %s", q.key("glimit").c_str());
  // gresume's own ring insert (credits listed while a group was paused can only come from
  // outside our scripts: staged here).
  const std::string paused = group_id(), waiting = job_id();
  ASSERT_TRUE(is_integer(q.gpause(paused), 1));
  ASSERT_TRUE(is_integer(q.genqueue(waiting, "p", paused), 1));
  q.list_credits(4, 10000);
  ASSERT_TRUE(is_integer(q.gresume(paused), 1));
  EXPECT_FALSE(q.exists(q.key("parked")));
  ASSERT_EQ(drain(q), 1u);
  // A plain HSET meta paused has no script to take the credits down: the credits listed before
  // it still hand off (member_park.lua: until the consumer's next member_park, within a beat).
  q.park(10000, 1);
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 2));
  EXPECT_TRUE(is_integer(q.member_park("8", "10000"), -1));
  EXPECT_EQ(mem().fanout(job_id(), "p", g), all({"1"}, 1));
}

// The credits' promise under random interleavings of every script that touches a member queue
// (fixed seed): whenever credits are listed, that many claims of new jobs would be legal and in
// order (live, nothing paused, every lane empty, no group pushed past its ceiling); an admission
// hands off exactly when a credit is listed, and never otherwise.
TEST_F(BusFanout, UnderRandomScriptInterleavingsAListedCreditAlwaysMeansAHandOffIsLegal) {
  mem().beat("1", 600000);
  Queue q = mem().member("1");
  std::mt19937 rng(20261130);
  const std::vector<std::string> groups = {group_id(), group_id(), group_id()};
  std::vector<Claimed> held;  // claimed from a lane or taken from deliver, not yet let go
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  // Legal for `credits` hand-offs: live, nothing paused, every lane empty, and that many more in
  // flight in any one group keeps it within its ceiling.
  auto legal = [&](long long credits) {
    long long lanes = 0, room = LLONG_MAX;
    for (const auto& g : groups) {
      lanes += q.zcard(q.lane(g));
      const std::string limit = q.hget("glimit", g.c_str()), act = q.hget("gactive", g.c_str());
      if (limit != "(nil)")
        room = std::min(room, std::stoll(limit) - (act == "(nil)" ? 0 : std::stoll(act)));
    }
    return q.exists(q.key("live")) && !q.exists(q.key("meta")) &&
           s().integer("SCARD %s", q.key("paused")) == 0 && lanes == 0 && credits <= room;
  };
  int handed = 0, laned = 0, parks_listed = 0;
  for (int step = 0; step < 3000; ++step) {
    if (step % 60 == 0) {
      // Back to a clean queue now and then (as an operator and the consumer would bring it), so
      // the walk keeps reaching the states where credits are listed.
      for (const auto& gg : groups) {
        ASSERT_TRUE(is_integer(q.gresume(gg), 1));
        if (q.hget("glimit", gg.c_str()) != "(nil)") {
          ASSERT_TRUE(is_integer(q.glimit(gg, 1000), 1));
        }
      }
      for (const Claimed& c : held) q.complete(c.id, std::to_string(c.token));
      held.clear();
      drain(q);
    }
    const std::string& g = groups[pick(groups.size())];
    // Weighted so the walk keeps coming back to a clean queue: pauses and ceilings are rarer
    // than what lifts them, and claims and completions drain the lanes.
    static constexpr int kWeights[] = {12, 2, 2, 10, 2, 10, 25, 8, 15, 2, 12};
    int roll = static_cast<int>(pick(100)), op = 0;
    while (roll >= kWeights[op]) roll -= kWeights[op++];
    switch (op) {
      case 0: {
        RedisReply r = q.member_park(std::to_string(1 + pick(4)), "600000");
        ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << text(r.get());
        parks_listed += r->integer > 0;
        break;
      }
      case 1:
        ASSERT_TRUE(is_integer(q.genqueue(job_id(), "p", g), 1));
        break;
      case 2:
        ASSERT_TRUE(is_integer(q.gpause(g), 1));
        break;
      case 3:
        ASSERT_TRUE(is_integer(q.gresume(g), 1));
        break;
      case 4:
        ASSERT_TRUE(is_integer(q.glimit(g, 1 + static_cast<long long>(pick(2))), 1));
        break;
      case 5:  // WIRE has no verb that removes a ceiling: a high one lifts it (and re-enters the
               // ring)
        ASSERT_TRUE(is_integer(q.glimit(g, 1000), 1));
        break;
      case 6:
        if (auto c = q.gclaim(pick(4) == 0 ? 1 : 600000)) held.push_back(*c);
        break;
      case 7: {  // the consumer takes one hand-off from its deliver list
        RedisReply r = command(s().context(), "LPOP %s", q.key("deliver").c_str());
        if (r && r->type == REDIS_REPLY_STRING) {
          auto c = parse_delivered(std::string_view(r->str, r->len));
          ASSERT_TRUE(c);
          held.push_back(*c);
        }
        break;
      }
      case 8:  // let one go: complete, or retry at once (then promote puts it back in its lane)
        if (!held.empty()) {
          const std::size_t i = pick(held.size());
          if (pick(3) == 0) {
            q.retry(held[i].id, std::to_string(held[i].token), 0, 5);
            q.promote();
          } else {
            q.complete(held[i].id, std::to_string(held[i].token));
          }
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 9:  // leases of 1 ms run out: reap puts those jobs back in their lanes
        std::this_thread::sleep_for(milliseconds(2));
        q.reap();
        break;
      default: {
        const long long credits = q.credits();
        const bool was_legal = legal(credits);
        const std::string id = job_id();
        EXPECT_EQ(mem().fanout(id, "p", g), all({"1"}, credits > 0 ? 2 : 1)) << "step " << step;
        (credits > 0 ? handed : laned) += 1;
        EXPECT_TRUE(credits == 0 || was_legal)
            << "step " << step << ": a credit was listed while a claim was illegal";
        break;
      }
    }
    ASSERT_TRUE(legal(q.credits()) || q.credits() == 0)
        << "step " << step << ": a credit outlived what it vouches for";
  }
  // The walk exercised both outcomes, and credits were listed again after being taken down.
  EXPECT_GT(handed, 20);
  EXPECT_GT(laned, 20);
  EXPECT_GT(parks_listed, 20);
}

TEST_F(BusFanout, HandOffsAreBoundedByTheListedCreditsWhichEachOneTakes) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  q.park(10000, 2);
  const std::string g1 = group_id(), g2 = group_id(), g3 = group_id();
  EXPECT_EQ(mem().fanout(job_id(), "p", g1), all({"1"}, 2));
  EXPECT_EQ(q.credits(), 1);
  const long long pttl = s().integer("PTTL %s", q.key("parked"));
  EXPECT_GT(pttl, 0);  // LPOP keeps the list's PX
  EXPECT_LE(pttl, 10000);
  const std::string dup = job_id();
  EXPECT_EQ(mem().fanout(dup, "p", g2), all({"1"}, 2));
  EXPECT_FALSE(q.exists(q.key("parked")));  // the last LPOP took the list
  // Four free less the two handed off and still listed on deliver.
  EXPECT_TRUE(is_integer(q.member_park("4", "10000"), 2));
  // A duplicate takes no credit.
  EXPECT_EQ(mem().fanout(dup, "p", g2), all({"1"}, 0));
  EXPECT_EQ(q.credits(), 2);
  EXPECT_EQ(mem().fanout(job_id(), "p", g1), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", g2), all({"1"}, 2));
  EXPECT_FALSE(q.exists(q.key("parked")));
  // Out of credits: the lane and a wake, as for a consumer that is not parked.
  const std::string third = job_id();
  EXPECT_EQ(mem().fanout(third, "p", g3), all({"1"}, 1));
  EXPECT_EQ(q.llen("deliver"), 4);
  EXPECT_EQ(s().zscore(q.lane(g3), third), "0");
  EXPECT_EQ(q.llen("wake"), 1);
}

TEST_F(BusFanout, MemberParkListsTheFreeCreditsLessTheListedHandOffsOrDeletesTheList) {
  mem().beat("1", 60000, "900");
  Queue q = mem().member("1");
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 3));
  EXPECT_EQ(s().list("LRANGE %s 0 -1", q.key("parked")),
            (std::vector<std::string>{"900", "900", "900"}));  // each credit: the member's lease
  const long long pttl = s().integer("PTTL %s", q.key("parked"));
  EXPECT_GT(pttl, 4000);
  EXPECT_LE(pttl, 5000);
  // Two hand-offs listed and not yet taken count against the consumer's free credits.
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 2));
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 2));
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 1));
  EXPECT_EQ(q.credits(), 1);
  EXPECT_TRUE(is_integer(q.member_park("2", "5000"), 0));
  EXPECT_FALSE(q.exists(q.key("parked")));
  EXPECT_TRUE(is_integer(q.member_park("0", "5000"), 0));
  EXPECT_FALSE(q.exists(q.key("parked")));
  // More credits than one RPUSH carries (512 per call).
  command(s().context(), "DEL %s", q.key("deliver").c_str());
  EXPECT_TRUE(is_integer(q.member_park("1300", "5000"), 1300));
  EXPECT_EQ(q.credits(), 1300);
  // The credits never outlive the live key: their PX is at most its PTTL.
  mem().beat("1", 2000, "900");
  EXPECT_TRUE(is_integer(q.member_park("3", "5000"), 3));
  EXPECT_LE(s().integer("PTTL %s", q.key("parked")), 2000);
  for (const auto& [free, px] : std::vector<std::pair<std::string, std::string>>{
           {"-1", "5000"}, {"x", "5000"}, {"1.5", "5000"}, {"1", "0"}, {"1", "x"}}) {
    EXPECT_TRUE(is_error(q.member_park(free, px),
                         "EMQARG free must be an integer >= 0 and px_ms a positive integer"))
        << free << " " << px;
  }
  EXPECT_EQ(q.credits(), 3);  // an argument error writes nothing
}

TEST_F(BusFanout, AHandOffIsLeasedForTheMembersDeclaredLeaseNotTheWritersArgument) {
  mem().beat("1", 60000, "700");
  mem().beat("2", 60000);      // declares none ("-"): the writer's argument
  mem().beat("3", 60000, "x");  // not a positive integer: the writer's argument too
  Queue declared = mem().member("1"), plain = mem().member("2"), odd = mem().member("3");
  EXPECT_EQ(s().str("GET %s", declared.key("live")), "700");
  for (Queue* q : {&declared, &plain, &odd}) q->park(10000);
  const std::string id = job_id();
  const long long t0 = s().now_ms();
  EXPECT_EQ(mem().fanout(id, "p", group_id(), false, 30000), all({"1", "2", "3"}, 2));
  const long long d1 = std::stoll(s().zscore(declared.key("active"), id)) - t0;
  const long long d2 = std::stoll(s().zscore(plain.key("active"), id)) - t0;
  const long long d3 = std::stoll(s().zscore(odd.key("active"), id)) - t0;
  EXPECT_GE(d1, 700);
  EXPECT_LT(d1, 1700);
  EXPECT_GE(d2, 30000);
  EXPECT_LT(d2, 31000);
  EXPECT_GE(d3, 30000);
  EXPECT_LT(d3, 31000);
}

TEST_F(BusFanout, AMemberWhoseLiveKeyExpiredAnswersMinus1AndNothingIsWrittenInItsQueue) {
  mem().beat("1", 60000);
  mem().beat("2", 30);
  std::this_thread::sleep_for(milliseconds(60));
  Queue gone = mem().member("2");
  EXPECT_EQ(keys_of(gone), std::vector<std::string>{});
  RedisReply r = mem().enqueue_reply("2", job_id(), "p", group_id());
  EXPECT_TRUE(is_integer(r, -1));
  EXPECT_EQ(keys_of(gone), std::vector<std::string>{});
  // Still listed (member_reap has not run): the writer sends, the member answers -1.
  EXPECT_EQ(mem().listed(), (std::vector<std::string>{"2", "1"}));
  EXPECT_EQ(mem().fanout(job_id(), "p", group_id()), all({"1"}, 1));
}

// ---- a member queue is a full WIRE §5 queue -------------------------------------------------

TEST_F(BusFanout, TheWireScriptsRunUnchangedOnAMemberQueue) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id(), c = job_id();
  for (const auto& id : {a, b, c}) ASSERT_EQ(mem().fanout(id, "p-" + id, g), all({"1", "2"}, 1));
  EXPECT_EQ(q.gclaim(30000), (Claimed{a, "p-" + a, 1, g}));
  EXPECT_TRUE(is_integer(q.complete(a, "1"), 1));
  EXPECT_FALSE(q.exists(q.job(a)));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "1");
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "p-" + b, 1, g}));
  ASSERT_EQ(std::string(text(q.retry(b, "1", 0, 3).get())), "scheduled");
  EXPECT_TRUE(is_integer(q.promote(), 1));
  // Lane order is mint order: b (retried, back in the lane) before c.
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "p-" + b, 2, g}));
  EXPECT_EQ(q.gclaim(30000), (Claimed{c, "p-" + c, 1, g}));
  EXPECT_FALSE(q.gclaim(30000));
  // Member 2's queue is untouched by member 1's consumer.
  Queue other = mem().member("2");
  EXPECT_EQ(other.zcard(other.lane(g)), 3);
  EXPECT_EQ(other.zcard(other.key("active")), 0);
}

TEST_F(BusFanout, AHandOffWhoseLeaseRunsOutIsReapedToTheLaneAndReclaimedWithToken2) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  q.park(10000);
  const std::string id = job_id(), g = group_id();
  ASSERT_EQ(mem().fanout(id, "p", g, false, 30), all({"1"}, 2));
  // The consumer died after the RPUSH: nobody pops the deliver list or completes.
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_TRUE(is_integer(q.reap(), 1));
  EXPECT_EQ(q.jobf(id, "state"), "pending");
  EXPECT_EQ(q.jobf(id, "attempts"), "1");
  EXPECT_EQ(s().zscore(q.lane(g), id), "0");
  EXPECT_EQ(q.ring(), std::vector<std::string>{g});
  EXPECT_EQ(q.llen("wake"), 1);
  EXPECT_EQ(q.hget("gactive", g.c_str()), "(nil)");
  EXPECT_EQ(q.gclaim(30000), (Claimed{id, "p", 2, g}));
  // The lost holder's token is fenced off; the new holder completes.
  EXPECT_TRUE(is_error(q.complete(id, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_integer(q.complete(id, "2"), 1));
  EXPECT_FALSE(q.exists(q.job(id)));
}

// ---- complete_claim -------------------------------------------------------------------------

TEST_F(BusFanout, CompleteClaimCompletesAndClaimsTheNextInOneCall) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(30000), (Claimed{a, "pa", 1, g}));
  const long long t0 = s().now_ms();
  const CompleteClaimed r = q.complete_claim(a, "1", 4000);
  const long long t1 = s().now_ms();
  EXPECT_EQ(r.verdict, 1);
  EXPECT_EQ(r.next, (Claimed{b, "pb", 1, g}));
  EXPECT_FALSE(q.exists(q.job(a)));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "1");
  EXPECT_EQ(q.jobf(b, "state"), "active");
  const long long deadline = std::stoll(s().zscore(q.key("active"), b));
  EXPECT_GE(deadline, t0 + 4000);
  EXPECT_LE(deadline, t1 + 4000);
  EXPECT_EQ(q.zcard(q.key("active")), 1);  // a left, b entered
  EXPECT_EQ(q.hget("gactive", g.c_str()), "1");
  EXPECT_EQ(q.ring(), std::vector<std::string>{});  // lane drained
  // The last one: completed, nothing to claim.
  const CompleteClaimed last = q.complete_claim(b, "1", 4000);
  EXPECT_EQ(last.verdict, 1);
  EXPECT_FALSE(last.next);
  EXPECT_EQ(q.hget("gactive", g.c_str()), "(nil)");
  EXPECT_EQ(q.hget("metrics:completed", "count"), "2");
  // Gone: the row no longer exists; still a claim if there is work.
  const std::string c = job_id();
  ASSERT_EQ(mem().fanout(c, "pc", g), all({"1"}, 1));
  const CompleteClaimed gone = q.complete_claim(b, "1", 4000);
  EXPECT_EQ(gone.verdict, 0);
  EXPECT_EQ(gone.next, (Claimed{c, "pc", 1, g}));
  EXPECT_EQ(q.hget("metrics:completed", "count"), "2");
}

TEST_F(BusFanout, CompleteClaimWithAStaleTokenAnswersMinus1ChangesNothingAndStillClaims) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(20), (Claimed{a, "pa", 1, g}));
  std::this_thread::sleep_for(milliseconds(40));
  ASSERT_TRUE(is_integer(q.reap(), 1));
  ASSERT_EQ(q.gclaim(30000), (Claimed{a, "pa", 2, g}));  // a second holder
  // The first holder finishes late with token 1.
  const CompleteClaimed r = q.complete_claim(a, "1", 30000);
  EXPECT_EQ(r.verdict, -1);
  EXPECT_EQ(r.next, (Claimed{b, "pb", 1, g}));
  EXPECT_EQ(q.jobf(a, "state"), "active");  // the second holder's job is untouched
  EXPECT_EQ(q.jobf(a, "attempts"), "2");
  EXPECT_NE(s().zscore(q.key("active"), a), "(nil)");
  EXPECT_EQ(q.hget("metrics:completed", "count"), "(nil)");
  EXPECT_EQ(q.hget("gactive", g.c_str()), "2");
  // Tokens compare as strings: "02" is not the row's "2".
  EXPECT_EQ(q.complete_claim(a, "02", 30000).verdict, -1);
  const CompleteClaimed ok = q.complete_claim(a, "2", 30000);
  EXPECT_EQ(ok.verdict, 1);
  EXPECT_FALSE(ok.next);
}

TEST_F(BusFanout, CompleteClaimOnAPausedQueueCompletesButDoesNotClaim) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "pa", g), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b, "pb", g), all({"1"}, 1));
  ASSERT_TRUE(q.gclaim(30000));
  command(s().context(), "HSET %s paused 1", q.key("meta").c_str());
  const CompleteClaimed r = q.complete_claim(a, "1", 30000);
  EXPECT_EQ(r.verdict, 1);
  EXPECT_FALSE(r.next);
  EXPECT_EQ(q.jobf(b, "state"), "pending");
  command(s().context(), "HDEL %s paused", q.key("meta").c_str());
  EXPECT_EQ(q.gclaim(30000), (Claimed{b, "pb", 1, g}));
}

TEST_F(BusFanout, CompleteClaimRoundRobinsLikeGclaim) {
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string g1 = group_id(), g2 = group_id();
  const std::string a1 = job_id(), a2 = job_id(), b1 = job_id();
  ASSERT_EQ(mem().fanout(a1, "p", g1), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(a2, "p", g1), all({"1"}, 1));
  ASSERT_EQ(mem().fanout(b1, "p", g2), all({"1"}, 1));
  ASSERT_EQ(q.gclaim(30000)->id, a1);
  const CompleteClaimed r = q.complete_claim(a1, "1", 30000);
  ASSERT_TRUE(r.next);
  EXPECT_EQ(r.next->id, b1);  // g2's turn, though g1 still has a2
  const CompleteClaimed r2 = q.complete_claim(b1, "1", 30000);
  ASSERT_TRUE(r2.next);
  EXPECT_EQ(r2.next->id, a2);
}

// ---- member_reap ----------------------------------------------------------------------------

TEST_F(BusFanout, MemberReapDeletesEveryKeyOfAnExpiredMemberAndLeavesLiveOnesIntact) {
  mem().beat("1", 60000);
  mem().beat("2", 60000);
  Queue live = mem().member("1"), dead = mem().member("2");
  const std::string g = group_id(), h = group_id();
  // Fill member 2's queue with every kind of key: lanes in two groups, a hand-off (active and
  // deliver), a scheduled and a dead job, a flat pending job, pause, limit, meta, metrics.
  dead.park(60000);
  const std::string handed = job_id();
  ASSERT_EQ(mem().fanout(handed, "p", g), (Fanned{{"1", 1}, {"2", 2}}));
  dead.unpark();
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(mem().fanout(job_id(), "p", g), (Fanned{{"1", 1}, {"2", 1}}));
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(mem().fanout(job_id(), "p", h), (Fanned{{"1", 1}, {"2", 1}}));
  const auto to_schedule = dead.gclaim(30000);
  ASSERT_TRUE(to_schedule);
  ASSERT_EQ(text(dead.retry(to_schedule->id, "1", 600000, 3).get()), "scheduled");
  const auto to_kill = dead.gclaim(30000);
  ASSERT_TRUE(to_kill);
  ASSERT_EQ(text(dead.retry(to_kill->id, "1", 0, 1).get()), "dead");
  const auto done = dead.gclaim(30000);
  ASSERT_TRUE(done);
  ASSERT_TRUE(is_integer(dead.complete(done->id, "1"), 1));
  ASSERT_TRUE(is_integer(dead.enqueue(job_id(), "flat"), 1));
  ASSERT_TRUE(is_integer(dead.gpause(h), 1));
  ASSERT_TRUE(is_integer(dead.glimit(g, 9), 1));
  command(s().context(), "HSET %s paused 1", dead.key("meta").c_str());
  dead.list_credits(8, 60000);  // as if its consumer died while blocked
  const std::vector<std::string> before = keys_of(dead);
  for (const char* k :
       {"pending", "active", "schedule", "dead", "ring", "paused", "glimit", "gactive", "wake",
        "deliver", "parked", "meta", "groups", "metrics:completed", "metrics:failed", "live"}) {
    EXPECT_TRUE(dead.exists(dead.key(k))) << k << " was not staged, so its deletion is unproved";
  }
  ASSERT_GE(before.size(), 20u);
  const auto live_before = keys_of(live);
  ASSERT_GE(live_before.size(), 8u);

  // Not expired yet: nothing reclaimed.
  EXPECT_EQ(mem().reap(10), 0);
  EXPECT_EQ(keys_of(dead).size(), before.size());

  mem().beat("2", 1);  // its last beat, with a ttl that runs out at once
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(keys_of(dead), std::vector<std::string>{});
  EXPECT_EQ(mem().live(), std::vector<std::string>{"1"});
  auto live_after = keys_of(live);
  std::sort(live_after.begin(), live_after.end());
  auto live_expected = live_before;
  std::sort(live_expected.begin(), live_expected.end());
  EXPECT_EQ(live_after, live_expected);
  EXPECT_EQ(live.zcard(live.lane(g)), 4);
  EXPECT_EQ(live.zcard(live.lane(h)), 3);
  EXPECT_EQ(mem().reap(10), 0);
  // Every key left is the live member's, the members set, the epoch, or nothing else.
  for (const std::string& k : s().scan("*")) {
    EXPECT_TRUE(k == mem().key() || k == mem().epoch_key() || k.starts_with(live.base())) << k;
  }
  // A rejoin starts from an empty queue.
  mem().beat("2", 60000);
  const std::string fresh = job_id();
  EXPECT_EQ(mem().fanout(fresh, "p", g), (Fanned{{"1", 1}, {"2", 1}}));
  EXPECT_EQ(dead.zcard(dead.lane(g)), 1);
}

TEST_F(BusFanout, MemberDropFindsALaneThatOnlyAReapedHandOffCreated) {
  // A handed-off job never enters the groups set; when its lease runs out, reap puts it in its
  // lane (and the group in the ring). If the member then lapses before it claims the job again,
  // member_drop must still find that lane (through the ring, or paused, or glimit).
  mem().beat("1", 60000);
  Queue q = mem().member("1");
  const std::string in_ring = group_id(), paused = group_id(), limited = group_id();
  q.park(10000, 3);
  for (const std::string& g : {in_ring, paused, limited}) {
    ASSERT_EQ(mem().fanout(job_id(), "p", g, false, 1), all({"1"}, 2));
  }
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(is_integer(q.gpause(paused), 1));
  ASSERT_TRUE(is_integer(q.glimit(limited, 1), 1));
  // Its handed-off job and one more in flight: still at its ceiling once reap gives one back.
  command(s().context(), "HSET %s %s 2", q.key("gactive").c_str(), limited.c_str());
  ASSERT_TRUE(is_integer(q.reap(), 3));
  EXPECT_FALSE(q.exists(q.key("groups")));
  EXPECT_EQ(q.ring(), std::vector<std::string>{in_ring});  // the other two are held out
  for (const std::string& g : {in_ring, paused, limited}) ASSERT_EQ(q.zcard(q.lane(g)), 1) << g;
  mem().beat("1", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(keys_of(q), std::vector<std::string>{});
}

TEST_F(BusFanout, MemberReapTakesAtMostItsBatchAndOnlyExpiredMembers) {
  for (const char* m : {"1", "2", "3"}) mem().beat(m, 1);
  mem().beat("4", 60000);
  std::this_thread::sleep_for(milliseconds(10));
  const std::string g = group_id();
  ASSERT_EQ(mem().fanout(job_id(), "p", g), all({"4"}, 1));
  EXPECT_EQ(mem().reap(2), 2);
  EXPECT_EQ(mem().reap(2), 1);
  EXPECT_EQ(mem().reap(2), 0);
  EXPECT_EQ(mem().live(), std::vector<std::string>{"4"});
  // Scores set directly: one live for a minute, one a millisecond in the past.
  command(s().context(), "ZADD %s %lld 5", mem().key().c_str(), s().now_ms() + 60000);
  command(s().context(), "ZADD %s %lld 6", mem().key().c_str(), s().now_ms() - 1);
  EXPECT_EQ(mem().reap(10), 1);
  EXPECT_EQ(mem().live(), (std::vector<std::string>{"4", "5"}));
}

// ---- policy and slots -----------------------------------------------------------------------

TEST_F(BusFanout, AnOrdIdIsRefusedWithEmqkindAndABadLeaseWithEmqargAndNothingIsWritten) {
  for (const char* m : {"1", "2"}) mem().beat(m, 60000);
  mem().member("2").park(10000);
  const long long keys = dbsize();
  const std::string ord = minter_.mint("ORD").value().str();
  ASSERT_TRUE(table::is_valid_id(ord));
  for (const char* m : {"1", "2"}) {
    EXPECT_TRUE(is_error(mem().enqueue_reply(m, ord, "p", group_id()),
                         "EMQKIND job id must be JOB-namespaced"));
    for (const char* bad : {"0", "-1", "x", "2.5"}) {
      EXPECT_TRUE(is_error(mem().enqueue_reply(m, job_id(), "p", group_id(), bad),
                           "EMQARG lease_ms must be a positive integer"))
          << bad;
    }
  }
  EXPECT_EQ(dbsize(), keys);
}

TEST_F(BusFanout, EachMemberQueueHasItsOwnSlotAndEveryScriptStaysInOne) {
  const std::uint16_t table_slot = table::hash_slot(mem().key());
  ASSERT_EQ(table_slot, table::hash_slot("{" + kQueue + "}"));
  ASSERT_EQ(table::hash_slot(mem().epoch_key()), table_slot);
  for (const char* m : {"1", "2", "3"}) mem().beat(m, 60000);
  mem().member("3").park(10000);
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_EQ(mem().fanout(a, "p", g, true), (Fanned{{"1", 1}, {"2", 1}, {"3", 2}, {"*", 1}}));
  ASSERT_EQ(mem().fanout(b, "p", g, true), (Fanned{{"1", 1}, {"2", 1}, {"3", 2}, {"*", 1}}));
  Queue q = mem().member("1");
  ASSERT_TRUE(q.gclaim(30000));
  EXPECT_EQ(q.complete_claim(a, "1", 30000).verdict, 1);
  mem().beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem().reap(10), 1);
  // Each member queue on the slot of its own tag {ecc.coh.users|<m>}; the membership, the epoch
  // and the shared queue on the table's.
  std::map<std::string, std::uint16_t> slot_of = {{"1", 0}, {"3", 0}};
  for (auto& [m, slot] : slot_of) slot = table::hash_slot("{" + kQueue + "|" + m + "}");
  EXPECT_NE(slot_of["1"], slot_of["3"]);
  EXPECT_NE(slot_of["1"], table_slot);
  const auto keys = s().scan("*");
  EXPECT_GE(keys.size(), 10u);
  for (const std::string& k : keys) {
    if (k.starts_with(mem().member("1").base())) {
      EXPECT_EQ(table::hash_slot(k), slot_of["1"]) << k;
    } else if (k.starts_with(mem().member("3").base())) {
      EXPECT_EQ(table::hash_slot(k), slot_of["3"]) << k;
    } else {
      EXPECT_TRUE(k.starts_with(mem().qbase())) << k;
      EXPECT_EQ(table::hash_slot(k), table_slot) << k;
    }
  }
  EXPECT_EQ(s().scan(mem().member("2").base() + "*"), std::vector<std::string>{});
}

TEST_F(BusFanout, EveryNewScriptIsEmbeddedWithItsContractHeaderAndTheServersSha1) {
  for (const char* name :
       {"member_beat", "member_enqueue", "complete_claim", "member_reap", "member_drop",
        "member_park"}) {
    const lua::Script* script = lua::find_script(name);
    ASSERT_NE(script, nullptr) << name;
    EXPECT_TRUE(script->source.starts_with("-- SPDX-License-Identifier: MIT\n")) << name;
    for (const char* part : {"\n-- KEYS[1]", "\n-- ARGV[1]", "\n-- returns"}) {
      EXPECT_NE(script->source.find(part), std::string_view::npos) << name << " lacks " << part;
    }
    RedisReply loaded =
        command(client(), "SCRIPT LOAD %b", script->source.data(), script->source.size());
    EXPECT_EQ(text(loaded.get()), script->sha1) << name;
  }
}

// A cluster-enabled server owning every slot, each script run under `#!lua`: the server refuses
// any key access outside the slot of the script's first key, including the keys the scripts build
// from their base at run time, which the standalone server never checks.
using FanoutOnACluster = OneNodeClusterTest;

TEST_F(FanoutOnACluster, ACrossSlotAccessIsRefusedSoTheCheckIsLive) {
  EXPECT_TRUE(refuses_across_slots(client(), "emq:{ecc.coh.users}:members", "emq:{fills}:m:1:x"));
}

TEST_F(FanoutOnACluster, EveryNewScriptStaysInOneSlotOnEveryBranch) {
  Scripts s(client(), Scripts::Load::kStrictSlot);
  Members mem(s, kQueue);
  table::Minter minter(10);
  const auto id = [&] { return minter.mint("JOB").value().str(); };
  const std::string g = minter.mint("PRT").value().str();
  EXPECT_GT(mem.beat("1", 60000), 0);
  const long long first = mem.epoch();  // a new key: the server's time in us
  for (const char* m : {"2", "3"}) EXPECT_GT(mem.beat(m, 60000), 0);
  EXPECT_EQ(mem.epoch(), first + 2);
  mem.member("3").park(10000);
  const std::string a = id(), b = id();
  // Lane insert, hand-off and the shared queue; then duplicates in all four.
  EXPECT_EQ(mem.fanout(a, "p", g, true), (Fanned{{"1", 1}, {"2", 1}, {"3", 2}, {"*", 1}}));
  EXPECT_EQ(mem.fanout(a, "p", g, true), (Fanned{{"1", 0}, {"2", 0}, {"3", 0}, {"*", 0}}));
  EXPECT_EQ(mem.fanout(b, "p", g, true), (Fanned{{"1", 1}, {"2", 1}, {"3", 2}, {"*", 1}}));
  Queue q = mem.member("1");
  EXPECT_EQ(q.gclaim(30000)->id, a);
  const CompleteClaimed ok = q.complete_claim(a, "1", 30000);  // ok, claims b
  EXPECT_EQ(ok.verdict, 1);
  EXPECT_TRUE(ok.next);
  EXPECT_EQ(q.complete_claim(b, "7", 30000).verdict, -1);  // stale, lane empty
  EXPECT_EQ(q.complete_claim(a, "1", 30000).verdict, 0);   // gone
  // The scripts that take a member's credits down, each on the member's own slot, and
  // member_park's barred branch.
  Queue h = mem.member("3");
  EXPECT_TRUE(is_integer(h.member_park("6", "10000"), 4));  // two handed off above, listed
  EXPECT_TRUE(is_integer(h.gpause(g), 1));
  EXPECT_TRUE(is_integer(h.member_park("4", "10000"), -1));
  EXPECT_TRUE(is_integer(h.genqueue(id(), "p", g), 1));
  EXPECT_TRUE(is_integer(h.gresume(g), 1));
  EXPECT_TRUE(is_integer(h.glimit(g, 5), 1));
  EXPECT_EQ(h.credits(), 0);
  command(client(), "HSET %s paused 1", q.key("meta").c_str());
  EXPECT_EQ(q.complete_claim(b, "1", 30000).verdict, 1);  // paused: no claim
  mem.beat("2", 1);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(mem.reap(10), 1);
  EXPECT_EQ(s.scan(mem.member("2").base() + "*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace echo::test
