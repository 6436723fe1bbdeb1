// SPDX-License-Identifier: MIT
// The message that carries its value (docs/wire.md, "Carried values"): "{" key "}" version value.
// The built bytes, values holding every byte ('}' and ':' included), the length bounds, a key that
// never closes, each forbidden key byte, a version failing its gate, and the other two forms told
// apart by their first byte.
#include <gtest/gtest.h>

#include <string>

#include <echo/table/coherence_frame.h>

namespace echo::table {
namespace {

const BrandedId kVersion = BrandedId::parse("TXN0NgWEfAEJfs").value();

std::string frame(std::string_view key, std::string_view value) {
  std::string out;
  append_carried_frame(out, key, kVersion, value);
  return out;
}

TEST(CarriedFrame, BuildsAndParsesTheLayout) {
  const std::string f = frame("AAPL", "189.10/189.12");
  EXPECT_EQ(f, "{AAPL}TXN0NgWEfAEJfs189.10/189.12");
  EXPECT_TRUE(is_carried(f));
  auto m = parse_carried_frame(f);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->key, "AAPL");
  EXPECT_EQ(m->version, kVersion);
  EXPECT_EQ(m->value, "189.10/189.12");
}

TEST(CarriedFrame, TheValueMayHoldAnyByteAndBeEmpty) {
  const std::string value("a}b:c{\0\xff", 8);
  const std::string bytes = frame("k:1", value);  // the parse views into it
  auto m = parse_carried_frame(bytes);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->key, "k:1");
  EXPECT_EQ(m->value, value);
  const std::string none = frame("k", "");
  auto empty = parse_carried_frame(none);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->value, "");
}

TEST(CarriedFrame, KeysOfEveryLengthAndTheValueBound) {
  for (std::size_t n : {std::size_t{1}, std::size_t{14}, std::size_t{200}}) {
    const std::string bytes = frame(std::string(n, 'k'), "v");
    auto m = parse_carried_frame(bytes);
    ASSERT_TRUE(m) << n;
    EXPECT_EQ(m->key.size(), n);
  }
  EXPECT_TRUE(parse_carried_frame(frame("k", std::string(kMaxCarriedValue, 'v'))));
  auto over =
      parse_carried_frame(frame(std::string(200, 'k'), std::string(kMaxCarriedValue + 1, 'v')));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().error, FrameError::kLength);
}

TEST(CarriedFrame, RefusalsNameTheirGate) {
  const auto gate = [](std::string_view bytes) {
    auto m = parse_carried_frame(bytes);
    return m ? FrameError{} : m.error().error;
  };
  EXPECT_EQ(gate(""), FrameError::kLength);
  EXPECT_EQ(gate("{k}TXN0NgWEfAEJf"), FrameError::kLength);      // one version byte short
  EXPECT_EQ(gate("AAPL}TXN0NgWEfAEJfsv"), FrameError::kLength);  // no '{'
  EXPECT_EQ(gate("{" + std::string(201, 'k') + "}TXN0NgWEfAEJfs"), FrameError::kSeparator);
  EXPECT_EQ(gate("{kkkkkkkkkkkkkkkkkkkkk"), FrameError::kSeparator);  // never closes
  EXPECT_EQ(gate("{kkkkkkkkkk}TXN0NgWEfA"), FrameError::kSeparator);  // no room for a version
  // An empty key: the '}' found is a later one, and the "key" before it holds a '}'.
  EXPECT_EQ(gate("{}TXN0NgWEfAEJfs}TXN0NgWEfAEJfs"), FrameError::kName);
  EXPECT_EQ(gate("{a b}TXN0NgWEfAEJfs"), FrameError::kName);
  auto bad_version = parse_carried_frame("{AAPL}txn0NgWEfAEJfsv");
  ASSERT_FALSE(bad_version);
  EXPECT_EQ(bad_version.error().error, FrameError::kVersion);
}

TEST(CarriedFrame, TheOtherFormsAreNotCarried) {
  EXPECT_FALSE(is_carried("AST0KHTOWnGLuC:TXN0NgWEfAEJfs"));
  EXPECT_FALSE(is_carried("AAPL:TXN0NgWEfAEJfs"));
  EXPECT_FALSE(is_carried(""));
  // A carried frame is no text frame: its key would hold '{'.
  EXPECT_FALSE(parse_text_frame(frame("AAPL", ":TXN0NgWEfAEJfs")));
}

}  // namespace
}  // namespace echo::table
