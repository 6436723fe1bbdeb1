// SPDX-License-Identifier: MIT
// Unit tests of typed values (codec.h): the built-in codecs (std::string as bytes, a trivially
// copyable struct by its object bytes with the size checked), a user codec with its refusal and its
// throw, and the L1 row layout built from each (decoded once into the row, destroyed once), through
// a real L1Map.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <echo/engine/codec.h>
#include <echo/table/l1_map.h>

namespace {

struct Quote {
  double bid, ask;
  std::int64_t size;
};

// A user type with heap parts and its own text format "bid/ask/venue".
struct Tick {
  double bid = 0, ask = 0;
  std::string venue;
  static inline std::atomic<int> live{0};
  Tick() { ++live; }
  Tick(const Tick& o) : bid(o.bid), ask(o.ask), venue(o.venue) { ++live; }
  Tick(Tick&& o) noexcept : bid(o.bid), ask(o.ask), venue(std::move(o.venue)) { ++live; }
  Tick& operator=(const Tick&) = default;
  ~Tick() { --live; }
};

}  // namespace

template <>
struct echo::engine::Codec<Tick> {
  static void encode(const Tick& t, std::string& out) {
    out += std::to_string(t.bid) + "/" + std::to_string(t.ask) + "/" + t.venue;
  }
  static bool decode(std::string_view bytes, Tick& out, std::string& why) {
    if (bytes == "throw") throw std::runtime_error("feed format changed");
    const auto a = bytes.find('/'), b = bytes.rfind('/');
    if (a == std::string_view::npos || a == b) {
      why = "want bid/ask/venue";
      return false;
    }
    out.bid = std::stod(std::string(bytes.substr(0, a)));
    out.ask = std::stod(std::string(bytes.substr(a + 1, b - a - 1)));
    out.venue = std::string(bytes.substr(b + 1));
    return true;
  }
};

