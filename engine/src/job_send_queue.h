// SPDX-License-Identifier: MIT
// The engine's job-send thread (Engine::enqueue_async): runs the admissions handed off by
// asynchronous enqueues one at a time, in hand-off order, each followed by its caller's
// callback. Started at the first hand-off; close_and_drain() (Engine::stop, while the engine
// still runs) refuses new work, runs everything already queued, and joins.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "housekeeping.h"
#include "thread_name.h"

namespace echo::engine {

class JobSendQueue {
 public:
  using Task = std::function<void()>;

  JobSendQueue() = default;
  JobSendQueue(const JobSendQueue&) = delete;
  JobSendQueue& operator=(const JobSendQueue&) = delete;
  ~JobSendQueue() { close_and_drain(); }

  // Where the thread runs (EngineOptions::housekeeping_cpus). Before the first push().
  void set_housekeeping(const Housekeeping& h) noexcept { housekeeping_ = &h; }

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
    if (housekeeping_ != nullptr) {
      housekeeping_->enter("echo-jobsend");
    } else {
      name_this_thread("echo-jobsend");
    }
    never_preempt_on_wake();
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

  // Under the default policy, SCHED_BATCH: the same share of the CPU, but waking this thread
  // does not preempt the thread that woke it. Without it, on a core shared with the sender
  // (lanes_bench one-core; a busy machine), push()'s notify handed the CPU to this thread and
  // the admissions' whole chain (this thread, the io thread, the server) ran before the sender
  // got it back: enqueue_async held its caller 82 us against the lead's 22 us (job_vs_broadcast
  // one-core 4.6x, 1.23x with it). A thread started under a real-time policy keeps it (batch
  // would put it behind every real-time spinner). Best effort: a refusal changes nothing else.
  static void never_preempt_on_wake() noexcept {
    int policy = 0;
    sched_param param{};
    if (pthread_getschedparam(pthread_self(), &policy, &param) != 0 || policy != SCHED_OTHER)
      return;
    param.sched_priority = 0;
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;  // under mu_
  bool closed_ = false;     // under mu_
  std::mutex join_mu_;
  const Housekeeping* housekeeping_ = nullptr;
  std::thread thread_;  // started under mu_, joined under join_mu_
};

}  // namespace echo::engine
