// SPDX-License-Identifier: MIT
// Sharing a server with the original (docs/wire.md, "The fence", "The job lane's member queues"):
// the version fence of either era, and the shared-queue relay both ways. The original's writer and
// consumer are stood in for by the bus's scripts alone (genqueue, gclaim, complete:
// docs/wire.md, "Scripts"), run by EVAL from a plain client.
#include <hiredis/hiredis.h>

#include <string>

#include <echo/engine/internal/job_consumer.h>
#include <echo/table/coherence_frame.h>

#include "engine_nodes.h"
#include "support/script_client.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using table::BrandedId;

class Interop : public SingleServerTest {};

// The original's current code fences echomq:3.0.0, the chapters' echomq:2.0.0: an engine at its
// defaults starts beside either, claims 2.0.0 on an unfenced server, and still refuses a value
// it does not know.
TEST_F(Interop, TheFenceAcceptsEitherErasValueAndRefusesAnother) {
  LoaderProbe loader;
  const auto tables = [&] {
    return std::vector<engine::TableSpec>{
        table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("x"))};
  };
  {
    auto a = node(1, tables());
    ASSERT_TRUE(a);
    EXPECT_EQ(l2_raw(client(), "{emq}:version"), "echomq:2.0.0") << "an unfenced server is claimed";
  }
  ASSERT_TRUE(command(client(), "SET {emq}:version echomq:3.0.0"));
  {
    auto a = node(1, tables());
    ASSERT_TRUE(a) << "refused the original's current fence";
    EXPECT_EQ(l2_raw(client(), "{emq}:version"), "echomq:3.0.0") << "the fence is never rewritten";
  }
  ASSERT_TRUE(command(client(), "SET {emq}:version echomq:9.9.9"));
  engine::Engine e(node_options(server(), 1), tables());
  EXPECT_EQ(e.start(std::chrono::seconds(5)), io::IoErrc::kVersionFence);
}

// The bus's scripts, run as the original runs them (by a plain client, on the shared queue).
struct Original {
  redisContext* c;
  std::string base;  // emq:{ecc.coh.<t>}:

  RedisReply eval(const char* name, const Args& keys, const Args& argv) {
    return run_script(c, name, keys, argv);  // EVALSHA, as the original calls them
  }
  // The original's writer: genqueue into the shared queue (docs/wire.md, "Scripts"), lane `g`.
  long long genqueue(const BrandedId& job, const std::string& payload, const BrandedId& g) {
    const std::string id = job.str(), group = g.str();
    RedisReply r = eval("genqueue",
                        {base + "job:" + id, base + "g:" + group + ":pending", base + "ring",
                         base + "paused", base + "glimit", base + "gactive", base + "wake"},
                        {id, payload, group});
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  }
  // The original's consumer: one gclaim (docs/wire.md, "Scripts"); [id, payload, attempts, group]
  // or empty.
  std::vector<std::string> gclaim(long long lease_ms) {
    RedisReply r =
        eval("gclaim", {base + "ring", base + "active"}, {base, std::to_string(lease_ms)});
    std::vector<std::string> out;
    if (!r || r->type != REDIS_REPLY_ARRAY) return out;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      out.push_back(e->type == REDIS_REPLY_INTEGER ? std::to_string(e->integer)
                                                   : std::string(e->str, e->len));
    }
    return out;
  }
  long long complete(const std::string& id, const std::string& token) {
    RedisReply r = eval("complete", {base + "active", base + "job:" + id}, {id, token, base});
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  }
  // Jobs the shared queue still holds: pending in any lane, active, or scheduled.
  long long held() {
    RedisReply keys = command(c, "KEYS %s", (base + "job:*").c_str());
    return keys && keys->type == REDIS_REPLY_ARRAY ? static_cast<long long>(keys->elements) : -1;
  }
};

engine::TableSpec lane_table(std::string name, bool relay, bool shared = false) {
  auto s = table_spec(std::move(name), "LIM", CoherenceMode::kJob, answering("max=10"));
  s.job_relay = relay;
  s.job_shared_queue = shared;
  s.job_beat_ms = 200;
  return s;
}

std::uint64_t relayed(const engine::Engine& e) { return e.stats().relay_relayed; }

