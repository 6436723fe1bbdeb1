// SPDX-License-Identifier: MIT
// Running a step on an event loop's own thread from a test, for the verbs that must be called
// there (a Connection's calls): post it, wait for it, hand back what it returned.
#pragma once

#include <future>
#include <utility>

namespace echo::test {

// Runs `fn` on `loop`'s thread (any loop with post(closure)) and waits for it; returns its result.
template <class Loop, class Fn>
auto on_loop(Loop& loop, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto f = task.get_future();
  loop.post([&task] { task(); });
  return f.get();
}

}  // namespace echo::test
