// SPDX-License-Identifier: MIT
// LentCall under concurrent load (run under TSan): two caller threads run batches of one to four
// parts (some leading) with deadlines from nothing to a few hundred microseconds, so many give up
// mid-call and hand their storage to the io thread; a stand-in io thread issues each batch and
// answers its parts at once (inside its own issuing) or after a random delay, in any order.
// Checked: every call that did not give up holds each part's own answer (the part's first word,
// echoed); every call ends exactly once, answered or given up; the storage handed over is freed
// (ASan/LSan in the sanitizer tree; TSan sees every hand-over). Bounded: 2 x 3,000 calls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <echo/io/resp3_decoder.h>

#include "lent_call.h"

namespace echo::engine {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The io thread's stand-in: a posted queue (as the loop's post) and the parts it owes answers.
class FakeLoop {
 public:
  FakeLoop() : thread_([this] { run(); }) {}
  ~FakeLoop() {
    stop_.store(true);
    thread_.join();
  }
  FakeLoop(const FakeLoop&) = delete;
  FakeLoop& operator=(const FakeLoop&) = delete;

  void post(LentCall* c) {
    const std::lock_guard lock(mu_);
    posted_.push_back(c);
  }
  static std::error_code issue(void* owner, LentCall::Part& p) {
    auto& loop = *static_cast<FakeLoop*>(owner);
    const auto roll = loop.rng_() % 8;
    if (roll == 0) return std::make_error_code(std::errc::not_connected);  // refused inline
    if (roll == 1) {
      loop.answer(p);  // a router that answers at once
      return {};
    }
    const auto delay = std::chrono::microseconds(loop.rng_() % 300);
    loop.owed_.push_back({&p, Clock::now() + delay});
    return {};
  }

 private:
  struct Owed {
    LentCall::Part* part;
    Clock::time_point due;
  };
  void answer(LentCall::Part& p) {
    const std::string word(p.command()[0]);
    io::Resp3Decoder dec;
    dec.feed("$" + std::to_string(word.size()) + "\r\n" + word + "\r\n");
    const io::Resp3Owned reply = dec.next().value.to_owned();
    p.eval.done({}, reply.view());
  }
  void run() {
    while (!stop_.load() || !idle()) {
      std::deque<LentCall*> posted;
      {
        const std::lock_guard lock(mu_);
        posted.swap(posted_);
      }
      for (LentCall* c : posted) c->issue_on_io();
      // Answers in any order: the due ones, from a random start.
      const Clock::time_point now = Clock::now();
      for (std::size_t n = owed_.size(), i = 0; i < n && !owed_.empty(); ++i) {
        const std::size_t at = rng_() % owed_.size();
        if (owed_[at].due > now) continue;
        LentCall::Part* p = owed_[at].part;
        owed_[at] = owed_.back();
        owed_.pop_back();
        answer(*p);
      }
    }
  }
  bool idle() {
    const std::lock_guard lock(mu_);
    return posted_.empty() && owed_.empty();
  }

  std::mutex mu_;
  std::deque<LentCall*> posted_;  // guarded by mu_
  std::vector<Owed> owed_;        // the io thread's
  std::minstd_rand rng_{7};       // the io thread's
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(LentCallStress, CallersThatGiveUpAndAnswersInAnyOrderNeverMeet) {
  constexpr int kCallers = 2, kCalls = 3000;
  std::atomic<int> answered{0}, gave_up{0}, wrong{0};
  {
    FakeLoop loop;
    std::vector<std::thread> callers;
    for (int t = 0; t < kCallers; ++t) {
      callers.emplace_back([&, t] {
        std::minstd_rand rng(static_cast<unsigned>(t + 1));
        for (int i = 0; i < kCalls; ++i) {
          LentCall& c = LentCall::mine();
          const std::size_t parts = 1 + rng() % 4, leads = rng() % (parts + 1);
          for (std::size_t k = 0; k < parts; ++k) {
            c.begin(nullptr, 0, k < leads);
            c.word("w" + std::to_string(t) + "." + std::to_string(i) + "." + std::to_string(k));
            c.word("tail");
          }
          c.arm(&FakeLoop::issue, &loop);
          loop.post(&c);
          // Every tenth call waits as long as it takes, so some answers are checked however slow
          // the machine; the rest give up after 0-400 us.
          const auto patience = i % 10 == 0 ? std::chrono::microseconds(10'000'000)
                                            : std::chrono::microseconds(rng() % 400);
          if (!c.wait(Clock::now() + patience)) {
            gave_up.fetch_add(1);
            continue;
          }
          answered.fetch_add(1);
          for (std::size_t k = 0; k < parts; ++k) {
            const LentCall::Part& p = c.part(k);
            if (p.ec == std::make_error_code(std::errc::not_connected)) continue;
            if (p.ec || p.reply.view().str() != p.command()[0]) wrong.fetch_add(1);
          }
        }
      });
    }
    for (auto& th : callers) th.join();
  }  // the loop answers everything it owes before it stops: the storage handed over is freed
  EXPECT_EQ(answered.load() + gave_up.load(), kCallers * kCalls);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(gave_up.load(), 0) << "no caller gave up: the hand-over went untested";
  EXPECT_GT(answered.load(), 0);
}

}  // namespace
}  // namespace echo::engine
