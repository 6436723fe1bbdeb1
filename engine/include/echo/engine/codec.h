// SPDX-License-Identifier: MIT
// A table's value type and its bytes in L2. The L2 frame stays version(14) ‖ encoded bytes
// (docs/wire.md, "L2 values"); for a typed table (any T but std::string) the encoded bytes are
// the schema header (schema.h: 0xEC 'S' and T's 8-byte fingerprint) and then the codec's bytes
// (docs/wire.md, "Typed values"). A typed table's writer decodes those bytes once, when a row
// enters L1 (a fill, a put or a carried value), into the row itself, and every read uses the
// object in place (table.h). A row written under another schema is never decoded: the node takes
// it as a miss for its loader (WriterStats::schema_mismatches).
//
// Built in:
//   std::string            the bytes as they are (the untyped tables' values; no header);
//   any trivially copyable T (a struct of numbers, enums and fixed char arrays): its object
//                          bytes with the padding zeroed (field by field), decoded only when
//                          exactly sizeof(T) bytes arrive; its schema is derived from its layout
//                          (schema.h), or declared (`static constexpr std::uint64_t
//                          schema_version = N;` in T).
// Your own type (a struct holding a std::string, say): specialise echo::engine::Codec<T> with
//   static void encode(const T& value, std::string& out);               // appends to out
//   static bool decode(std::string_view bytes, T& out, std::string& why); // false + why: refused
//   static std::uint64_t schema();  // optional: the format's fingerprint (schema.h)
// (T default-constructible and move-constructible; docs/guide.md, "Values and their schema",
// has a whole example). Both run on any thread (encode on the caller's, decode on the table's
// writer or the caller's); neither may block; a throw from decode is taken as a refusal. A
// refusal reaches the reader as Errc::kBadValue with `why`, and is counted
// (L1Stats::decode_errors). codec_protobuf.h adapts every Protocol Buffers message.
#pragma once

#include <concepts>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <variant>

#include <echo/engine/error.h>
#include <echo/engine/schema.h>
#include <echo/engine/table_spec.h>

