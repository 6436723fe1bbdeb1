// SPDX-License-Identifier: MIT
// A minimal value-or-error result (C++20 has no std::expected). Used where a parser refuses bad
// input with a typed error on a hot path (no allocation), and as the engine's Result.
//
// Reaching for the side that is not there (value(), *, -> on an error; error() on a value) throws
// BadExpectedAccess in every build, where it used to be an assert that release builds dropped (a
// value() on an error then read an empty optional). The check is one branch; the throw and the
// building of its message sit in cold, out-of-line functions, so the hot path pays only the branch
// (perf/check_ops.sh: see the commit that made it so).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace echo::table {

// value() on an error, or error() on a value: a broken precondition of the caller's, so a
// logic_error. what() names the access and, when the error can say what it is (a message()
// member, as std::error_code and engine::Error have, or a to_string(E) found by lookup, as the
// table's error enums have), what the error was.
class BadExpectedAccess : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

[[noreturn, gnu::cold, gnu::noinline]] void throw_bad_expected_access(const char* what,
                                                                      std::string_view detail);

template <class E>
[[noreturn, gnu::cold, gnu::noinline]] void throw_value_on_error(const E& e) {
  if constexpr (requires { std::string(e.message()); }) {
    throw_bad_expected_access("Expected::value() on an error", std::string(e.message()));
  } else if constexpr (requires { std::string(to_string(e)); }) {
    throw_bad_expected_access("Expected::value() on an error", std::string(to_string(e)));
  } else {
    throw_bad_expected_access("Expected::value() on an error", {});
  }
}

}  // namespace detail

template <class E>
struct Unexpected {
  E error;
};
template <class E>
Unexpected(E) -> Unexpected<E>;

template <class T, class E>
class [[nodiscard]] Expected {
 public:
  Expected(T value) noexcept(std::is_nothrow_move_constructible_v<T>)  // NOLINT: implicit
      : value_(std::move(value)) {}
  Expected(Unexpected<E> u) noexcept(std::is_nothrow_move_constructible_v<E>)  // NOLINT: implicit
      : error_(std::move(u.error)) {}
  // An error of another type that E is made from (engine::Error from a std::error_code or an
  // Errc), so `return Unexpected{make_error_code(Errc::kKind)};` serves a Result<T>.
  template <class G>
  requires(!std::is_same_v<G, E> && std::is_constructible_v<E, G>)
      Expected(Unexpected<G> u)  // NOLINT: implicit
  noexcept(std::is_nothrow_constructible_v<E, G>) : error_(std::move(u.error)) {}

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }

  // Throw BadExpectedAccess on an error (what() carries the error's message where it has one).
  const T& value() const& {
    if (!has_value()) [[unlikely]]
      detail::throw_value_on_error(error_);
    return *value_;
  }
  T& value() & {
    if (!has_value()) [[unlikely]]
      detail::throw_value_on_error(error_);
    return *value_;
  }
  T&& value() && {
    if (!has_value()) [[unlikely]]
      detail::throw_value_on_error(error_);
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // Throws BadExpectedAccess on a value: the same rule as value(), so a misuse is caught in every
  // build rather than answering a default-made E (for std::error_code, "success").
  const E& error() const& {
    if (has_value()) [[unlikely]] {
      detail::throw_bad_expected_access("Expected::error() on a value", {});
    }
    return error_;
  }
  E error() && {
    if (has_value()) [[unlikely]] {
      detail::throw_bad_expected_access("Expected::error() on a value", {});
    }
    return std::move(error_);
  }

 private:
  // optional + a plain error rather than std::variant: no index visitation on the hot path
  // (BM_BrandedId_Validate in bench/vocab_bench.cc).
  std::optional<T> value_;
  E error_{};
};

}  // namespace echo::table
