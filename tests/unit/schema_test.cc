// SPDX-License-Identifier: MIT
// Unit tests of typed values' schemas (schema.h, codec.h): the fingerprint the built-in codec
// derives from a struct's layout changes with every drift a rolling deploy can bring (a field
// added, two fields swapped, a size changed, a field renamed, a nested struct or an array
// changed) and with nothing else (the struct's own name, its namespace); a declared
// schema_version stands for the layout; the padding is zeroed on the wire; and a value of another
// schema is refused by name, never decoded into the wrong fields.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include <echo/engine/codec.h>

// std::array fields: laid out as C arrays, described as them (the same schema as the C twin).
namespace arrays {
struct Level {
  double px;
  std::int32_t qty;  // four bytes of padding after it
};
struct Book {
  std::array<char, 8> venue;
  std::array<Level, 5> bids;
};
struct CBook {
  char venue[8];
  Level bids[5];
};
}  // namespace arrays

// Two releases of one service's value, as two namespaces of one test.
namespace v1 {
struct Quote {
  double bid, ask;
};
}  // namespace v1
namespace v1_copy {
struct Quote {  // the same layout under another name: the same schema
  double bid, ask;
};
}  // namespace v1_copy
namespace added {
struct Quote {
  double bid, ask;
  std::int64_t size;
};
}  // namespace added
namespace swapped {
struct Quote {
  double ask, bid;  // the reorder that used to come back silently swapped
};
}  // namespace swapped
namespace resized {
struct Quote {
  float bid, ask;
};
}  // namespace resized
namespace renamed {
struct Quote {
  double bid_px, ask;
};
}  // namespace renamed
namespace signedness {
struct Book {
  std::int32_t depth;
  char venue[8];
};
struct BookUnsigned {
  std::uint32_t depth;
  char venue[8];
};
struct BookWider {
  std::int32_t depth;
  char venue[12];
};
}  // namespace signedness
namespace nested {
struct Px {
  double bid, ask;
};
struct Quote {
  Px px;
  std::int32_t level;
};
struct PxSwapped {
  double ask, bid;
};
struct QuoteOfSwapped {
  PxSwapped px;
  std::int32_t level;
};
}  // namespace nested
namespace declared {
class Quote1 {  // private members: the reflection cannot see them, the version stands for them
 public:
  static constexpr std::uint64_t schema_version = 1;
  double bid() const { return bid_; }
  double ask() const { return ask_; }

 private:
  double bid_ = 0, ask_ = 0;
};
class Quote2 {
 public:
  static constexpr std::uint64_t schema_version = 2;
  double bid() const { return bid_; }
  double ask() const { return ask_; }

 private:
  double bid_ = 0, ask_ = 0;
};
}  // namespace declared

struct Padded {
  char side;         // 7 bytes of padding follow
  double px;         //
  std::int16_t qty;  // 6 more at the end
};

