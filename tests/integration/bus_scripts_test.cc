// SPDX-License-Identifier: MIT
// The job bus state machine (WIRE §5) at the script level, against a real redis-server: every
// script of lua/scripts run by EVALSHA with its embedded SHA1, asserting the bus gates of WIRE §9
// where they are properties of the scripts (3.2 J1-J5, 3.3 L1-L6, 3.4 G1-G8 with their figures),
// the conditional L2 drop (WIRE §3), every error class, and that each script stays in one hash slot
// (so they work on a cluster), proved on a cluster-enabled server that refuses otherwise.
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
namespace {

using std::chrono::milliseconds;

::testing::AssertionResult is_bulk(const RedisReply& r, std::string_view expected) {
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
std::optional<Claimed> as_claim(const RedisReply& r, std::size_t width) {
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
Claimed claimed(const std::optional<Claimed>& c) {
  if (!c) {
    ADD_FAILURE() << "the claim was empty";
    return {};
  }
  return *c;
}

// One queue's verbs, each sending the KEYS and ARGV of WIRE §5.3 in the contract's order, plus
// plain reads of the queue's keys for the assertions. Load::kStrictSlot is for a cluster-enabled
// server (ScriptClient).
class Bus : public ScriptClient {
 public:
  Bus(redisContext* c, std::string queue, Load load = Load::kEvalsha)
      : ScriptClient(c, load), queue_(std::move(queue)), base_(table::bus_key(queue_, "").value()) {}

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

// ---- 3.2 J1-J5: admission -------------------------------------------------------------------

TEST_F(BusScripts, J1EnqueueAdmitsAPendingRowWithAttemptsZeroAtScoreZero) {
  const std::string id = job_id();
  EXPECT_TRUE(is_integer(bus().enqueue(id, "p1"), 1));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "0");
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "p1");
  EXPECT_EQ(bus().hget(bus().job(id), "group"), "(nil)");
  EXPECT_EQ(bus().zscore(bus().key("pending"), id), "0");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 1);
}

TEST_F(BusScripts, J2DuplicateLeavesTheRowUnchangedAndPendingOne) {
  const std::string id = job_id();
  EXPECT_TRUE(is_integer(bus().enqueue(id, "first"), 1));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "second"), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "first");
  EXPECT_EQ(bus().integer("HLEN %s", bus().job(id)), 3);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 1);
  // Dedup is on the row in any state: a replay after the claim cannot reset the fencing token.
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "third"), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
}

TEST_F(BusScripts, J3AnOrdIdIsRefusedWithEmqkindByEveryAdmissionAndNothingIsWritten) {
  const std::string ord = minter_.mint("ORD").value().str();
  ASSERT_TRUE(table::is_valid_id(ord));  // it passes the key builder; the script refuses it
  const char* kind = "EMQKIND job id must be JOB-namespaced";
  EXPECT_TRUE(is_error(bus().enqueue(ord, "p"), kind));
  EXPECT_TRUE(is_error(bus().genqueue(ord, "p", group_id()), kind));
  EXPECT_TRUE(is_error(bus().schedule(ord, "p", "in", 0), kind));
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(BusScripts, J4BrowseIsNewestFirstOver301Pending) {
  std::vector<std::string> ids;
  for (int i = 0; i < 301; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().enqueue(ids.back(), "p"), 1));
  }
  ASSERT_EQ(bus().zcard(bus().key("pending")), 301);
  for (const int n : {10, 301}) {
    RedisReply r =
        command(client(), "ZRANGE %s + - BYLEX REV LIMIT 0 %d", bus().key("pending").c_str(), n);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
    ASSERT_EQ(r->elements, static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(text(r->element[i]), ids[300 - i]) << "rank " << i;
  }
  // And the consumer's end is the oldest: all scores are 0, so ZPOPMIN is mint order.
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, ids.front());
}

TEST_F(BusScripts, J5AdmissionDedupHoldsAcrossLanesAndVerbs) {
  const std::string id = job_id();
  const std::string g1 = group_id(), g2 = group_id();
  EXPECT_TRUE(is_integer(bus().genqueue(id, "first", g1), 1));
  EXPECT_TRUE(is_integer(bus().genqueue(id, "second", g2), 0));
  EXPECT_TRUE(is_integer(bus().enqueue(id, "third"), 0));
  EXPECT_TRUE(is_integer(bus().schedule(id, "fourth", "in", 0), 0));
  EXPECT_EQ(bus().hget(bus().job(id), "group"), g1);
  EXPECT_EQ(bus().hget(bus().job(id), "payload"), "first");
  EXPECT_EQ(bus().zcard(bus().lane(g1)), 1);
  EXPECT_EQ(bus().zcard(bus().lane(g2)), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g1});
  EXPECT_EQ(bus().llen(bus().key("wake")), 1);  // the duplicate pushed no wake
}

TEST_F(BusScripts, ScheduleInIsOnTheServerClockAndAtIsAbsolute) {
  const std::string later = job_id(), due = job_id();
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_integer(bus().schedule(later, "p", "in", 60000), 1));
  const long long t1 = bus().now_ms();
  const long long score = std::stoll(bus().zscore(bus().key("schedule"), later));
  EXPECT_GE(score, t0 + 60000);
  EXPECT_LE(score, t1 + 60000);
  EXPECT_EQ(bus().hget(bus().job(later), "state"), "scheduled");
  EXPECT_EQ(bus().hget(bus().job(later), "attempts"), "0");
  EXPECT_TRUE(is_integer(bus().schedule(due, "p", "at", t0 - 1), 1));
  EXPECT_EQ(bus().zscore(bus().key("schedule"), due), std::to_string(t0 - 1));
  EXPECT_TRUE(is_integer(bus().promote(100), 1));  // only the due one
  EXPECT_EQ(bus().hget(bus().job(due), "state"), "pending");
  EXPECT_EQ(bus().zscore(bus().key("pending"), due), "0");
  EXPECT_EQ(bus().hget(bus().job(later), "state"), "scheduled");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 1);
}

