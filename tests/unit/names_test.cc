// SPDX-License-Identifier: MIT
// Key, channel and queue names (docs/wire.md, "Names, keys and channels"); refusal of invalid ids
// and of table names that would break a key; the CRC16 hash slot vectors. "Text keys": the text key
// check and its L2 key.
#include <gtest/gtest.h>

#include <string>

#include <echo/table/journal_file.h>
#include <echo/table/names.h>

namespace echo::table {
namespace {

TEST(Names, BuildTheContractNames) {
  EXPECT_EQ(l2_key("users", "AST0KHTOWnGLuC").value(), "ecc:{users}:AST0KHTOWnGLuC");
  EXPECT_EQ(coherence_channel("users").value(), "ecc:{users}:coh");
  EXPECT_EQ(ask_channel("users").value(), "ecc:{users}:ask");
  EXPECT_EQ(receipt_key("users", "RCP0KHTOWnGLuC").value(), "ecc:rcpt:{users}:RCP0KHTOWnGLuC");
  const std::uint16_t slot = hash_slot(coherence_channel("users").value());
  EXPECT_EQ(hash_slot(ask_channel("users").value()), slot);
  EXPECT_EQ(hash_slot(receipt_key("users", "RCP0KHTOWnGLuC").value()), slot);
  EXPECT_EQ(coherence_queue("users").value(), "ecc.coh.users");
  EXPECT_EQ(tracking_prefix("users").value(), "ecc:{users}:");
  EXPECT_EQ(bus_key("ecc.coh.users", "pending").value(), "emq:{ecc.coh.users}:pending");
  EXPECT_EQ(job_key("orders", "JOB0KHTOWnGLuC").value(), "emq:{orders}:job:JOB0KHTOWnGLuC");
  EXPECT_EQ(bus_key("orders", "job:").value().size(), 17u);
  EXPECT_EQ(journal_file("/var/ech", "PRT0KHTOWnGLuC").value(),
            std::filesystem::path("/var/ech/journal-PRT0KHTOWnGLuC.db"));
}

TEST(Names, RefuseAnInvalidIdInKeyPosition) {
  EXPECT_EQ(l2_key("users", "not-an-id").error(), NameError::kInvalidId);
  EXPECT_EQ(l2_key("users", "usr0KHTOWnGLuC").error(), NameError::kInvalidId);
  EXPECT_EQ(job_key("orders", "JOB0KHTOWnGLu").error(), NameError::kInvalidId);
  EXPECT_EQ(receipt_key("users", "not-an-id").error(), NameError::kInvalidId);
  EXPECT_EQ(journal_file("/tmp", "not-a-branded-id").error(), NameError::kInvalidId);
}

TEST(Names, RefuseTableNamesThatWouldBreakAKey) {
  const std::string bad[] = {
      "a{b",    "a}b", "{users}", "two words", "tab\there", "nl\n", std::string("nul\0x", 5),
      "del\x7f"};
  for (const auto& t : bad) {
    EXPECT_EQ(coherence_channel(t).error(), NameError::kForbiddenByte) << t;
    EXPECT_EQ(coherence_queue(t).error(), NameError::kForbiddenByte) << t;
    EXPECT_EQ(l2_key(t, "AST0KHTOWnGLuC").error(), NameError::kForbiddenByte) << t;
  }
  EXPECT_EQ(coherence_channel("").error(), NameError::kEmpty);
  EXPECT_EQ(coherence_channel(std::string(kMaxTableName + 1, 'x')).error(), NameError::kTooLong);
  EXPECT_TRUE(coherence_channel(std::string(kMaxTableName, 'x')));
  EXPECT_TRUE(coherence_channel("quotes.v2-eu_1"));
}

TEST(Names, RefuseTableNamesThatAreNotUtf8) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate, past U+10FFFF,
  // and bytes UTF-8 never uses.
  const std::string bad[] = {"q\x80",     "q\xC3",         "q\xE2\x82",
                             "q\xC0\xAF", "q\xED\xA0\x80", "q\xF4\x90\x80\x80",
                             "q\xFF",     "\xFEq"};
  for (const auto& t : bad) {
    EXPECT_EQ(coherence_channel(t).error(), NameError::kNotUtf8) << t;
    EXPECT_EQ(l2_key(t, "AST0KHTOWnGLuC").error(), NameError::kNotUtf8) << t;
    EXPECT_EQ(bus_key(t, "pending").error(), NameError::kNotUtf8) << t;
  }
  // Well-formed multi-byte names stay legal: 2, 3 and 4 bytes, and the highest code point.
  for (const char* good :
       {"caf\xC3\xA9", "\xE2\x82\xAC-eu", "\xF0\x9F\x93\x88", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_TRUE(coherence_channel(good)) << good;
  }
}

TEST(Names, ErrorNamesAreStable) {
  EXPECT_EQ(to_string(NameError::kEmpty), "empty");
  EXPECT_EQ(to_string(NameError::kTooLong), "too_long");
  EXPECT_EQ(to_string(NameError::kForbiddenByte), "forbidden_byte");
  EXPECT_EQ(to_string(NameError::kInvalidId), "invalid_id");
  EXPECT_EQ(to_string(NameError::kNotUtf8), "not_utf8");
}

// The bytes docs/wire.md forbids in a table name or a text key.
std::string forbidden_bytes() {
  std::string out;
  for (int c = 0; c <= 0x20; ++c) out.push_back(static_cast<char>(c));
  out += "\x7f{}";
  return out;
}

TEST(TextKey, AcceptsOneToTwoHundredBytes) {
  EXPECT_EQ(check_text_key("A").value(), "A");
  EXPECT_EQ(check_text_key("AAPL").value(), "AAPL");
  const std::string longest(kMaxTextKey, 'k');
  EXPECT_EQ(check_text_key(longest).value().size(), 200u);
  EXPECT_EQ(check_text_key("").error(), NameError::kEmpty);
  EXPECT_EQ(check_text_key(std::string(kMaxTextKey + 1, 'k')).error(), NameError::kTooLong);
  EXPECT_EQ(check_text_key(std::string(1 << 16, 'k')).error(), NameError::kTooLong);
}

TEST(TextKey, MayHoldColonsAndAnyByteOutsideTheForbiddenSet) {
  EXPECT_TRUE(check_text_key("a:b"));
  EXPECT_TRUE(check_text_key(":"));
  EXPECT_TRUE(check_text_key("px:AAPL:XNAS"));
  // Every other byte passes, high bytes too: a text key needs no UTF-8 (it never goes into JSON).
  const std::string bad = forbidden_bytes();
  for (int c = 0; c < 256; ++c) {
    const std::string key(1, static_cast<char>(c));
    EXPECT_EQ(check_text_key(key).has_value(), bad.find(key[0]) == std::string::npos) << c;
  }
}

TEST(TextKey, RefusesEachForbiddenByteAnywhere) {
  for (const char c : forbidden_bytes()) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{2}, std::size_t{4}}) {
      std::string key = "AAPLx";
      key[at] = c;
      auto r = check_text_key(key);
      ASSERT_FALSE(r) << int(c) << " at " << at;
      EXPECT_EQ(r.error(), NameError::kForbiddenByte) << int(c) << " at " << at;
    }
    // The longest key with the forbidden byte last is still refused for the byte, not its length.
    std::string longest(kMaxTextKey, 'k');
    longest.back() = c;
    EXPECT_EQ(check_text_key(longest).error(), NameError::kForbiddenByte) << int(c);
  }
}

