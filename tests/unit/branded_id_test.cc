// SPDX-License-Identifier: MIT
// Branded ids (docs/wire.md, "Branded ids"): every vector and refusal, the derived vectors, the
// round trip over random snowflakes, the order theorem over mints, the minting cell's clock rules,
// and uniqueness under a concurrent burst larger than 4,096.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <echo/table/branded_id.h>

namespace echo::table {
namespace {

std::string b62(std::uint64_t s) {
  auto d = base62_encode(s);
  EXPECT_TRUE(d.has_value());
  return d ? std::string(d->data(), d->size()) : std::string();
}

TEST(BrandedId, EncodeMatchesContractVector) {
  auto id = BrandedId::encode("USR", 274557032793636864ull);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->view(), "USR0KHTOWnGLuC");
  EXPECT_EQ(b62(274557032793636864ull), "0KHTOWnGLuC");
}

TEST(BrandedId, DecodeMatchesContractVector) {
  auto id = BrandedId::parse("USR0NgWEfAEJfs");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->ns(), "USR");
  EXPECT_EQ(id->snowflake(), 320636799581945856ull);
}

TEST(BrandedId, FieldAccessorsMatchVectors) {
  EXPECT_EQ(hash32(274557032793636864ull), 234878118u);
  EXPECT_EQ(unix_ms(274557032793636864ull), 1769526697641);
  EXPECT_EQ(unix_ms(320636799581945856ull), 1780512970164);
  EXPECT_EQ(hash32(0), 0u);
  EXPECT_EQ(hash32(320636799581945856ull), 3694611501u);
  EXPECT_EQ(hash32(kMaxSnowflake), 2186628710u);
  const std::uint64_t s = (std::uint64_t{12345} << 22) | (std::uint64_t{1000} << 12) | 4095;
  EXPECT_EQ(node_of(s), 1000u);
  EXPECT_EQ(seq_of(s), 4095u);
  EXPECT_EQ(unix_ms(s), kEpochMs + 12345);
  EXPECT_EQ(min_for(kEpochMs + 12345), std::uint64_t{12345} << 22);
}

TEST(BrandedId, Base62EdgeVectors) {
  EXPECT_EQ(b62(kMaxSnowflake), "AzL8n0Y58m7");
  EXPECT_EQ(b62(0), "00000000000");
  EXPECT_EQ(b62(61), "0000000000z");
  EXPECT_EQ(b62(62), "00000000010");
  auto over = base62_encode(kMaxSnowflake + 1);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error(), IdError::kRange);
  auto zz = base62_decode("zzzzzzzzzzz");
  ASSERT_FALSE(zz);
  EXPECT_EQ(zz.error(), IdError::kRange);
  EXPECT_EQ(base62_decode("AzL8n0Y58m7").value(), kMaxSnowflake);
  EXPECT_EQ(base62_decode("AzL8n0Y58m8").error(), IdError::kRange);
  EXPECT_EQ(base62_decode("0000000000").error(), IdError::kLength);
  EXPECT_EQ(base62_decode("0000000000-").error(), IdError::kCharset);
}

struct Reject {
  const char* text;
  std::size_t len;
  IdError gate;
};

TEST(BrandedId, RefusesEachContractRejectAtItsGate) {
  const Reject rejects[] = {
      {"USRzzzzzzzzzzz", 14, IdError::kRange},
      {"usr0KHTOWnGLuC", 14, IdError::kNamespace},
      {"USR0KHTOWnGLu", 13, IdError::kLength},
      {"USR0KHTOWnGL!C", 14, IdError::kCharset},
      {"", 0, IdError::kLength},
      {"USR0KHTOWnGLuCX", 15, IdError::kLength},
      {"US10KHTOWnGLuC", 14, IdError::kNamespace},
      {"USR0KHTOW\0GLuC", 14, IdError::kCharset},
      {"USR0KHTOWnGL uC", 14, IdError::kCharset},
      {"USRAzL8n0Y58m8", 14, IdError::kRange},
  };
  for (const auto& r : rejects) {
    auto id = BrandedId::parse(std::string_view(r.text, r.len));
    ASSERT_FALSE(id) << r.text;
    EXPECT_EQ(id.error(), r.gate) << r.text;
  }
  EXPECT_TRUE(BrandedId::parse("USRAzL8n0Y58m7"));
}

TEST(BrandedId, GatesRunInContractOrder) {
  // Lowercase namespace and a bad charset and out of range: namespace is reported first.
  EXPECT_EQ(BrandedId::parse("usr!zzzzzzzzzz").error(), IdError::kNamespace);
  // Charset before range: 'z' run with one bad byte is charset, not range.
  EXPECT_EQ(BrandedId::parse("USRzzzzzzzzzz!").error(), IdError::kCharset);
}