TEST_F(BusScripts, PromoteMovesAtMostItsBatch) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(is_integer(bus().schedule(job_id(), "p", "in", 0), 1));
  EXPECT_TRUE(is_integer(bus().promote(2), 2));
  EXPECT_TRUE(is_integer(bus().promote(100), 3));
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_EQ(bus().zcard(bus().key("pending")), 5);
}

// ---- 3.3 L1-L6: leases and fencing ----------------------------------------------------------

TEST_F(BusScripts, L1ClaimHandsTokenOneAndCompleteDeletesTheRow) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p1"), 1));
  const long long t0 = bus().now_ms();
  const auto c = bus().claim(30000);
  const long long t1 = bus().now_ms();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->payload, "p1");
  EXPECT_EQ(c->token, 1);
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  const long long deadline = std::stoll(bus().zscore(bus().key("active"), id));
  EXPECT_GE(deadline, t0 + 30000);
  EXPECT_LE(deadline, t1 + 30000);

  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  EXPECT_FALSE(bus().exists(bus().job(id)));
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
  EXPECT_FALSE(bus().claim(30000));  // empty
  EXPECT_EQ(dbsize(), 1);            // only the metric is left
}

TEST_F(BusScripts, L2CompleteWithToken99IsEmqstaleAndChangesNothing) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_error(bus().complete(id, "99"), "EMQSTALE complete token mismatch"));
  // Compared as strings: "01" is not the row's "1".
  EXPECT_TRUE(is_error(bus().complete(id, "01"), "EMQSTALE complete token mismatch"));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("active")), 1);
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "(nil)");
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  // Gone is 0, not an error: the host maps it to `error gone`.
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 0));
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
}

TEST_F(BusScripts, L3RetryThenPromoteHandsTokenTwo) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 1);
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "first failure"), "scheduled"));
  const long long t1 = bus().now_ms();
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "scheduled");
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "first failure");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "1");
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  const long long run_at = std::stoll(bus().zscore(bus().key("schedule"), id));
  EXPECT_GE(run_at, t0);
  EXPECT_LE(run_at, t1);
  EXPECT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->token, 2);
  EXPECT_TRUE(is_error(bus().complete(id, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_integer(bus().complete(id, "2"), 1));
}

TEST_F(BusScripts, L3RetryDelayIsOnTheServerClock) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  const long long t0 = bus().now_ms();
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 60000, 3, "later"), "scheduled"));
  const long long t1 = bus().now_ms();
  const long long run_at = std::stoll(bus().zscore(bus().key("schedule"), id));
  EXPECT_GE(run_at, t0 + 60000);
  EXPECT_LE(run_at, t1 + 60000);
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, L4AttemptsTwoOfMaxTwoGoesDeadWithLastError) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 1);
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 2, "boom 1"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().promote(100), 1));
  ASSERT_EQ(claimed(bus().claim(30000)).token, 2);
  EXPECT_TRUE(is_bulk(bus().retry(id, "2", 0, 2, "boom 2"), "dead"));
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "dead");
  EXPECT_EQ(bus().hget(bus().job(id), "attempts"), "2");
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "boom 2");
  EXPECT_EQ(bus().zscore(bus().key("dead"), id), "0");
  EXPECT_EQ(bus().hget(bus().key("metrics:failed"), "count"), "1");
  for (const char* k : {"active", "pending", "schedule"}) EXPECT_EQ(bus().zcard(bus().key(k)), 0);
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, L5A40msLeaseIsReapedAndTheNextClaimHandsTokenTwo) {
  const std::string lost = job_id(), held = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(lost, "p"), 1));
  ASSERT_TRUE(is_integer(bus().enqueue(held, "p"), 1));
  ASSERT_EQ(claimed(bus().claim(40)).id, lost);
  ASSERT_EQ(claimed(bus().claim(60000)).id, held);
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_TRUE(is_integer(bus().reap(), 1));  // the 40 ms lease only
  EXPECT_EQ(bus().hget(bus().job(lost), "state"), "pending");
  EXPECT_EQ(bus().hget(bus().job(lost), "attempts"), "1");  // reap leaves the token alone
  EXPECT_EQ(bus().zscore(bus().key("pending"), lost), "0");
  EXPECT_EQ(bus().hget(bus().job(held), "state"), "active");
  const auto c = bus().claim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, lost);
  EXPECT_EQ(c->token, 2);
  // The lost holder is fenced off once the job is re-claimed.
  EXPECT_TRUE(is_error(bus().complete(lost, "1"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(is_error(bus().retry(lost, "1", 0, 3, "late"), "EMQSTALE retry token mismatch"));
  EXPECT_TRUE(is_integer(bus().complete(lost, "2"), 1));
}

TEST_F(BusScripts, L6RetryOfAGoneJobOrWithAStaleTokenIsEmqstaleAndWritesNothing) {
  const std::string id = job_id();
  EXPECT_TRUE(is_error(bus().retry(id, "1", 0, 3, "e"), "EMQSTALE job gone"));
  EXPECT_EQ(dbsize(), 0);
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  EXPECT_TRUE(is_error(bus().retry(id, "2", 0, 3, "e"), "EMQSTALE retry token mismatch"));
  EXPECT_EQ(bus().hget(bus().job(id), "last_error"), "(nil)");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "active");
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
}

// ---- 3.4 G1-G8: lanes -----------------------------------------------------------------------

TEST_F(BusScripts, G1TwelveClaimsOverThreeLanesAreFourStrictTurns) {
  const std::vector<std::string> groups{group_id(), group_id(), group_id()};
  std::vector<std::vector<std::string>> jobs(3);
  for (std::size_t g = 0; g < 3; ++g) {  // lane by lane: the ring, not arrival, sets the turns
    for (int i = 0; i < 4; ++i) {
      jobs[g].push_back(job_id());
      ASSERT_TRUE(is_integer(bus().genqueue(jobs[g].back(), "p", groups[g]), 1));
    }
  }
  EXPECT_EQ(bus().ring(), groups);
  for (int turn = 0; turn < 4; ++turn) {
    for (std::size_t g = 0; g < 3; ++g) {
      const auto c = bus().gclaim(30000);
      ASSERT_TRUE(c) << "turn " << turn << " lane " << g;
      EXPECT_EQ(c->group, groups[g]) << "turn " << turn;
      EXPECT_EQ(c->id, jobs[g][turn]) << "turn " << turn;  // oldest first within a lane
      EXPECT_EQ(c->token, 1);
    }
  }
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());  // each drained lane left the ring
  for (const auto& g : groups) EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "4");
}

