// SPDX-License-Identifier: MIT
// Unit tests of the small face of a table's declaration and keys: TextKey joins integer, string
// and char parts by ':' on the stack, and an over-long key is empty (which every verb refuses);
// text_table declares a text-key table with no kind or loader to set.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>

#include <echo/engine/keys.h>
#include <echo/engine/table_spec.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

TEST(TextKey, JoinsItsPartsByColons) {
  EXPECT_EQ(TextKey("AAPL").view(), "AAPL");
  EXPECT_EQ(TextKey("AAPL", 20240105).view(), "AAPL:20240105");
  const std::string account = "ACC-7";
  EXPECT_EQ(TextKey(account, std::string_view("EUR"), 'B', -42, 7u).view(), "ACC-7:EUR:B:-42:7");
  EXPECT_EQ(TextKey(std::uint64_t{18446744073709551615u}).view(), "18446744073709551615");
  EXPECT_EQ(TextKey(std::int64_t{INT64_MIN}).view(), "-9223372036854775808");
  EXPECT_EQ(TextKey().view(), "");
  const std::string_view v = TextKey("x", 1);  // a key is a view
  EXPECT_EQ(v.size(), 3u);
}

TEST(TextKey, AKeyPastTheLimitIsEmptyAndTheGateRefusesIt) {
  const std::string long_part(kMaxTextKey - 2, 'K');
  EXPECT_EQ(TextKey(long_part, 1).view().size(), kMaxTextKey);
  EXPECT_TRUE(table::check_text_key(TextKey(long_part, 1).view()));
  EXPECT_EQ(TextKey(long_part, 12).view(), "");
  EXPECT_FALSE(table::check_text_key(TextKey(long_part, 12).view()));
}

TEST(TextTable, DeclaresATextKeyTableWithNothingElseToSet) {
  TableSpec s = text_table("quotes");
  EXPECT_EQ(s.name, "quotes");
  EXPECT_EQ(s.keys, KeyKind::kText);
  EXPECT_EQ(s.coherence, CoherenceMode::kBroadcast);
  EXPECT_EQ(s.kind, kTextKind);
  EXPECT_FALSE(s.loader);
  EXPECT_NO_THROW(validate(s));
  s.ttl_ms = 60000;  // any other knob, by assignment, in any order
  s.max_size = 1000;
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(text_table("positions", CoherenceMode::kJob).coherence, CoherenceMode::kJob);
}

}  // namespace
}  // namespace echo::engine
