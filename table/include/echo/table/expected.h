// SPDX-License-Identifier: MIT
// A minimal value-or-error result (C++20 has no std::expected). Used where a parser refuses bad
// input with a typed error on a hot path: no exceptions, no allocation.
#pragma once

#include <cassert>
#include <utility>
#include <variant>

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
      : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Unexpected<E> u) noexcept : v_(std::in_place_index<1>, u.error) {}  // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  const T& value() const& noexcept {
    assert(has_value() && "Expected::value() on an error");
    return *std::get_if<0>(&v_);
  }
  T&& value() && noexcept {
    assert(has_value() && "Expected::value() on an error");
    return std::move(*std::get_if<0>(&v_));
  }
  const T& operator*() const& noexcept { return value(); }
  const T* operator->() const noexcept { return &value(); }

  E error() const noexcept {
    assert(!has_value() && "Expected::error() on a value");
    return *std::get_if<1>(&v_);
  }

 private:
  std::variant<T, E> v_;
};

}  // namespace echo::table
