// SPDX-License-Identifier: MIT
// A plain HTTP/1.1 client of the metrics endpoint on a loopback port, for the tests that scrape
// it (metrics_endpoint_test.cc, metric_refs_test.cc): a raw connection, everything the peer
// sends until it closes, and one request's status, head and body.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <echo/io/unique_fd.h>

namespace echo::test {

inline io::UniqueFd dial(int port) {
  io::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << port;
  timeval tv{5, 0};  // a hung endpoint fails the test instead of hanging it
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Everything the peer sends until it closes (or 5 s of silence).
inline std::string read_all(int fd) {
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;  // a signal the test process took (the timeout below is SO_RCVTIMEO's EAGAIN)
    } else {
      return out;
    }
  }
}

struct Answer {
  int status = 0;
  std::string head, body;
};

// Sends `request` as is on a fresh connection and reads the whole answer.
inline Answer http_exchange(int port, const std::string& request) {
  io::UniqueFd fd = dial(port);
  EXPECT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  const std::string raw = read_all(fd.get());
  Answer a;
  const std::size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) {
    ADD_FAILURE() << "no HTTP answer on port " << port << " (errno " << errno << "): '"
                  << raw.substr(0, 200) << "'";
    return a;
  }
  a.status = std::atoi(raw.c_str() + 9);
  a.head = raw.substr(0, end);
  a.body = raw.substr(end + 4);
  return a;
}

inline Answer get(int port, const std::string& target = "/metrics") {
  return http_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

}  // namespace echo::test
