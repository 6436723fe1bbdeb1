// SPDX-License-Identifier: MIT
// LentCall: the calling thread's reusable blocking call (lent_call.h).
#include "lent_call.h"

#include <charconv>
#include <memory>

#include <echo/ring/doorbell.h>

namespace echo::engine {

namespace {
thread_local std::unique_ptr<LentCall> t_mine;
}  // namespace

LentCall& LentCall::mine() {
  if (!t_mine) t_mine = std::make_unique<LentCall>();
  LentCall& c = *t_mine;
  c.used_ = 0;
  c.keys_ = 0;
  c.eval_.script = nullptr;
  return c;
}

std::string& LentCall::word() {
  if (used_ == words_.size()) words_.emplace_back();
  std::string& w = words_[used_++];
  w.clear();
  return w;
}

void LentCall::word(std::uint64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  word(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

void LentCall::script(const io::Script& s, std::size_t keys) {
  word("EVALSHA");
  word(s.sha);
  word(std::uint64_t{keys});
  keys_ = keys;
  eval_.script = &s;
}

void LentCall::arm() {
  views_.assign(words_.begin(), words_.begin() + static_cast<std::ptrdiff_t>(used_));
  eval_.command = views_;
  eval_.asking = false;
  if (!eval_.done) eval_.done = answer();
  state_.store(kPending, std::memory_order_relaxed);  // the post publishes it to the io thread
}

void LentCall::end(std::error_code e, const io::Resp3Value& r) {
  fired_ = true;
  ec = e;
  reply.assign(r);
  std::uint32_t s = kPending;
  // acq_rel: the answer before the caller's acquire of kDone; the caller's abandonment before
  // this thread owning the storage.
  if (state_.compare_exchange_strong(s, kDone, std::memory_order_acq_rel)) {
    // The caller may have woken (a spurious wake, its deadline) and moved on: a wake of a word it
    // no longer waits on is harmless.
    ring::detail::futex_wake(state_, 1);
    return;
  }
  if (issuing_) {
    orphaned_ = true;  // issue_on_io frees it once `issue` returns
    return;
  }
  delete this;
}

bool LentCall::wait(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (state_.load(std::memory_order_acquire) == kDone) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    ring::detail::futex_wait(state_, kPending, deadline);
  }
  std::uint32_t s = kPending;
  if (!state_.compare_exchange_strong(s, kAbandoned, std::memory_order_acq_rel)) return true;
  (void)t_mine.release();  // the io thread's now: it frees it when the call ends
  return false;
}

}  // namespace echo::engine
