// SPDX-License-Identifier: MIT
// The bus scripts on L2 rows: publish_l2 sets the row (newer-only) and publishes its message in one
// call, drop_l2 deletes a row only for a newer version, and a removal's tombstone
// (ecc:rm:{t}:<id>, KEYS[2]) refuses the newer-only writes of a version as old as it or older.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

// ---- publish_l2 (Engine::publish on the broadcast lane) ---------------------------------------

TEST_F(BusScripts, PublishL2SetsTheRowWithItsTtlAndPublishesTheMessageToEverySubscriber) {
  const table::BrandedId name = minter_.mint("AST").value(), v = minter_.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string channel = table::coherence_channel("users").value();
  const std::string message(table::view(table::make_frame(name, v)));
  RedisClient listener = connect_client(server());
  ASSERT_TRUE(command(listener.get(), "SUBSCRIBE %s", channel.c_str()));
  EXPECT_TRUE(is_integer(
      bus().run("publish_l2", {key}, {v.str() + "value", "60000", channel, message, "PUBLISH"}),
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

TEST_F(BusScripts, PublishL2NeverSetsAnOlderRowButStillSendsItsMessage) {
  // Two publishes of one key in flight at once reach the server in either order: the older one,
  // run last, must not leave L2 behind the newer message. Its own message still goes (stale
  // wherever it arrives).
  const table::BrandedId name = minter_.mint("AST").value();
  const table::BrandedId v1 = minter_.mint("AST").value(), v2 = minter_.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string channel = table::coherence_channel("users").value();
  RedisClient listener = connect_client(server());
  ASSERT_TRUE(command(listener.get(), "SUBSCRIBE %s", channel.c_str()));
  for (const auto* v : {&v2, &v1}) {
    const std::string message(table::view(table::make_frame(name, *v)));
    EXPECT_TRUE(is_integer(
        bus().run("publish_l2", {key}, {v->str() + "value", "60000", channel, message, "PUBLISH"}),
        1));
  }
  EXPECT_EQ(text(command(client(), "GET %s", key.c_str()).get()), v2.str() + "value");
  for (const auto* v : {&v2, &v1}) {
    redisReply* heard = nullptr;
    ASSERT_EQ(redisGetReply(listener.get(), reinterpret_cast<void**>(&heard)), REDIS_OK);
    RedisReply owned(heard);
    EXPECT_EQ(text(heard->element[2]), std::string(table::view(table::make_frame(name, *v))));
  }
}

TEST_F(BusScripts, PublishL2RefusesAShortFrameOrAnotherVerbBeforeAnyWrite) {
  const table::BrandedId name = minter_.mint("AST").value(), v = minter_.mint("AST").value();
  const std::string key = table::l2_key("users", name.view()).value();
  const std::string channel = table::coherence_channel("users").value();
  const std::string message(table::view(table::make_frame(name, v)));
  EXPECT_TRUE(
      is_error(bus().run("publish_l2", {key}, {"AST0000", "60000", channel, message, "PUBLISH"}),
               "EMQFRAME framed value shorter than 14 bytes"));
  EXPECT_TRUE(is_error(bus().run("publish_l2", {key}, {v.str(), "60000", channel, message, "DEL"}),
                       "EMQARG verb must be PUBLISH or SPUBLISH"));
  EXPECT_EQ(dbsize(), 0);
}

// ---- drop_l2 (docs/wire.md, "L2 values") -----------------------------------------------------

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

// ---- removals: the tombstone a remove() leaves in L2 (KEYS[2]) -------------------------------

class Removals : public BusScripts {
 protected:
  std::string id_ = minter_.mint("AST").value().str();
  std::string key_ = table::l2_key("users", id_).value();
  std::string removal_ = "ecc:rm:{users}:" + id_;
  std::string channel_ = table::coherence_channel("users").value();
  std::string get(const std::string& k) {
    return text(command(client(), "GET %s", k.c_str()).get());
  }
  RedisReply put(const std::string& framed) {
    return bus().run("put_l2", {key_, removal_}, {framed, "60000"});
  }
  RedisReply publish(const std::string& framed) {
    return bus().run("publish_l2", {key_, removal_},
                     {framed, "60000", channel_, id_ + ":" + framed.substr(0, 14), "PUBLISH"});
  }
  RedisReply remove(const std::string& v) {
    return bus().run("publish_l2", {key_, removal_},
                     {v, "60000", channel_, id_ + ":" + v, "PUBLISH", "remove"});
  }
};

TEST_F(Removals, PublishL2RemoveDeletesTheRowAndKeepsItsVersionForTheTtl) {
  const std::string v1 = minter_.mint("AST").value().str(), v2 = minter_.mint("AST").value().str();
  ASSERT_TRUE(is_integer(publish(v1 + "one"), 0));
  ASSERT_TRUE(remove(v2));
  EXPECT_EQ(get(key_), "(nil)");
  EXPECT_EQ(get(removal_), v2);
  const long long ttl = bus().integer("PTTL %s", removal_);
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 60000);
  // An older removal leaves the newer tombstone in place.
  const std::string v0 = minter_.mint("AST").value().str();  // newer than v2: minted after
  ASSERT_TRUE(remove(v1));
  EXPECT_EQ(get(removal_), v2);
  ASSERT_TRUE(remove(v0));
  EXPECT_EQ(get(removal_), v0);
}

TEST_F(Removals, AWriteAsOldAsTheRemovalOrOlderIsRefusedAndANewerOneStored) {
  const std::string before = minter_.mint("AST").value().str();  // a slow loader's version
  const std::string removed = minter_.mint("AST").value().str();
  ASSERT_TRUE(remove(removed));
  EXPECT_TRUE(is_integer(put(before + "stale"), 0)) << "put_l2 brought the removed row back";
  EXPECT_TRUE(is_integer(put(removed + "same"), 0));
  ASSERT_TRUE(publish(before + "stale"));  // its message still goes: stale wherever it lands
  EXPECT_EQ(get(key_), "(nil)") << "publish_l2 brought the removed row back";
  const std::string after = minter_.mint("AST").value().str();
  EXPECT_TRUE(is_integer(put(after + "new"), 1));
  EXPECT_EQ(get(key_), after + "new");
  // Without KEYS[2] (the original's callers) the scripts behave as before.
  command(client(), "DEL %s", key_.c_str());
  EXPECT_TRUE(is_integer(bus().run("put_l2", {key_}, {before + "old", "60000"}), 1));
}

TEST_F(Removals, DropL2WithATombstoneKeyKeepsTheRemovalsVersion) {
  const std::string v1 = minter_.mint("AST").value().str(), v2 = minter_.mint("AST").value().str();
  ASSERT_TRUE(is_integer(put(v1 + "one"), 1));
  EXPECT_TRUE(is_integer(bus().run("drop_l2", {key_, removal_}, {v2, "60000"}), 1));
  EXPECT_EQ(get(key_), "(nil)");
  EXPECT_EQ(get(removal_), v2);
  EXPECT_TRUE(is_integer(put(v1 + "one"), 0));
}

}  // namespace
}  // namespace echo::test