TEST_F(BusScripts, G2AQuietLanesLastJobIsClaimedAt40Of420AgainstFlat401To420) {
  const std::string busy = group_id(), quiet = group_id();
  Bus flat(client(), "orders.flat");
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "busy", busy), 1));
    ASSERT_TRUE(is_integer(flat.enqueue(job_id(), "busy"), 1));
  }
  for (int i = 0; i < 20; ++i) {  // enqueued after the whole busy backlog
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "quiet", quiet), 1));
    ASSERT_TRUE(is_integer(flat.enqueue(job_id(), "quiet"), 1));
  }
  int lanes_last = 0, flat_first = 0, flat_last = 0;
  for (int pos = 1; pos <= 420; ++pos) {
    const auto l = bus().gclaim(30000);
    const auto f = flat.claim(30000);
    ASSERT_TRUE(l && f) << "position " << pos;
    if (l->payload == "quiet") lanes_last = pos;
    if (f->payload == "quiet") {
      if (flat_first == 0) flat_first = pos;
      flat_last = pos;
    }
  }
  std::printf("G2: quiet lane's last job at %d of 420 with lanes; flat: %d..%d\n", lanes_last,
              flat_first, flat_last);
  EXPECT_EQ(lanes_last, 40);
  EXPECT_EQ(flat_first, 401);
  EXPECT_EQ(flat_last, 420);
}

TEST_F(BusScripts, G3Limit2MakesTheThirdClaimEmptyWithGactive2) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  EXPECT_TRUE(is_integer(bus().glimit(g, 2), 1));
  EXPECT_EQ(bus().hget(bus().key("glimit"), g.c_str()), "2");
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "2");
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 1);
  // A completion frees a slot: the lane re-enters the ring, with a wake.
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().complete(ids[0], "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_TRUE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, ids[2]);
}

TEST_F(BusScripts, G3LoweringTheLimitBelowInFlightTakesTheLaneOutAndRaisingItPutsItBack) {
  const std::string g = group_id();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().in_ring(g));
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().glimit(g, 2), 1));
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);
  EXPECT_TRUE(is_integer(bus().glimit(g, 3), 1));
  EXPECT_TRUE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  EXPECT_TRUE(is_integer(bus().glimit(g, 4), 1));  // already in the ring: no second wake
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
}

