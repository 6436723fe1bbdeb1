// SPDX-License-Identifier: MIT
// The 29-byte message (docs/wire.md, "The coherence message"). The vectors, every truncation, a
// wrong separator, an embedded NUL, over-long input, and valid-looking frames with a bad half, each
// refused with its gate. "Text keys": the text-key message, split from the right: keys holding ':',
// the 16..215-byte bounds, each forbidden key byte, a version failing each id gate, and a branded
// frame read as text.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include <echo/table/coherence_frame.h>

namespace echo::table {
namespace {

constexpr std::string_view kName = "AST0KHTOWnGLuC";
constexpr std::string_view kVersion = "TXN0NgWEfAEJfs";
constexpr std::string_view kFrame = "AST0KHTOWnGLuC:TXN0NgWEfAEJfs";

TEST(CoherenceFrame, BuildsTheContractVector) {
  auto f = make_frame(kName, kVersion);
  ASSERT_TRUE(f);
  EXPECT_EQ(view(*f), kFrame);
  EXPECT_EQ(view(*f).size(), 29u);
  const auto typed =
      make_frame(BrandedId::parse(kName).value(), BrandedId::parse(kVersion).value());
  EXPECT_EQ(view(typed), kFrame);
}

TEST(CoherenceFrame, BuildNeedsOnlyLengthsNotValidity) {
  // The contract: both args exactly 14 bytes, validity not checked.
  auto f = make_frame("AAAAAAAAAAAAAA", "BBBBBBBBBBBBBB");
  ASSERT_TRUE(f);
  EXPECT_EQ(view(*f), "AAAAAAAAAAAAAA:BBBBBBBBBBBBBB");
  EXPECT_EQ(make_frame("short", kVersion).error(), FrameError::kLength);
  EXPECT_EQ(make_frame(kName, "TXN0NgWEfAEJfsX").error(), FrameError::kLength);
}

TEST(CoherenceFrame, VectorParsesBack) {
  auto m = parse_frame(kFrame);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->name.view(), kName);
  EXPECT_EQ(m->version.view(), kVersion);
}

TEST(CoherenceFrame, RefusesContractGarbage) {
  EXPECT_EQ(parse_frame("garbage").error().error, FrameError::kLength);
  EXPECT_EQ(parse_frame("AST:short").error().error, FrameError::kLength);
  auto r = parse_frame("AAAAAAAAAAAAAA:BBBBBBBBBBBBBB");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().error, FrameError::kVersion);
  EXPECT_EQ(r.error().id, IdError::kRange);
}

TEST(CoherenceFrame, RefusesEveryTruncation) {
  for (std::size_t n = 0; n < kFrame.size(); ++n) {
    auto r = parse_frame(kFrame.substr(0, n));
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error().error, FrameError::kLength) << n;
  }
}

TEST(CoherenceFrame, RefusesOverLongInput) {
  EXPECT_EQ(parse_frame(std::string(kFrame) + "x").error().error, FrameError::kLength);
  EXPECT_EQ(parse_frame(std::string(kFrame) + std::string(kFrame)).error().error,
            FrameError::kLength);
  EXPECT_EQ(parse_frame(std::string(1 << 16, 'A')).error().error, FrameError::kLength);
}

TEST(CoherenceFrame, RefusesWrongSeparator) {
  for (const char sep : {';', ' ', '-', '\0', '\n'}) {
    std::string f(kFrame);
    f[14] = sep;
    EXPECT_EQ(parse_frame(f).error().error, FrameError::kSeparator) << int(sep);
  }
  // The colon moved one byte: the length still fits but the halves are wrong.
  EXPECT_FALSE(parse_frame("AST0KHTOWnGLu:CTXN0NgWEfAEJfs"));
}

TEST(CoherenceFrame, RefusesEmbeddedNul) {
  std::string f(kFrame);
  f[5] = '\0';
  auto r = parse_frame(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().error, FrameError::kName);
  EXPECT_EQ(r.error().id, IdError::kCharset);
  f = std::string(kFrame);
  f[20] = '\0';
  EXPECT_EQ(parse_frame(f).error().error, FrameError::kVersion);
}

TEST(CoherenceFrame, RefusesAValidLookingFrameWithABadHalf) {
  const struct {
    std::string_view frame;
    FrameError gate;
    IdError id;
  } cases[] = {
      {"ast0KHTOWnGLuC:TXN0NgWEfAEJfs", FrameError::kName, IdError::kNamespace},
      {"ASTzzzzzzzzzzz:TXN0NgWEfAEJfs", FrameError::kName, IdError::kRange},
      {"AST0KHTOWnGL!C:TXN0NgWEfAEJfs", FrameError::kName, IdError::kCharset},
      {"AST0KHTOWnGLuC:tXN0NgWEfAEJfs", FrameError::kVersion, IdError::kNamespace},
      {"AST0KHTOWnGLuC:TXN0NgWEfAEJ$s", FrameError::kVersion, IdError::kCharset},
      {"AST0KHTOWnGLuC:TXNzzzzzzzzzzz", FrameError::kVersion, IdError::kRange},
  };
  for (const auto& c : cases) {
    auto r = parse_frame(c.frame);
    ASSERT_FALSE(r) << c.frame;
    EXPECT_EQ(r.error().error, c.gate) << c.frame;
    EXPECT_EQ(r.error().id, c.id) << c.frame;
  }
}

