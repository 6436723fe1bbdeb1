// SPDX-License-Identifier: MIT
// The open-loop and flood rows' sender: PUBLISH commands encoded ahead of time into one byte
// stream, written raw on a plain connection's socket without waiting for replies (pipelined), and
// the replies read back without blocking and checked (":1": one subscriber heard it). Keeps the
// sender's own cost per message to a memcpy-free write, the same for our lane and its floor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <echo/harness/hiredis.h>

#include "drill/drill.h"

namespace echo::cli::bench {

// PUBLISH commands laid end to end; message i is bytes [offset(i), offset(i + 1)).
class PublishStream {
 public:
  void add(std::string_view channel, std::string_view payload);
  std::size_t size() const noexcept { return offsets_.size() - 1; }
  std::size_t offset(std::size_t i) const noexcept { return offsets_[i]; }
  const char* data() const noexcept { return bytes_.data(); }

 private:
  std::string bytes_;
  std::vector<std::size_t> offsets_{0};
};

// A plain connection (harness::connect: its AUTH, its 5 s timeouts) used as a raw socket from
// then on. Caller's thread only.
class RawPublisher {
 public:
  explicit RawPublisher(const DrillTarget& target);
  // Writes bytes [from, to) of `stream`'s messages, blocking until the kernel took them; reads
  // whatever replies have come meanwhile. Throws std::runtime_error on a socket error.
  void send(const PublishStream& stream, std::size_t from, std::size_t to);
  // Reads replies until `count` in all have come (up to 5 s); false if they did not.
  bool await_replies(std::uint64_t count);
  std::uint64_t replies() const noexcept { return replies_; }
  // Replies other than ":1" (nobody, or more than one subscriber, heard that message).
  std::uint64_t unheard() const noexcept { return unheard_; }

 private:
  void read_replies();  // whatever has come, without blocking
  harness::Context c_;
  int fd_;
  std::string line_;
  std::uint64_t replies_ = 0, unheard_ = 0;
};

}  // namespace echo::cli::bench
