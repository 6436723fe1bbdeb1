// SPDX-License-Identifier: MIT
// The cluster router's pure half: slots (the vectors of docs/wire.md, "Names, keys and channels",
// hash-tag rules, agreement with table::hash_slot), first-key routing, redirect text, seeds, and
// both topology replies decoded from the bytes a server sends (RESP3 and RESP2 forms).
#include <echo/io/cluster_map.h>
#include <echo/io/resp3_decoder.h>
#include <echo/table/names.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace echo::io {
namespace {

std::optional<std::uint16_t> slot_of(std::initializer_list<std::string_view> args) {
  return command_slot(std::span<const std::string_view>(args.begin(), args.size()));
}

TEST(HashSlot, MatchesWireVectors) {
  EXPECT_EQ(hash_slot("123456789"), 12739);
  EXPECT_EQ(hash_slot("emq:{orders}:pending"), 105);
  EXPECT_EQ(hash_slot("emq:{fills}:job:X"), 4165);
  EXPECT_EQ(hash_slot("{emq}:version"), 9051);
}

TEST(HashSlot, FollowsHashTagRules) {
  EXPECT_EQ(hash_slot("ecc:{quotes}:AST0KHTOWnGLuC"), hash_slot("ecc:{quotes}:coh"));
  EXPECT_EQ(hash_slot("x{quotes}y"), hash_slot("quotes"));
  EXPECT_NE(hash_slot("foo{}{bar}"), hash_slot("bar"));      // the first {} is empty: whole key
  EXPECT_EQ(hash_slot("foo{{bar}}zap"), hash_slot("{bar"));  // up to the first '}'
  EXPECT_NE(hash_slot("foo{bar"), hash_slot("bar"));         // no closing brace: whole key
  EXPECT_EQ(hash_slot(""), 0);
}

TEST(HashSlot, AgreesWithTableHashSlot) {
  std::mt19937_64 rng(9);
  const std::string alphabet = "ab{}:xyz019";
  for (int i = 0; i < 20000; ++i) {
    std::string key(rng() % 12, 'a');
    for (char& c : key) c = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(hash_slot(key), table::hash_slot(key)) << key;
  }
}

TEST(CommandSlot, RoutesByFirstKey) {
  EXPECT_EQ(slot_of({"GET", "ecc:{quotes}:AST0KHTOWnGLuC"}), hash_slot("quotes"));
  EXPECT_EQ(slot_of({"set", "{a}x", "v"}), hash_slot("a"));
  EXPECT_EQ(slot_of({"SPUBLISH", "ecc:{quotes}:coh", "m"}), hash_slot("quotes"));
  EXPECT_EQ(slot_of({"EVALSHA", "abc", "2", "emq:{orders}:a", "emq:{orders}:b", "x"}), 105);
  EXPECT_EQ(slot_of({"evalsha_ro", "abc", "1", "{emq}:version"}), 9051);
}

TEST(CommandSlot, KeylessCommandsHaveNone) {
  EXPECT_FALSE(slot_of({"PING"}));
  EXPECT_FALSE(slot_of({"CLUSTER", "SHARDS"}));
  EXPECT_FALSE(slot_of({"script", "load", "return 1"}));
  EXPECT_FALSE(slot_of({"EVALSHA", "abc", "0", "argv"}));
  EXPECT_FALSE(slot_of({"EVAL", "return 1", "x"}));  // numkeys not a number
  EXPECT_FALSE(slot_of({"EVALSHA", "abc", "2"}));    // keys promised, none given
}

TEST(Redirect, ParsesMovedAndAsk) {
  auto m = parse_redirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(m->slot, 3999);
  EXPECT_EQ(m->to, (NodeAddress{"127.0.0.1", 6381}));
  auto a = parse_redirect("ASK 0 [::1]:7000");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(a->slot, 0);
  EXPECT_EQ(a->to, (NodeAddress{"::1", 7000}));
  auto unknown_host = parse_redirect("MOVED 16383 :7001");
  ASSERT_TRUE(unknown_host);
  EXPECT_EQ(unknown_host->to.host, "");
  EXPECT_EQ(unknown_host->slot, 16383);
}

TEST(Redirect, RefusesAnythingElse) {
  for (std::string_view bad :
       {"ERR unknown command", "MOVED", "MOVED 3999", "MOVED 16384 h:1", "MOVED -1 h:1",
        "MOVED x h:1", "ASK 1 h", "ASK 1 h:0", "ASK 1 h:65536", "moved 1 h:1", "TRYAGAIN"}) {
    EXPECT_FALSE(parse_redirect(bad)) << bad;
  }
}

TEST(Seeds, ParsesListsAndRefusesBadEntries) {
  const auto s = parse_seeds("127.0.0.1:7000,localhost:7001,[::1]:7002");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], (NodeAddress{"127.0.0.1", 7000}));
  EXPECT_EQ(s[1], (NodeAddress{"localhost", 7001}));
  EXPECT_EQ(s[2], (NodeAddress{"::1", 7002}));
  for (std::string_view bad : {"", "host", ":7000", "h:0", "h:70000", "h:1,", "h:x"}) {
    EXPECT_THROW(parse_seeds(bad), std::invalid_argument) << bad;
  }
}

