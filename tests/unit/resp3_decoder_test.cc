// SPDX-License-Identifier: MIT
// The RESP3 decoder: every type, nesting and attributes, every split of a recorded multi-frame
// stream, each limit and each malformed case as its typed error, sticky errors, lifetimes
// across buffer moves, no allocation in steady state, and a differential test against hiredis's
// RESP2 reader on random streams.
#include <echo/io/resp3_decoder.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

// Counts heap allocations made by this thread's code between two reads (the allocation claims).
namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

// g++ 12 sees free() paired with operator new across inlining and warns; the pair is ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace echo::io {

// gtest finds these by argument-dependent lookup, so they live in echo::io itself.
void PrintTo(Resp3Error error, std::ostream* os) { *os << to_string(error); }
void PrintTo(Resp3Status status, std::ostream* os) { *os << static_cast<int>(status); }

namespace {

// What a whole stream decodes to: the values in order, then how it stopped.
struct Decoded {
  std::vector<Resp3Owned> values;
  Resp3Status last = Resp3Status::need_more;
  Resp3Error error = Resp3Error::none;

  friend bool operator==(const Decoded& a, const Decoded& b) {
    return a.values == b.values && a.last == b.last && a.error == b.error;
  }
};

std::string describe(const Decoded& d) {
  std::string out;
  for (const auto& v : d.values) out += v.view().to_debug_string() + "\n";
  out += "last=" + std::to_string(static_cast<int>(d.last)) +
         " error=" + std::string(to_string(d.error));
  return out;
}

void drain(Resp3Decoder& dec, Decoded& out) {
  for (;;) {
    const Resp3Next r = dec.next();
    out.last = r.status;
    out.error = r.error;
    if (r.status != Resp3Status::value) return;
    out.values.push_back(r.value.to_owned());
  }
}

// Feeds `stream` cut at each of `cuts` (ascending offsets), draining after every chunk.
Decoded decode_split(std::string_view stream, const std::vector<std::size_t>& cuts,
                     Resp3Limits limits = {}) {
  Resp3Decoder dec(limits);
  Decoded out;
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    dec.feed(stream.substr(at, cut - at));
    drain(dec, out);
    if (out.last == Resp3Status::error) return out;
    at = cut;
  }
  dec.feed(stream.substr(at));
  drain(dec, out);
  return out;
}

Decoded decode(std::string_view stream, Resp3Limits limits = {}) {
  return decode_split(stream, {}, limits);
}

Resp3Error error_of(std::string_view stream, Resp3Limits limits = {}) {
  return decode(stream, limits).error;
}

// Exactly one complete value, nothing left over.
Resp3Owned one(std::string_view stream) {
  Decoded d = decode(stream);
  EXPECT_EQ(d.values.size(), 1u) << describe(d);
  EXPECT_EQ(d.last, Resp3Status::need_more) << describe(d);
  return d.values.empty() ? Resp3Owned{} : d.values.front();
}

// Printable rendering of raw input for failure messages.
std::string one_line(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A 29-byte coherence payload with the bytes a naive parser trips on.
std::string payload29() {
  static constexpr char kBytes[] = "USR0KHTOWnGLuC\r\n\0$*:+-USR0N\xff\x01";
  static_assert(sizeof kBytes - 1 == 29, "a coherence message is 29 bytes");
  return std::string(kBytes, 29);
}

std::string push_message(std::string_view channel, std::string_view payload, char kind = '>') {
  std::string s;
  s += kind;
  s += "3\r\n$7\r\nmessage\r\n$" + std::to_string(channel.size()) + "\r\n";
  s += channel;
  s += "\r\n$" + std::to_string(payload.size()) + "\r\n";
  s += payload;
  s += "\r\n";
  return s;
}

// Every RESP3 type, nesting, attributes (top-level and nested), a push, and payloads holding
// CRLF: the recorded stream that every split must decode identically.
std::string recorded_stream() {
  std::string s;
  s += "+OK\r\n";
  s += "-ERR unknown command 'FOO'\r\n";
  s += ":-42\r\n";
  s += "$5\r\nhello\r\n";
  s += "$0\r\n\r\n";
  s += "$-1\r\n";
  s += "*-1\r\n";
  s += "_\r\n";
  s += "#t\r\n";
  s += ",3.25\r\n";
  s += ",-inf\r\n";
  s += "(3492890328409238509324850943850943825024385\r\n";
  s += "!21\r\nSYNTAX invalid syntax\r\n";
  s += "=15\r\ntxt:Some string\r\n";
  s += "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n";
  s += "~3\r\n+orange\r\n+apple\r\n#f\r\n";
  s += "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n";
  s += "*2\r\n:2039123\r\n:9543892\r\n";
  s += push_message("ecc:{t}:coh", payload29());
  s += "*3\r\n*2\r\n:1\r\n*0\r\n%0\r\n~2\r\n|1\r\n+ttl\r\n:3\r\n$2\r\n\r\n\r\n>0\r\n";
  s += ":9223372036854775807\r\n";
  return s;
}

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

// ---------------------------------------------------------------------------------------------
// Splits

TEST(Resp3Decoder, RecordedStreamDecodesToEveryType) {
  Decoded d = decode(recorded_stream());
  ASSERT_EQ(d.last, Resp3Status::need_more) << describe(d);
  ASSERT_EQ(d.values.size(), 20u) << describe(d);
  EXPECT_EQ(d.values[16].view().type(), Resp3Type::array);
  EXPECT_TRUE(d.values[16].view().has_attribute());
  EXPECT_EQ(d.values[17].view().type(), Resp3Type::push);
  EXPECT_EQ(d.values[18].view()[2][0].str(), "\r\n");
  EXPECT_EQ(d.values[18].view()[2][0].attribute().find("ttl")->integer(), 3);
}

TEST(Resp3Decoder, EveryTwoWaySplitYieldsIdenticalValues) {
  const std::string stream = recorded_stream();
  const Decoded whole = decode(stream);
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    const Decoded split = decode_split(stream, {cut});
    ASSERT_TRUE(split == whole) << "cut at " << cut << "\n" << describe(split);
  }
}