TEST(CoherenceFrame, VersionNamespaceIsFree) {
  EXPECT_TRUE(parse_frame("AST0KHTOWnGLuC:ZZZ0NgWEfAEJfs"));
  EXPECT_TRUE(parse_frame("AST0KHTOWnGLuC:AST0NgWEfAEJfs"));
}

TEST(CoherenceFrame, ErrorNamesAreStable) {
  EXPECT_EQ(to_string(FrameError::kLength), "length");
  EXPECT_EQ(to_string(FrameError::kSeparator), "separator");
  EXPECT_EQ(to_string(FrameError::kName), "name");
  EXPECT_EQ(to_string(FrameError::kVersion), "version");
}

// ---- text keys (docs/wire.md, "Text keys") ----

BrandedId version_id() { return BrandedId::parse(kVersion).value(); }

std::string text_frame(std::string_view key, std::string_view version = kVersion) {
  return std::string(key) + ":" + std::string(version);
}

TEST(TextFrame, BuildsAndParsesBack) {
  auto f = make_text_frame("AAPL", version_id());
  ASSERT_TRUE(f);
  EXPECT_EQ(view(*f), "AAPL:TXN0NgWEfAEJfs");
  auto m = parse_text_frame(view(*f));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->key, "AAPL");
  EXPECT_EQ(m->version.view(), kVersion);
  EXPECT_EQ(m->key.data(), view(*f).data());  // a view into the input, not a copy
}

TEST(TextFrame, KeyMayHoldColons) {
  for (const std::string_view key : {"a:b", "px:AAPL:XNAS", ":", "::", "AAPL:"}) {
    const std::string in = text_frame(key);
    auto m = parse_text_frame(in);
    ASSERT_TRUE(m) << in;
    EXPECT_EQ(m->key, key) << in;
    EXPECT_EQ(m->version.view(), kVersion) << in;
    auto f = make_text_frame(key, version_id());
    ASSERT_TRUE(f) << key;
    EXPECT_EQ(view(*f), in);
  }
}

TEST(TextFrame, KeysOfOneAndTwoHundredBytesRoundTrip) {
  for (const std::size_t n : {std::size_t{1}, kMaxTextKey}) {
    const std::string key(n, 'k');
    auto f = make_text_frame(key, version_id());
    ASSERT_TRUE(f) << n;
    EXPECT_EQ(view(*f).size(), n + 15);
    auto m = parse_text_frame(view(*f));
    ASSERT_TRUE(m) << n;
    EXPECT_EQ(m->key, key);
    EXPECT_EQ(m->version, version_id());
  }
  EXPECT_EQ(view(make_text_frame(std::string(kMaxTextKey, 'k'), version_id()).value()).size(),
            kMaxTextFrameSize);
}

TEST(TextFrame, BuildRefusesABadKey) {
  EXPECT_EQ(make_text_frame("", version_id()).error(), NameError::kEmpty);
  EXPECT_EQ(make_text_frame(std::string(kMaxTextKey + 1, 'k'), version_id()).error(),
            NameError::kTooLong);
  EXPECT_EQ(make_text_frame("two words", version_id()).error(), NameError::kForbiddenByte);
}

TEST(TextFrame, LengthBoundsAreSixteenAndTwoHundredFifteen) {
  EXPECT_EQ(kMinTextFrameSize, 16u);
  EXPECT_EQ(kMaxTextFrameSize, 215u);
  // 15 bytes: ':' then a version, no key.
  auto r15 = parse_text_frame(text_frame(""));
  ASSERT_FALSE(r15);
  EXPECT_EQ(r15.error().error, FrameError::kLength);
  EXPECT_TRUE(parse_text_frame(text_frame("k")));                            // 16
  EXPECT_TRUE(parse_text_frame(text_frame(std::string(kMaxTextKey, 'k'))));  // 215
  auto r216 = parse_text_frame(text_frame(std::string(kMaxTextKey + 1, 'k')));
  ASSERT_FALSE(r216);
  EXPECT_EQ(r216.error().error, FrameError::kLength);
  EXPECT_EQ(parse_text_frame("").error().error, FrameError::kLength);
  EXPECT_EQ(parse_text_frame(std::string(1 << 16, 'A')).error().error, FrameError::kLength);
  const std::string in = text_frame("AAPL");
  for (std::size_t n = 0; n < kMinTextFrameSize; ++n) {
    EXPECT_EQ(parse_text_frame(in.substr(0, n)).error().error, FrameError::kLength) << n;
  }
}

