// SPDX-License-Identifier: MIT
// The one syscall the ring makes: a Linux futex on a 32-bit atomic word, with an absolute
// CLOCK_MONOTONIC deadline (std::atomic::wait has no timeout, and the writer needs one).
#include <echo/ring/doorbell.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>

namespace echo::ring::detail {

namespace {
long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value,
           const timespec* timeout) noexcept {
  // The kernel reads the atomic's object representation, which is the 32-bit word itself
  // (static_assert in doorbell.h).
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr,
                   FUTEX_BITSET_MATCH_ANY);
}
}  // namespace

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::steady_clock::time_point deadline) noexcept {
  static_assert(std::chrono::steady_clock::is_steady, "deadline is on CLOCK_MONOTONIC");
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    futex(word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, nullptr);
    return;
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch());
  if (ns.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  // EAGAIN (word changed), EINTR (signal) and ETIMEDOUT all return to the caller's loop,
  // which re-checks its condition; nothing to report.
  futex(word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, &ts);
}

void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept {
  futex(word, FUTEX_WAKE_PRIVATE, static_cast<std::uint32_t>(count), nullptr);
}

}  // namespace echo::ring::detail