TEST(Resp3Decoder, ByteByByteYieldsIdenticalValues) {
  const std::string stream = recorded_stream();
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < stream.size(); ++i) cuts.push_back(i);
  const Decoded split = decode_split(stream, cuts);
  EXPECT_TRUE(split == decode(stream)) << describe(split);
}

TEST(Resp3Decoder, RandomChunksThroughPrepareCommitYieldIdenticalValues) {
  const std::string stream = recorded_stream() + recorded_stream();
  const Decoded whole = decode(stream);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    Resp3Decoder dec;
    Decoded out;
    std::size_t at = 0;
    while (at < stream.size()) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 40, stream.size() - at);
      std::span<char> room = dec.prepare(1 + rng() % 64);
      const std::size_t take = std::min(n, room.size());
      std::memcpy(room.data(), stream.data() + at, take);
      dec.commit(take);
      at += take;
      drain(dec, out);
    }
    ASSERT_TRUE(out == whole) << "round " << round << "\n" << describe(out);
  }
}

TEST(Resp3Decoder, PushesInterleavedWithRepliesKeepStreamOrder) {
  std::string stream;
  for (int i = 0; i < 50; ++i) {
    stream += "+OK\r\n";
    stream += push_message("ecc:{t}:coh", payload29());
    stream += ":" + std::to_string(i) + "\r\n";
    stream += ">3\r\n$9\r\nsubscribe\r\n$3\r\nchn\r\n:1\r\n";
  }
  Decoded d = decode_split(stream, {17, 333, 334, 2000});
  ASSERT_EQ(d.values.size(), 200u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(d.values[4 * i].view().str(), "OK");
    EXPECT_EQ(d.values[4 * i + 1].view().type(), Resp3Type::push);
    EXPECT_EQ(d.values[4 * i + 1].view()[0].str(), "message");
    EXPECT_EQ(d.values[4 * i + 2].view().integer(), i);
    EXPECT_EQ(d.values[4 * i + 3].view()[0].str(), "subscribe");
  }
}

