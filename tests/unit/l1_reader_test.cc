// SPDX-License-Identifier: MIT
// Unit tests of the read-only view of an L1 map (l1_reader.h) and of what a typed table handle
// hands application threads (engine::Table<T>::l1()): every member any thread may call, and
// none of the writer thread's. A member that must be absent cannot be called, so most of this
// is checked on the types at compile time: each probe is asserted true on L1Map itself first,
// so a probe that could never match (a misspelt member) fails here rather than passing.
#include <echo/engine/table.h>
#include <echo/table/l1_map.h>
#include <echo/table/l1_reader.h>
#include <gtest/gtest.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace echo::table {
namespace {

// The writer thread's members of L1Map that a const reference still reaches, one probe each.
template <class V>
constexpr bool kHasTombstone = requires(const V& v) {
  v.tombstone(std::string_view());
};
template <class V>
constexpr bool kHasReleaseWriter = requires(const V& v) {
  v.release_writer();
};
template <class V>
constexpr bool kHasMark = requires(const V& v) {
  v.mark(std::string_view());
};
template <class V>
constexpr bool kHasMemoryBytes = requires(const V& v) {
  v.memory_bytes();
};
template <class V>
constexpr bool kHasValueBytes = requires(const V& v) {
  v.value_bytes();
};
template <class V>
constexpr bool kHasBytes = requires(const V& v) {
  v.bytes();
};
template <class V>
constexpr bool kHasIndexWalks = requires(const V& v) {
  v.index_walks();
};
template <class V>
constexpr bool kHasFillFloor = requires(const V& v) {
  v.fill_floor(std::string_view());
};
template <class V>
constexpr bool kHasDecodeError = requires(const V& v) {
  v.decode_error();
};
// And two of the writer's verbs, on a non-const value.
template <class V>
constexpr bool kHasPut = requires(V& v, const BrandedId& id) {
  v.put("K", "v", id);
};
template <class V>
constexpr bool kHasReclaim = requires(V& v) {
  v.reclaim();
};
template <class V>
constexpr bool kHasWriterSide =
    kHasTombstone<V> || kHasReleaseWriter<V> || kHasMark<V> || kHasMemoryBytes<V> ||
    kHasValueBytes<V> || kHasBytes<V> || kHasIndexWalks<V> || kHasFillFloor<V> ||
    kHasDecodeError<V> || kHasPut<V> || kHasReclaim<V>;

// The members documented "any thread".
template <class V>
constexpr bool kHasAnyThreadMembers = requires(const V& v, std::string& s, std::span<char> buf,
                                               const ReadGuard& g,
                                               void (*fn)(std::string_view, std::string_view)) {
  { v.get(std::string_view(), s) } -> std::same_as<bool>;
  { v.read(std::string_view(), buf) } -> std::same_as<ReadResult>;
  { v.read_at(std::string_view(), buf, std::int64_t{0}) } -> std::same_as<ReadResult>;
  { v.find(g, std::string_view()) } -> std::same_as<std::optional<RowView>>;
  { v.visit(std::string_view(), fn) } -> std::same_as<bool>;
  { v.size() } -> std::same_as<std::size_t>;
  { v.stats() } -> std::same_as<L1Stats>;
  { v.bucket_count() } -> std::same_as<std::size_t>;
  { v.row_charge(std::size_t{1}, std::size_t{1}) } -> std::same_as<std::size_t>;
  { v.now() } -> std::same_as<std::int64_t>;
  { v.ttl_ms() } -> std::same_as<std::int64_t>;
  { v.jitter_span_ms() } -> std::same_as<std::int64_t>;
};

// The probes see the map's own members (and would fail on a misspelling).
static_assert(kHasTombstone<L1Map> && kHasReleaseWriter<L1Map> && kHasMark<L1Map> &&
              kHasMemoryBytes<L1Map> && kHasValueBytes<L1Map> && kHasBytes<L1Map> &&
              kHasIndexWalks<L1Map> && kHasFillFloor<L1Map> && kHasDecodeError<L1Map> &&
              kHasPut<L1Map> && kHasReclaim<L1Map>);
static_assert(kHasAnyThreadMembers<L1Map>);

static_assert(!kHasTombstone<L1Reader>, "tombstone() races the fill guard's growth");
static_assert(!kHasReleaseWriter<L1Reader>, "release_writer() would unbind the map's writer");
static_assert(!kHasMark<L1Reader> && !kHasMemoryBytes<L1Reader> && !kHasValueBytes<L1Reader> &&
                  !kHasBytes<L1Reader> && !kHasIndexWalks<L1Reader> && !kHasFillFloor<L1Reader> &&
                  !kHasDecodeError<L1Reader>,
              "the writer thread's state, read without synchronisation");
static_assert(!kHasPut<L1Reader> && !kHasReclaim<L1Reader>);
static_assert(kHasAnyThreadMembers<L1Reader>);
static_assert(std::is_nothrow_copy_constructible_v<L1Reader>, "a handle returns it by value");

// What application code gets from a typed table's handle: the view, nothing of the writer's.
using HandleL1 = decltype(std::declval<const engine::Table<std::string>&>().l1());
static_assert(!kHasWriterSide<std::remove_cvref_t<HandleL1>>,
              "Table<T>::l1() must not reach the map's writer side");
static_assert(kHasAnyThreadMembers<std::remove_cvref_t<HandleL1>>);

BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 5'000'000 + n); }

TEST(L1Reader, AnswersAsTheMapItViews) {
  L1Config c;
  c.max_size = 16;
  c.ttl_ms = 60'000;
  c.jitter = 0;
  L1Map map(c);
  const L1Reader reader(map);
  ASSERT_EQ(map.put("AAPL", "189.10", ver(1)), InsertVerdict::kInserted);

  std::string value;
  IdBytes version{};
  EXPECT_TRUE(reader.get("AAPL", value, &version));
  EXPECT_EQ(value, "189.10");
  EXPECT_EQ(view(version), ver(1).view());
  EXPECT_FALSE(reader.get("MSFT", value));
  char buf[16];
  EXPECT_EQ(reader.read("AAPL", buf).status, ReadStatus::kHit);
  EXPECT_EQ(reader.read_at("AAPL", buf, reader.now()).size, 6u);
  {
    const ReadGuard guard;
    const auto row = reader.find(guard, "AAPL");
    ASSERT_TRUE(row);
    EXPECT_EQ(row->value, "189.10");
  }
  std::string seen;
  EXPECT_TRUE(reader.visit("AAPL", [&seen](std::string_view v, std::string_view) { seen = v; }));
  EXPECT_EQ(seen, "189.10");

  EXPECT_EQ(reader.size(), 1u);
  const L1Stats s = reader.stats();
  EXPECT_EQ(s.hits, 5u);  // get, read, read_at, find, visit
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(reader.bucket_count(), map.bucket_count());
  EXPECT_EQ(reader.row_charge(4, 6), map.row_charge(4, 6));
  EXPECT_EQ(reader.ttl_ms(), 60'000);
  EXPECT_EQ(reader.jitter_span_ms(), 0);
}

}  // namespace
}  // namespace echo::table
