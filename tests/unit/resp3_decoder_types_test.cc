// SPDX-License-Identifier: MIT
// The RESP3 decoder reads every type: scalars, nulls by origin, aggregates, pushes, attributes
// top-level and nested, and neutral answers from the wrong type's accessors.

#include "resp3_decoder_fixture.h"

namespace echo::io {
namespace {

// ---------------------------------------------------------------------------------------------
// Types

TEST(Resp3Decoder, SimpleStringAndError) {
  Resp3Owned ok = one("+OK\r\n");
  EXPECT_EQ(ok.view().type(), Resp3Type::simple_string);
  EXPECT_EQ(ok.view().str(), "OK");
  EXPECT_FALSE(ok.view().is_error());
  Resp3Owned err = one("-WRONGTYPE Operation against a key\r\n");
  EXPECT_EQ(err.view().type(), Resp3Type::simple_error);
  EXPECT_TRUE(err.view().is_error());
  EXPECT_EQ(err.view().str(), "WRONGTYPE Operation against a key");
  EXPECT_EQ(one("+\r\n").view().str(), "");
}

TEST(Resp3Decoder, IntegerCoversInt64Range) {
  EXPECT_EQ(one(":0\r\n").view().integer(), 0);
  EXPECT_EQ(one(":-1\r\n").view().integer(), -1);
  EXPECT_EQ(one(":+7\r\n").view().integer(), 7);
  EXPECT_EQ(one(":9223372036854775807\r\n").view().integer(),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(one(":-9223372036854775808\r\n").view().integer(),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(one(":5\r\n").view().type(), Resp3Type::integer);
}

TEST(Resp3Decoder, BulkStringKeepsBinaryPayload) {
  const std::string p = payload29();
  Resp3Owned v = one("$29\r\n" + p + "\r\n");
  EXPECT_EQ(v.view().type(), Resp3Type::bulk_string);
  EXPECT_EQ(v.view().str(), p);
  EXPECT_EQ(one("$0\r\n\r\n").view().str(), "");
}

TEST(Resp3Decoder, NullsRememberTheirOrigin) {
  Resp3Owned n = one("_\r\n");
  EXPECT_TRUE(n.view().is_null());
  EXPECT_EQ(n.view().null_origin(), Resp3NullOrigin::resp3);
  Resp3Owned nb = one("$-1\r\n");
  EXPECT_TRUE(nb.view().is_null());
  EXPECT_EQ(nb.view().null_origin(), Resp3NullOrigin::nil_bulk);
  Resp3Owned na = one("*-1\r\n");
  EXPECT_TRUE(na.view().is_null());
  EXPECT_EQ(na.view().null_origin(), Resp3NullOrigin::nil_array);
  EXPECT_FALSE(n == nb);
}

TEST(Resp3Decoder, Boolean) {
  EXPECT_TRUE(one("#t\r\n").view().boolean());
  EXPECT_EQ(one("#f\r\n").view().type(), Resp3Type::boolean);
  EXPECT_FALSE(one("#f\r\n").view().boolean());
}

TEST(Resp3Decoder, DoubleIncludesInfinitiesAndNan) {
  EXPECT_DOUBLE_EQ(one(",1.23\r\n").view().floating(), 1.23);
  EXPECT_DOUBLE_EQ(one(",-10\r\n").view().floating(), -10.0);
  EXPECT_DOUBLE_EQ(one(",+2.5e3\r\n").view().floating(), 2500.0);
  EXPECT_DOUBLE_EQ(one(",1.5E-2\r\n").view().floating(), 0.015);
  EXPECT_EQ(one(",inf\r\n").view().floating(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(one(",-inf\r\n").view().floating(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(one(",nan\r\n").view().floating()));
  EXPECT_EQ(one(",0\r\n").view().type(), Resp3Type::floating);
}

TEST(Resp3Decoder, BigNumberKeepsItsText) {
  Resp3Owned v = one("(-3492890328409238509324850943850943825024385\r\n");
  EXPECT_EQ(v.view().type(), Resp3Type::big_number);
  EXPECT_EQ(v.view().str(), "-3492890328409238509324850943850943825024385");
}

TEST(Resp3Decoder, BulkError) {
  Resp3Owned v = one("!21\r\nSYNTAX invalid syntax\r\n");
  EXPECT_EQ(v.view().type(), Resp3Type::bulk_error);
  EXPECT_TRUE(v.view().is_error());
  EXPECT_EQ(v.view().str(), "SYNTAX invalid syntax");
}

TEST(Resp3Decoder, VerbatimStringSplitsFormatFromText) {
  Resp3Owned v = one("=15\r\ntxt:Some string\r\n");
  EXPECT_EQ(v.view().type(), Resp3Type::verbatim_string);
  EXPECT_EQ(v.view().verbatim_format(), "txt");
  EXPECT_EQ(v.view().str(), "Some string");
  Resp3Owned empty = one("=4\r\nmkd:\r\n");
  EXPECT_EQ(empty.view().verbatim_format(), "mkd");
  EXPECT_EQ(empty.view().str(), "");
}

TEST(Resp3Decoder, MapIsFlattenedPairsAndFindable) {
  Resp3Owned v = one("%2\r\n+server\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n");
  const Resp3Value m = v.view();
  EXPECT_EQ(m.type(), Resp3Type::map);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].str(), "server");
  EXPECT_EQ(m[1].str(), "redis");
  ASSERT_TRUE(m.find("proto").has_value());
  EXPECT_EQ(m.find("proto")->integer(), 3);
  EXPECT_FALSE(m.find("nope").has_value());
}

TEST(Resp3Decoder, SetAndArray) {
  Resp3Owned s = one("~3\r\n+a\r\n:1\r\n#t\r\n");
  EXPECT_EQ(s.view().type(), Resp3Type::set);
  ASSERT_EQ(s.view().size(), 3u);
  EXPECT_EQ(s.view()[1].integer(), 1);
  Resp3Owned a = one("*0\r\n");
  EXPECT_EQ(a.view().type(), Resp3Type::array);
  EXPECT_EQ(a.view().size(), 0u);
  EXPECT_EQ(a.view().begin(), a.view().end());
}

TEST(Resp3Decoder, PushMessageIsThreeChildren) {
  const std::string p = payload29();
  Resp3Owned v = one(push_message("ecc:{t}:coh", p));
  const Resp3Value push = v.view();
  EXPECT_EQ(push.type(), Resp3Type::push);
  ASSERT_EQ(push.size(), 3u);
  EXPECT_EQ(push[0].str(), "message");
  EXPECT_EQ(push[1].str(), "ecc:{t}:coh");
  EXPECT_EQ(push[2].str(), p);
}

TEST(Resp3Decoder, TopLevelAttributeRidesOnTheNextValue) {
  Decoded d =
      decode("|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.5\r\n*2\r\n:1\r\n:2\r\n+after\r\n");
  ASSERT_EQ(d.values.size(), 2u) << describe(d);
  const Resp3Value v = d.values[0].view();
  EXPECT_EQ(v.type(), Resp3Type::array);
  EXPECT_EQ(v.size(), 2u);
  ASSERT_TRUE(v.has_attribute());
  const Resp3Value attr = v.attribute();
  EXPECT_EQ(attr.type(), Resp3Type::attribute);
  ASSERT_TRUE(attr.find("key-popularity").has_value());
  EXPECT_DOUBLE_EQ(attr.find("key-popularity")->find("a")->floating(), 0.5);
  EXPECT_FALSE(d.values[1].view().has_attribute());
}

TEST(Resp3Decoder, NestedAttributeIsNotCountedAsAChild) {
  Resp3Owned v = one("*2\r\n:1\r\n|1\r\n+ttl\r\n:3\r\n+b\r\n");
  const Resp3Value a = v.view();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0].has_attribute());
  EXPECT_EQ(a[1].str(), "b");
  ASSERT_TRUE(a[1].has_attribute());
  EXPECT_EQ(a[1].attribute().find("ttl")->integer(), 3);
  std::size_t visited = 0;
  for (const Resp3Value child : a) {
    EXPECT_NE(child.type(), Resp3Type::attribute);
    ++visited;
  }
  EXPECT_EQ(visited, 2u);
}

TEST(Resp3Decoder, ConsecutiveAttributesChain) {
  Resp3Owned v = one("|1\r\n+first\r\n:1\r\n|1\r\n+second\r\n:2\r\n+value\r\n");
  const Resp3Value x = v.view();
  EXPECT_EQ(x.str(), "value");
  ASSERT_TRUE(x.has_attribute());
  EXPECT_TRUE(x.attribute().find("second").has_value());
  ASSERT_TRUE(x.attribute().has_attribute());
  EXPECT_TRUE(x.attribute().attribute().find("first").has_value());
}

TEST(Resp3Decoder, NestedAggregatesWalkInOrder) {
  Resp3Owned v = one("*3\r\n*2\r\n:1\r\n*1\r\n:2\r\n%1\r\n+k\r\n~1\r\n#t\r\n:3\r\n");
  const Resp3Value a = v.view();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].size(), 2u);
  EXPECT_EQ(a[0][0].integer(), 1);
  EXPECT_EQ(a[0][1][0].integer(), 2);
  EXPECT_EQ(a[1].type(), Resp3Type::map);
  EXPECT_TRUE(a[1].find("k")->type() == Resp3Type::set);
  EXPECT_TRUE((*a[1].find("k"))[0].boolean());
  EXPECT_EQ(a[2].integer(), 3);
  EXPECT_TRUE(a[3].is_null()) << "out of range is a null, never a crash";
  EXPECT_EQ(a.to_debug_string(), "*3[*2[:1,*1[:2]],%2[+\"k\",~1[#t]],:3]");
}

TEST(Resp3Decoder, WrongTypeAccessorsAreNeutral) {
  Resp3Owned v = one(":5\r\n");
  EXPECT_EQ(v.view().str(), "");
  EXPECT_EQ(v.view().size(), 0u);
  EXPECT_FALSE(v.view().boolean());
  EXPECT_EQ(v.view().floating(), 0.0);
  EXPECT_TRUE(v.view()[0].is_null());
  Resp3Value none;
  EXPECT_TRUE(none.is_null());
  EXPECT_EQ(none.str(), "");
}

}  // namespace
}  // namespace echo::io