TEST_F(BusScripts, G4PauseKeepsDepth3AndTakesTheLaneOutOfTheRingUntilResume) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  ASSERT_TRUE(bus().gclaim(30000));  // one in flight when the pause lands
  EXPECT_TRUE(is_integer(bus().gpause(g), 1));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 3);
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_FALSE(bus().gclaim(30000));
  const long long wakes = bus().llen(bus().key("wake"));
  // In flight runs on; neither its completion nor new work puts a paused lane back.
  EXPECT_TRUE(is_integer(bus().complete(ids[0], "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "(nil)");
  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  EXPECT_FALSE(bus().in_ring(g));
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);
  EXPECT_EQ(bus().zcard(bus().lane(g)), 4);

  EXPECT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(claimed(bus().gclaim(30000)).id, ids[i]);
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_FALSE(bus().gclaim(30000));
}

// A group at its ceiling re-enters the ring only when a holder lets go (complete or retry); no
// other ring insert (genqueue, gresume, promote, reap) may put it back early, nor push a wake.
TEST_F(BusScripts, EveryRingInsertHonoursTheCeiling) {
  const std::string g = group_id();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(job_id());
    ASSERT_TRUE(is_integer(bus().genqueue(ids.back(), "p", g), 1));
  }
  ASSERT_TRUE(bus().gclaim(40));     // ids[0], lease runs out below
  ASSERT_TRUE(bus().gclaim(30000));  // ids[1]
  ASSERT_TRUE(is_integer(bus().glimit(g, 1), 1));
  ASSERT_FALSE(bus().in_ring(g));
  const long long wakes = bus().llen(bus().key("wake"));

  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", g), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "genqueue";
  ASSERT_TRUE(is_integer(bus().gpause(g), 1));
  ASSERT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "gresume";
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));  // ids[0]; ids[1] still holds the one slot
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_FALSE(bus().in_ring(g)) << "reap";
  // ids[0] is back in the lane unclaimed: its retry with the old token schedules it again
  // without touching gactive, and promote brings it back while ids[1] still holds the slot.
  ASSERT_TRUE(is_bulk(bus().retry(ids[0], "1", 0, 3, "e"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_FALSE(bus().in_ring(g)) << "promote";
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes);

  EXPECT_TRUE(is_integer(bus().complete(ids[1], "1"), 1));  // the slot frees: back, one wake
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
}

TEST_F(BusScripts, G4ResumingAnEmptyLaneLeavesTheRingAlone) {
  const std::string g = group_id();
  EXPECT_TRUE(is_integer(bus().gpause(g), 1));
  EXPECT_TRUE(is_integer(bus().gresume(g), 1));
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_EQ(bus().llen(bus().key("wake")), 0);
  EXPECT_EQ(bus().integer("SCARD %s", bus().key("paused")), 0);
}

TEST_F(BusScripts, G5AWakeIsPushedOnlyWhenAGroupEntersTheRingCappedAt64) {
  const std::string a = group_id();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", a), 1));
  EXPECT_EQ(bus().llen(bus().key("wake")), 1);  // five jobs, one entry
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());
  ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", a), 1));  // re-enters: a second wake
  EXPECT_EQ(bus().llen(bus().key("wake")), 2);
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(is_integer(bus().genqueue(job_id(), "p", group_id()), 1));
  EXPECT_EQ(bus().llen(bus().key("ring")), 101);
  EXPECT_EQ(bus().llen(bus().key("wake")), 64);
  RedisReply tokens = command(client(), "LRANGE %s 0 -1", bus().key("wake").c_str());
  ASSERT_TRUE(tokens && tokens->type == REDIS_REPLY_ARRAY);
  for (std::size_t i = 0; i < tokens->elements; ++i) EXPECT_EQ(text(tokens->element[i]), "1");
}

TEST_F(BusScripts, G6AParkedConsumerIsWokenByTheEnqueueNotByIts5000msBeat) {
  RedisClient parked = connect_client(server());
  ASSERT_TRUE(parked);
  const std::string wake = bus().key("wake");
  RedisReply popped;
  const auto t0 = std::chrono::steady_clock::now();
  auto woken = t0;
  std::thread consumer([&] {
    popped = command(parked.get(), "BLPOP %s 5.000", wake.c_str());
    woken = std::chrono::steady_clock::now();
  });
  // Enqueue only once the consumer is parked, or the test would not show a wake.
  bool blocked = false;
  for (int i = 0; i < 400 && !blocked; ++i) {
    RedisReply info = command(client(), "INFO clients");
    blocked = info && text(info.get()).find("blocked_clients:1") != std::string::npos;
    if (!blocked) std::this_thread::sleep_for(milliseconds(5));
  }
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_integer(bus().genqueue(job_id(), "p", group_id()), 1));
  consumer.join();
  ASSERT_TRUE(blocked) << "the consumer never parked";
  ASSERT_TRUE(popped && popped->type == REDIS_REPLY_ARRAY && popped->elements == 2)
      << text(popped.get());
  EXPECT_EQ(text(popped->element[0]), wake);
  EXPECT_EQ(text(popped->element[1]), "1");
  const auto answered = std::chrono::duration_cast<milliseconds>(woken - sent).count();
  std::printf("G6: wake answered in %lld ms against a 5000 ms beat\n",
              static_cast<long long>(answered));
  EXPECT_LT(answered, 1000);
}

TEST_F(BusScripts, G7A60msLaneLeaseIsReapedOnTheBeatWithToken2) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(60)).token, 1);
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  std::this_thread::sleep_for(milliseconds(90));
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().reap(), 1));
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);
  EXPECT_EQ(bus().zscore(bus().lane(g), id), "0");
  EXPECT_EQ(bus().hget(bus().job(id), "state"), "pending");
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->token, 2);
  EXPECT_EQ(c->group, g);
}

TEST_F(BusScripts, G8AReapedButUnclaimedHolderCompletesWithItsOldTokenAndRetiresItEverywhere) {
  const std::string g = group_id(), first = job_id(), second = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(first, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(second, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(40)).id, first);
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  ASSERT_EQ(bus().zcard(bus().lane(g)), 2);
  EXPECT_TRUE(is_integer(bus().complete(first, "1"), 1));
  EXPECT_FALSE(bus().exists(bus().job(first)));
  EXPECT_EQ(bus().zscore(bus().lane(g), first), "(nil)");
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);  // not decremented twice
  EXPECT_EQ(bus().hget(bus().key("metrics:completed"), "count"), "1");
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});  // the lane still has work
  const auto c = bus().gclaim(40);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, second);
  EXPECT_EQ(c->token, 1);
  // The same for the lane's last job: the emptied lane leaves the ring.
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  EXPECT_TRUE(is_integer(bus().complete(second, "1"), 1));
  EXPECT_EQ(bus().zcard(bus().lane(g)), 0);
  EXPECT_TRUE(bus().ring().empty());
  EXPECT_FALSE(bus().gclaim(30000));
}

