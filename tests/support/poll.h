// SPDX-License-Identifier: MIT
// Waiting with a deadline, for tests that wait on another thread, process or server. The condition
// is checked once more after the deadline has passed, so a wait never fails on a slow machine
// where a last look would have passed it.
#pragma once

#include <chrono>
#include <thread>

namespace echo::test {

// Checks `pred` every `interval`: true as soon as it holds, false when a check begun at or after
// `timeout` fails too.
template <class Pred>
bool poll_until(Pred&& pred, std::chrono::steady_clock::duration timeout,
                std::chrono::steady_clock::duration interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const bool last = std::chrono::steady_clock::now() >= deadline;
    if (pred()) return true;
    if (last) return false;
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace echo::test
