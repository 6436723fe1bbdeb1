// SPDX-License-Identifier: MIT
// Name builders and the CRC16 hash slot (docs/wire.md, "Names, keys and channels"), the text key
// check and its L2 key ("Text keys").
#include <echo/table/journal_file.h>
#include <echo/table/names.h>

#include <algorithm>
#include <array>

namespace echo::table {
namespace {

// One set for table names and text keys (docs/wire.md forbids the same bytes in both): a brace
// would move the hash tag, a space or control byte would split a RESP inline command. A table, not
// four compares: every text-key coherence message runs this over its key (parse_text_frame).
constexpr std::array<bool, 256> make_forbidden_table() {
  std::array<bool, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = c <= 0x20 || c == 0x7F || c == '{' || c == '}';
  return t;
}
constexpr auto kForbidden = make_forbidden_table();

bool any_forbidden(std::string_view s) noexcept {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return kForbidden[static_cast<unsigned char>(c)]; });
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). A name
// reaches JSON (stats snapshots, connection labels), which holds text only; the reference's
// table names are atoms, which are UTF-8.
bool utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the first continuation byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    t[i] = crc;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

std::string concat(std::initializer_list<std::string_view> parts) {
  std::size_t n = 0;
  for (auto p : parts) n += p.size();
  std::string out;
  out.reserve(n);
  for (auto p : parts) out.append(p);
  return out;
}

}  // namespace

std::string_view to_string(NameError e) noexcept {
  switch (e) {
    case NameError::kEmpty:
      return "empty";
    case NameError::kTooLong:
      return "too_long";
    case NameError::kForbiddenByte:
      return "forbidden_byte";
    case NameError::kInvalidId:
      return "invalid_id";
    case NameError::kNotUtf8:
      return "not_utf8";
  }
  return "unknown";
}

Expected<std::string_view, NameError> check_table_name(std::string_view table) noexcept {
  if (table.empty()) return Unexpected{NameError::kEmpty};
  if (table.size() > kMaxTableName) return Unexpected{NameError::kTooLong};
  if (any_forbidden(table)) return Unexpected{NameError::kForbiddenByte};
  if (!utf8(table)) return Unexpected{NameError::kNotUtf8};
  return table;
}

Expected<std::string_view, NameError> check_text_key(std::string_view key) noexcept {
  if (key.empty()) return Unexpected{NameError::kEmpty};
  if (key.size() > kMaxTextKey) return Unexpected{NameError::kTooLong};
  if (any_forbidden(key)) return Unexpected{NameError::kForbiddenByte};
  return key;
}

Expected<std::string, NameError> l2_key(std::string_view table, std::string_view id) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  if (!is_valid_id(id)) return Unexpected{NameError::kInvalidId};
  std::string out;
  append_l2_key(out, table, id);
  return out;
}

Expected<std::string, NameError> text_l2_key(std::string_view table, std::string_view key) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  if (auto k = check_text_key(key); !k) return Unexpected{k.error()};
  std::string out;
  append_l2_key(out, table, key);
  return out;
}

void append_l2_key(std::string& out, std::string_view table, std::string_view id) {
  out.reserve(out.size() + 7 + table.size() + id.size());
  out.append("ecc:{").append(table).append("}:").append(id);
}

void append_removal_key(std::string& out, std::string_view table, std::string_view id) {
  out.reserve(out.size() + 10 + table.size() + id.size());
  out.append("ecc:rm:{").append(table).append("}:").append(id);
}

Expected<std::string, NameError> coherence_channel(std::string_view table) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  return concat({"ecc:{", table, "}:coh"});
}

Expected<std::string, NameError> ask_channel(std::string_view table) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  return concat({"ecc:{", table, "}:ask"});
}

Expected<std::string, NameError> receipt_key(std::string_view table, std::string_view receipt) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  if (!is_valid_id(receipt)) return Unexpected{NameError::kInvalidId};
  return concat({"ecc:rcpt:{", table, "}:", receipt});
}

Expected<std::string, NameError> coherence_queue(std::string_view table) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  return concat({"ecc.coh.", table});
}

Expected<std::string, NameError> tracking_prefix(std::string_view table) {
  if (auto t = check_table_name(table); !t) return Unexpected{t.error()};
  return concat({"ecc:{", table, "}:"});
}

Expected<std::string, NameError> bus_key(std::string_view queue, std::string_view suffix) {
  if (auto q = check_table_name(queue); !q) return Unexpected{q.error()};
  return concat({"emq:{", queue, "}:", suffix});
}

Expected<std::string, NameError> job_key(std::string_view queue, std::string_view id) {
  if (!is_valid_id(id)) return Unexpected{NameError::kInvalidId};
  return bus_key(queue, concat({"job:", id}));
}

Expected<std::filesystem::path, NameError> journal_file(const std::filesystem::path& dir,
                                                        std::string_view group) {
  if (!is_valid_id(group)) return Unexpected{NameError::kInvalidId};
  return dir / concat({"journal-", group, ".db"});
}

std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<std::uint16_t>(
        (crc << 8) ^ kCrcTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xFF]);
  }
  return crc;
}

std::uint16_t hash_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      return crc16(key.substr(open + 1, close - open - 1)) & 16383;
    }
  }
  return crc16(key) & 16383;
}

}  // namespace echo::table
