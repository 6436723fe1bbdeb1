// SPDX-License-Identifier: MIT
// A table's loader threads (TableSpec::loader_threads).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "housekeeping.h"

namespace echo::engine {

// One table's loader threads (TableSpec::loader_threads): run its loader (which may block) off
// the writer and io threads, and off every other table's loaders, so a slow loader holds up only
// its own table's misses. The threads start on demand: a job posted while none waits idle starts
// one more, up to `threads`, so a table whose misses never reach the loader has no loader thread.
// The destructor waits for the calls under way (a thread cannot be cancelled) and drops the jobs
// not started: stop() has answered their flights `stopped`.
class LoaderPool {
 public:
  LoaderPool(int threads, const Housekeeping& housekeeping)
      : max_(static_cast<std::size_t>(threads)), housekeeping_(housekeeping) {
    threads_.reserve(max_);
  }
  ~LoaderPool() {
    std::vector<std::jthread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.request_stop();
    cv_.notify_all();
    threads.clear();  // joins
  }
  LoaderPool(const LoaderPool&) = delete;
  LoaderPool& operator=(const LoaderPool&) = delete;
  // Any thread (the table's writer). Never blocks on a loader: a lock around a deque push, and
  // the first misses each start a thread (pthread_create, tens of microseconds, once each).
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
      if (idle_ < jobs_.size() && threads_.size() < max_) {
        threads_.emplace_back([this](const std::stop_token& stop) {
          housekeeping_.enter("echo-load");
          run(stop);
        });
      }
    }
    cv_.notify_one();
  }

 private:
  void run(const std::stop_token& stop) {
    std::unique_lock lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, stop, [this] { return !jobs_.empty(); });
      --idle_;
      if (stop.stop_requested()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }
  const std::size_t max_;
  const Housekeeping& housekeeping_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> jobs_;
  std::size_t idle_ = 0;  // threads waiting for a job (under mu_)
  std::vector<std::jthread> threads_;
};
}  // namespace echo::engine