namespace echo::engine {

// Codec<T, Enable> is declared in schema.h: undefined for a type with neither a built-in codec
// nor a specialisation.

template <>
struct Codec<std::string> {
  static void encode(const std::string& value, std::string& out) { out.append(value); }
  static bool decode(std::string_view bytes, std::string& out, std::string&) {
    out.assign(bytes);
    return true;
  }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>>> {
  static void encode(const T& value, std::string& out) {
    const std::size_t at = out.size();
    out.resize(at + sizeof(T));  // zeroes: the padding stays zero
    detail::schema::copy_fields(value, out.data() + at);
  }
  static std::uint64_t schema() { return layout_schema<T>(); }
  static bool decode(std::string_view bytes, T& out, std::string& why) {
    if (bytes.size() != sizeof(T)) {
      why = "expected " + std::to_string(sizeof(T)) + " bytes of " + type_name(typeid(T)) +
            ", got " + std::to_string(bytes.size());
      return false;
    }
    std::memcpy(static_cast<void*>(&out), bytes.data(), sizeof(T));
    return true;
  }
};

// What a typed read hands its callback: the object in the row (const T&), or for std::string,
// whose rows hold the bytes themselves, a std::string_view of them.
template <class T>
using ValueView = std::conditional_t<std::is_same_v<T, std::string>, std::string_view, const T&>;

// True when T has a codec (built in or specialised).
template <class T>
concept Encodable = requires(const T& value, std::string& out, std::string_view bytes, T& into,
                             std::string& why) {
  Codec<T>::encode(value, out);
  { Codec<T>::decode(bytes, into, why) } -> std::convertible_to<bool>;
};

namespace detail {

template <class T>
void check_codec() {
  static_assert(Encodable<T>,
                "no codec for this value type: a type that is not trivially copyable (one holding "
                "a std::string, say) needs a specialisation of echo::engine::Codec<T> "
                "(codec.h; docs/guide.md, \"Values and their schema\")");
}

// True when `bytes` were written under T's schema (a typed table's header leads them).
template <class T>
bool same_schema(std::string_view bytes) noexcept {
  if constexpr (std::is_same_v<T, std::string>) {
    return true;
  } else {
    return bytes.starts_with(schema_header<T>());
  }
}

// Decodes an L2 value of T: the schema header checked and stripped, then the codec.
template <class T>
bool decode_into(std::string_view bytes, T& out, std::string& why) noexcept {
  try {
    if constexpr (!std::is_same_v<T, std::string>) {
      if (!same_schema<T>(bytes)) {
        why = "schema mismatch: the value was not written under this node's schema of ";
        why += type_name(typeid(T));
        return false;
      }
      bytes.remove_prefix(kSchemaHeaderSize);
    }
    return Codec<T>::decode(bytes, out, why);
  } catch (const std::exception& e) {
    why = std::string("the codec threw: ") + e.what();
  } catch (...) {
    why = "the codec threw";
  }
  return false;
}

// The L1 row layout of T: decode builds the object in the row (writer thread).
template <class T>
table::ValueLayout layout_of() {
  table::ValueLayout l;
  if constexpr (std::is_same_v<T, std::string>) {
    return l;  // bytes: rows hold the encoded value as it is
  } else {
    static_assert(alignof(T) <= 16, "a typed table's value must be aligned to at most 16 bytes");
    l.size = sizeof(T);
    l.align = alignof(T);
    l.decode = [](std::string_view bytes, void* at, std::string& why) {
      if constexpr (std::is_trivially_copyable_v<T> &&
                    std::is_trivially_default_constructible_v<T>) {
        // Decoded straight into the row: no temporary.
        return decode_into(bytes, *::new (at) T, why);
      } else {
        T value{};
        if (!decode_into(bytes, value, why)) return false;
        try {
          ::new (at) T(std::move(value));
        } catch (...) {
          why = "moving the decoded value threw";
          return false;
        }
        return true;
      }
    };
    if constexpr (!std::is_trivially_destructible_v<T>) {
      l.destroy = [](void* at) noexcept { static_cast<T*>(at)->~T(); };
    }
  }
  return l;
}

}  // namespace detail

// The encoded bytes of `value` (what L2 holds after the 14-byte version).
template <class T>
std::string encode(const T& value) {
  detail::check_codec<T>();
  std::string out;
  if constexpr (!std::is_same_v<T, std::string>) out = schema_header<T>();
  Codec<T>::encode(value, out);
  return out;
}

// A loader of T values: fn(const Key&) answers a T, a std::variant<T, LoadError>, a
// std::optional<T> (nullopt: Absent, the key has no value), a LoadError (its reason reaches the
// caller) or Absent; the engine encodes the T for L2. Runs where every loader runs (table_spec.h).
template <class T, class Fn>
Loader loader_of(Fn fn) {
  return [fn = std::move(fn)](const Key& key) -> LoadResult {
    auto answer = fn(key);
    if constexpr (std::is_same_v<decltype(answer), LoadError> ||
                  std::is_same_v<decltype(answer), Absent>) {
      return answer;
    } else if constexpr (std::is_same_v<decltype(answer), std::optional<T>>) {
      if (!answer) return Absent{};
      return Loaded{encode(*answer), std::nullopt};
    } else if constexpr (std::is_same_v<decltype(answer), std::variant<T, LoadError>>) {
      if (auto* error = std::get_if<LoadError>(&answer)) return *error;
      return Loaded{encode(std::get<T>(answer)), std::nullopt};
    } else {
      return Loaded{encode(static_cast<const T&>(answer)), std::nullopt};
    }
  };
}

// The value of a row of T as a reader sees it, from the row's value bytes (the object's, for a
// typed table).
template <class T>
ValueView<T> view_of(std::string_view value) noexcept {
  if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else {
    return *std::launder(reinterpret_cast<const T*>(value.data()));
  }
}

// An on_change listener of T values (TableSpec::on_change): fn(key, version, ValueView<T>) on the
// table's writer thread; it must not block (ChangeListener).
template <class T, class Fn>
ChangeListener on_change_of(Fn fn) {
  return [fn = std::move(fn)](std::string_view key, std::string_view version,
                              std::string_view value) { fn(key, version, view_of<T>(value)); };
}

// Declares `spec` as a table of T values: set before the Engine is built, then resolved with
// Engine::table<T>(name).
template <class T>
TableSpec typed(TableSpec spec) {
  detail::check_codec<T>();
  spec.value = ValueType{&typeid(T), detail::layout_of<T>(), {}};
  if constexpr (!std::is_same_v<T, std::string>) spec.value.schema = schema_header<T>();
  return spec;
}

}  // namespace echo::engine