TEST(TextKey, L2KeyIsTheKeyUnderTheTableTag) {
  EXPECT_EQ(text_l2_key("quotes", "AAPL").value(), "ecc:{quotes}:AAPL");
  EXPECT_EQ(text_l2_key("quotes", "px:AAPL").value(), "ecc:{quotes}:px:AAPL");
  // A branded id is a text key too; the two builders then name the same row.
  EXPECT_EQ(text_l2_key("users", "AST0KHTOWnGLuC").value(),
            l2_key("users", "AST0KHTOWnGLuC").value());
  EXPECT_EQ(hash_slot(text_l2_key("quotes", "AAPL").value()),
            hash_slot(coherence_channel("quotes").value()));
  // The branded builder keeps its id gate.
  EXPECT_EQ(l2_key("quotes", "AAPL").error(), NameError::kInvalidId);
}

TEST(TextKey, L2KeyRefusesABadKeyAndChecksTheTableFirst) {
  EXPECT_EQ(text_l2_key("quotes", "").error(), NameError::kEmpty);
  EXPECT_EQ(text_l2_key("quotes", std::string(kMaxTextKey + 1, 'k')).error(), NameError::kTooLong);
  EXPECT_EQ(text_l2_key("quotes", "a}b").error(), NameError::kForbiddenByte);
  EXPECT_EQ(text_l2_key("quotes", "two words").error(), NameError::kForbiddenByte);
  EXPECT_EQ(text_l2_key("", "AAPL").error(), NameError::kEmpty);
  EXPECT_EQ(text_l2_key("q\x80", "AAPL").error(), NameError::kNotUtf8);
  EXPECT_EQ(text_l2_key("a b", "").error(), NameError::kForbiddenByte);  // the table's refusal
  EXPECT_EQ(text_l2_key("", "a b").error(), NameError::kEmpty);          // the table's refusal
}

TEST(HashSlot, MatchesContractVectors) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);
  EXPECT_EQ(hash_slot("123456789"), 12739);
  EXPECT_EQ(hash_slot("emq:{orders}:pending"), 105);
  EXPECT_EQ(hash_slot("emq:{orders}:job:JOB0KHTOWnGLuC"), 105);
  EXPECT_EQ(hash_slot("emq:{fills}:wake"), 4165);
  EXPECT_EQ(hash_slot(kVersionFenceKey), 9051);
}

TEST(HashSlot, EveryKeyOfATableSharesItsSlot) {
  const auto slot = hash_slot(coherence_channel("users").value());
  EXPECT_EQ(hash_slot(l2_key("users", "AST0KHTOWnGLuC").value()), slot);
  EXPECT_EQ(hash_slot(tracking_prefix("users").value()), slot);
  EXPECT_EQ(hash_slot("users"), slot);
}

TEST(HashSlot, EmptyOrUnclosedTagHashesTheWholeKey) {
  EXPECT_EQ(hash_slot("a{}b"), crc16("a{}b") & 16383);
  EXPECT_EQ(hash_slot("a{b"), crc16("a{b") & 16383);
  EXPECT_EQ(hash_slot("{}{x}"), crc16("{}{x}") & 16383);  // first '{' then next '}' is empty
  EXPECT_EQ(hash_slot("x{a}{b}"), crc16("a") & 16383);
}

}  // namespace
}  // namespace echo::table