TEST_F(BusScripts, G8FlatAReapedButUnclaimedHolderRetiresItFromPending) {
  const std::string id = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(40));
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE(is_integer(bus().reap(), 1));
  ASSERT_EQ(bus().zcard(bus().key("pending")), 1);
  EXPECT_TRUE(is_integer(bus().complete(id, "1"), 1));
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, GactiveIsDecrementedAndItsFieldDeletedAtZero) {
  const std::string g = group_id(), a = job_id(), b = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(a, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(b, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "2");
  EXPECT_TRUE(is_integer(bus().complete(a, "1"), 1));
  EXPECT_EQ(bus().hget(bus().key("gactive"), g.c_str()), "1");
  EXPECT_TRUE(is_bulk(bus().retry(b, "1", 60000, 3, "e"), "scheduled"));
  EXPECT_EQ(bus().hexists(bus().key("gactive"), g), false);
  EXPECT_FALSE(bus().exists(bus().key("gactive")));
}

TEST_F(BusScripts, ARetriedLaneJobKeepsItsGroupAndPromoteReturnsItToItsLaneWithAWake) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  EXPECT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "e"), "scheduled"));
  EXPECT_EQ(bus().hget(bus().job(id), "group"), g);
  EXPECT_TRUE(bus().ring().empty());
  const long long wakes = bus().llen(bus().key("wake"));
  EXPECT_TRUE(is_integer(bus().promote(100), 1));
  EXPECT_EQ(bus().zscore(bus().lane(g), id), "0");
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_EQ(bus().ring(), std::vector<std::string>{g});
  EXPECT_EQ(bus().llen(bus().key("wake")), wakes + 1);
  const auto c = bus().gclaim(30000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->token, 2);
  EXPECT_EQ(c->group, g);
}

TEST_F(BusScripts, GclaimOnARingNamingAnEmptyLaneAnswersEmptyAndHealsTheRing) {
  const std::string g = group_id();
  RedisReply pushed = command(client(), "RPUSH %s %s", bus().key("ring").c_str(), g.c_str());
  ASSERT_TRUE(is_integer(pushed, 1));
  EXPECT_FALSE(bus().gclaim(30000));
  EXPECT_TRUE(bus().ring().empty());
}

// ---- error classes, embedding, slots --------------------------------------------------------

TEST_F(BusScripts, EveryErrorReplyLeadsWithItsClassNeverErr) {
  const std::string id = job_id();
  std::vector<RedisReply> errors;
  errors.push_back(bus().enqueue(minter_.mint("ORD").value().str(), "p"));
  errors.push_back(bus().retry(id, "1", 0, 3, "e"));
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  errors.push_back(bus().complete(id, "2"));
  errors.push_back(bus().retry(id, "2", 0, 3, "e"));
  const std::vector<std::string> expected{"EMQKIND job id must be JOB-namespaced",
                                          "EMQSTALE job gone", "EMQSTALE complete token mismatch",
                                          "EMQSTALE retry token mismatch"};
  for (std::size_t i = 0; i < errors.size(); ++i) {
    EXPECT_TRUE(is_error(errors[i], expected[i]));
    const std::string t = text(errors[i].get());
    const std::string cls = t.substr(0, t.find(' '));
    EXPECT_TRUE(cls == "EMQKIND" || cls == "EMQSTALE") << t;
  }
}