TEST(Resp3Decoder, LargeBulkFedInSmallPiecesReportsWhatItWants) {
  const std::string body(100000, 'x');
  const std::string frame = "$100000\r\n" + body + "\r\n";
  Resp3Decoder dec;
  dec.feed(frame.substr(0, 19));
  EXPECT_EQ(dec.next().status, Resp3Status::need_more);
  EXPECT_EQ(dec.wanted(), frame.size() - 19);
  EXPECT_EQ(dec.buffered(), 19u);
  for (std::size_t at = 19; at < frame.size(); at += 7) {
    dec.feed(frame.substr(at, 7));
    Resp3Next r = dec.next();
    if (at + 7 < frame.size()) {
      ASSERT_EQ(r.status, Resp3Status::need_more);
    } else {
      ASSERT_EQ(r.status, Resp3Status::value);
      EXPECT_EQ(r.value.str(), body);
    }
  }
  EXPECT_EQ(dec.next().status, Resp3Status::need_more);
  EXPECT_EQ(dec.buffered(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Lifetimes and memory

TEST(Resp3Decoder, ValueSurvivesBufferGrowthMidFrame) {
  // Half a frame, then a feed that forces the buffer to grow and move: offsets stay right.
  Resp3Decoder dec;
  const std::string head = "*2\r\n$3\r\nabc\r\n";
  dec.feed(head);
  EXPECT_EQ(dec.next().status, Resp3Status::need_more);
  const std::string big(3 * Resp3Decoder::kDefaultCapacity, 'q');
  dec.feed("$" + std::to_string(big.size()) + "\r\n" + big + "\r\n");
  Resp3Next r = dec.next();
  ASSERT_EQ(r.status, Resp3Status::value);
  EXPECT_EQ(r.value[0].str(), "abc");
  EXPECT_EQ(r.value[1].str(), big);
}

TEST(Resp3Decoder, ValueSurvivesCompactionMidFrame) {
  Resp3Decoder dec;
  std::string filler;
  while (filler.size() < Resp3Decoder::kDefaultCapacity - 200) filler += "+filler-line\r\n";
  dec.feed(filler + "*2\r\n$3\r\nabc\r\n");
  Decoded out;
  drain(dec, out);
  ASSERT_EQ(out.last, Resp3Status::need_more);
  dec.feed("$300\r\n" + std::string(300, 'z') + "\r\n");  // needs a slide to the front
  Resp3Next r = dec.next();
  ASSERT_EQ(r.status, Resp3Status::value);
  EXPECT_EQ(r.value[0].str(), "abc");
  EXPECT_EQ(r.value[1].str(), std::string(300, 'z'));
}

TEST(Resp3Decoder, OwnedCopyOutlivesTheDecoder) {
  Resp3Owned kept;
  {
    Resp3Decoder dec;
    dec.feed("|1\r\n+a\r\n:1\r\n=8\r\nmkd:text\r\n");
    Resp3Next r = dec.next();
    ASSERT_EQ(r.status, Resp3Status::value);
    kept = r.value.to_owned();
    dec.feed(std::string(100000, '+'));  // overwrite and move the buffer
  }
  Resp3Owned moved = std::move(kept);
  EXPECT_EQ(moved.view().verbatim_format(), "mkd");
  EXPECT_EQ(moved.view().str(), "text");
  EXPECT_EQ(moved.view().attribute().find("a")->integer(), 1);
}

TEST(Resp3Decoder, HugeDeclaredCountsAllocateNothing) {
  Resp3Limits limits;
  limits.max_aggregate_len = 1u << 31;
  limits.max_frame_elements = 1u << 31;
  Resp3Decoder dec(limits);
  dec.feed("*2000000000\r\n%1000000000\r\n~2000000000\r\n");
  const std::size_t before = g_allocations.load();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(dec.next().status, Resp3Status::need_more);
  EXPECT_EQ(g_allocations.load(), before);
}

TEST(Resp3Decoder, SteadyStatePushDecodingDoesNotAllocate) {
  const std::string push = push_message("ecc:{t}:coh", payload29());
  Resp3Decoder dec;
  dec.feed(push + push);
  while (dec.next().status == Resp3Status::value) {
  }
  const std::size_t before = g_allocations.load();
  std::size_t decoded = 0;
  for (int i = 0; i < 1000; ++i) {
    dec.feed(push);
    for (Resp3Next r = dec.next(); r.status == Resp3Status::value; r = dec.next()) {
      decoded += r.value[2].str().size() == 29;
    }
  }
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(decoded, 1000u);
}

TEST(Resp3Decoder, MovedDecoderResumesTheFrameInProgress) {
  Resp3Decoder a;
  a.feed("*2\r\n:1\r\n");
  EXPECT_EQ(a.next().status, Resp3Status::need_more);
  Resp3Decoder b = std::move(a);
  b.feed(":2\r\n");
  Resp3Next r = b.next();
  ASSERT_EQ(r.status, Resp3Status::value);
  EXPECT_EQ(r.value[1].integer(), 2);
}

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

// ---------------------------------------------------------------------------------------------
// Differential: hiredis's RESP2 reader on random streams

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};

::testing::AssertionResult same(const redisReply* h, const Resp3Value& v) {
  auto text = [&](Resp3Type t) -> ::testing::AssertionResult {
    if (v.type() != t) return ::testing::AssertionFailure() << "type " << to_string(v.type());
    if (v.str() != std::string_view(h->str, h->len)) {
      return ::testing::AssertionFailure() << "text " << v.to_debug_string();
    }
    return ::testing::AssertionSuccess();
  };
  switch (h->type) {
    case REDIS_REPLY_STATUS:
      return text(Resp3Type::simple_string);
    case REDIS_REPLY_ERROR:
      return text(Resp3Type::simple_error);
    case REDIS_REPLY_STRING:
      return text(Resp3Type::bulk_string);
    case REDIS_REPLY_NIL:
      if (v.is_null() && v.null_origin() != Resp3NullOrigin::resp3) {
        return ::testing::AssertionSuccess();
      }
      return ::testing::AssertionFailure() << "nil vs " << v.to_debug_string();
    case REDIS_REPLY_INTEGER:
      if (v.type() == Resp3Type::integer && v.integer() == h->integer) {
        return ::testing::AssertionSuccess();
      }
      return ::testing::AssertionFailure() << h->integer << " vs " << v.to_debug_string();
    case REDIS_REPLY_ARRAY: {
      if (v.type() != Resp3Type::array || v.size() != h->elements) {
        return ::testing::AssertionFailure()
               << "array of " << h->elements << " vs " << v.to_debug_string();
      }
      std::size_t i = 0;
      for (const Resp3Value child : v) {
        if (auto r = same(h->element[i++], child); !r) return r;
      }
      return ::testing::AssertionSuccess();
    }
    default:
      return ::testing::AssertionFailure() << "hiredis type " << h->type;
  }
}

// A random RESP2 value; hiredis 0.14 nests at most 7 levels, so stay below.
void random_resp2(std::mt19937_64& rng, int depth, std::string& out) {
  auto pick = rng() % (depth < 5 ? 7 : 5);
  auto random_bytes = [&](std::size_t n, bool line) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
      char c = static_cast<char>(rng() % 256);
      if (line && (c == '\r' || c == '\n')) c = 'r';
      s += c;
    }
    return s;
  };
  switch (pick) {
    case 0:
      out += "+" + random_bytes(rng() % 20, true) + "\r\n";
      break;
    case 1:
      out += "-" + random_bytes(rng() % 20, true) + "\r\n";
      break;
    case 2: {
      auto n = static_cast<std::int64_t>(rng() >> (rng() % 64));
      if (n == std::numeric_limits<std::int64_t>::min()) n = 0;
      if (rng() % 2) n = -n;
      out += ":" + std::to_string(n) + "\r\n";
      break;
    }
    case 3: {
      const std::size_t n = rng() % 4 == 0 ? rng() % 3000 : rng() % 40;
      out += "$" + std::to_string(n) + "\r\n" + random_bytes(n, false) + "\r\n";
      break;
    }
    case 4:
      out += rng() % 2 ? "$-1\r\n" : "*-1\r\n";
      break;
    default: {
      const std::size_t n = rng() % 6;
      out += "*" + std::to_string(n) + "\r\n";
      for (std::size_t i = 0; i < n; ++i) random_resp2(rng, depth + 1, out);
      break;
    }
  }
}

