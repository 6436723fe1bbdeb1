// SPDX-License-Identifier: MIT
// One thread's writes of one key keep their order in L1 as in L2, against a real redis-server:
// publish_async(K, v1), then at once a blocking put(K, v2), publish(K, v2) or invalidate(K) on the
// same thread, 2,000 rounds each, on the none and broadcast lanes, with the writer's direct apply
// on and off. The async call's row reaches the writer through io thread 0 when its reply lands,
// and the later call's row (put in place under the writer's token, or posted from this thread)
// may reach it first; the inbox keeps each poster's order, not one across posters. Once both
// calls are done, L1 must hold L2's version (or, after the invalidate, nothing, as L2): a put is
// newer-wins in L1, and the invalidate leaves a tombstone that refuses the older row.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using table::BrandedId;

enum class Then { kPut, kPublish, kInvalidate };

const char* name_of(Then t) {
  return t == Then::kPut ? "put" : t == Then::kPublish ? "publish" : "invalidate";
}

class PublishOrder : public SingleServerTest,
                     public ::testing::WithParamInterface<std::tuple<CoherenceMode, bool, Then>> {
 protected:
  static constexpr int kRounds = 2000;
};

// L1's version of `name` on `e`'s table, or "" when it holds no row.
std::string l1_version(const Engine& e, std::string_view table, const BrandedId& name) {
  char buf[256];
  const auto r = writer_of(e, table).map().read(name.view(), std::span<char>(buf, sizeof buf));
  return r.status == table::ReadStatus::kMiss ? std::string() : std::string(table::view(r.version));
}

// L2's version of `key`, or "" when it holds no row.
std::string l2_version(redisContext* c, const std::string& key) {
  const std::string raw = l2_raw(c, key);
  return raw == "(nil)" ? std::string() : raw.substr(0, 14);
}

TEST_P(PublishOrder, LaterCallsOfOneThreadAreNeverOvertakenInL1) {
  const auto [mode, direct, then] = GetParam();
  const std::string table = "porder";
  auto spec = table_spec(table, "AST", mode, answering("loaded"));
  spec.direct_apply = direct;
  auto a = node(1, {spec});
  ASSERT_TRUE(a);
  int differ = 0;
  std::string first;
  for (int i = 0; i < kRounds; ++i) {
    const BrandedId name = fresh_id("AST");
    const std::string key = l2_key(table, name);
    std::atomic<bool> answered{false};
    ASSERT_TRUE(a->publish_async(table, name.view(), "async",
                                 [&](const engine::Result<BrandedId>&) { answered = true; }));
    switch (then) {
      case Then::kPut:
        ASSERT_TRUE(a->put(table, name.view(), "later"));
        break;
      case Then::kPublish:
        ASSERT_TRUE(a->publish(table, name.view(), "later"));
        break;
      case Then::kInvalidate:
        ASSERT_TRUE(a->invalidate(table, name.view()));
        break;
    }
    ASSERT_TRUE(eventually([&] { return answered.load(); }));
    // Both rows have been through the writer: the async one before its done() ran.
    const std::string in_l1 = l1_version(*a, table, name);
    const std::string in_l2 = l2_version(client(), key);
    if (in_l1 != in_l2 && !(in_l1.empty() && !in_l2.empty())) {  // a miss is never stale
      if (differ++ == 0) {
        first = "round " + std::to_string(i) + ": L1 '" + in_l1 + "', L2 '" + in_l2 + "'";
      }
    }
  }
  std::printf("[ order ] %s then %s, direct_apply %s: %d of %d rounds with L1 behind L2\n",
              mode == CoherenceMode::kNone ? "none" : "broadcast", name_of(then),
              direct ? "on" : "off", differ, kRounds);
  EXPECT_EQ(differ, 0) << "L1 held another version than L2 after both calls; first: " << first;
}

std::string case_name(const ::testing::TestParamInfo<PublishOrder::ParamType>& info) {
  const CoherenceMode mode = std::get<0>(info.param);
  const Then then = std::get<2>(info.param);
  return std::string(mode == CoherenceMode::kNone ? "None" : "Broadcast") +
         (std::get<1>(info.param) ? "Direct" : "Posted") +
         (then == Then::kPut       ? "ThenPut"
          : then == Then::kPublish ? "ThenPublish"
                                   : "ThenInvalidate");
}

INSTANTIATE_TEST_SUITE_P(
    Lanes, PublishOrder,
    ::testing::Combine(::testing::Values(CoherenceMode::kNone, CoherenceMode::kBroadcast),
                       ::testing::Bool(),
                       ::testing::Values(Then::kPut, Then::kPublish, Then::kInvalidate)),
    case_name);

}  // namespace
}  // namespace echo::test