// Every key of the database with its DUMP (type, contents), sorted: equal before and after a call
// means the call wrote nothing.
std::vector<std::pair<std::string, std::string>> snapshot(redisContext* c) {
  std::vector<std::pair<std::string, std::string>> out;
  RedisReply keys = command(c, "KEYS *");
  if (!keys || keys->type != REDIS_REPLY_ARRAY) {
    ADD_FAILURE() << "KEYS: " << text(keys.get());
    return out;
  }
  for (std::size_t i = 0; i < keys->elements; ++i) {
    const std::string k = text(keys->element[i]);
    RedisReply dump = command(c, "DUMP %b", k.data(), k.size());
    out.emplace_back(k, dump && dump->type == REDIS_REPLY_STRING ? std::string(dump->str, dump->len)
                                                                 : text(dump.get()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Redis keeps what a script wrote before it fails, so every argument is checked before the first
// write: a lease, delay or ceiling found bad half-way once left a job popped but never leased
// (lost), scheduled but never due, or a group whose stored ceiling broke every later ring insert.
// Each bad call below is refused with EMQARG (a class, never a generic ERR) and changes nothing.
TEST_F(BusScripts, ABadArgumentIsRefusedWithEmqargBeforeAnyWriteByEveryScript) {
  const std::string g = group_id(), a = job_id(), b = job_id(), f = job_id(), held = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(held, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(30000)).id, held);  // one job active, with a token of 1
  ASSERT_TRUE(is_integer(bus().genqueue(a, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(b, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().enqueue(f, "p"), 1));
  const std::string base = bus().base();
  const auto k = [&](const char* suffix) { return bus().key(suffix); };
  const Args gkeys{k("glimit"), k("gactive"), k("ring"), k("paused"), k("wake")};
  struct Bad {
    const char* why;
    const char* script;
    Args keys, argv;
  };
  const std::vector<Bad> bad{
      {"non-numeric lease", "gclaim", {k("ring"), k("active")}, {base, "abc"}},
      {"NaN lease", "gclaim", {k("ring"), k("active")}, {base, "nan"}},
      {"hex lease", "gclaim", {k("ring"), k("active")}, {base, "0x10"}},
      {"exponent lease", "gclaim", {k("ring"), k("active")}, {base, "1e3"}},
      {"zero lease", "gclaim", {k("ring"), k("active")}, {base, "0"}},
      {"negative lease", "gclaim", {k("ring"), k("active")}, {base, "-5"}},
      {"missing lease", "gclaim", {k("ring"), k("active")}, {base}},
      {"empty base", "gclaim", {k("ring"), k("active")}, {"", "30000"}},
      {"flat claim, empty lease", "claim", {k("pending"), k("active")}, {base + "job:", ""}},
      {"flat claim, no prefix", "claim", {k("pending"), k("active")}, {"", "30000"}},
      {"complete without base", "complete", {k("active"), bus().job(held)}, {held, "1"}},
      {"complete_claim, bad lease",
       "complete_claim",
       {k("active"), bus().job(held), k("ring")},
       {held, "1", base, "soon"}},
      {"retry, non-numeric delay",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "soon", "3", "boom", base}},
      {"retry, empty max",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "1000", "", "boom", base}},
      {"retry, max 0",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "1000", "0", "boom", base}},
      {"retry, no base",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "0", "3", "boom"}},
      {"schedule at a non-number",
       "schedule",
       {bus().job(job_id()), k("schedule")},
       {job_id(), "pay", "at", "soon"}},
      {"schedule in an unknown mode",
       "schedule",
       {bus().job(job_id()), k("schedule")},
       {job_id(), "pay", "In", "5000"}},
      {"glimit abc", "glimit", gkeys, {base, g, "abc"}},
      {"glimit 0", "glimit", gkeys, {base, g, "0"}},
      {"glimit -1", "glimit", gkeys, {base, g, "-1"}},
      {"glimit without group", "glimit", gkeys, {base, "", "2"}},
      {"gresume, empty base",
       "gresume",
       {k("paused"), k("ring"), k("glimit"), k("gactive"), k("wake")},
       {"", g}},
      {"promote, bad batch", "promote", {k("schedule"), k("pending")}, {base, "many"}},
      {"promote, no base", "promote", {k("schedule"), k("pending")}, {}},
      {"reap, no base", "reap", {k("active"), k("pending")}, {}},
      {"enqueue without payload", "enqueue", {bus().job(job_id()), k("pending")}, {job_id()}},
      {"genqueue without group",
       "genqueue",
       {bus().job(job_id()), bus().lane(g), k("ring"), k("paused"), k("glimit"), k("gactive"),
        k("wake")},
       {job_id(), "p"}},
  };
  for (const Bad& call : bad) {
    const auto before = snapshot(client());
    RedisReply r = bus().run(call.script, call.keys, call.argv);
    ASSERT_TRUE(r) << call.why;
    EXPECT_EQ(r->type, REDIS_REPLY_ERROR) << call.why << ": " << text(r.get());
    EXPECT_TRUE(text(r.get()).starts_with("EMQARG ")) << call.why << ": " << text(r.get());
    EXPECT_TRUE(snapshot(client()) == before) << call.why << ": the refused call wrote";
  }
  // Nothing was lost: the queue still serves a and b in turn, and the held job completes.
  EXPECT_EQ(claimed(bus().gclaim(30000)).id, a);
  EXPECT_EQ(claimed(bus().gclaim(30000)).id, b);
  EXPECT_TRUE(is_integer(bus().complete(held, "1"), 1));
}

// WIRE's complete compares the token, not the state: a holder that retried a job and then
// completed it with the same token deletes the row while its id waits in schedule. promote (and
// reap, for an id left in active) once wrote "state pending" to the missing row, making a row of
// one field that a flat claim then handed out without a payload. They now only drop the id.
TEST_F(BusScripts, PromoteAndReapDropAnIdWhoseRowIsGoneAndMakeNoRow) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "boom"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().complete(id, "1"), 1));  // the same token: the row is deleted
  ASSERT_FALSE(bus().exists(bus().job(id)));
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().exists(bus().job(id)));
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  EXPECT_EQ(bus().zcard(bus().lane(g)), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);

  const std::string flat = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(flat, "p"), 1));
  ASSERT_TRUE(bus().claim(1));                                                // leased for 1 ms
  RedisReply deleted = command(client(), "DEL %s", bus().job(flat).c_str());  // an admin's DEL
  ASSERT_TRUE(is_integer(deleted, 1));
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(is_integer(bus().reap(), 0));
  EXPECT_FALSE(bus().exists(bus().job(flat)));
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_FALSE(bus().claim(30000));
}

