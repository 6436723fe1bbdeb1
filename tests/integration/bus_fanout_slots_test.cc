// SPDX-License-Identifier: MIT
// The fan-out scripts' policy and slots: a non-JOB id and a bad lease are refused before any write,
// each member queue has its own slot, and every new script stays in one, checked on a cluster.

#include "bus_fanout_fixture.h"

namespace echo::test {
namespace {

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
  for (const char* name : {"member_beat", "member_enqueue", "complete_claim", "member_reap",
                           "member_drop", "member_park"}) {
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
