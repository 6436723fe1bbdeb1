// SPDX-License-Identifier: MIT
// Key, channel and queue names (docs/wire.md, "Names, keys and channels"), and the cluster hash
// slot. Every key of one table (or one queue) shares one hash tag, so every script touching them is
// single-slot. Builders refuse an invalid id, a text key or a table name that would break a key
// before anything reaches the wire. Which section each implements: check_table_name and the
// builders from l2_key to journal_file, the table of "Names, keys and channels" (l2_key is the
// branded form); crc16 and hash_slot, its slot rule; check_text_key and text_l2_key, "Text keys"
// (an EchoStore extension: tables of text keys).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <echo/table/branded_id.h>

namespace echo::table {

inline constexpr std::size_t kMaxTableName = 200;
inline constexpr std::size_t kMaxTextKey = 200;  // docs/wire.md, "Text keys"

enum class NameError : std::uint8_t {
  kEmpty = 1,          // a table or queue name, or a text key, of zero bytes
  kTooLong = 2,        // longer than kMaxTableName (a text key: kMaxTextKey)
  kForbiddenByte = 3,  // '{', '}', a space or a control byte (<= 0x20, 0x7F): would break a key
  kInvalidId = 4,      // the id in a key position is not a valid branded id
  kNotUtf8 = 5,        // a table or queue name that is not well-formed UTF-8 (JSON cannot hold it)
};

// "empty", "too_long", "forbidden_byte", "invalid_id", "not_utf8".
std::string_view to_string(NameError e) noexcept;

// The table name check every builder applies. Any thread; no allocation.
Expected<std::string_view, NameError> check_table_name(std::string_view table) noexcept;

// The text key check (docs/wire.md, "Text keys"): 1..kMaxTextKey bytes with no '{', '}', space or
// control byte, so a key never moves the hash tag of ecc:{t}:<key> and never splits a RESP inline
// command. kEmpty, kTooLong or kForbiddenByte. Bytes >= 0x80 pass: the contract asks no more (a key
// is not written into JSON, which is why a table name must also be UTF-8). Any thread; no
// allocation.
Expected<std::string_view, NameError> check_text_key(std::string_view key) noexcept;

// ecc:{t}:<id> — the L2 key of a cached name (a branded table).
Expected<std::string, NameError> l2_key(std::string_view table, std::string_view id);
// ecc:{t}:<key> — the L2 key of a text key (docs/wire.md, "Text keys"). The table is checked first,
// so once a table has passed check_table_name every refusal here is the key's.
Expected<std::string, NameError> text_l2_key(std::string_view table, std::string_view key);
// ecc:{t}:<id or key> appended to `out`, for a table and an id or key already checked (no checks:
// l2_key and text_l2_key check, then write through it). Allocates only as `out` grows.
void append_l2_key(std::string& out, std::string_view table, std::string_view id);
// ecc:rm:{t}:<id or key> appended to `out` (no checks, as append_l2_key) — a removal's tombstone
// in L2 (docs/wire.md, "Removals"): the version of the last remove() of that row, kept one TTL,
// so that a newer-only write of an older version (a slow loader's) cannot bring the row back.
// The table's hash tag (one slot with the row), outside its keys and its tracking prefix.
void append_removal_key(std::string& out, std::string_view table, std::string_view id);
// ecc:{t}:coh — the broadcast lane's channel.
Expected<std::string, NameError> coherence_channel(std::string_view table);
// ecc:{t}:ask — a broadcast table's receipt asks (docs/wire.md, "Receipts": an EchoStore
// extension). The channel's hash tag: the same shard, the same subscriber connection.
Expected<std::string, NameError> ask_channel(std::string_view table);
// ecc:rcpt:{t}:<id> — the count of nodes that applied the write a receipt ask names (the
// table's hash tag, outside its keys and its tracking prefix ecc:{t}:); the id must be a valid
// branded id.
Expected<std::string, NameError> receipt_key(std::string_view table, std::string_view receipt);
// ecc.coh.<t> — the job lane's queue (an EchoMQ queue name).
Expected<std::string, NameError> coherence_queue(std::string_view table);
// ecc:{t}: — the tracking prefix.
Expected<std::string, NameError> tracking_prefix(std::string_view table);
// emq:{q}:<suffix> — a per-queue bus key (suffix e.g. "pending", "job:<id>").
Expected<std::string, NameError> bus_key(std::string_view queue, std::string_view suffix);
// emq:{q}:job:<id> — the job hash; the id must be a valid branded id.
Expected<std::string, NameError> job_key(std::string_view queue, std::string_view id);
// journal_file (<dir>/journal-<group>.db) is in journal_file.h: <filesystem> stays out of the
// headers every program includes.

// The cross-queue version fence key.
inline constexpr std::string_view kVersionFenceKey = "{emq}:version";

// CRC16-XMODEM (poly 0x1021, init 0), as Redis Cluster uses.
std::uint16_t crc16(std::string_view bytes) noexcept;
// The cluster slot of a key: CRC16 of its hash tag (text between the first '{' and the next
// '}', if non-empty), else of the whole key, mod 16384.
std::uint16_t hash_slot(std::string_view key) noexcept;

}  // namespace echo::table
