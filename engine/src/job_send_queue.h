// SPDX-License-Identifier: MIT
// The engine's job-send thread (Engine::enqueue_async): runs the admissions handed off by
// asynchronous enqueues one at a time, in hand-off order, each followed by its caller's
// callback. Started at the first hand-off; close_and_drain() (Engine::stop, while the engine
// still runs) refuses new work, runs everything already queued, and joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "thread_name.h"

namespace echo::engine {

class JobSendQueue {
 public:
  using Task = std::function<void()>;

  JobSendQueue() = default;
  JobSendQueue(const JobSendQueue&) = delete;
  JobSendQueue& operator=(const JobSendQueue&) = delete;
  ~JobSendQueue() { close_and_drain(); }

  // Any thread. Queues `task` and returns true, or returns false (the task not taken, not run)
  // once close_and_drain() began. One mutex section and one condvar notify; the first call
  // starts the thread.
  bool push(Task task) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }

  // Any thread but the job-send thread itself (a task must not stop its engine). Idempotent.
  void close_and_drain() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_one();
    std::lock_guard join(join_mu_);  // two stopping threads: one joins, the other waits for it
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    name_this_thread("echo-jobsend");
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return closed_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // closed and drained
      Task task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();  // a task's exception would end the process: Engine's tasks catch their own
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;  // under mu_
  bool closed_ = false;     // under mu_
  std::mutex join_mu_;
  std::thread thread_;  // started under mu_, joined under join_mu_
};

}  // namespace echo::engine
