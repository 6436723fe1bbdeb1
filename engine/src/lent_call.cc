// SPDX-License-Identifier: MIT
// LentCall: the calling thread's reusable blocking call or batch (lent_call.h).
#include "lent_call.h"

#include <charconv>

#include <echo/ring/doorbell.h>

#include "thread_owned.h"

namespace echo::engine {

LentCall& LentCall::mine() {
  // Outlives the thread's thread_local destructors (thread_owned.h): one of the application's
  // that publishes on its way out still finds its call storage.
  LentCall& c = ThreadOwned<LentCall>::get();
  c.words_used_ = 0;
  c.parts_used_ = 0;
  return c;
}

void LentCall::begin(const io::Script* script, std::size_t keys, bool lead) {
  if (parts_used_ == parts_.size()) {
    const std::size_t i = parts_.size();
    // Made once per part index: the answer names its part by index, so the parts may move
    // (the vector grows between calls) and the function stays small enough to hold inline.
    parts_.emplace_back().eval.done = [this, i](std::error_code ec, const io::Resp3Value& r) {
      answered(i, ec, r);
    };
  }
  Part& p = parts_[parts_used_++];
  p.first = words_used_;
  p.words = 0;
  p.keys = keys;
  p.lead = lead;
  p.eval.script = script;
  p.eval.asking = false;
}

void LentCall::script(const io::Script& s, std::size_t keys, bool lead) {
  begin(&s, keys, lead);
  word("EVALSHA");
  word(s.sha);
  word(std::uint64_t{keys});
}

std::string& LentCall::word() {
  if (parts_used_ == 0) begin();
  ++parts_[parts_used_ - 1].words;
  if (words_used_ == words_.size()) words_.emplace_back();
  std::string& w = words_[words_used_++];
  w.clear();
  return w;
}

void LentCall::word(std::uint64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  word(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

void LentCall::view() {
  views_.assign(words_.begin(), words_.begin() + static_cast<std::ptrdiff_t>(words_used_));
  for (std::size_t i = 0; i < parts_used_; ++i) {
    Part& p = parts_[i];
    p.eval.command = std::span<const std::string_view>(views_).subspan(p.first, p.words);
  }
}

void LentCall::arm(Issuer issue, void* owner) {
  view();
  leads_ = 0;
  for (std::size_t i = 0; i < parts_used_; ++i) {
    Part& p = parts_[i];
    p.answered = false;
    if (leads_ == i && p.lead) ++leads_;
  }
  issuer_ = issue;
  owner_ = owner;
  leads_left_ = leads_;
  left_ = parts_used_;
  frames_ = 0;
  state_.store(kPending, std::memory_order_relaxed);  // the post publishes it to the io thread
}

void LentCall::issue_on_io() {
  ++frames_;
  issue_range(0, leads_ != 0 ? leads_ : parts_used_);
  leave_frame();
}

void LentCall::fail_on_io(std::error_code ec) {
  ++frames_;
  leads_ = 0;  // nothing more is issued
  for (std::size_t i = 0; i < parts_used_; ++i) answered(i, ec, io::Resp3Value{});
  leave_frame();
}

void LentCall::issue_range(std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i) {
    // An immediate error: the connection never runs the part's answer.
    if (const std::error_code ec = issuer_(owner_, parts_[i])) answered(i, ec, io::Resp3Value{});
  }
}

void LentCall::answered(std::size_t i, std::error_code ec, const io::Resp3Value& reply) {
  Part& p = parts_[i];
  if (p.answered) return;
  p.answered = true;
  p.ec = ec;
  p.reply.assign(reply);
  ++frames_;
  // The last leading answer sends the rest: the server runs them in a later turn.
  if (i < leads_ && --leads_left_ == 0) issue_range(leads_, parts_used_);
  --left_;
  leave_frame();
}

void LentCall::leave_frame() {
  if (--frames_ == 0 && left_ == 0) end();  // the last touch of the storage
}

void LentCall::end() {
  std::uint32_t s = kPending;
  // acq_rel: the answers before the caller's acquire of kDone; the caller's abandonment before
  // this thread owning the storage.
  if (state_.compare_exchange_strong(s, kDone, std::memory_order_acq_rel)) {
    // The caller may have woken (a spurious wake, its deadline) and moved on: a wake of a word it
    // no longer waits on is harmless.
    ring::detail::futex_wake(state_, 1);
    return;
  }
  delete this;  // the caller gave up: the storage is this thread's
}

bool LentCall::wait(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (state_.load(std::memory_order_acquire) == kDone) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    ring::detail::futex_wait(state_, kPending, deadline);
  }
  std::uint32_t s = kPending;
  if (!state_.compare_exchange_strong(s, kAbandoned, std::memory_order_acq_rel)) return true;
  (void)ThreadOwned<LentCall>::release();  // the io thread's now: it frees it when the last
                                           // answer is in
  return false;
}

}  // namespace echo::engine