TEST_F(BusScripts, EveryVerbIsEmbeddedWithItsContractHeaderAndTheServersSha1) {
  ASSERT_TRUE(command(client(), "SCRIPT FLUSH"));
  for (const char* name : {"enqueue", "genqueue", "schedule", "claim", "gclaim", "complete",
                           "retry", "promote", "reap", "gpause", "gresume", "glimit", "drop_l2",
                           "publish_l2"}) {
    const lua::Script* s = lua::find_script(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_TRUE(s->source.starts_with("-- SPDX-License-Identifier: MIT\n")) << name;
    for (const char* part : {"\n-- KEYS[1]", "\n-- ARGV[1]", "\n-- returns"}) {
      EXPECT_NE(s->source.find(part), std::string_view::npos) << name << " lacks " << part;
    }
    RedisReply loaded = command(client(), "SCRIPT LOAD %b", s->source.data(), s->source.size());
    EXPECT_EQ(text(loaded.get()), s->sha1) << name;
  }
  // After a flush (a restarted server), the first EVALSHA falls back to SCRIPT LOAD.
  ASSERT_TRUE(command(client(), "SCRIPT FLUSH"));
  EXPECT_TRUE(is_integer(bus().enqueue(job_id(), "p"), 1));
  RedisReply cached =
      command(client(), "SCRIPT EXISTS %s", std::string(lua::find_script("enqueue")->sha1).c_str());
  ASSERT_TRUE(cached && cached->type == REDIS_REPLY_ARRAY && cached->elements == 1);
  EXPECT_EQ(cached->element[0]->integer, 1);
}

// Runs every script through every branch that builds a key from the base. Each reply is checked
// for the branch it is meant to take, so a refused script (e.g. a cross-slot key) fails here.
void exercise_every_script(Bus& bus, table::Minter& minter, redisContext* c) {
  const auto id = [&] { return minter.mint("JOB").value().str(); };
  const std::string g = minter.mint("PRT").value().str();
  const std::string a = id(), b = id(), f = id(), s = id(), d = id();
  EXPECT_TRUE(is_integer(bus.genqueue(a, "p", g), 1));
  EXPECT_TRUE(is_integer(bus.genqueue(b, "p", g), 1));
  EXPECT_TRUE(is_integer(bus.enqueue(f, "p"), 1));
  EXPECT_TRUE(is_integer(bus.schedule(s, "p", "in", 0), 1));
  EXPECT_TRUE(is_integer(bus.glimit(g, 5), 1));
  EXPECT_TRUE(is_integer(bus.gpause(g), 1));
  EXPECT_TRUE(is_integer(bus.gresume(g), 1));
  EXPECT_EQ(claimed(bus.gclaim(1)).id, a);  // expires at once
  EXPECT_EQ(claimed(bus.claim(1)).id, f);
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(is_integer(bus.reap(), 2));            // a to its lane, f to pending
  EXPECT_TRUE(is_integer(bus.complete(a, "1"), 1));  // reaped grouped: ZREM lane
  EXPECT_TRUE(is_integer(bus.complete(f, "1"), 1));  // reaped flat: ZREM pending
  EXPECT_EQ(claimed(bus.gclaim(30000)).id, b);
  EXPECT_TRUE(is_bulk(bus.retry(b, "1", 0, 3, "e"), "scheduled"));  // active grouped
  EXPECT_TRUE(is_integer(bus.promote(100), 2));                     // b to its lane, s flat
  EXPECT_EQ(claimed(bus.gclaim(30000)).token, 2);
  EXPECT_TRUE(is_integer(bus.complete(b, "2"), 1));  // active grouped
  EXPECT_EQ(claimed(bus.claim(30000)).id, s);
  EXPECT_TRUE(is_bulk(bus.retry(s, "1", 0, 1, "e"), "dead"));  // active flat, metrics:failed
  EXPECT_TRUE(is_integer(bus.enqueue(d, "p"), 1));
  EXPECT_TRUE(is_error(bus.complete(d, "7"), "EMQSTALE complete token mismatch"));
  EXPECT_TRUE(
      is_error(bus.retry(minter.mint("JOB").value().str(), "1", 0, 3, "e"), "EMQSTALE job gone"));
  const std::string l2 = table::l2_key("users", minter.mint("AST").value().str()).value();
  const std::string v = minter.mint("TXN").value().str();
  RedisReply set = command(c, "SET %s %s", l2.c_str(), (v + "value").c_str());
  EXPECT_TRUE(set && set->type == REDIS_REPLY_STATUS) << text(set.get());
  EXPECT_TRUE(is_integer(bus.run("drop_l2", {l2}, {minter.mint("TXN").value().str()}), 1));
}

TEST_F(BusScripts, EveryKeyTheScriptsWriteSharesTheQueuesSlot105) {
  ASSERT_EQ(table::hash_slot(bus().key("pending")), 105);  // WIRE §2 vector for emq:{orders}:*
  exercise_every_script(bus(), minter_, client());
  RedisReply keys = command(client(), "KEYS *");
  ASSERT_TRUE(keys && keys->type == REDIS_REPLY_ARRAY);
  EXPECT_GE(keys->elements, 5u);
  for (std::size_t i = 0; i < keys->elements; ++i) {
    const std::string k = text(keys->element[i]);
    EXPECT_TRUE(k.starts_with(bus().base())) << k;
    EXPECT_EQ(table::hash_slot(k), 105) << k;
  }
}

// A cluster-enabled server owning every slot, with each script run under `#!lua`: the server
// then refuses any key access outside the slot of the script's first key, declared or built
// from the base at run time, which the standalone server never checks.
using BusOnACluster = OneNodeClusterTest;

TEST_F(BusOnACluster, ACrossSlotAccessIsRefusedSoTheCheckIsLive) {
  EXPECT_TRUE(refuses_across_slots(client(), "emq:{orders}:x", "emq:{fills}:x"));
}

// publish_l2 on a cluster SPUBLISHes on the channel of its key's slot; a channel of another slot
// is refused (so the engine's channel, built from the same table name, is what keeps it legal).
TEST_F(BusOnACluster, PublishL2SpublishesOnItsOwnSlotAndAnotherSlotsChannelIsRefused) {
  table::Minter minter(8);
  const table::BrandedId name = minter.mint("AST").value(), v = minter.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string frame = v.str() + "value";
  const std::string message(table::view(table::make_frame(name, v)));
  ScriptClient strict(client(), ScriptClient::Load::kStrictSlot);
  EXPECT_TRUE(is_integer(
      strict.run("publish_l2", {key}, {frame, "60000", "ecc:{users}:coh", message, "SPUBLISH"}), 0));
  EXPECT_EQ(text(command(client(), "GET %s", key.c_str()).get()), frame);
  const lua::Script* s = lua::find_script("publish_l2");
  ASSERT_NE(s, nullptr);
  RedisReply foreign = command_argv(client(), {"EVAL", "#!lua\n" + std::string(s->source), "1", key,
                                               frame, "60000", "ecc:{orders}:coh", message, "SPUBLISH"});
  ASSERT_TRUE(foreign && foreign->type == REDIS_REPLY_ERROR) << text(foreign.get());
  EXPECT_NE(text(foreign.get()).find("same slot"), std::string::npos) << text(foreign.get());
}

TEST_F(BusOnACluster, EveryScriptStaysInOneSlotOnEveryBranch) {
  table::Minter minter(8);
  for (const char* queue : {"orders", "ecc.coh.users"}) {
    Bus bus(client(), queue, Bus::Load::kStrictSlot);
    exercise_every_script(bus, minter, client());
  }
}

// ---- publish_l2 (Engine::publish on the broadcast lane) ---------------------------------------

TEST_F(BusScripts, PublishL2SetsTheRowWithItsTtlAndPublishesTheMessageToEverySubscriber) {
  const table::BrandedId name = minter_.mint("AST").value(), v = minter_.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string channel = table::coherence_channel("users").value();
  const std::string message(table::view(table::make_frame(name, v)));
  RedisClient listener = connect_client(server());
  ASSERT_TRUE(command(listener.get(), "SUBSCRIBE %s", channel.c_str()));
  EXPECT_TRUE(is_integer(bus().run("publish_l2", {key}, {v.str() + "value", "60000", channel, message,
                                                         "PUBLISH"}),
                         1));
  EXPECT_EQ(text(command(client(), "GET %s", key.c_str()).get()), v.str() + "value");
  const long long ttl = bus().integer("PTTL %s", key);
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 60000);
  redisReply* heard = nullptr;
  ASSERT_EQ(redisGetReply(listener.get(), reinterpret_cast<void**>(&heard)), REDIS_OK);
  RedisReply owned(heard);
  ASSERT_TRUE(heard->type == REDIS_REPLY_ARRAY && heard->elements == 3);
  EXPECT_EQ(text(heard->element[2]), message);
}

