// SPDX-License-Identifier: MIT
// The RESP3 decoder over a stream: every split of a recorded multi-frame stream yields the same
// values, values survive the buffer's moves, and steady-state decoding allocates nothing.

#include <atomic>
#include <cstdlib>
#include <new>

#include "resp3_decoder_fixture.h"

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
namespace {

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

}  // namespace
}  // namespace echo::io
