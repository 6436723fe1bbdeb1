// SPDX-License-Identifier: MIT
// Branded ids (docs/wire.md, "Branded ids"): 3 namespace bytes A–Z + 11 base62 digits of a 63-bit
// snowflake (ts 41 | node 10 | seq 12), 14 bytes, no terminator. Byte order of payloads = numeric
// order = mint order, so "newer wins" is a comparison of 11 bytes (newer()).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <echo/table/expected.h>

namespace echo::table {

inline constexpr std::size_t kIdSize = 14;
inline constexpr std::size_t kNamespaceSize = 3;
inline constexpr std::size_t kPayloadSize = 11;
inline constexpr std::int64_t kEpochMs = 1704067200000;  // 2024-01-01T00:00:00Z
inline constexpr std::uint64_t kMaxSnowflake = (std::uint64_t{1} << 63) - 1;
inline constexpr std::string_view kMaxPayload = "AzL8n0Y58m7";  // base62(2^63 - 1)
inline constexpr std::string_view kBase62Alphabet =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
inline constexpr unsigned kMaxNode = 1023;

// The contract's gates, in the order they are checked; values are the C reference's statuses.
enum class IdError : std::uint8_t {
  kLength = 1,     // not exactly 14 bytes
  kNamespace = 2,  // a byte of 0..2 outside A–Z
  kCharset = 3,    // a payload byte outside the base62 alphabet
  kRange = 4,      // payload > kMaxPayload, or (encode) snowflake outside [0, 2^63)
};

// "length", "namespace", "charset", "range".
std::string_view to_string(IdError e) noexcept;

// A validated 14-byte branded id. Trivially copyable; compares by bytes.
class BrandedId {
 public:
  // Validates `text` through the four gates in order. Any thread; no allocation.
  static Expected<BrandedId, IdError> parse(std::string_view text) noexcept;
  // Encodes `snowflake` under namespace `ns` (3 bytes A–Z, else kNamespace; snowflake beyond
  // 2^63 - 1: kRange).
  static Expected<BrandedId, IdError> encode(std::string_view ns, std::uint64_t snowflake) noexcept;

  std::string_view view() const noexcept { return {bytes_.data(), kIdSize}; }
  // The 14 bytes in place (fill_guard.h's IdBytes): no copy for a caller that takes them by
  // reference (L1Map::apply_batch).
  const std::array<char, kIdSize>& bytes() const noexcept { return bytes_; }
  std::string_view ns() const noexcept { return view().substr(0, kNamespaceSize); }
  std::string_view payload() const noexcept { return view().substr(kNamespaceSize); }
  std::string str() const { return std::string(view()); }
  // The snowflake this id encodes (always valid: the id passed the gates).
  std::uint64_t snowflake() const noexcept;

  friend bool operator==(const BrandedId&, const BrandedId&) = default;

 private:
  BrandedId() = default;
  std::array<char, kIdSize> bytes_{};
};

// True iff `text` passes all four gates. Any thread; no allocation.
inline bool is_valid_id(std::string_view text) noexcept {
  return BrandedId::parse(text).has_value();
}

// newer(a, b): both exactly 14 bytes and a's payload bytes (3..13) > b's, unsigned compare.
// Namespaces ignored, no validation; newer(x, x) is false. A wrong length is never newer.
bool newer(std::string_view a, std::string_view b) noexcept;
inline bool newer(const BrandedId& a, const BrandedId& b) noexcept {
  return newer(a.view(), b.view());
}

// base62 of a snowflake, 11 digits, most significant first, zero-padded. kRange beyond 2^63 - 1.
Expected<std::array<char, kPayloadSize>, IdError> base62_encode(std::uint64_t snowflake) noexcept;
// 11 base62 digits to the snowflake: kLength, kCharset or kRange (> kMaxPayload).
Expected<std::uint64_t, IdError> base62_decode(std::string_view digits) noexcept;

// Snowflake fields (docs/wire.md, "Branded ids").
constexpr std::int64_t unix_ms(std::uint64_t s) noexcept {
  return static_cast<std::int64_t>(s >> 22) + kEpochMs;
}
constexpr unsigned node_of(std::uint64_t s) noexcept { return (s >> 12) & 0x3FF; }
constexpr unsigned seq_of(std::uint64_t s) noexcept { return s & 0xFFF; }
// The smallest snowflake mintable at or after wall time t_ms (a range-scan lower bound).
constexpr std::uint64_t min_for(std::int64_t t_ms) noexcept {
  return static_cast<std::uint64_t>(t_ms - kEpochMs) << 22;
}
// Placement hash: the first half of fmix64, low 32 bits (docs/wire.md, "Branded ids").
constexpr std::uint32_t hash32(std::uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  return static_cast<std::uint32_t>(k);
}

// The minting cell (docs/wire.md, "Branded ids"): one atomic (ts << 12 | seq) shared by every
// minter of a process. Monotonic per process, never blocks, never repeats: same-ms mints bump seq,
// more than 4096 in a millisecond borrow into ts, a backwards clock continues from the last state.
class Minter {
 public:
  using WallClock = std::int64_t (*)() noexcept;  // Unix wall-clock milliseconds
  static std::int64_t system_wall_ms() noexcept;

  // node 0..1023, else std::invalid_argument naming the knob. Caller thread; no blocking.
  explicit Minter(unsigned node, WallClock clock = &system_wall_ms);

  // The next snowflake under this minter's node (or an explicit `node`, 0..1023, asserted).
  // Any thread; lock-free (a CAS loop), no allocation.
  std::uint64_t next() noexcept { return next(node_); }
  std::uint64_t next(unsigned node) noexcept;
  // generate!(ns): a branded id in namespace ns (3 bytes A–Z), else the encode error; the second
  // form under an explicit node (0..1023) on the same cell.
  Expected<BrandedId, IdError> mint(std::string_view ns) noexcept { return mint(ns, node_); }
  Expected<BrandedId, IdError> mint(std::string_view ns, unsigned node) noexcept;

  // The next snowflake under `node` that is also greater than `floor` (a version minted
  // elsewhere): the cell's time may run up to kMaxBorrowMs ahead of the wall clock for it, as it
  // already borrows when one millisecond's 4096 sequence numbers are spent (a hybrid logical
  // clock). A floor further ahead than that (a skewed or hostile peer) is not followed: the
  // answer is next(node), which may then not exceed it. Any thread; lock-free, no allocation.
  std::uint64_t next_after(unsigned node, std::uint64_t floor) noexcept;
  // generate!(ns) past `floor` (next_after's contract): ns and node as mint's.
  Expected<BrandedId, IdError> mint_after(std::string_view ns, unsigned node,
                                          const BrandedId& floor) noexcept;
  static constexpr std::int64_t kMaxBorrowMs = 1000;

  unsigned node() const noexcept { return node_; }

 private:
  std::int64_t now_part() const noexcept;
  std::uint64_t next_from(unsigned node, std::int64_t at_least) noexcept;

  unsigned node_;
  WallClock clock_;
  std::atomic<std::int64_t> state_;
};

// The process's one minting cell (docs/wire.md, "Branded ids": "one atomic state"). Every part of
// the engine mints through it with its own node id, so two components of one process can never mint
// the same id or an out-of-order pair, whatever nodes they were given. Any thread.
Minter& process_minter() noexcept;  // NOLINT(bugprone-exception-escape): cannot throw

}  // namespace echo::table
