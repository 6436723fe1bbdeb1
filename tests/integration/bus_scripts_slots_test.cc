// SPDX-License-Identifier: MIT
// The bus scripts as embedded and as a cluster sees them: each is embedded with its contract header
// and the server's SHA1, and every key each writes stays in the queue's one hash slot.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

TEST_F(BusScripts, EveryVerbIsEmbeddedWithItsContractHeaderAndTheServersSha1) {
  ASSERT_TRUE(command(client(), "SCRIPT FLUSH"));
  for (const char* name :
       {"enqueue", "genqueue", "schedule", "claim", "gclaim", "complete", "retry", "promote",
        "reap", "gpause", "gresume", "glimit", "drop_l2", "publish_l2"}) {
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
  ASSERT_EQ(table::hash_slot(bus().key("pending")), 105);  // a vector for emq:{orders}:*
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
      strict.run("publish_l2", {key}, {frame, "60000", "ecc:{users}:coh", message, "SPUBLISH"}),
      0));
  EXPECT_EQ(text(command(client(), "GET %s", key.c_str()).get()), frame);
  const lua::Script* s = lua::find_script("publish_l2");
  ASSERT_NE(s, nullptr);
  RedisReply foreign =
      command_argv(client(), {"EVAL", "#!lua\n" + std::string(s->source), "1", key, frame, "60000",
                              "ecc:{orders}:coh", message, "SPUBLISH"});
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

}  // namespace
}  // namespace echo::test
