// SPDX-License-Identifier: MIT
// An engine's periodic chores on one thread (`echo-house`): the node lease's renewal and the
// stats publisher share it, so that an engine runs io + writers + this one thread (plus a thread
// only where a feature needs its own: the relay's park, the job sender, the loaders while a miss
// runs). A chore is a function that does its work and says when it wants to run next; the thread
// sleeps until the earliest of those moments, and starts with the first chore added (an engine
// with no lease and no stats publishing has no such thread).
//
// Chores run one at a time in due order: a slow one (a blocking call that waits out the command
// timeout) delays the others by that long, which every chore here tolerates (the lease renews a
// third into its term; a stats SET is best effort).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "housekeeping.h"

namespace echo::engine {

class Chores {
 public:
  using Clock = std::chrono::steady_clock;
  // Does its work (on the chores thread) and answers the delay to its next run.
  using Chore = std::function<std::chrono::milliseconds()>;

  // `housekeeping`: where the thread runs; must outlive this object.
  explicit Chores(const Housekeeping& housekeeping) noexcept : housekeeping_(housekeeping) {}
  ~Chores();  // stop()
  Chores(const Chores&) = delete;
  Chores& operator=(const Chores&) = delete;

  // Adds a chore whose first run is `first` from now (0: at once); starts the thread with the
  // first one. Any thread but the chores thread itself. Returns its id, for remove().
  std::uint64_t add(std::chrono::milliseconds first, Chore chore);
  // Removes a chore: when this returns, it is not running and never runs again. Any thread but
  // the chores thread (a chore cannot remove itself). An unknown id is a no-op.
  void remove(std::uint64_t id);
  // Stops the thread (after the chore under way). Idempotent.
  void stop();

  // Runs so far, over every chore (tests and stats).
  std::uint64_t runs() const;

 private:
  struct Entry {
    std::uint64_t id;
    Clock::time_point due;
    Chore chore;
  };
  void loop(const std::stop_token& stop);

  const Housekeeping& housekeeping_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Entry> entries_;  // few (two today): a scan beats a heap
  std::uint64_t next_id_ = 1;
  std::uint64_t running_ = 0;  // the id of the chore under way, 0 for none
  std::uint64_t runs_ = 0;
  std::uint64_t changes_ = 0;  // bumped by add() and remove(): the sleeper looks again
  std::jthread thread_;        // last: started by the first add()
};

}  // namespace echo::engine
