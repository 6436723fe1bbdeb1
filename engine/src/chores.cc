// SPDX-License-Identifier: MIT
// The chores thread (chores.h).
#include "chores.h"

#include <algorithm>

namespace echo::engine {

Chores::~Chores() { stop(); }

std::uint64_t Chores::add(std::chrono::milliseconds first, Chore chore) {
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    entries_.push_back({id, Clock::now() + first, std::move(chore)});
    ++changes_;
    if (!thread_.joinable()) {
      thread_ = std::jthread([this](const std::stop_token& stop) { loop(stop); });
    }
  }
  cv_.notify_all();
  return id;
}

void Chores::remove(std::uint64_t id) {
  std::unique_lock lock(mu_);
  // The chore under way runs outside the lock: wait for it to come back first.
  cv_.wait(lock, [&] { return running_ != id; });
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
  ++changes_;
}

void Chores::stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  cv_.notify_all();
  thread_.join();
}

std::uint64_t Chores::runs() const {
  std::lock_guard lock(mu_);
  return runs_;
}

void Chores::loop(const std::stop_token& stop) {
  housekeeping_.enter("echo-house");
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    auto next = std::min_element(entries_.begin(), entries_.end(),
                                 [](const Entry& a, const Entry& b) { return a.due < b.due; });
    if (next == entries_.end()) {
      cv_.wait(lock, stop, [this] { return !entries_.empty(); });
      continue;
    }
    if (Clock::now() < next->due) {
      // Wakes for the due time, a new chore (which may be due sooner) or stop.
      const Clock::time_point due = next->due;
      const std::uint64_t seen = changes_;
      cv_.wait_until(lock, stop, due, [&] { return changes_ != seen; });
      continue;
    }
    const std::uint64_t id = next->id;
    Chore chore = next->chore;  // a copy: remove() may erase the entry while it runs
    running_ = id;
    lock.unlock();
    const std::chrono::milliseconds after = chore();
    lock.lock();
    running_ = 0;
    ++runs_;
    for (auto& e : entries_) {
      if (e.id == id) e.due = Clock::now() + after;
    }
    cv_.notify_all();  // a remove() waiting for this chore
  }
}

}  // namespace echo::engine
