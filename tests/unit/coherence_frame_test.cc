// SPDX-License-Identifier: MIT
// WIRE §2.1: the 29-byte message. The vectors, every truncation, a wrong separator, an embedded
// NUL, over-long input, and valid-looking frames with a bad half, each refused with its gate.
#include <gtest/gtest.h>

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
  const auto typed = make_frame(BrandedId::parse(kName).value(), BrandedId::parse(kVersion).value());
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

}  // namespace
}  // namespace echo::table
