// SPDX-License-Identifier: MIT
// Versions ordered by bytes in every script, whatever the server's collation (docs/wire.md,
// "L2 values", "Byte order in scripts"): a redis-server started under LC_ALL=en_US.UTF-8 (the setup
// script generates the locale) takes LC_COLLATE from it, and Lua's string `>` follows it. The pair
// below differs in one byte, 'a' (0x61) against 'B' (0x42): in byte order the first is newer;
// en_US's collation folds case first and puts it before. The old comparison misorders the pair
// there; put_l2 and drop_l2 do not.
#include <hiredis/hiredis.h>

#include <string>

#include "engine_nodes.h"
#include "support/script_client.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;

constexpr const char* kNewer = "AST0KHTOWnGLua";  // byte order: newer
constexpr const char* kOlder = "AST0KHTOWnGLuB";

class CollatedServer : public SingleServerTest {
 protected:
  static void SetUpTestSuite() {
    testing::LocalServerOptions o;
    o.locale = "en_US.UTF-8";
    start_server(o);
  }
};

long long eval_int(redisContext* c, const char* script, const char* a, const char* b) {
  RedisReply r = command(c, "EVAL %s 0 %s %s", script, a, b);
  EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->str ? r->str : "no reply");
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

TEST_F(CollatedServer, TheOldStringComparisonMisordersAPairThatBytesOrder) {
  ASSERT_TRUE(table::newer(*table::BrandedId::parse(kNewer), *table::BrandedId::parse(kOlder)))
      << "the pair is ordered by bytes";
  // The comparison the scripts used before (and docs/wire.md, "L2 values", "Byte order in scripts"
  // describes): under this server's collation it says the newer version is not newer. If the locale
  // were missing the server would fall back to C and this would fail: the setup script generates
  // en_US.UTF-8.
  EXPECT_EQ(eval_int(client(),
                     "return (string.sub(ARGV[1], 4, 14) > string.sub(ARGV[2], 4, 14)) and 1 or 0",
                     kNewer, kOlder),
            0)
      << "the server does not collate under en_US.UTF-8: the test proves nothing";
}

TEST_F(CollatedServer, PutL2AndDropL2OrderByBytes) {
  const std::string key = "ecc:{quotes}:AST0KHTOWnGLuC";
  const std::string older = std::string(kOlder) + "old", newer = std::string(kNewer) + "new";
  auto put_l2 = [&](const std::string& framed) {
    RedisReply r = run_script(client(), "put_l2", {key}, {framed, "60000"});
    EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->str ? r->str : "no reply");
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  };
  EXPECT_EQ(put_l2(older), 1);
  EXPECT_EQ(put_l2(newer), 1) << "the newer version was taken for an older one";
  EXPECT_EQ(l2_raw(client(), key), newer);
  EXPECT_EQ(put_l2(older), 0) << "the older version overwrote the newer one";
  EXPECT_EQ(l2_raw(client(), key), newer);

  // drop_l2 through the engine (its embedded script by EVALSHA).
  LoaderProbe loader;
  auto a = node(1, {table_spec("quotes", "AST", CoherenceMode::kNone, loader.answer("x"))});
  ASSERT_TRUE(a);
  auto kept = a->drop_l2("quotes", "AST0KHTOWnGLuC", *table::BrandedId::parse(kOlder));
  ASSERT_TRUE(kept) << kept.error().message();
  EXPECT_FALSE(*kept) << "an older version dropped the newer row";
  ASSERT_TRUE(command(client(), "SET %b %b", key.data(), key.size(), older.data(), older.size()));
  auto dropped = a->drop_l2("quotes", "AST0KHTOWnGLuC", *table::BrandedId::parse(kNewer));
  ASSERT_TRUE(dropped) << dropped.error().message();
  EXPECT_TRUE(*dropped) << "a newer version did not drop the older row";
  EXPECT_EQ(l2_raw(client(), key), "(nil)");
}

}  // namespace
}  // namespace echo::test
