// SPDX-License-Identifier: MIT
// Two helpers of the bench's latency rows that observe a message away from its sender's thread
// (churn.cc's carried_visible_vs_floor): a watcher thread that stamps the moment a condition
// first holds, and a bare PUBLISH floor whose subscriber only counts what it reads.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <echo/base/clock.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

#include "drill/floors.h"

namespace echo::cli::bench {

// The observer of a latency row whose sender's call returns later than the moment it measures to
// (carried_visible_vs_floor: A's publish also waits for A's writer to insert its own row): a
// thread that, once armed, polls one condition the way spin_until does (64 spins, then a yield
// per poll, so the threads it waits for still run on a shared core) and stamps the first moment
// it holds. A row's contenders all seen by one watcher carry the same observation cost.
class Watcher {
 public:
  Watcher() : thread_([this](std::stop_token st) { run(st); }) {}
  ~Watcher() {
    thread_.request_stop();
    armed_.fetch_add(1, std::memory_order_release);
    armed_.notify_one();
  }
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Arms `done`; returns once the watcher is polling it, so the send that follows is timed from
  // a watcher already on the CPU.
  std::uint64_t arm(std::function<bool()> done) {
    done_ = std::move(done);
    const std::uint64_t n = ++n_;
    armed_.store(n, std::memory_order_release);  // publishes done_
    armed_.notify_one();
    while (polling_.load(std::memory_order_acquire) != n) std::this_thread::yield();
    return n;
  }
  // The steady ns at which armed condition `n` first held (the caller sleeps meanwhile: the stamp
  // is taken already, so its own wake does not count).
  std::int64_t await(std::uint64_t n) const {
    const std::int64_t limit = base::steady_ns() + 2'000'000'000;
    while (seen_.load(std::memory_order_acquire) != n) {
      if (base::steady_ns() > limit)
        throw std::runtime_error("a watched condition did not hold within 2 s");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return seen_ns_;
  }

 private:
  void run(const std::stop_token& st) {
    std::uint64_t last = 0;
    for (;;) {
      armed_.wait(last, std::memory_order_acquire);
      if (st.stop_requested()) return;
      last = armed_.load(std::memory_order_acquire);
      polling_.store(last, std::memory_order_release);
      for (unsigned spins = 0; !done_(); ++spins) {
        if (spins > 64) std::this_thread::yield();
        if (st.stop_requested()) return;
      }
      seen_ns_ = base::steady_ns();
      seen_.store(last, std::memory_order_release);  // publishes seen_ns_
    }
  }

  std::function<bool()> done_;
  std::uint64_t n_ = 0;
  std::int64_t seen_ns_ = 0;
  std::atomic<std::uint64_t> armed_{0}, polling_{0}, seen_{0};
  std::jthread thread_;  // last: stopped and joined before the rest goes
};

// The floor: a bare PUBLISH of `payload` bytes on a hiredis connection to a blocking RESP2 hiredis
// subscriber on its own thread, which counts what it reads.
class FloorSub {
 public:
  FloorSub(const DrillTarget& target, std::string channel, std::size_t payload)
      : sub_(target), pub_(target), channel_(std::move(channel)), payload_(payload, 'x') {
    floors::Reply ok = sub_.command("SUBSCRIBE %b", channel_.data(), channel_.size());
    if (!ok) throw std::runtime_error("the floor's subscriber could not subscribe");
    redisSetTimeout(sub_.raw(), timeval{0, 0});
    thread_ = std::jthread([this] {
      for (;;) {
        void* raw = nullptr;
        if (redisGetReply(sub_.raw(), &raw) != REDIS_OK) return;  // the destructor's shutdown
        floors::Reply m(static_cast<redisReply*>(raw));
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3) {
          heard_.fetch_add(1, std::memory_order_release);
        }
      }
    });
  }
  ~FloorSub() { ::shutdown(sub_.raw()->fd, SHUT_RDWR); }
  FloorSub(const FloorSub&) = delete;
  FloorSub& operator=(const FloorSub&) = delete;

  bool publish() {
    floors::Reply r = pub_.command("PUBLISH %b %b", channel_.data(), channel_.size(),
                                   payload_.data(), payload_.size());
    return r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  }
  std::uint64_t heard() const { return heard_.load(std::memory_order_acquire); }

 private:
  floors::Redis sub_, pub_;
  std::string channel_, payload_;
  std::atomic<std::uint64_t> heard_{0};
  std::jthread thread_;  // last: joined before the connections close
};

}  // namespace echo::cli::bench
