// SPDX-License-Identifier: MIT
// The command encoder: sizes a whole command first, then writes it with one capacity check, so
// the per-byte work is memcpy and the per-argument work is one short integer conversion.
#include <echo/io/resp_encoder.h>

#include <cassert>
#include <cstring>
#include <utility>

namespace echo::io {
namespace {

// Decimal digits of n: the length prefixes are sized before anything is written.
std::size_t decimal_digits(std::size_t n) noexcept {
  std::size_t digits = 1;
  while (n >= 10000) {
    n /= 10000;
    digits += 4;
  }
  if (n >= 10) ++digits;
  if (n >= 100) ++digits;
  if (n >= 1000) ++digits;
  return digits;
}

// Writes "<prefix><n>\r\n" and returns the next write position. `digits` is decimal_digits(n).
char* put_header(char* out, char prefix, std::size_t n, std::size_t digits) noexcept {
  *out++ = prefix;
  char* last = out + digits;
  char* p = last;
  do {
    *--p = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  last[0] = '\r';
  last[1] = '\n';
  return last + 2;
}

// One argument's encoded size: "$<len>\r\n<bytes>\r\n".
std::size_t bulk_size(std::size_t len) noexcept { return 1 + decimal_digits(len) + 2 + len + 2; }

template <class Arg>
std::string_view text_of(const Arg& arg) noexcept {
  if constexpr (std::is_same_v<Arg, RespArg>) {
    return arg.view();
  } else {
    return arg;
  }
}

}  // namespace

RespArg& RespArg::operator=(const RespArg& other) noexcept {
  if (this == &other) return *this;
  std::memcpy(digits_, other.digits_, sizeof digits_);
  size_ = other.size_;
  data_ = other.data_ == other.digits_ ? digits_ : other.data_;
  return *this;
}

RespEncoder::RespEncoder(std::size_t initial_capacity)
    : data_(new char[initial_capacity > 0 ? initial_capacity : 1]),
      cap_(initial_capacity > 0 ? initial_capacity : 1) {}

RespEncoder::RespEncoder(RespEncoder&& other) noexcept
    : data_(std::move(other.data_)),
      cap_(std::exchange(other.cap_, 0)),
      head_(std::exchange(other.head_, 0)),
      size_(std::exchange(other.size_, 0)) {}

RespEncoder& RespEncoder::operator=(RespEncoder&& other) noexcept {
  data_ = std::move(other.data_);
  cap_ = std::exchange(other.cap_, 0);
  head_ = std::exchange(other.head_, 0);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

RespEncoder::~RespEncoder() = default;

void RespEncoder::consume(std::size_t n) noexcept {
  assert(n <= size() && "RespEncoder::consume past the encoded bytes");
  head_ += n;
  if (head_ == size_) head_ = size_ = 0;
}

char* RespEncoder::reserve(std::size_t extra) {
  if (cap_ - size_ >= extra) return data_.get() + size_;
  const std::size_t live = size_ - head_;
  if (head_ > 0 && cap_ - live >= extra && live <= cap_ / 2) {
    // Mostly consumed: slide the unsent tail down instead of growing.
    if (live > 0) std::memmove(data_.get(), data_.get() + head_, live);
  } else {
    std::size_t new_cap = cap_ * 2;
    if (new_cap < live + extra) new_cap = live + extra;
    std::unique_ptr<char[]> grown(new char[new_cap]);
    if (live > 0) std::memcpy(grown.get(), data_.get() + head_, live);
    data_ = std::move(grown);
    cap_ = new_cap;
  }
  head_ = 0;
  size_ = live;
  return data_.get() + size_;
}

namespace {
template <class Arg>
char* encode(char* out, std::span<const Arg> argv) noexcept {
  out = put_header(out, '*', argv.size(), decimal_digits(argv.size()));
  for (const Arg& arg : argv) {
    const std::string_view text = text_of(arg);
    out = put_header(out, '$', text.size(), decimal_digits(text.size()));
    if (!text.empty()) std::memcpy(out, text.data(), text.size());
    out += text.size();
    out[0] = '\r';
    out[1] = '\n';
    out += 2;
  }
  return out;
}

template <class Arg>
std::size_t encoded_size(std::span<const Arg> argv) noexcept {
  std::size_t total = 1 + decimal_digits(argv.size()) + 2;
  for (const Arg& arg : argv) total += bulk_size(text_of(arg).size());
  return total;
}
}  // namespace

void RespEncoder::command_argv(std::span<const RespArg> argv) {
  const std::size_t total = encoded_size(argv);
  char* out = reserve(total);
  char* end = encode(out, argv);
  assert(static_cast<std::size_t>(end - out) == total && "RespEncoder: size and write disagree");
  size_ += static_cast<std::size_t>(end - out);
}

void RespEncoder::command_argv(std::span<const std::string_view> argv) {
  const std::size_t total = encoded_size(argv);
  char* out = reserve(total);
  char* end = encode(out, argv);
  assert(static_cast<std::size_t>(end - out) == total && "RespEncoder: size and write disagree");
  size_ += static_cast<std::size_t>(end - out);
}

}  // namespace echo::io
