// SPDX-License-Identifier: MIT
// The command encoder: byte-exact RESP arrays of bulk strings (integers as decimal text),
// pipelining by appending, partial-send consumption, no allocation in steady state, and
// byte-for-byte equality with hiredis's redisFormatCommandArgv on random commands.
#include <echo/io/resp3_decoder.h>
#include <echo/io/resp_encoder.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace echo::io {
namespace {

std::string hiredis_format(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* out = nullptr;
  const int n =
      redisFormatCommandArgv(&out, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  EXPECT_GT(n, 0);
  std::string s(out, static_cast<std::size_t>(n));
  redisFreeCommand(out);
  return s;
}

TEST(RespEncoder, EncodesArrayOfBulkStrings) {
  RespEncoder enc;
  enc.command("SET", "key", "value");
  EXPECT_EQ(enc.view(), "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n");
}

TEST(RespEncoder, IntegersAreDecimalText) {
  RespEncoder enc;
  enc.command("EXPIRE", std::string("k"), 30);
  enc.command("INCRBY", std::string_view("k"), std::numeric_limits<std::int64_t>::min());
  enc.command("X", std::numeric_limits<std::uint64_t>::max(), -1, 0u);
  EXPECT_EQ(enc.view(),
            "*3\r\n$6\r\nEXPIRE\r\n$1\r\nk\r\n$2\r\n30\r\n"
            "*3\r\n$6\r\nINCRBY\r\n$1\r\nk\r\n$20\r\n-9223372036854775808\r\n"
            "*4\r\n$1\r\nX\r\n$20\r\n18446744073709551615\r\n$2\r\n-1\r\n$1\r\n0\r\n");
}

TEST(RespEncoder, EmptyAndBinaryArgumentsAreExact) {
  RespEncoder enc;
  const std::string binary("a\r\n\0b", 5);
  enc.command("PUBLISH", "", binary);
  EXPECT_EQ(enc.view(), std::string("*3\r\n$7\r\nPUBLISH\r\n$0\r\n\r\n$5\r\na\r\n\0b\r\n", 34));
}

TEST(RespEncoder, PipelineIsConcatenationAndConsumeTracksPartialSends) {
  RespEncoder enc(8);  // tiny: forces growth
  std::string expected;
  for (int i = 0; i < 100; ++i) {
    enc.command("GET", "key:" + std::to_string(i));
    expected += hiredis_format({"GET", "key:" + std::to_string(i)});
  }
  EXPECT_EQ(enc.view(), expected);
  enc.consume(10);
  EXPECT_EQ(enc.view(), std::string_view(expected).substr(10));
  enc.consume(enc.size());
  EXPECT_TRUE(enc.empty());
  enc.command("PING");
  EXPECT_EQ(enc.view(), "*1\r\n$4\r\nPING\r\n");
}

TEST(RespEncoder, RuntimeArgvMatchesVariadic) {
  RespEncoder a;
  RespEncoder b;
  a.command("EVALSHA", "0123456789abcdef0123456789abcdef01234567", 2, "k1", "k2", 42);
  const std::vector<std::string_view> views = {
      "EVALSHA", "0123456789abcdef0123456789abcdef01234567", "2", "k1", "k2", "42"};
  b.command_argv(views);
  EXPECT_EQ(a.view(), b.view());
  RespEncoder c;
  std::vector<RespArg> args = {"EVALSHA", "0123456789abcdef0123456789abcdef01234567", 2, "k1", "k2",
                               42};
  std::vector<RespArg> copied = args;  // a copied integer argument must keep its own digits
  args.clear();
  c.command_argv(copied);
  EXPECT_EQ(c.view(), a.view());
}

TEST(RespEncoder, ClearKeepsCapacity) {
  RespEncoder enc(16);
  enc.command("SET", std::string(1000, 'v'), "x");
  const std::size_t cap = enc.capacity();
  enc.clear();
  EXPECT_TRUE(enc.empty());
  for (int i = 0; i < 100; ++i) {
    enc.clear();
    enc.command("SET", std::string(900, 'v'), i);
  }
  EXPECT_EQ(enc.capacity(), cap);
}

TEST(RespEncoder, EqualsHiredisFormatterOnRandomCommands) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> argv(1 + rng() % 8);
    std::vector<std::string_view> views;
    for (auto& a : argv) {
      const std::size_t n = rng() % 4 == 0 ? rng() % 2000 : rng() % 16;
      for (std::size_t i = 0; i < n; ++i) a += static_cast<char>(rng() % 256);
      views.push_back(a);
    }
    RespEncoder enc(1);
    enc.command_argv(views);
    ASSERT_EQ(enc.view(), hiredis_format(argv)) << "round " << round;
  }
}

TEST(RespEncoder, OutputDecodesBackToTheArguments) {
  RespEncoder enc;
  enc.command("HSET", "h", "f", -7);
  Resp3Decoder dec;
  dec.feed(enc.view());
  Resp3Next r = dec.next();
  ASSERT_EQ(r.status, Resp3Status::value);
  ASSERT_EQ(r.value.size(), 4u);
  EXPECT_EQ(r.value[0].str(), "HSET");
  EXPECT_EQ(r.value[3].str(), "-7");
}

}  // namespace
}  // namespace echo::io