TEST(ParseAddress, OneHostPortStrictly) {
  EXPECT_EQ(parse_address("127.0.0.1:7000"), (NodeAddress{"127.0.0.1", 7000}));
  EXPECT_EQ(parse_address("[::1]:7002"), (NodeAddress{"::1", 7002}));
  EXPECT_EQ(parse_address("h:65535"), (NodeAddress{"h", 65535}));
  // std::stoi took "6379x", " 6379" and "+6379" as 6379.
  for (std::string_view bad : {"", "host", ":7000", "h:", "h:0", "h:65536", "h:-1", "h:6379x",
                               "h: 6379", "h:+6379", "h:99999999999999999999", "[]:7000"}) {
    EXPECT_FALSE(parse_address(bad)) << bad;
  }
}

// Decodes one reply from its wire bytes and hands it to `fn`.
template <class Fn>
void with_reply(std::string_view bytes, Fn fn) {
  Resp3Decoder d;
  d.feed(bytes);
  const Resp3Next n = d.next();
  ASSERT_EQ(n.status, Resp3Status::value) << bytes;
  fn(n.value);
}

std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

// One node of a CLUSTER SHARDS reply, as a RESP3 map.
std::string shard_node(std::string_view id, int port, std::string_view role,
                       std::string_view health, std::string_view endpoint = "127.0.0.1") {
  return "%6\r\n" + bulk("id") + bulk(id) + bulk("port") + ":" + std::to_string(port) + "\r\n" +
         bulk("ip") + bulk("127.0.0.1") + bulk("endpoint") + bulk(endpoint) + bulk("role") +
         bulk(role) + bulk("health") + bulk(health);
}

TEST(ClusterShards, TakesTheOnlineMasterOfEachShard) {
  // Shard 1: two ranges, master online. Shard 2: its master failed, its replica promoted.
  // Shard 3: master failed and nobody promoted yet: no ranges.
  const std::string reply =
      "*3\r\n"
      "%2\r\n" +
      bulk("slots") + "*4\r\n:0\r\n:99\r\n:200\r\n:300\r\n" + bulk("nodes") + "*2\r\n" +
      shard_node("a", 7000, "master", "online") + shard_node("b", 7003, "replica", "online") +
      "%2\r\n" + bulk("slots") + "*2\r\n:100\r\n:199\r\n" + bulk("nodes") + "*2\r\n" +
      shard_node("c", 7001, "master", "failed") + shard_node("d", 7004, "master", "online", "?") +
      "%2\r\n" + bulk("slots") + "*2\r\n:301\r\n:16383\r\n" + bulk("nodes") + "*1\r\n" +
      shard_node("e", 7002, "master", "failed");
  with_reply(reply, [](const Resp3Value& v) {
    const auto ranges = parse_cluster_shards(v);
    ASSERT_TRUE(ranges);
    ASSERT_EQ(ranges->size(), 3u);
    EXPECT_EQ((*ranges)[0].first, 0);
    EXPECT_EQ((*ranges)[0].last, 99);
    EXPECT_EQ((*ranges)[0].master, (NodeAddress{"127.0.0.1", 7000}));
    EXPECT_EQ((*ranges)[0].master_id, "a");
    EXPECT_EQ((*ranges)[1].first, 200);
    EXPECT_EQ((*ranges)[1].last, 300);
    EXPECT_EQ((*ranges)[2].first, 100);
    EXPECT_EQ((*ranges)[2].master, (NodeAddress{"127.0.0.1", 7004}));  // "?" endpoint: the ip
    EXPECT_EQ((*ranges)[2].master_id, "d");
  });
}