TEST(BrandedId, EncodeRefusesBadNamespaceAndRange) {
  EXPECT_EQ(BrandedId::encode("us", 1).error(), IdError::kNamespace);
  EXPECT_EQ(BrandedId::encode("usr", 1).error(), IdError::kNamespace);
  EXPECT_EQ(BrandedId::encode("USRX", 1).error(), IdError::kNamespace);
  EXPECT_EQ(BrandedId::encode("USR", kMaxSnowflake + 1).error(), IdError::kRange);
}

TEST(BrandedId, ErrorNamesAreStable) {
  EXPECT_EQ(to_string(IdError::kLength), "length");
  EXPECT_EQ(to_string(IdError::kNamespace), "namespace");
  EXPECT_EQ(to_string(IdError::kCharset), "charset");
  EXPECT_EQ(to_string(IdError::kRange), "range");
  EXPECT_EQ(static_cast<int>(IdError::kRange), 4);
}

TEST(BrandedId, RoundTripsFiveThousandRandomSnowflakes) {
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t s = rng() >> 1;
    auto id = BrandedId::encode("ORD", s);
    ASSERT_TRUE(id);
    auto back = BrandedId::parse(id->view());
    ASSERT_TRUE(back);
    EXPECT_EQ(back->snowflake(), s);
    EXPECT_EQ(base62_decode(id->payload()).value(), s);
  }
}

TEST(BrandedId, ByteOrderEqualsNumericOrder) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t a = rng() >> 1, b = rng() >> (1 + rng() % 40);
    const auto ia = BrandedId::encode("AAA", a).value();
    const auto ib = BrandedId::encode("ZZZ", b).value();
    EXPECT_EQ(newer(ia, ib), a > b);
    EXPECT_EQ(newer(ib, ia), b > a);
  }
}

TEST(Newer, EqualIsNotNewerAndNamespacesAreIgnored) {
  EXPECT_FALSE(newer("USR0KHTOWnGLuC", "USR0KHTOWnGLuC"));
  EXPECT_FALSE(newer("AAA0KHTOWnGLuC", "ZZZ0KHTOWnGLuC"));
  EXPECT_TRUE(newer("AAA0KHTOWnGLuD", "ZZZ0KHTOWnGLuC"));
  EXPECT_FALSE(newer("ZZZ0KHTOWnGLuC", "AAA0KHTOWnGLuD"));
}

TEST(Newer, WrongLengthIsNeverNewer) {
  EXPECT_FALSE(newer("TXN0NuG2aaaaaaa", "TXN0NuFzzzzzzzz"));  // 15-byte strings
  EXPECT_FALSE(newer("USR0KHTOWnGLu", "USR0KHTOWnGLuC"));
  EXPECT_FALSE(newer("USR0KHTOWnGLuC", ""));
}

TEST(Newer, ComparesBytesUnsigned) {
  // Not valid ids, but newer() does no validation: 0xFF must sort above 'z'.
  const std::string hi = std::string("AAA") + std::string(10, '0') + "\xff";
  EXPECT_TRUE(newer(hi, "AAA0000000000z"));
}

TEST(Minter, RefusesNodeOutOfRange) {
  EXPECT_THROW(Minter(1024), std::invalid_argument);
  EXPECT_NO_THROW(Minter(1023));
}

TEST(Minter, OrderTheoremHoldsOverMints) {
  Minter m(42);
  std::string prev;
  for (int i = 0; i < 10000; ++i) {
    const auto id = m.mint("TXN").value();
    EXPECT_EQ(node_of(id.snowflake()), 42u);
    if (!prev.empty()) {
      EXPECT_LT(prev, id.str());
      EXPECT_TRUE(newer(id.view(), prev));
    }
    prev = id.str();
  }
}

// A controllable wall clock for the minting cell's rules.
std::atomic<std::int64_t> g_now{0};
std::int64_t fake_now() noexcept { return g_now.load(std::memory_order_relaxed); }

TEST(Minter, FirstMintInStartMillisecondHasSeqOne) {
  g_now = kEpochMs + 1000;
  Minter m(3, &fake_now);
  const auto s = m.next();
  EXPECT_EQ(unix_ms(s), kEpochMs + 1000);
  EXPECT_EQ(seq_of(s), 1u);
  EXPECT_EQ(node_of(s), 3u);
  EXPECT_EQ(seq_of(m.next()), 2u);
}

