// SPDX-License-Identifier: MIT
// The command encoder: each command is a RESP array of bulk strings (integers as decimal text,
// docs/wire.md, "The connector") appended to one reusable buffer, so a pipeline is several appends
// and a send of bytes(). Kept over hiredis's redisFormatCommandArgv, which formats with sprintf
// into a fresh malloc per command: 6-8x its commands/s on a 64-command pipeline of PUBLISH, GET,
// SET and EVALSHA (bench/resp3_bench.cc, BM_RespEncoder_EncodePipeline against
// BM_Hiredis_FormatCommandArgvPipeline).
//
// CONTRACT: no threads inside; one encoder per connection, used by one thread at a time.
// Appending allocates only when the buffer must grow; clear() and consume() keep the capacity,
// so steady state allocates nothing. bytes() is valid until the next non-const call.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

namespace echo::io {

// One argument of a command: a byte string, or an integer written as decimal text. Holds a
// view of the caller's bytes (no copy): valid for the duration of the append that takes it.
class RespArg {
 public:
  RespArg(std::string_view text) noexcept : data_(text.data()), size_(text.size()) {}  // NOLINT
  RespArg(const char* text) noexcept : RespArg(std::string_view(text)) {}              // NOLINT
  template <class T>
  requires std::convertible_to<const T&, std::string_view> &&
      (!std::integral<T>)RespArg(const T& text) noexcept
      : RespArg(std::string_view(text)) {}  // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) RespArg(T number)
  noexcept  // NOLINT: implicit, so command("EXPIRE", key, 30) reads naturally
      : data_(digits_) {
    // In the body: digits_ is declared (so initialized) after data_ and size_.
    size_ = static_cast<std::size_t>(std::to_chars(digits_, digits_ + sizeof digits_, number).ptr -
                                     digits_);
  }

  RespArg(const RespArg& other) noexcept { *this = other; }
  RespArg& operator=(const RespArg& other) noexcept;

  std::string_view view() const noexcept { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
  char digits_[24] = {};  // enough for any 64-bit integer with its sign
};

class RespEncoder {
 public:
  static constexpr std::size_t kDefaultCapacity = 4096;

  explicit RespEncoder(std::size_t initial_capacity = kDefaultCapacity);
  RespEncoder(RespEncoder&&) noexcept;
  RespEncoder& operator=(RespEncoder&&) noexcept;
  RespEncoder(const RespEncoder&) = delete;
  RespEncoder& operator=(const RespEncoder&) = delete;
  ~RespEncoder();

  // Appends one command: command("SET", key, value), command("EXPIRE", key, 30).
  template <class... Args>
  void command(const Args&... args) {
    static_assert(sizeof...(Args) > 0, "a command has at least its name");
    const RespArg argv[] = {RespArg(args)...};
    command_argv(std::span<const RespArg>(argv));
  }
  // Appends one command from a runtime-sized argument list (EVALSHA with n keys).
  void command_argv(std::span<const RespArg> argv);
  void command_argv(std::span<const std::string_view> argv);

  // The encoded bytes not yet consumed: one or more commands, ready to send.
  std::span<const char> bytes() const noexcept { return {data_.get() + head_, size_ - head_}; }
  std::string_view view() const noexcept { return {data_.get() + head_, size_ - head_}; }
  std::size_t size() const noexcept { return size_ - head_; }
  bool empty() const noexcept { return size_ == head_; }
  std::size_t capacity() const noexcept { return cap_; }

  // Drops the first n bytes of bytes() (a partial send). n <= size(). Never allocates.
  void consume(std::size_t n) noexcept;
  // Drops everything, keeps the capacity.
  void clear() noexcept { head_ = size_ = 0; }

 private:
  char* reserve(
      std::size_t extra);  // room for `extra` more bytes at size_; returns size_'s address

  std::unique_ptr<char[]> data_;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;  // first unconsumed byte
  std::size_t size_ = 0;  // one past the last encoded byte
};

}  // namespace echo::io
