// SPDX-License-Identifier: MIT
// A table's value type and its bytes in L2. The L2 frame stays version(14) ‖ encoded bytes
// (docs/wire.md, "L2 values"); a typed table's writer decodes those bytes once, when a row enters
// L1 (a fill or a put), into the row itself, and every read uses the object in place (table.h).
//
// Built in:
//   std::string            the bytes as they are (the untyped tables' values);
//   any trivially copyable T (a struct of numbers and fixed char arrays): its object bytes,
//                          decoded only when exactly sizeof(T) bytes arrive.
// Your own type: specialise echo::engine::Codec<T> with
//   static void encode(const T& value, std::string& out);               // appends to out
//   static bool decode(std::string_view bytes, T& out, std::string& why); // false + why: refused
// (T default-constructible and move-constructible). Both run on any thread (encode on the
// caller's, decode on the table's writer or the caller's); neither may block; a throw from
// decode is taken as a refusal. A refusal reaches the reader as Errc::kBadValue with `why`, and
// is counted (L1Stats::decode_errors).
#pragma once

#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <variant>

#include <echo/engine/table_spec.h>

namespace echo::engine {

template <class T, class Enable = void>
struct Codec;  // undefined: a type with neither a built-in codec nor a specialisation

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
    out.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  static bool decode(std::string_view bytes, T& out, std::string& why) {
    if (bytes.size() != sizeof(T)) {
      why = "expected " + std::to_string(sizeof(T)) + " bytes of " + typeid(T).name() + ", got " +
            std::to_string(bytes.size());
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

namespace detail {

template <class T>
bool decode_into(std::string_view bytes, T& out, std::string& why) noexcept {
  try {
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
  std::string out;
  Codec<T>::encode(value, out);
  return out;
}

// A loader of T values: fn(const Key&) answers a T, or a LoadError (its reason reaches the
// caller); the engine encodes the T for L2. Runs where every loader runs (table_spec.h).
template <class T, class Fn>
Loader loader_of(Fn fn) {
  return [fn = std::move(fn)](const Key& key) -> LoadResult {
    auto answer = fn(key);
    if constexpr (std::is_same_v<decltype(answer), LoadError>) {
      return answer;
    } else if constexpr (std::is_same_v<decltype(answer), std::variant<T, LoadError>>) {
      if (auto* error = std::get_if<LoadError>(&answer)) return *error;
      return Loaded{encode(std::get<T>(answer)), std::nullopt};
    } else {
      return Loaded{encode(static_cast<const T&>(answer)), std::nullopt};
    }
  };
}

// Declares `spec` as a table of T values: set before the Engine is built, then resolved with
// Engine::table<T>(name).
template <class T>
TableSpec typed(TableSpec spec) {
  spec.value = ValueType{&typeid(T), detail::layout_of<T>()};
  return spec;
}

}  // namespace echo::engine
