// SPDX-License-Identifier: MIT
// The RESP3 decoder's refusals: each limit is exact and typed, each malformed input is its typed
// error, values before an error are delivered and the error then sticks.

#include "resp3_decoder_fixture.h"

namespace echo::io {
namespace {

// ---------------------------------------------------------------------------------------------
// Limits

TEST(Resp3Decoder, DepthLimitIsExactAndTyped) {
  Resp3Limits limits;
  limits.max_depth = 3;
  EXPECT_EQ(decode("*1\r\n*1\r\n*1\r\n:1\r\n", limits).values.size(), 1u);
  EXPECT_EQ(error_of("*1\r\n*1\r\n*1\r\n*0\r\n", limits), Resp3Error::depth_exceeded);
  EXPECT_EQ(error_of("*1\r\n%1\r\n~1\r\n>1\r\n:1\r\n", limits), Resp3Error::depth_exceeded);
  EXPECT_EQ(error_of("*1\r\n*1\r\n|1\r\n*1\r\n", limits), Resp3Error::depth_exceeded);
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "*1\r\n";
  EXPECT_EQ(error_of(deep), Resp3Error::depth_exceeded);
}

TEST(Resp3Decoder, AggregateLengthLimitIsExactAndTyped) {
  Resp3Limits limits;
  limits.max_aggregate_len = 4;
  EXPECT_EQ(decode("*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n", limits).values.size(), 1u);
  EXPECT_EQ(decode("%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n", limits).values.size(), 1u);
  EXPECT_EQ(error_of("*5\r\n", limits), Resp3Error::aggregate_too_long);
  EXPECT_EQ(error_of("%3\r\n", limits), Resp3Error::aggregate_too_long);
  EXPECT_EQ(error_of("~5\r\n", limits), Resp3Error::aggregate_too_long);
  EXPECT_EQ(error_of(">5\r\n", limits), Resp3Error::aggregate_too_long);
  EXPECT_EQ(error_of("|3\r\n", limits), Resp3Error::aggregate_too_long);
  EXPECT_EQ(error_of("%9223372036854775807\r\n"), Resp3Error::aggregate_too_long);
}

TEST(Resp3Decoder, FrameElementLimitIsExactAndTyped) {
  Resp3Limits limits;
  limits.max_frame_elements = 4;
  EXPECT_EQ(decode("*3\r\n:1\r\n:2\r\n:3\r\n*3\r\n:1\r\n:2\r\n:3\r\n", limits).values.size(), 2u)
      << "the limit is per frame";
  EXPECT_EQ(decode("*2\r\n*2\r\n:1\r\n:2\r\n", limits).last, Resp3Status::need_more);
  EXPECT_EQ(error_of("*2\r\n*2\r\n:1\r\n:2\r\n:3\r\n", limits),
            Resp3Error::frame_too_many_elements);
  EXPECT_EQ(error_of("|1\r\n:1\r\n:2\r\n*2\r\n:1\r\n", limits), Resp3Error::frame_too_many_elements)
      << "attributes count";
}

TEST(Resp3Decoder, BulkLengthLimitIsExactAndTyped) {
  Resp3Limits limits;
  limits.max_bulk_len = 5;
  EXPECT_EQ(decode("$5\r\nhello\r\n", limits).values.size(), 1u);
  EXPECT_EQ(error_of("$6\r\n", limits), Resp3Error::bulk_too_long);
  EXPECT_EQ(error_of("!6\r\n", limits), Resp3Error::bulk_too_long);
  EXPECT_EQ(error_of("=6\r\n", limits), Resp3Error::bulk_too_long);
  EXPECT_EQ(error_of("$9223372036854775807\r\n"), Resp3Error::bulk_too_long);
}

TEST(Resp3Decoder, LineLengthLimitIsExactAndTypedEvenBeforeTheLineEnds) {
  Resp3Limits limits;
  limits.max_line_len = 16;
  EXPECT_EQ(decode("+" + std::string(16, 'a') + "\r\n", limits).values.size(), 1u);
  EXPECT_EQ(error_of("+" + std::string(17, 'a') + "\r\n", limits), Resp3Error::line_too_long);
  EXPECT_EQ(error_of("-" + std::string(17, 'a'), limits), Resp3Error::line_too_long)
      << "an unterminated line is refused once it passes the limit";
  EXPECT_EQ(decode("+" + std::string(16, 'a'), limits).last, Resp3Status::need_more);
  EXPECT_EQ(error_of("$" + std::string(17, '1'), limits), Resp3Error::line_too_long);
}

TEST(Resp3Decoder, FrameBytesLimitIsExactAndTyped) {
  Resp3Limits limits;
  limits.max_frame_bytes = 32;
  const std::string fits = "*2\r\n$5\r\nhello\r\n$5\r\nworld\r\n";  // 26 bytes
  EXPECT_EQ(decode(fits + fits, limits).values.size(), 2u) << "the limit is per frame";
  EXPECT_EQ(error_of("*2\r\n$5\r\nhello\r\n$20\r\n", limits), Resp3Error::frame_too_large)
      << "refused from the header, before the payload is buffered";
  EXPECT_EQ(error_of("*2\r\n+" + std::string(30, 'a') + "\r\n", limits),
            Resp3Error::frame_too_large);
}

TEST(Resp3Decoder, OutOfRangeLimitsAreRefusedWithTheKnobName) {
  auto refused = [](Resp3Limits limits, const char* knob) {
    try {
      Resp3Decoder dec(limits);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find(knob) != std::string::npos;
    }
    return false;
  };
  Resp3Limits l;
  l.max_depth = 0;
  EXPECT_TRUE(refused(l, "max_depth"));
  l = {};
  l.max_aggregate_len = 0;
  EXPECT_TRUE(refused(l, "max_aggregate_len"));
  l = {};
  l.max_frame_elements = (1u << 31) + 1;
  EXPECT_TRUE(refused(l, "max_frame_elements"));
  l = {};
  l.max_line_len = 3;
  EXPECT_TRUE(refused(l, "max_line_len"));
  l = {};
  l.max_frame_bytes = 1ull << 41;
  EXPECT_TRUE(refused(l, "max_frame_bytes"));
}

// ---------------------------------------------------------------------------------------------
// Malformed input

TEST(Resp3Decoder, MalformedInputGivesTypedErrors) {
  const std::vector<std::pair<std::string, Resp3Error>> cases = {
      {"x\r\n", Resp3Error::bad_type},
      {"\r\n", Resp3Error::bad_type},
      {std::string(1, '\0'), Resp3Error::bad_type},
      {":\r\n", Resp3Error::bad_integer},
      {":-\r\n", Resp3Error::bad_integer},
      {":12a\r\n", Resp3Error::bad_integer},
      {": 1\r\n", Resp3Error::bad_integer},
      {"*x\r\n", Resp3Error::bad_integer},
      {"$\r\n", Resp3Error::bad_integer},
      {"$+3\r\nabc\r\n", Resp3Error::bad_integer},
      {":9223372036854775808\r\n", Resp3Error::integer_overflow},
      {":-9223372036854775809\r\n", Resp3Error::integer_overflow},
      {"*99999999999999999999\r\n", Resp3Error::integer_overflow},
      {"$-2\r\n", Resp3Error::bad_length},
      {"*-5\r\n", Resp3Error::bad_length},
      {"%-1\r\n", Resp3Error::bad_length},
      {"~-1\r\n", Resp3Error::bad_length},
      {">-1\r\n", Resp3Error::bad_length},
      {"|-1\r\n", Resp3Error::bad_length},
      {"!-1\r\n", Resp3Error::bad_length},
      {"=-1\r\n", Resp3Error::bad_length},
      {"+OK\rX", Resp3Error::missing_crlf},
      {"+OK\r\r\n", Resp3Error::missing_crlf},
      {"$3\r\nabcXY", Resp3Error::missing_crlf},
      {"$3\r\nabc\r\r", Resp3Error::missing_crlf},
      {",\r\n", Resp3Error::bad_double},
      {",1.2.3\r\n", Resp3Error::bad_double},
      {",infinity\r\n", Resp3Error::bad_double},
      {",0x10\r\n", Resp3Error::bad_double},
      {",++1\r\n", Resp3Error::bad_double},
      {",1 \r\n", Resp3Error::bad_double},
      {"#x\r\n", Resp3Error::bad_boolean},
      {"#tt\r\n", Resp3Error::bad_boolean},
      {"#\r\n", Resp3Error::bad_boolean},
      {"_x\r\n", Resp3Error::bad_null},
      {"(\r\n", Resp3Error::bad_big_number},
      {"(-\r\n", Resp3Error::bad_big_number},
      {"(12.5\r\n", Resp3Error::bad_big_number},
      {"=3\r\ntxt\r\n", Resp3Error::bad_verbatim},
      {"=5\r\ntxt-a\r\n", Resp3Error::bad_verbatim},
      {"$?\r\n", Resp3Error::streamed_unsupported},
      {"*?\r\n", Resp3Error::streamed_unsupported},
      {"%?\r\n", Resp3Error::streamed_unsupported},
  };
  for (const auto& [input, error] : cases) {
    EXPECT_EQ(error_of(input), error) << "input: " << one_line(input);
  }
}

TEST(Resp3Decoder, ValuesBeforeAnErrorAreDeliveredThenTheErrorSticks) {
  Resp3Decoder dec;
  dec.feed("+one\r\n:2\r\n@bad\r\n+never\r\n");
  EXPECT_EQ(dec.next().value.str(), "one");
  EXPECT_EQ(dec.next().value.integer(), 2);
  Resp3Next r = dec.next();
  EXPECT_EQ(r.status, Resp3Status::error);
  EXPECT_EQ(r.error, Resp3Error::bad_type);
  EXPECT_TRUE(dec.failed());
  dec.feed("+fine\r\n");
  EXPECT_EQ(dec.next().error, Resp3Error::bad_type) << "sticky until reset";
  dec.reset();
  EXPECT_FALSE(dec.failed());
  dec.feed("+fine\r\n");
  EXPECT_EQ(dec.next().value.str(), "fine");
}

TEST(Resp3Decoder, AnErrorInsideAnAggregateFailsTheFrame) {
  Decoded d = decode("*3\r\n:1\r\n#maybe\r\n:3\r\n");
  EXPECT_TRUE(d.values.empty());
  EXPECT_EQ(d.error, Resp3Error::bad_boolean);
}

}  // namespace
}  // namespace echo::io