TEST(ClusterShards, ReadsTheResp2FlatForm) {
  const std::string reply = "*1\r\n*4\r\n" + bulk("slots") + "*2\r\n:5\r\n:9\r\n" + bulk("nodes") +
                            "*1\r\n*10\r\n" + bulk("id") + bulk("n1") + bulk("port") + ":7005\r\n" +
                            bulk("endpoint") + bulk("10.0.0.5") + bulk("role") + bulk("master") +
                            bulk("health") + bulk("online");
  with_reply(reply, [](const Resp3Value& v) {
    const auto ranges = parse_cluster_shards(v);
    ASSERT_TRUE(ranges);
    ASSERT_EQ(ranges->size(), 1u);
    EXPECT_EQ((*ranges)[0].master, (NodeAddress{"10.0.0.5", 7005}));
    EXPECT_EQ((*ranges)[0].first, 5);
    EXPECT_EQ((*ranges)[0].last, 9);
  });
}

// A node listing both ports (tls-cluster on Redis 7: "tls-port" beside the plaintext "port"): a
// TLS client dials the TLS one, a plain client the plain one; a node with no tls-port keeps
// "port" for both (under tls-cluster its "port" already is the TLS one).
TEST(ClusterShards, ATlsClientDialsTheTlsPort) {
  const std::string both = "*1\r\n*4\r\n" + bulk("slots") + "*2\r\n:0\r\n:16383\r\n" +
                           bulk("nodes") + "*1\r\n*12\r\n" + bulk("id") + bulk("n1") +
                           bulk("port") + ":7005\r\n" + bulk("tls-port") + ":8005\r\n" +
                           bulk("ip") + bulk("10.0.0.5") + bulk("role") + bulk("master") +
                           bulk("health") + bulk("online");
  with_reply(both, [](const Resp3Value& v) {
    const auto plain = parse_cluster_shards(v);
    const auto tls = parse_cluster_shards(v, /*tls=*/true);
    ASSERT_TRUE(plain && tls);
    EXPECT_EQ(plain->front().master, (NodeAddress{"10.0.0.5", 7005}));
    EXPECT_EQ(tls->front().master, (NodeAddress{"10.0.0.5", 8005}));
  });
  const std::string port_only = "*1\r\n*4\r\n" + bulk("slots") + "*2\r\n:0\r\n:16383\r\n" +
                                bulk("nodes") + "*1\r\n*10\r\n" + bulk("id") + bulk("n1") +
                                bulk("port") + ":8005\r\n" + bulk("ip") + bulk("10.0.0.5") +
                                bulk("role") + bulk("master") + bulk("health") + bulk("online");
  with_reply(port_only, [](const Resp3Value& v) {
    const auto tls = parse_cluster_shards(v, /*tls=*/true);
    ASSERT_TRUE(tls);
    EXPECT_EQ(tls->front().master, (NodeAddress{"10.0.0.5", 8005}));
  });
}