TEST(Resp3Decoder, AgreesWithHiredisReaderOnRandomResp2Streams) {
  std::mt19937_64 rng(20261129);
  std::size_t compared = 0;
  for (int round = 0; round < 300; ++round) {
    std::string stream;
    const int frames = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < frames; ++i) random_resp2(rng, 0, stream);

    std::unique_ptr<redisReader, ReaderDeleter> reader(redisReaderCreate());
    Resp3Decoder dec;
    std::size_t at = 0;
    int seen = 0;
    while (at < stream.size()) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 64, stream.size() - at);
      ASSERT_EQ(redisReaderFeed(reader.get(), stream.data() + at, n), REDIS_OK);
      dec.feed(std::string_view(stream).substr(at, n));
      at += n;
      for (;;) {
        void* raw = nullptr;
        ASSERT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
        std::unique_ptr<redisReply, ReplyDeleter> reply(static_cast<redisReply*>(raw));
        Resp3Next ours = dec.next();
        ASSERT_NE(ours.status, Resp3Status::error) << to_string(ours.error);
        if (!reply) {
          ASSERT_EQ(ours.status, Resp3Status::need_more) << "round " << round;
          break;
        }
        ASSERT_EQ(ours.status, Resp3Status::value) << "round " << round;
        ASSERT_TRUE(same(reply.get(), ours.value)) << "round " << round << " frame " << seen;
        ++seen;
        ++compared;
      }
    }
    EXPECT_EQ(seen, frames);
  }
  EXPECT_GT(compared, 3000u);
}

}  // namespace
}  // namespace echo::io
