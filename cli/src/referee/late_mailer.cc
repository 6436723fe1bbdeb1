// SPDX-License-Identifier: MIT
// The late mailer's thread: a heap of held messages ordered by due time.
#include "referee/late_mailer.h"

#include <utility>

namespace echo::cli::referee {

LateMailer::LateMailer(std::chrono::microseconds min_delay, std::chrono::microseconds max_delay)
    : rng_(0x1A7E),  // fixed: every contestant's mailer draws the same delays in the same order
      delay_us_(min_delay.count(), max_delay.count()),
      thread_([this] { run(); }) {}

LateMailer::~LateMailer() { drain(); }

void LateMailer::post(Send send) {
  {
    const std::lock_guard lock(mu_);
    const auto due = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us_(rng_));
    held_.push(Held{due, posted_++, std::move(send)});
  }
  cv_.notify_one();
}

void LateMailer::drain() {
  {
    const std::lock_guard lock(mu_);
    draining_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void LateMailer::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (held_.empty()) {
      if (draining_) return;
      cv_.wait(lock);
      continue;
    }
    const auto due = held_.top().due;
    if (std::chrono::steady_clock::now() < due) {
      cv_.wait_until(lock, due);  // a post with an earlier due time wakes it
      continue;
    }
    Send send = std::move(const_cast<Held&>(held_.top()).send);  // popped at once
    held_.pop();
    lock.unlock();
    std::string error;
    const bool ok = send(error);
    lock.lock();
    if (!ok && failed_++ == 0) first_error_ = std::move(error);
  }
}

std::uint64_t LateMailer::failed() const {
  const std::lock_guard lock(mu_);
  return failed_;
}

std::string LateMailer::first_error() const {
  const std::lock_guard lock(mu_);
  return first_error_;
}

}  // namespace echo::cli::referee