// An original writer's message (one job in the shared queue) reaches every EchoStore member:
// some member's relay claims it, admits it into each member queue, then completes it.
TEST_F(Interop, AnOriginalWritersJobReachesEveryMemberAndLeavesTheSharedQueueEmpty) {
  auto a = node(41, {lane_table("limits", true)});
  auto b = node(42, {lane_table("limits", true)});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("LIM");
  const std::string key = l2_key("limits", name);
  ASSERT_TRUE(command(client(), "SET %s %s", key.c_str(),
                      engine::frame_l2_value(fresh_id("LIM"), "max=20").c_str()));
  for (engine::Engine* n : {a.get(), b.get()}) {
    ASSERT_TRUE(n->get("limits", name.view()));
    ASSERT_TRUE(
        eventually([&] { return n->get("limits", name.view()) && l1_holds(*n, "limits", name); }));
  }
  Original original{client(), engine::JobLaneKeys::for_table("limits").qbase};
  const BrandedId v2 = fresh_id("LIM");
  ASSERT_TRUE(
      command(client(), "SET %s %s", key.c_str(), engine::frame_l2_value(v2, "max=30").c_str()));
  ASSERT_EQ(original.genqueue(fresh_id("JOB"), frame_text(name, v2), fresh_id("PRT")), 1);
  for (engine::Engine* n : {a.get(), b.get()}) {
    ASSERT_TRUE(eventually([&] { return !l1_holds(*n, "limits", name); }, 10s))
        << "a member kept the row the original's job dropped";
    auto got = n->get("limits", name.view());
    ASSERT_TRUE(got);
    EXPECT_EQ(got->value, "max=30");
  }
  ASSERT_TRUE(eventually([&] { return original.held() == 0; }, 10s)) << "the shared queue grew";
  // Counted once the completion answered, just after the job's hash went.
  EXPECT_TRUE(eventually([&] { return relayed(*a) + relayed(*b) == 1; }));
  EXPECT_EQ(relayed(*a) + relayed(*b), 1u) << "one relay claimed it, once";

  // A flood of them: the queue drains as fast as it fills.
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(original.genqueue(fresh_id("JOB"), frame_text(fresh_id("LIM"), fresh_id("LIM")),
                                fresh_id("PRT")),
              1);
  }
  ASSERT_TRUE(eventually([&] { return original.held() == 0; }, 15s));
  EXPECT_TRUE(eventually([&] { return relayed(*a) + relayed(*b) == 51; }));
  EXPECT_EQ(relayed(*a) + relayed(*b), 51u);

  // Not a message of this table: retried by the relay as an original consumer would, then dead.
  ASSERT_EQ(original.genqueue(fresh_id("JOB"), "garbage", fresh_id("PRT")), 1);
  ASSERT_TRUE(
      eventually([&] { return a->stats().relay_malformed + b->stats().relay_malformed >= 1; }));
}

// A relay that crashed between its fan-out and its completion leaves the job active: its lease
// lapses, a live relay's reap returns it, and the fan-out runs again (duplicates where it had
// landed) before the completion.
TEST_F(Interop, AJobAbandonedMidRelayIsReapedAndRelayedAgain) {
  Original original{client(), engine::JobLaneKeys::for_table("limits").qbase};
  const BrandedId name = fresh_id("LIM"), v = fresh_id("LIM");
  ASSERT_EQ(original.genqueue(fresh_id("JOB"), frame_text(name, v), fresh_id("PRT")), 1);
  const auto claimed = original.gclaim(300);  // the "crashed" relay's claim, never completed
  ASSERT_EQ(claimed.size(), 4u);
  auto a = node(43, {lane_table("limits", true)});
  ASSERT_TRUE(a);
  ASSERT_TRUE(eventually([&] { return original.held() == 0; }, 10s)) << "the abandoned job stayed";
  EXPECT_TRUE(eventually([&] { return relayed(*a) == 1; }));
  EXPECT_EQ(original.complete(claimed[0], claimed[2]), 0) << "the old claim's job is gone";
}

// The other way: an EchoStore writer with job_shared_queue feeds the original's consumers (here
// no member relays, so the stand-in consumer is the one that takes it).
TEST_F(Interop, AnEchoStoreWriterFeedsTheOriginalsConsumers) {
  auto member = node(44, {lane_table("limits", false)});
  auto writer = node(45, {lane_table("limits", false, /*shared=*/true)});
  ASSERT_TRUE(member && writer);
  const BrandedId name = fresh_id("LIM"), v = fresh_id("LIM");
  auto admitted = writer->enqueue("limits", fresh_id("PRT"), name.view(), v);
  ASSERT_TRUE(admitted) << admitted.error().message();
  bool to_shared = false;
  for (const auto& m : *admitted)
    to_shared |= m.member == "*" && m.admission == engine::Admission::kEnqueued;
  EXPECT_TRUE(to_shared);
  Original original{client(), engine::JobLaneKeys::for_table("limits").qbase};
  const auto job = original.gclaim(30000);
  ASSERT_EQ(job.size(), 4u) << "the original's consumer found nothing";
  auto parsed = table::parse_frame(job[1]);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->name.str(), name.str());
  EXPECT_EQ(parsed->version.str(), v.str());
  EXPECT_EQ(original.complete(job[0], job[2]), 1);

  // With a relaying member live, the shared queue no longer grows: the relay drains what the
  // writer feeds it, and the members that already had the job answer duplicate.
  auto relay = node(46, {lane_table("limits", true)});
  ASSERT_TRUE(relay);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        writer->enqueue("limits", fresh_id("PRT"), fresh_id("LIM").view(), fresh_id("LIM")));
  }
  ASSERT_TRUE(eventually([&] { return original.held() == 0; }, 10s));
  EXPECT_TRUE(eventually([&] { return relayed(*relay) == 20; }));
  EXPECT_EQ(relayed(*relay), 20u);
}

}  // namespace
}  // namespace echo::test
