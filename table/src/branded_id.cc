// SPDX-License-Identifier: MIT
// Branded id codec and minting cell (docs/wire.md, "Branded ids"). Table-driven base62; the gates
// run in the C reference's order: length, namespace, charset, range.
#include <echo/table/branded_id.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace echo::table {
namespace {

// Digit value of each byte, or -1 outside the alphabet.
constexpr std::array<std::int8_t, 256> make_digit_table() {
  std::array<std::int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (std::size_t i = 0; i < kBase62Alphabet.size(); ++i) {
    t[static_cast<unsigned char>(kBase62Alphabet[i])] = static_cast<std::int8_t>(i);
  }
  return t;
}
constexpr auto kDigit = make_digit_table();

constexpr bool is_upper(char c) noexcept { return c >= 'A' && c <= 'Z'; }

bool valid_namespace(std::string_view ns) noexcept {
  return ns.size() == kNamespaceSize && std::all_of(ns.begin(), ns.end(), is_upper);
}

}  // namespace

std::string_view to_string(IdError e) noexcept {
  switch (e) {
    case IdError::kLength:
      return "length";
    case IdError::kNamespace:
      return "namespace";
    case IdError::kCharset:
      return "charset";
    case IdError::kRange:
      return "range";
  }
  return "unknown";
}

Expected<std::array<char, kPayloadSize>, IdError> base62_encode(std::uint64_t s) noexcept {
  if (s > kMaxSnowflake) return Unexpected{IdError::kRange};
  std::array<char, kPayloadSize> out;
  for (std::size_t i = kPayloadSize; i-- > 0;) {
    out[i] = kBase62Alphabet[s % 62];
    s /= 62;
  }
  return out;
}

Expected<std::uint64_t, IdError> base62_decode(std::string_view digits) noexcept {
  if (digits.size() != kPayloadSize) return Unexpected{IdError::kLength};
  for (const char c : digits) {
    if (kDigit[static_cast<unsigned char>(c)] < 0) return Unexpected{IdError::kCharset};
  }
  // Byte order equals numeric order, so the range gate is a compare, never an overflow.
  if (digits > kMaxPayload) return Unexpected{IdError::kRange};
  std::uint64_t s = 0;
  for (const char c : digits)
    s = s * 62 + static_cast<std::uint64_t>(kDigit[static_cast<unsigned char>(c)]);
  return s;
}

Expected<BrandedId, IdError> BrandedId::parse(std::string_view text) noexcept {
  if (text.size() != kIdSize) return Unexpected{IdError::kLength};
  if (!valid_namespace(text.substr(0, kNamespaceSize))) return Unexpected{IdError::kNamespace};
  const std::string_view payload = text.substr(kNamespaceSize);
  for (const char c : payload) {
    if (kDigit[static_cast<unsigned char>(c)] < 0) return Unexpected{IdError::kCharset};
  }
  if (payload > kMaxPayload) return Unexpected{IdError::kRange};
  BrandedId id;
  std::memcpy(id.bytes_.data(), text.data(), kIdSize);
  return id;
}

Expected<BrandedId, IdError> BrandedId::encode(std::string_view ns,
                                               std::uint64_t snowflake) noexcept {
  if (!valid_namespace(ns)) return Unexpected{IdError::kNamespace};
  const auto digits = base62_encode(snowflake);
  if (!digits) return Unexpected{digits.error()};
  BrandedId id;
  std::memcpy(id.bytes_.data(), ns.data(), kNamespaceSize);
  std::memcpy(id.bytes_.data() + kNamespaceSize, digits->data(), kPayloadSize);
  return id;
}

std::uint64_t BrandedId::snowflake() const noexcept {
  std::uint64_t s = 0;
  for (const char c : payload())
    s = s * 62 + static_cast<std::uint64_t>(kDigit[static_cast<unsigned char>(c)]);
  return s;
}

bool newer(std::string_view a, std::string_view b) noexcept {
  if (a.size() != kIdSize || b.size() != kIdSize) return false;
  // memcmp compares as unsigned char, as the contract requires.
  return std::memcmp(a.data() + kNamespaceSize, b.data() + kNamespaceSize, kPayloadSize) > 0;
}

std::int64_t Minter::system_wall_ms() noexcept {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

Minter::Minter(unsigned node, WallClock clock) : node_(node), clock_(clock) {
  if (node > kMaxNode) {
    throw std::invalid_argument("node_id must lie in 0..1023, got " + std::to_string(node));
  }
  state_.store(now_part(), std::memory_order_relaxed);
}

std::int64_t Minter::now_part() const noexcept {
  // A clock before the epoch mints as if at the epoch; ts never goes negative.
  return std::max<std::int64_t>(0, clock_() - kEpochMs) << 12;
}

std::uint64_t Minter::next(unsigned node) noexcept { return next_from(node, 0); }

std::uint64_t Minter::next_after(unsigned node, std::uint64_t floor) noexcept {
  assert(node <= kMaxNode && "Minter::next_after: node must lie in 0..1023");
  // The smallest cell state (ts << 12 | seq) whose snowflake under `node` exceeds `floor`: a
  // higher node wins within floor's millisecond from seq 0, the same node from floor's seq + 1,
  // a lower node only in the next millisecond.
  const auto ts = static_cast<std::int64_t>(floor >> 22);
  const unsigned floor_node = node_of(floor);
  const std::int64_t required = node > floor_node    ? ts << 12
                                : node == floor_node ? ((ts << 12) | seq_of(floor)) + 1
                                                     : (ts + 1) << 12;
  if (required > now_part() + (kMaxBorrowMs << 12)) return next_from(node, 0);
  return next_from(node, required);
}

Expected<BrandedId, IdError> Minter::mint_after(std::string_view ns, unsigned node,
                                                const BrandedId& floor) noexcept {
  if (!valid_namespace(ns)) return Unexpected{IdError::kNamespace};
  if (node > kMaxNode) return Unexpected{IdError::kRange};
  return BrandedId::encode(ns, next_after(node, floor.snowflake()));
}

std::uint64_t Minter::next_from(unsigned node, std::int64_t at_least) noexcept {
  assert(node <= kMaxNode && "Minter::next: node must lie in 0..1023");
  const std::int64_t now = std::max(now_part(), at_least);
  // relaxed suffices: uniqueness and monotonicity come from the CAS on this one cell; no other
  // memory is published through it.
  std::int64_t last = state_.load(std::memory_order_relaxed);
  std::int64_t next;
  do {
    next = std::max(now, last + 1);
  } while (!state_.compare_exchange_weak(last, next, std::memory_order_relaxed,
                                         std::memory_order_relaxed));
  const auto n = static_cast<std::uint64_t>(next);
  return (n >> 12) << 22 | static_cast<std::uint64_t>(node & kMaxNode) << 12 | (n & 0xFFF);
}

Expected<BrandedId, IdError> Minter::mint(std::string_view ns, unsigned node) noexcept {
  if (!valid_namespace(ns)) return Unexpected{IdError::kNamespace};
  if (node > kMaxNode) return Unexpected{IdError::kRange};
  return BrandedId::encode(ns, next(node));
}

// Node 0 is in range, so Minter's constructor (which throws only on a bad node) cannot throw here.
Minter& process_minter() noexcept {  // NOLINT(bugprone-exception-escape)
  static Minter cell(0);
  return cell;
}

}  // namespace echo::table
