// SPDX-License-Identifier: MIT
// The late mailer: injected race (2). A writer hands it a write's message instead of sending it;
// it holds each one back a random delay and sends them in due order from its own thread, so late
// messages overtake each other and are overtaken by the messages sent at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace echo::cli::referee {

class LateMailer {
 public:
  // Sends a message; false with `error` set when it could not. Runs on the mailer's thread.
  using Send = std::function<bool(std::string& error)>;

  // Delays are drawn uniformly from [min_delay, max_delay], from a fixed seed. Starts the
  // mailer's thread.
  LateMailer(std::chrono::microseconds min_delay, std::chrono::microseconds max_delay);
  ~LateMailer();  // drain()
  LateMailer(const LateMailer&) = delete;
  LateMailer& operator=(const LateMailer&) = delete;

  // Holds `send` back a random delay. Any thread; never blocks beyond a short lock.
  void post(Send send);
  // Sends everything still held (each at its due time) and stops the thread. Idempotent.
  void drain();

  std::uint64_t failed() const;
  std::string first_error() const;

 private:
  struct Held {
    std::chrono::steady_clock::time_point due;
    std::uint64_t order;  // ties in due time go out in posting order
    Send send;
    bool operator>(const Held& o) const { return due != o.due ? due > o.due : order > o.order; }
  };
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Held, std::vector<Held>, std::greater<>> held_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<std::int64_t> delay_us_;
  std::uint64_t posted_ = 0, failed_ = 0;
  std::string first_error_;
  bool draining_ = false;
  std::thread thread_;
};

}  // namespace echo::cli::referee