TEST_F(BusScripts, PublishL2RefusesAShortFrameOrAnotherVerbBeforeAnyWrite) {
  const table::BrandedId name = minter_.mint("AST").value(), v = minter_.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string channel = table::coherence_channel("users").value();
  const std::string message(table::view(table::make_frame(name, v)));
  EXPECT_TRUE(is_error(bus().run("publish_l2", {key}, {"AST0000", "60000", channel, message, "PUBLISH"}),
                       "EMQFRAME framed value shorter than 14 bytes"));
  EXPECT_TRUE(is_error(bus().run("publish_l2", {key}, {v.str(), "60000", channel, message, "DEL"}),
                       "EMQARG verb must be PUBLISH or SPUBLISH"));
  EXPECT_EQ(dbsize(), 0);
}

// ---- drop_l2 (WIRE §3) ----------------------------------------------------------------------

class DropL2 : public BusScripts {
 protected:
  std::string key_ = table::l2_key("users", minter_.mint("AST").value().str()).value();
  RedisReply drop(const std::string& v) { return bus().run("drop_l2", {key_}, {v}); }
  void store(const std::string& frame) {
    ASSERT_TRUE(
        command(client(), "SET %b %b", key_.data(), key_.size(), frame.data(), frame.size()));
  }
  std::string stored() { return text(command(client(), "GET %s", key_.c_str()).get()); }
};

TEST_F(DropL2, AMissingKeyAnswers0) {
  EXPECT_TRUE(is_integer(drop(minter_.mint("TXN").value().str()), 0));
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(DropL2, AStoredFrameShorterThan14BytesIsDeletedWith1) {
  store("TXN0000");
  EXPECT_TRUE(is_integer(drop(minter_.mint("TXN").value().str()), 1));
  EXPECT_EQ(stored(), "(nil)");
}

TEST_F(DropL2, ANewerVersionDeletesWith1) {
  const std::string old_v = minter_.mint("TXN").value().str();
  const std::string new_v = minter_.mint("TXN").value().str();
  store(old_v + "value");
  EXPECT_TRUE(is_integer(drop(new_v), 1));
  EXPECT_EQ(stored(), "(nil)");
}

TEST_F(DropL2, AnEqualOrOlderVersionKeepsTheRowWith0) {
  const std::string old_v = minter_.mint("TXN").value().str();
  const std::string v = minter_.mint("TXN").value().str();
  store(v + "value");
  EXPECT_TRUE(is_integer(drop(v), 0));
  EXPECT_TRUE(is_integer(drop(old_v), 0));
  // The namespace is ignored: only the 11 payload bytes order versions.
  EXPECT_TRUE(is_integer(drop("ZZZ" + v.substr(3)), 0));
  EXPECT_EQ(stored(), v + "value");
}

}  // namespace
}  // namespace echo::test
