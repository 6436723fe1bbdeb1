// SPDX-License-Identifier: MIT
// The RESP3 decoder agrees with hiredis's RESP2 reader on random RESP2 streams cut at random.

#include <hiredis/hiredis.h>

#include "resp3_decoder_fixture.h"

namespace echo::io {
namespace {

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
