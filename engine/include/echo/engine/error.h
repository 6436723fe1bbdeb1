// SPDX-License-Identifier: MIT
// The engine's one error for data verbs: a code (an Errc, an io::IoErrc, or the kernel's errno)
// and, where the engine knows more than the code says, a detail (a loader's reason, the bound a
// loader missed). Result<T> carries it: every data verb answers one and none throws, the
// journal's included (journal.h); only construction throws (ConfigError, table_spec.h, and a
// Journal whose file cannot be opened, std::runtime_error).
#pragma once

#include <iosfwd>
#include <string>
#include <system_error>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <echo/engine/errc.h>
#include <echo/table/expected.h>

namespace echo::engine {

struct Error {
  std::error_code code;
  std::string detail;  // empty: the code says it all

  Error() = default;
  // Implicit from a code or a code enum (Errc, io::IoErrc): `return Unexpected{ec};` and
  // `return Unexpected{make_error_code(Errc::kKind)};` serve a Result<T> unchanged.
  Error(std::error_code c) noexcept : code(c) {}  // NOLINT: implicit
  template <class E>
  requires std::is_error_code_enum_v<E> Error(E e)
  noexcept : code(make_error_code(e)) {}  // NOLINT: implicit
  Error(std::error_code c, std::string d) noexcept : code(c), detail(std::move(d)) {}
  template <class E>
  requires std::is_error_code_enum_v<E> Error(E e, std::string d)
  noexcept : code(make_error_code(e)), detail(std::move(d)) {}

  // The detail when there is one ("loader failed: no such quote"), else the code's message
  // ("loader_failed", "disconnected", "Connection refused").
  std::string message() const { return detail.empty() ? code.message() : detail; }

  // True when it holds an error (like std::error_code's).
  explicit operator bool() const noexcept { return static_cast<bool>(code); }
  // Implicit, so code written against the error_code this replaced keeps compiling where it
  // hands the error on (`std::error_code ec = r.error();`, a function taking an error_code):
  // those places wanted the code, and the detail is an addition for the ones that print it.
  // An implicit conversion to a type with its own comparisons risks ambiguity: the exact-match
  // comparisons below win every overload contest against std's error_code ones.
  operator std::error_code() const noexcept { return code; }  // NOLINT: implicit

  // Comparisons look at the code only: the detail is for people, the code is for programs.
  friend bool operator==(const Error& a, const Error& b) noexcept { return a.code == b.code; }
  friend bool operator==(const Error& a, const std::error_code& c) noexcept { return a.code == c; }
  template <class E>
  requires std::is_error_code_enum_v<E>
  friend bool operator==(const Error& a, E e) noexcept { return a.code == make_error_code(e); }
};

// "echostore:loader_failed", or with a detail "echostore:loader_failed (loader failed: gone)";
// gtest prints an Error with it.
// A type's name as its source spells it ("nc45::Quote", not typeid's "N4nc455QuoteE"), for the
// messages that name a value type. Allocates.
std::string type_name(const std::type_info& type);

std::ostream& operator<<(std::ostream& os, const Error& e);

// Every data verb's answer. value() on an error throws table::BadExpectedAccess whose what()
// carries message(); check has_value() (or operator bool) first.
template <class T>
using Result = table::Expected<T, Error>;

}  // namespace echo::engine