// A fragmented slot space: one shard owning every other slot, each its own range (8,192 pairs),
// and a RESP2 flat node whose field list ends in a key with no value. Every range comes back, in
// order (the walk takes the pairs in one pass: indexing each would be quadratic on the loop).
TEST(ClusterShards, ReadsThousandsOfRangesInOrderAndAFlatNodeWithADanglingKey) {
  std::string slots = "*16384\r\n";
  for (int s = 0; s < kClusterSlots; s += 2) {
    slots += ":" + std::to_string(s) + "\r\n:" + std::to_string(s) + "\r\n";
  }
  const std::string node = "*9\r\n" + bulk("port") + ":7005\r\n" + bulk("endpoint") +
                           bulk("10.0.0.5") + bulk("role") + bulk("master") + bulk("health") +
                           bulk("online") + bulk("id");
  const std::string reply =
      "*1\r\n%2\r\n" + bulk("slots") + slots + bulk("nodes") + "*1\r\n" + node;
  with_reply(reply, [](const Resp3Value& v) {
    const auto ranges = parse_cluster_shards(v);
    ASSERT_TRUE(ranges);
    ASSERT_EQ(ranges->size(), 8192u);
    for (std::size_t i = 0; i < ranges->size(); ++i) {
      ASSERT_EQ((*ranges)[i].first, 2 * i) << i;
      ASSERT_EQ((*ranges)[i].last, 2 * i) << i;
    }
    EXPECT_EQ(ranges->front().master, (NodeAddress{"10.0.0.5", 7005}));
    EXPECT_EQ(ranges->front().master_id, "") << "the dangling key has no value";
  });
}

TEST(ClusterShards, RefusesMalformedReplies) {
  for (const std::string& bad :
       {std::string("+OK\r\n"), std::string("*1\r\n:1\r\n"),
        "*1\r\n%1\r\n" + bulk("slots") + "*2\r\n:0\r\n:1\r\n",  // no nodes
        "*1\r\n%2\r\n" + bulk("slots") + "*1\r\n:0\r\n" + bulk("nodes") + "*1\r\n" +
            shard_node("a", 1, "master", "online"),  // odd slot list
        "*1\r\n%2\r\n" + bulk("slots") + "*2\r\n:9\r\n:1\r\n" + bulk("nodes") + "*1\r\n" +
            shard_node("a", 1, "master", "online"),  // first > last
        "*1\r\n%2\r\n" + bulk("slots") + "*2\r\n:0\r\n:16384\r\n" + bulk("nodes") + "*1\r\n" +
            shard_node("a", 1, "master", "online"),  // past the last slot
        "*1\r\n%2\r\n" + bulk("slots") + "*2\r\n:0\r\n:1\r\n" + bulk("nodes") + "*1\r\n" +
            shard_node("a", 0, "master", "online")}) {  // port 0
    with_reply(bad, [&](const Resp3Value& v) { EXPECT_FALSE(parse_cluster_shards(v)) << bad; });
  }
}

TEST(ClusterSlots, ReadsRangesAndMasters) {
  const std::string reply = "*2\r\n*4\r\n:0\r\n:8191\r\n*3\r\n" + bulk("127.0.0.1") + ":7000\r\n" +
                            bulk("id0") + "*3\r\n" + bulk("127.0.0.1") + ":7003\r\n" + bulk("id3") +
                            "*3\r\n:8192\r\n:16383\r\n*2\r\n" + bulk("127.0.0.2") + ":7001\r\n";
  with_reply(reply, [](const Resp3Value& v) {
    const auto ranges = parse_cluster_slots(v);
    ASSERT_TRUE(ranges);
    ASSERT_EQ(ranges->size(), 2u);
    EXPECT_EQ((*ranges)[0].master, (NodeAddress{"127.0.0.1", 7000}));
    EXPECT_EQ((*ranges)[0].master_id, "id0");
    EXPECT_EQ((*ranges)[1].first, 8192);
    EXPECT_EQ((*ranges)[1].master, (NodeAddress{"127.0.0.2", 7001}));
    EXPECT_EQ((*ranges)[1].master_id, "");
  });
  for (const std::string& bad : {std::string(":1\r\n"), std::string("*1\r\n*2\r\n:0\r\n:1\r\n"),
                                 "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n" + bulk("h"),
                                 "*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n" + bulk("h") + ":1\r\n"}) {
    with_reply(bad, [&](const Resp3Value& v) { EXPECT_FALSE(parse_cluster_slots(v)) << bad; });
  }
}

}  // namespace
}  // namespace echo::io
