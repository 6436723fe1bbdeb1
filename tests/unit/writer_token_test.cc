// SPDX-License-Identifier: MIT
// The writer token's hand-overs, one interleaving at a time: a writer that waits for a borrower
// gets the token when that borrower gives it back, before any other borrower (its fairness).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <echo/engine/internal/writer_token.h>

namespace echo::engine {
namespace {

using namespace std::chrono_literals;

TEST(WriterToken, OnlyAnIdleTokenCanBeBorrowedAndTheWriterTakesItBack) {
  WriterToken token;
  EXPECT_FALSE(token.try_borrow()) << "closed before the writer starts";
  token.lend();
  ASSERT_TRUE(token.try_borrow());
  EXPECT_TRUE(token.borrowed_approx());
  EXPECT_FALSE(token.try_borrow()) << "one borrower at a time";
  token.give_back();
  EXPECT_FALSE(token.borrowed_approx());
  token.take_back();
  EXPECT_FALSE(token.try_borrow()) << "held by the writer";
  token.close();
  EXPECT_FALSE(token.try_borrow());
}

// Io threads on several CPUs can keep borrowing back to back: a give_back followed at once by
// another thread's try_borrow found the token idle, so a writer waiting in take_back could be
// held off for as long as they kept it busy (its ticks, sweeps and inbox with it). Once the
// writer waits, the borrower's give_back hands the token to it; no borrower gets it between.
TEST(WriterToken, AWaitingWriterGetsTheTokenBeforeAnyNewBorrower) {
  constexpr int kRounds = 200;
  int stolen = 0;
  for (int round = 0; round < kRounds; ++round) {
    WriterToken token;
    token.lend();
    ASSERT_TRUE(token.try_borrow());
    std::atomic<bool> back{false};
    std::thread writer([&] {
      token.take_back();
      back.store(true, std::memory_order_release);
    });
    // The writer is waiting for this borrower (before the fix, a 200 us sleep stood here: a new
    // borrower then took the token in most rounds).
    while (!token.wanted_approx()) std::this_thread::yield();
    token.give_back();
    // Another io thread's borrow, right after the give_back.
    if (token.try_borrow()) {
      ++stolen;
      token.give_back();
    }
    writer.join();
    EXPECT_TRUE(back.load(std::memory_order_acquire));
    EXPECT_FALSE(token.try_borrow()) << "the writer holds it after take_back";
  }
  EXPECT_EQ(stolen, 0) << "a new borrower took the token from a waiting writer in " << stolen
                       << " of " << kRounds << " rounds";
}

}  // namespace
}  // namespace echo::engine