TEST(TextFrame, NeverReadsOutsideTheInput) {
  // Exactly-sized heap copies, so ASan sees a read one byte either side of the input.
  for (const std::string& in :
       {text_frame(""), text_frame("k"), text_frame("AAPL"),
        text_frame(std::string(kMaxTextKey, 'k')), text_frame(std::string(kMaxTextKey + 1, 'k'))}) {
    auto copy = std::make_unique<char[]>(in.size());
    std::memcpy(copy.get(), in.data(), in.size());
    const auto r = parse_text_frame(std::string_view(copy.get(), in.size()));
    EXPECT_EQ(r.has_value(), in.size() >= 16 && in.size() <= 215) << in.size();
  }
}

TEST(TextFrame, SeparatorIsTheByteBeforeTheLastFourteen) {
  for (const char sep : {';', ' ', '-', '\0', '\n', 'T'}) {
    std::string in = text_frame("AAPL");
    in[4] = sep;
    auto r = parse_text_frame(in);
    ASSERT_FALSE(r) << int(sep);
    EXPECT_EQ(r.error().error, FrameError::kSeparator) << int(sep);
  }
  // A colon one byte early: the separator position holds a version byte.
  EXPECT_EQ(parse_text_frame("AAP:LTXN0NgWEfAEJfs").error().error, FrameError::kSeparator);
  // A colon one byte late is inside the version: the separator position is 'L'.
  EXPECT_EQ(parse_text_frame("AAPLT:XN0NgWEfAEJfs").error().error, FrameError::kSeparator);
}

TEST(TextFrame, RefusesEachForbiddenKeyByte) {
  std::string bad;
  for (int c = 0; c <= 0x20; ++c) bad.push_back(static_cast<char>(c));
  bad += "\x7f{}";
  for (const char c : bad) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{2}, std::size_t{3}}) {
      std::string key = "AAPL";
      key[at] = c;
      auto r = parse_text_frame(text_frame(key));
      ASSERT_FALSE(r) << int(c) << " at " << at;
      EXPECT_EQ(r.error().error, FrameError::kName) << int(c) << " at " << at;
      EXPECT_EQ(r.error().key, NameError::kForbiddenByte) << int(c) << " at " << at;
      EXPECT_EQ(make_text_frame(key, version_id()).error(), NameError::kForbiddenByte);
    }
  }
  // A one-byte key that is itself forbidden: the length fits, the key does not.
  EXPECT_EQ(parse_text_frame(text_frame(" ")).error().key, NameError::kForbiddenByte);
}

TEST(TextFrame, RefusesAVersionFailingEachIdGate) {
  const struct {
    std::string_view version;
    IdError id;
  } cases[] = {
      {"tXN0NgWEfAEJfs", IdError::kNamespace},
      {"T:N0NgWEfAEJfs", IdError::kNamespace},
      {"TXN0NgWEfAEJ$s", IdError::kCharset},
      {"TXN0NgWEf:EJfs", IdError::kCharset},  // a colon in the version is not a split point
      {std::string_view("TXN0NgWEfAEJf\0", kIdSize), IdError::kCharset},
      {"TXNzzzzzzzzzzz", IdError::kRange},
  };
  for (const auto& c : cases) {
    const std::string in = text_frame("px:AAPL", c.version);
    auto r = parse_text_frame(in);
    ASSERT_FALSE(r) << in;
    EXPECT_EQ(r.error().error, FrameError::kVersion) << in;
    EXPECT_EQ(r.error().id, c.id) << in;
  }
  // The key is checked first: a bad key and a bad version is the key's refusal.
  EXPECT_EQ(parse_text_frame(text_frame("a b", "TXNzzzzzzzzzzz")).error().error, FrameError::kName);
}

TEST(TextFrame, ABrandedFrameParsesAsATextFrame) {
  auto m = parse_text_frame(kFrame);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->key, kName);
  EXPECT_EQ(m->version.view(), kVersion);
  // And the 29-byte contract's refused vector is refused by both, at the version.
  auto r = parse_text_frame("AAAAAAAAAAAAAA:BBBBBBBBBBBBBB");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().error, FrameError::kVersion);
  EXPECT_EQ(r.error().id, IdError::kRange);
  // A name half that is no branded id is still a text key.
  auto lower = parse_text_frame("ast0KHTOWnGLuC:TXN0NgWEfAEJfs");
  ASSERT_TRUE(lower);
  EXPECT_EQ(lower->key, "ast0KHTOWnGLuC");
  EXPECT_EQ(parse_frame("ast0KHTOWnGLuC:TXN0NgWEfAEJfs").error().error, FrameError::kName);
}

}  // namespace
}  // namespace echo::table
