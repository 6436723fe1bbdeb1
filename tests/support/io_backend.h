// SPDX-License-Identifier: MIT
// The io backend the integration tests run their loops and engine nodes on: ECHO_TEST_IO_BACKEND
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

// `o` on the backend the run asks for.
inline io::LoopOptions test_loop_options(io::LoopOptions o = {}) {
  o.backend = test_io_backend();
  return o;
}

}  // namespace echo::test