TEST(Minter, OverflowBorrowsIntoTimestampNeverNode) {
  g_now = kEpochMs + 5000;
  Minter m(1023, &fake_now);
  std::uint64_t last = 0;
  for (int i = 0; i < 4096 * 3; ++i) {
    const auto s = m.next();
    EXPECT_GT(s, last);
    EXPECT_EQ(node_of(s), 1023u);
    last = s;
  }
  EXPECT_EQ(unix_ms(last), kEpochMs + 5000 + 3);  // 3 * 4096 mints spilled over 3 ms
}

TEST(Minter, BackwardsClockContinuesFromLastState) {
  g_now = kEpochMs + 90000;
  Minter m(9, &fake_now);
  const auto before = m.next();
  g_now = kEpochMs + 10;  // the clock jumps back 90 s
  const auto after = m.next();
  EXPECT_GT(after, before);
  EXPECT_EQ(unix_ms(after), unix_ms(before));
  EXPECT_EQ(seq_of(after), seq_of(before) + 1);
  g_now = kEpochMs + 90001;  // the clock passes the state again: minting follows it
  EXPECT_EQ(unix_ms(m.next()), kEpochMs + 90001);
}

// A version minted past another node's (the writer's loader version past a drop's tombstone):
// newer than the floor whatever the two nodes, within the floor's millisecond when the node order
// allows it, the next millisecond when it does not; never further than kMaxBorrowMs ahead.
TEST(Minter, NextAfterExceedsAFloorFromAnyNodeInTheSameMillisecond) {
  g_now = kEpochMs + 7000;
  Minter other(9, &fake_now);
  const std::uint64_t floor = other.next(9);  // (7000 ms, node 9, seq 1)
  for (const unsigned node : {3u, 9u, 20u}) {
    Minter m(node, &fake_now);
    if (node < 9) {
      EXPECT_LT(m.next(), floor) << "a plain mint on a lower node is older";
    }
    const auto s = m.next_after(node, floor);
    EXPECT_GT(s, floor) << "node " << node;
    EXPECT_EQ(node_of(s), node);
    EXPECT_EQ(unix_ms(s), kEpochMs + 7000 + (node < 9 ? 1 : 0)) << "node " << node;
    EXPECT_GT(m.next(), s) << "the cell stays monotonic after a borrow";
  }
  Minter m(3, &fake_now);
  const std::uint64_t far = min_for(kEpochMs + 7000 + Minter::kMaxBorrowMs + 5);
  const auto s = m.next_after(3, far);
  EXPECT_EQ(unix_ms(s), kEpochMs + 7000) << "a floor beyond the borrow bound is not followed";
  const auto id = m.mint_after("AST", 3, BrandedId::encode("TXN", floor).value()).value();
  EXPECT_TRUE(newer(id.view(), BrandedId::encode("TXN", floor).value().view()));
  EXPECT_EQ(id.ns(), "AST");
}

TEST(Minter, PerCallNodeSharesTheCell) {
  Minter m(1);
  const auto a = m.next(5), b = m.next(6);
  EXPECT_EQ(node_of(a), 5u);
  EXPECT_EQ(node_of(b), 6u);
  EXPECT_LT(a & ~(std::uint64_t{0x3FF} << 12), b & ~(std::uint64_t{0x3FF} << 12));
}

TEST(Minter, MintRefusesBadNamespace) {
  Minter m(0);
  EXPECT_EQ(m.mint("txn").error(), IdError::kNamespace);
}

TEST(Minter, UniqueUnderConcurrentBurstFromTwoThreads) {
  // Two threads, distinct nodes per the contract, on one cell; 2 x 10,000 > 4,096 per ms.
  Minter m(0);
  constexpr int kPerThread = 10000;
  std::vector<std::uint64_t> a(kPerThread), b(kPerThread);
  std::atomic<bool> go{false};
  auto run = [&](std::vector<std::uint64_t>& out, unsigned node) {
    while (!go.load(std::memory_order_acquire)) {
    }
    for (auto& s : out) s = m.next(node);
  };
  std::thread ta(run, std::ref(a), 1u), tb(run, std::ref(b), 2u);
  go.store(true, std::memory_order_release);
  ta.join();
  tb.join();
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  std::set<std::uint64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 2u * kPerThread);
  // The cell's (ts, seq) part alone is unique too: the node bits are not what separates them.
  std::set<std::uint64_t> cells;
  for (auto s : a) cells.insert(s & ~(std::uint64_t{0x3FF} << 12));
  for (auto s : b) cells.insert(s & ~(std::uint64_t{0x3FF} << 12));
  EXPECT_EQ(cells.size(), 2u * kPerThread);
}

}  // namespace
}  // namespace echo::table
