// SPDX-License-Identifier: MIT
// The raw pipelined PUBLISH sender of the open-loop and flood rows (wire.h).
#include "bench/wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace echo::cli::bench {

void PublishStream::add(std::string_view channel, std::string_view payload) {
  bytes_ += "*3\r\n$7\r\nPUBLISH\r\n$" + std::to_string(channel.size()) + "\r\n";
  bytes_.append(channel);
  bytes_ += "\r\n$" + std::to_string(payload.size()) + "\r\n";
  bytes_.append(payload);
  bytes_ += "\r\n";
  offsets_.push_back(bytes_.size());
}

RawPublisher::RawPublisher(const DrillTarget& target)
    : c_(harness::connect(target.host, target.port)), fd_(c_->fd) {}

void RawPublisher::send(const PublishStream& stream, std::size_t from, std::size_t to) {
  const char* p = stream.data() + stream.offset(from);
  std::size_t left = stream.offset(to) - stream.offset(from);
  while (left > 0) {
    const ssize_t n = ::send(fd_, p, left, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      read_replies();  // the server may be waiting for us to read
      continue;
    }
    if (n <= 0) {
      throw std::runtime_error(std::string("the raw PUBLISH sender's socket failed: ") +
                               std::strerror(errno));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  read_replies();
}

void RawPublisher::read_replies() {
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        throw std::runtime_error("the raw PUBLISH sender's connection closed or failed");
      }
      return;  // nothing more now
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        line_ += buf[i];
        continue;
      }
      ++replies_;
      if (line_ != ":1\r") ++unheard_;
      line_.clear();
    }
  }
}

bool RawPublisher::await_replies(std::uint64_t count) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (replies_ < count && std::chrono::steady_clock::now() < end) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) read_replies();
  }
  return replies_ >= count;
}

}  // namespace echo::cli::bench