namespace echo::engine {
namespace {

TEST(Schema, FieldNamesAreReadFromTheCompiler) {
  EXPECT_EQ((detail::schema::field_name<v1::Quote, 0>()), "bid");
  EXPECT_EQ((detail::schema::field_name<v1::Quote, 1>()), "ask");
  EXPECT_EQ((detail::schema::field_name<signedness::Book, 1>()), "venue");
  EXPECT_EQ(detail::schema::count_fields<signedness::Book>(), 2u) << "an array is one field";
  EXPECT_EQ(detail::schema::count_fields<nested::Quote>(), 2u);
}

TEST(Schema, TheSameLayoutUnderAnotherNameIsTheSameSchema) {
  EXPECT_EQ(schema_of<v1::Quote>(), schema_of<v1_copy::Quote>());
  EXPECT_EQ(schema_header<v1::Quote>().size(), kSchemaHeaderSize);
  EXPECT_EQ(schema_header<v1::Quote>().substr(0, 2),
            "\xEC"
            "S");
}

TEST(Schema, EveryDriftChangesTheFingerprint) {
  const std::uint64_t base = schema_of<v1::Quote>();
  EXPECT_NE(base, schema_of<added::Quote>()) << "a field added";
  EXPECT_NE(base, schema_of<swapped::Quote>()) << "two fields of one type swapped";
  EXPECT_NE(base, schema_of<resized::Quote>()) << "a field's size changed";
  EXPECT_NE(base, schema_of<renamed::Quote>()) << "a field renamed";
  EXPECT_NE(schema_of<signedness::Book>(), schema_of<signedness::BookUnsigned>())
      << "signed to unsigned";
  EXPECT_NE(schema_of<signedness::Book>(), schema_of<signedness::BookWider>())
      << "an array's extent";
  EXPECT_NE(schema_of<nested::Quote>(), schema_of<nested::QuoteOfSwapped>())
      << "a swap inside a nested struct";
  EXPECT_NE(schema_of<declared::Quote1>(), schema_of<declared::Quote2>()) << "a declared bump";
}

TEST(Schema, AValueOfAnotherSchemaIsRefusedByNameNeverDecodedIntoTheWrongFields) {
  const std::string written = encode(v1::Quote{101.5, 101.75});
  swapped::Quote read{};
  std::string why;
  EXPECT_FALSE(detail::decode_into(written, read, why));
  EXPECT_NE(why.find("schema mismatch"), std::string::npos) << why;
  EXPECT_FALSE(detail::same_schema<swapped::Quote>(written));
  // The same layout under another name reads it, field for field.
  v1_copy::Quote same{};
  why.clear();
  ASSERT_TRUE(detail::decode_into(written, same, why)) << why;
  EXPECT_EQ(same.bid, 101.5);
  EXPECT_EQ(same.ask, 101.75);
  // Bytes of no schema at all (what an older release wrote: the object bytes alone).
  EXPECT_FALSE(detail::decode_into(std::string(sizeof(v1::Quote), '\0'), same, why));
}

TEST(Schema, PaddingIsZeroedOnTheWire) {
  alignas(Padded) unsigned char storage[sizeof(Padded)];
  std::memset(storage, 0xAB, sizeof storage);  // what a stack slot may hold before the fields
  auto* p = ::new (static_cast<void*>(storage)) Padded;  // default-initialised: padding untouched
  p->side = 'B';
  p->px = 42.5;
  p->qty = 7;
  const std::string bytes = encode(*p);
  ASSERT_EQ(bytes.size(), kSchemaHeaderSize + sizeof(Padded));
  const std::string body = bytes.substr(kSchemaHeaderSize);
  for (std::size_t i = 0; i < body.size(); ++i) {
    const bool in_field = i < 1 || (i >= offsetof(Padded, px) && i < offsetof(Padded, px) + 8) ||
                          (i >= offsetof(Padded, qty) && i < offsetof(Padded, qty) + 2);
    if (!in_field) {
      EXPECT_EQ(body[i], '\0') << "padding byte " << i;
    }
  }
  Padded back{};
  std::string why;
  ASSERT_TRUE(detail::decode_into(bytes, back, why)) << why;
  EXPECT_EQ(back.side, 'B');
  EXPECT_EQ(back.px, 42.5);
  EXPECT_EQ(back.qty, 7);
}

TEST(Schema, ADeclaredTypeStandsOnItsVersionAndRoundTrips) {
  const std::string bytes = encode(declared::Quote1{});
  declared::Quote2 other;
  std::string why;
  EXPECT_FALSE(detail::decode_into(bytes, other, why));
  declared::Quote1 same;
  EXPECT_TRUE(detail::decode_into(bytes, same, why)) << why;
}

TEST(Schema, AStdArrayFieldIsDescribedAsItsCArrayTwinAndRoundTrips) {
  EXPECT_EQ(schema_of<arrays::Book>(), schema_of<arrays::CBook>());
  alignas(arrays::Book) unsigned char storage[sizeof(arrays::Book)];
  std::memset(storage, 0xAB, sizeof storage);
  auto* b = ::new (static_cast<void*>(storage)) arrays::Book;
  b->venue = {'X', 'N', 'Y', 'S', 0, 0, 0, 0};
  for (int i = 0; i < 5; ++i) b->bids[static_cast<std::size_t>(i)] = {100.0 - i, 10 * i};
  const std::string bytes = encode(*b);
  // Each level's padding is zeroed on the wire, element by element.
  const std::string body = bytes.substr(kSchemaHeaderSize);
  for (std::size_t i = 0; i < 5; ++i) {
    const std::size_t at = offsetof(arrays::Book, bids) + i * sizeof(arrays::Level);
    for (std::size_t p = offsetof(arrays::Level, qty) + 4; p < sizeof(arrays::Level); ++p) {
      EXPECT_EQ(body[at + p], '\0') << "level " << i << " padding byte " << p;
    }
  }
  arrays::Book back{};
  std::string why;
  ASSERT_TRUE(detail::decode_into(bytes, back, why)) << why;
  EXPECT_EQ(back.venue[2], 'Y');
  EXPECT_EQ(back.bids[4].px, 96.0);
  EXPECT_EQ(back.bids[3].qty, 30);
}

}  // namespace
}  // namespace echo::engine
