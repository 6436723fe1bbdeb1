// SPDX-License-Identifier: MIT
// A minimal value-or-error result (C++20 has no std::expected). Used where a parser refuses bad
// input with a typed error on a hot path: no exceptions, no allocation.
#pragma once

#include <cassert>
#include <utility>
#include <optional>

namespace echo::table {

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
  Expected(Unexpected<E> u) noexcept : error_(u.error) {}  // NOLINT: implicit

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }

  const T& value() const& noexcept {
    assert(has_value() && "Expected::value() on an error");
    return *value_;
  }
  T&& value() && noexcept {
    assert(has_value() && "Expected::value() on an error");
    return std::move(*value_);
  }
  const T& operator*() const& noexcept { return value(); }
  const T* operator->() const noexcept { return &value(); }

  E error() const noexcept {
    assert(!has_value() && "Expected::error() on a value");
    return error_;
  }

 private:
  // optional + a plain error rather than std::variant: no index visitation on the hot path
  // (BM_BrandedId_Validate in bench/vocab_bench.cc).
  std::optional<T> value_;
  E error_{};
};

}  // namespace echo::table