namespace echo::engine {
namespace {

table::BrandedId ver(std::uint64_t n) { return table::BrandedId::encode("QTE", 1000 + n).value(); }

table::L1Map map_of(const table::ValueLayout& layout) {
  table::L1Config c;
  c.max_size = 64;
  c.layout = layout;
  return table::L1Map(c);
}

TEST(Codec, AStructIsItsSchemaHeaderThenItsObjectBytesAndOtherSizesAreRefusedNamingThem) {
  const Quote q{189.1, 189.2, 300};
  const std::string encoded = encode(q);
  ASSERT_EQ(encoded.size(), kSchemaHeaderSize + sizeof(Quote));
  EXPECT_EQ(encoded.substr(0, kSchemaHeaderSize), schema_header<Quote>());
  const std::string bytes = encoded.substr(kSchemaHeaderSize);
  Quote back{};
  std::string why;
  ASSERT_TRUE(Codec<Quote>::decode(bytes, back, why));
  EXPECT_EQ(back.bid, 189.1);
  EXPECT_EQ(back.size, 300);
  EXPECT_FALSE(Codec<Quote>::decode(bytes.substr(1), back, why));
  EXPECT_NE(why.find("expected " + std::to_string(sizeof(Quote)) + " bytes"), std::string::npos)
      << why;
  EXPECT_NE(why.find("got " + std::to_string(sizeof(Quote) - 1)), std::string::npos) << why;
}

TEST(Codec, StringIsTheBytesAndItsLayoutKeepsRowsAsBytes) {
  EXPECT_EQ(encode(std::string("px=106.00")), "px=106.00");
  EXPECT_TRUE(detail::layout_of<std::string>().bytes());
  const auto t = typed<std::string>(TableSpec{});
  EXPECT_EQ(*t.value.type, typeid(std::string));
}

TEST(Codec, AStructRowIsDecodedIntoTheRowAndReadInPlace) {
  const auto layout = detail::layout_of<Quote>();
  EXPECT_EQ(layout.size, sizeof(Quote));
  EXPECT_EQ(layout.align, alignof(Quote));
  EXPECT_EQ(layout.destroy, nullptr) << "trivially destructible: nothing to run at free";
  table::L1Map m = map_of(layout);
  ASSERT_EQ(m.put("AAPL", encode(Quote{1.5, 1.6, 7}), ver(1)), table::InsertVerdict::kInserted);
  EXPECT_EQ(m.put("MSFT", schema_header<Quote>() + "short", ver(1)),
            table::InsertVerdict::kRefusedDecode);
  EXPECT_NE(m.decode_error().find("expected"), std::string::npos) << m.decode_error();
  EXPECT_EQ(m.put("IBM", std::string(sizeof(Quote) + kSchemaHeaderSize, 'x'), ver(1)),
            table::InsertVerdict::kRefusedDecode);
  EXPECT_NE(m.decode_error().find("schema mismatch"), std::string::npos) << m.decode_error();
  EXPECT_TRUE(m.visit("AAPL", [](std::string_view v, std::string_view) {
    EXPECT_EQ(reinterpret_cast<const Quote*>(v.data())->size, 7);
  }));
}

TEST(Codec, AUserCodecRoundTripsAndItsRefusalAndThrowAreRefusalsWithTheirReason) {
  const std::string bytes = encode(Tick{[] {
    Tick t;
    t.bid = 1.25;
    t.ask = 1.5;
    t.venue = "a venue name longer than any small-string buffer";
    return t;
  }()});
  const int live0 = Tick::live.load();
  {
    table::L1Map m = map_of(detail::layout_of<Tick>());
    ASSERT_NE(m.layout().destroy, nullptr);
    ASSERT_EQ(m.put("EUR:USD", bytes, ver(1)), table::InsertVerdict::kInserted);
    EXPECT_TRUE(m.visit("EUR:USD", [](std::string_view v, std::string_view) {
      const Tick& t = *reinterpret_cast<const Tick*>(v.data());
      EXPECT_EQ(t.bid, 1.25);
      EXPECT_EQ(t.venue, "a venue name longer than any small-string buffer");
    }));
    const std::string& header = schema_header<Tick>();
    EXPECT_EQ(m.put("GBP:USD", header + "no slashes", ver(1)),
              table::InsertVerdict::kRefusedDecode);
    EXPECT_EQ(m.decode_error(), "want bid/ask/venue");
    EXPECT_EQ(m.put("JPY:USD", header + "throw", ver(1)), table::InsertVerdict::kRefusedDecode);
    EXPECT_EQ(m.decode_error(), "the codec threw: feed format changed");
    EXPECT_EQ(m.stats().decode_errors, 2u);
    ASSERT_EQ(m.put("EUR:USD", bytes, ver(2)), table::InsertVerdict::kReplaced);
    m.reclaim();
  }
  EXPECT_EQ(Tick::live.load(), live0) << "every decoded Tick destroyed once, none leaked";
}

TEST(Codec, LoaderOfEncodesTheTypedAnswerOrPassesTheError) {
  Loader ok = loader_of<Quote>([](const Key& k) {
    return Quote{1, 2, static_cast<std::int64_t>(k.view().size())};
  });
  auto r = ok(Key(std::string_view("AAPL")));
  ASSERT_TRUE(std::holds_alternative<Loaded>(r));
  Quote q{};
  std::string why;
  ASSERT_TRUE(detail::decode_into(std::get<Loaded>(r).value, q, why)) << why;
  EXPECT_EQ(q.size, 4);
  Loader err = loader_of<Quote>([](const Key&) { return LoadError{"no such quote"}; });
  auto e = err(Key(std::string_view("AAPL")));
  ASSERT_TRUE(std::holds_alternative<LoadError>(e));
  EXPECT_EQ(std::get<LoadError>(e).reason, "no such quote");
  Loader either = loader_of<Quote>([](const Key& k) -> std::variant<Quote, LoadError> {
    if (k.view() == "X") return LoadError{"x"};
    return Quote{3, 4, 5};
  });
  EXPECT_TRUE(std::holds_alternative<LoadError>(either(Key(std::string_view("X")))));
  EXPECT_TRUE(std::holds_alternative<Loaded>(either(Key(std::string_view("Y")))));
  // A branded key still reads as its id; a text key refuses id().
  const auto id = table::BrandedId::encode("QTE", 5).value();
  EXPECT_EQ(Key(id).id(), id);
  EXPECT_THROW((void)Key(std::string_view("AAPL")).id(), std::logic_error);
}

}  // namespace
}  // namespace echo::engine
