// SPDX-License-Identifier: MIT
// The io backend (and io thread count) the integration tests run their loops and engine nodes
// on: ECHO_TEST_IO_BACKEND
// (auto, uring or epoll; unset or empty = auto, the library's default). tests/CMakeLists.txt
// registers the lane tests a second time with it set to epoll, so both backends carry the lanes.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <echo/io/uring_loop.h>

namespace echo::test {

// The backend ECHO_TEST_IO_BACKEND names; a value that names none aborts the test binary (a typo
// must not quietly run the default twice).
inline io::Backend test_io_backend() {
  const char* v = std::getenv("ECHO_TEST_IO_BACKEND");
  const std::string_view name = v == nullptr ? "" : v;
  if (name.empty() || name == "auto") return io::Backend::kAuto;
  if (name == "uring") return io::Backend::kUring;
  if (name == "epoll") return io::Backend::kEpoll;
  std::fprintf(stderr, "ECHO_TEST_IO_BACKEND must be auto, uring or epoll, got '%s'\n", v);
  std::abort();
}

// The io threads ECHO_TEST_IO_THREADS asks of the single-server engine nodes (unset or empty =
// 1, the default; else 1..16): tests/CMakeLists.txt registers the broadcast lane test a third
// time with 2. A value out of range aborts the test binary.
inline int test_io_threads() {
  const char* v = std::getenv("ECHO_TEST_IO_THREADS");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 16) {
    std::fprintf(stderr, "ECHO_TEST_IO_THREADS must be 1..16, got '%s'\n", v);
    std::abort();
  }
  return static_cast<int>(n);
}

// `o` on the backend the run asks for.
inline io::LoopOptions test_loop_options(io::LoopOptions o = {}) {
  o.backend = test_io_backend();
  return o;
}

}  // namespace echo::test
