// SPDX-License-Identifier: MIT
// Text keys built from parts on the stack: no allocation, no formatting by hand.
//
//   TextKey k("AAPL", 20240105);           // "AAPL:20240105"
//   quotes.read(TextKey(account, symbol), fn);
//   TextKey order(42u);                    // "42"
//
// Parts are integers (decimal), strings (std::string, std::string_view, a C string) and single
// chars, joined by ':' (a text key may hold colons: docs/wire.md, "Text keys"). A key longer than
// kMaxTextKey bytes is empty, which every verb refuses as bad_key; so is a part with a byte the
// key gate refuses (a space, a brace, a control byte), by the verb's own check.
#pragma once

#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace echo::engine {

inline constexpr std::size_t kMaxTextKey = 200;  // docs/wire.md, "Text keys"

class TextKey {
 public:
  template <class... Parts>
  explicit TextKey(const Parts&... parts) noexcept {
    (add(parts), ...);
  }

  std::string_view view() const noexcept {
    return overflow_ ? std::string_view() : std::string_view(buf_.data(), size_);
  }
  operator std::string_view() const noexcept { return view(); }  // NOLINT: a key is a view
  std::string str() const { return std::string(view()); }

 private:
  void bytes(std::string_view s) noexcept {
    if (overflow_ || s.size() > kMaxTextKey - size_) {
      overflow_ = true;
      return;
    }
    std::memcpy(buf_.data() + size_, s.data(), s.size());
    size_ += s.size();
  }
  void separate() noexcept {
    if (parts_++ != 0) bytes(":");
  }
  template <class P>
  void add(const P& part) noexcept {
    separate();
    if constexpr (std::is_same_v<P, char>) {
      bytes(std::string_view(&part, 1));
    } else if constexpr (std::integral<P> && !std::is_same_v<P, bool>) {
      char digits[24];
      const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, part);
      bytes(std::string_view(digits, static_cast<std::size_t>(end - digits)));
    } else {
      static_assert(std::is_convertible_v<const P&, std::string_view>,
                    "a TextKey part is an integer, a char or a string");
      bytes(std::string_view(part));
    }
  }

  std::array<char, kMaxTextKey> buf_;
  std::size_t size_ = 0;
  unsigned parts_ = 0;
  bool overflow_ = false;
};

}  // namespace echo::engine
