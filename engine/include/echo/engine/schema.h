// SPDX-License-Identifier: MIT
// A typed value's schema: a 64-bit fingerprint written in front of every value a typed table puts
// in L2 (docs/wire.md, "Typed values"), so a node that reads a row written under another layout of
// its type takes it as a miss for its loader (WriterStats::schema_mismatches), never as its own
// type's bytes: no bid and ask swapped silently, no refusal on the hot path.
//
// Where the fingerprint comes from (schema_of<T>()):
// - a codec that declares `static std::uint64_t schema()` (Codec<T>): that value. The built-in
//   codec of trivially copyable types declares it as below; a user codec that owns its format
//   (Protocol Buffers: codec_protobuf.h) declares what makes two formats readable by each other.
// - the built-in codec, T an aggregate of at most 32 fields (struct Quote { double bid, ask; }):
//   derived from T's layout: its size and alignment and, for each field in order, its name,
//   offset and kind (floating, signed or unsigned integer and its size, bool, enum, array and its
//   extent, or a nested aggregate, described the same way). Same layout and names, same schema,
//   whatever the struct is called: a field added, removed, renamed, retyped or moved changes it.
// - the built-in codec, T declaring `static constexpr std::uint64_t schema_version = N;`: N with
//   T's size and alignment, nothing else: you own the schema then, and bump N with every change
//   of the layout. For a type the reflection cannot see: a class with private members or a base
//   class, or more than 32 fields (it must declare one: a static_assert says so).
// - a user codec without schema(): the type's mangled name (typeid). Bump nothing, check nothing:
//   declare schema() when a format change must not be read by the older code.
//
// The reflection below reads field names from the compiler's function signatures (GCC and Clang,
// __PRETTY_FUNCTION__), the same technique Boost.PFR uses; it runs once per type, at the first
// use, off the hot path.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace echo::engine {

template <class T, class Enable = void>
struct Codec;

// The bytes in front of a typed value in L2: 0xEC 'S', then the fingerprint, little-endian.
inline constexpr std::size_t kSchemaHeaderSize = 10;

namespace detail::schema {

// Converts to anything: counts an aggregate's fields by initialising it with braced copies.
struct Any {
  template <class U>
  constexpr operator U() const noexcept;  // NOLINT(google-explicit-constructor): the point
};

template <class T, std::size_t... I>
constexpr bool initialisable(std::index_sequence<I...> /*fields*/) {
  // Each field braced on its own: an array field takes one Any as its first element, so brace
  // elision never counts an array's elements as fields.
  return requires { T{{(void(I), Any{})}...}; };
}

inline constexpr std::size_t kMaxFields = 32;

// How many fields T has; kMaxFields + 1 for more than kMaxFields (not reflected).
template <class T, std::size_t N = 0>
constexpr std::size_t count_fields() {
  if constexpr (N <= kMaxFields && initialisable<T>(std::make_index_sequence<N + 1>{})) {
    return count_fields<T, N + 1>();
  } else {
    return N;
  }
}

template <class T>
concept Declared = requires {
  { T::schema_version } -> std::convertible_to<std::uint64_t>;
};

// std::array<E, N>: laid out as E[N], and described and copied as one (its structured binding is
// the tuple protocol's N elements, not its one member).
template <class T>
struct StdArray : std::false_type {};
template <class E, std::size_t N>
struct StdArray<std::array<E, N>> : std::true_type {
  using element = E;
  static constexpr std::size_t extent = N;
};

// A type with std::tuple_size specialised binds its elements, not its fields.
template <class T>
concept TupleLike = requires {
  std::tuple_size<T>::value;
};

// True for the aggregates whose fields the fingerprint and the padding-free encoding walk.
template <class T>
constexpr bool reflected() {
  if constexpr (!std::is_class_v<T> || !std::is_aggregate_v<T> || Declared<T> ||
                StdArray<T>::value) {
    return false;
  } else {
    static_assert(
        !TupleLike<T>,
        "the built-in codec walks a value's fields by structured binding, which a "
        "tuple-like type (std::tuple_size specialised) binds as its elements: make this "
        "field a C array or a std::array, or give its type `static constexpr "
        "std::uint64_t schema_version = N;` (docs/guide.md, \"Values and their schema\")");
    constexpr std::size_t n = count_fields<T>();
    return n >= 1 && n <= kMaxFields;
  }
}

template <std::size_t N, class T>
constexpr auto tie_fields(T& t) {
  if constexpr (N == 1) {
    auto& [a0] = t;
    return std::tie(a0);
  } else if constexpr (N == 2) {
    auto& [a0, a1] = t;
    return std::tie(a0, a1);
  } else if constexpr (N == 3) {
    auto& [a0, a1, a2] = t;
    return std::tie(a0, a1, a2);
  } else if constexpr (N == 4) {
    auto& [a0, a1, a2, a3] = t;
    return std::tie(a0, a1, a2, a3);
  } else if constexpr (N == 5) {
    auto& [a0, a1, a2, a3, a4] = t;
    return std::tie(a0, a1, a2, a3, a4);
  } else if constexpr (N == 6) {
    auto& [a0, a1, a2, a3, a4, a5] = t;
    return std::tie(a0, a1, a2, a3, a4, a5);
  } else if constexpr (N == 7) {
    auto& [a0, a1, a2, a3, a4, a5, a6] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6);
  } else if constexpr (N == 8) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7);
  } else if constexpr (N == 9) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8);
  } else if constexpr (N == 10) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
  } else if constexpr (N == 11) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10);
  } else if constexpr (N == 12) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
  } else if constexpr (N == 13) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12);
  } else if constexpr (N == 14) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13);
  } else if constexpr (N == 15) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14);
  } else if constexpr (N == 16) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15);
  } else if constexpr (N == 17) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16);
  } else if constexpr (N == 18) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17);
  } else if constexpr (N == 19) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18);
  } else if constexpr (N == 20) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18,
           a19] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19);
  } else if constexpr (N == 21) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20);
  } else if constexpr (N == 22) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21);
  } else if constexpr (N == 23) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22);
  } else if constexpr (N == 24) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23);
  } else if constexpr (N == 25) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24);
  } else if constexpr (N == 26) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25);
  } else if constexpr (N == 27) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26);
  } else if constexpr (N == 28) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26, a27] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27);
  } else if constexpr (N == 29) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26, a27, a28] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28);
  } else if constexpr (N == 30) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26, a27, a28, a29] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29);
  } else if constexpr (N == 31) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30);
  } else if constexpr (N == 32) {
    auto& [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
           a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31] = t;
    return std::tie(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17,
                    a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31);
  }
}

template <class T>
constexpr auto tie(T& t) {
  return tie_fields<count_fields<std::remove_const_t<T>>()>(t);
}

template <class F>
struct FieldAddress {
  const F* at;
};

// An object of T that is never constructed (the union's other member is the active one): only its
// fields' addresses are named, in a template argument. Defined, so that a type with no linkage
// (one in an anonymous namespace) has one too.
template <class T>
union Phantom {
  char none;
  T value;
  constexpr Phantom() : none() {}
};
template <class T>
inline constexpr Phantom<T> kPhantom{};

template <auto Address>
constexpr std::string_view signature() {
  return __PRETTY_FUNCTION__;
}

// The name of T's field I, as the compiler spells the address of kPhantom<T>'s field in a
// signature: GCC "{(& kPhantom<Quote>.Phantom<Quote>::value.Quote::bid)}", Clang
// "{&kPhantom.value.bid}".
template <class T, std::size_t I>
constexpr std::string_view field_name() {
  using F = std::remove_reference_t<std::tuple_element_t<I, decltype(tie(kPhantom<T>.value))>>;
  constexpr std::string_view s =
      signature<FieldAddress<std::remove_const_t<F>>{&std::get<I>(tie(kPhantom<T>.value))}>();
  std::size_t end = s.find('}', s.find("Address = "));
  if (end == std::string_view::npos) return {};
  while (end > 0 && (s[end - 1] == ')' || s[end - 1] == ' ')) --end;
  std::size_t begin = end;
  while (begin > 0) {
    const char c = s[begin - 1];
    if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
      break;
    --begin;
  }
  return s.substr(begin, end - begin);
}

// FNV-1a, 64 bits: the fingerprint's hash (stable across compilers and builds).
struct Hasher {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void bytes(std::string_view s) noexcept {
    for (const char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ull;
    }
  }
  void number(std::uint64_t v) noexcept {
    char b[8];
    for (char& c : b) {
      c = static_cast<char>(v & 0xff);
      v >>= 8;
    }
    bytes(std::string_view(b, sizeof b));
  }
  void tag(char c) noexcept { bytes(std::string_view(&c, 1)); }
};

template <class T>
void describe_fields(Hasher& h);

template <class F>
void describe(Hasher& h) {
  if constexpr (std::is_array_v<F>) {
    h.tag('[');
    h.number(std::extent_v<F>);
    describe<std::remove_extent_t<F>>(h);
  } else if constexpr (StdArray<F>::value) {  // as E[N]: the same bytes, the same schema
    h.tag('[');
    h.number(StdArray<F>::extent);
    describe<typename StdArray<F>::element>(h);
  } else if constexpr (std::is_same_v<F, bool>) {
    h.tag('b');
  } else if constexpr (std::is_enum_v<F>) {
    h.tag('e');
    describe<std::underlying_type_t<F>>(h);
  } else if constexpr (std::is_floating_point_v<F>) {
    h.tag('f');
    h.number(sizeof(F));
  } else if constexpr (std::is_integral_v<F>) {
    h.tag(std::is_signed_v<F> ? 'i' : 'u');
    h.number(sizeof(F));
  } else if constexpr (reflected<F>()) {
    h.tag('{');
    describe_fields<F>(h);
    h.tag('}');
  } else {
    h.tag('o');  // opaque: a declared type, a class the reflection cannot see
    if constexpr (Declared<F>) h.number(static_cast<std::uint64_t>(F::schema_version));
    h.number(sizeof(F));
    h.number(alignof(F));
  }
}

template <class T, std::size_t... I>
void describe_each(Hasher& h, const T& sample, std::index_sequence<I...> /*fields*/) {
  const auto fields = tie(sample);
  const auto* base = reinterpret_cast<const char*>(&sample);
  (
      [&] {
        h.bytes(field_name<T, I>());
        h.tag(':');
        h.number(
            static_cast<std::uint64_t>(reinterpret_cast<const char*>(&std::get<I>(fields)) - base));
        describe<std::remove_cvref_t<std::tuple_element_t<I, decltype(fields)>>>(h);
        h.tag(';');
      }(),
      ...);
}

template <class T>
void describe_fields(Hasher& h) {
  h.number(sizeof(T));
  h.number(alignof(T));
  const T sample{};
  describe_each(h, sample, std::make_index_sequence<count_fields<T>()>{});
}

// T's object representation without its padding: `out` (sizeof(T) bytes, zeroed by the caller)
// gets each field's bytes at its offset, nested aggregates field by field.
template <class T>
void copy_fields(const T& value, char* out) noexcept {
  if constexpr (std::is_array_v<T> || StdArray<T>::value) {
    // Element by element, so an element's own padding stays zero too.
    const auto& elements = value;
    for (std::size_t i = 0; i < std::size(elements); ++i) {
      copy_fields(elements[i], out + i * sizeof(elements[0]));
    }
  } else if constexpr (reflected<T>()) {
    const auto* base = reinterpret_cast<const char*>(&value);
    std::apply(
        [&](const auto&... field) {
          (copy_fields(field, out + (reinterpret_cast<const char*>(&field) - base)), ...);
        },
        tie(value));
  } else {
    std::memcpy(out, static_cast<const void*>(&value), sizeof(T));
  }
}

}  // namespace detail::schema

// The fingerprint of the built-in codec's T (above).
template <class T>
std::uint64_t layout_schema() {
  static_assert(std::is_trivially_copyable_v<T>);
  static_assert(detail::schema::Declared<T> || detail::schema::reflected<T>() ||
                    std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_array_v<T> ||
                    detail::schema::StdArray<T>::value,
                "the built-in codec derives a value's schema from its fields: T must be an "
                "aggregate of 1..32 public fields and no base class, or declare "
                "`static constexpr std::uint64_t schema_version = N;` (docs/guide.md, "
                "\"Values and their schema\")");
  static const std::uint64_t fingerprint = [] {
    detail::schema::Hasher h;
    h.bytes("echo.schema.1");
    if constexpr (detail::schema::Declared<T>) {
      h.tag('v');
      h.number(static_cast<std::uint64_t>(T::schema_version));
      h.number(sizeof(T));
      h.number(alignof(T));
    } else {
      detail::schema::describe<T>(h);
    }
    return h.h;
  }();
  return fingerprint;
}

// A typed table's schema fingerprint: Codec<T>::schema() when the codec declares it, else T's
// mangled name.
template <class T>
std::uint64_t schema_of() {
  if constexpr (requires { Codec<T>::schema(); }) {
    return Codec<T>::schema();
  } else {
    static const std::uint64_t fingerprint = [] {
      detail::schema::Hasher h;
      h.bytes("echo.schema.name");
      h.bytes(typeid(T).name());
      return h.h;
    }();
    return fingerprint;
  }
}

// The kSchemaHeaderSize bytes that lead every value of T in L2.
template <class T>
const std::string& schema_header() {
  static const std::string header = [] {
    std::string out = {'\xEC', 'S'};
    std::uint64_t f = schema_of<T>();
    for (int i = 0; i < 8; ++i) {
      out.push_back(static_cast<char>(f & 0xff));
      f >>= 8;
    }
    return out;
  }();
  return header;
}

}  // namespace echo::engine
