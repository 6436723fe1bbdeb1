// SPDX-License-Identifier: MIT
// LentCall, the calling thread's reusable blocking call, without a server: a second thread plays
// the io thread. The answer wakes the caller; an immediate error ends the call; a caller that gives
// up hands the storage over, and the io thread frees it when the answer comes (inside the issue or
// later), so a late answer never lands in a call the thread has moved on to; the words keep their
// storage from one call to the next.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include <echo/io/resp3_decoder.h>

#include "lent_call.h"

namespace echo::engine {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

io::Resp3Owned decoded(std::string_view wire) {
  io::Resp3Decoder dec;
  dec.feed(wire);
  const io::Resp3Next next = dec.next();
  EXPECT_EQ(next.status, io::Resp3Status::value);
  return next.value.to_owned();
}

TEST(LentCall, TheAnswerWakesTheCaller) {
  LentCall& c = LentCall::mine();
  c.word("PING");
  c.arm();
  const io::Resp3Owned pong = decoded("+PONG\r\n");
  std::thread io([&] {
    c.issue_on_io([] { return std::error_code{}; });  // armed: the answer comes later
    std::this_thread::sleep_for(5ms);
    c.eval().done({}, pong.view());
  });
  EXPECT_TRUE(c.wait(Clock::now() + 10s));
  io.join();
  EXPECT_FALSE(c.ec);
  EXPECT_EQ(c.reply.view().str(), "PONG");
  EXPECT_EQ(&LentCall::mine(), &c) << "a finished call's storage stays the thread's";
}

TEST(LentCall, AnImmediateErrorEndsTheCall) {
  LentCall& c = LentCall::mine();
  c.word("PING");
  c.arm();
  std::thread io(
      [&] { c.issue_on_io([] { return std::make_error_code(std::errc::not_connected); }); });
  EXPECT_TRUE(c.wait(Clock::now() + 10s));
  io.join();
  EXPECT_EQ(c.ec, std::make_error_code(std::errc::not_connected));
  EXPECT_TRUE(c.reply.view().is_null());
}

TEST(LentCall, ACallerThatGivesUpHandsTheStorageToTheIoThread) {
  LentCall* c = &LentCall::mine();
  c->word("PING");
  c->arm();
  c->issue_on_io([] { return std::error_code{}; });  // armed, never answered in time
  const Clock::time_point before = Clock::now();
  EXPECT_FALSE(c->wait(before + 20ms));
  EXPECT_GE(Clock::now() - before, 20ms);
  // The thread's next call is a new one: the late answer below cannot land in it.
  LentCall& next = LentCall::mine();
  EXPECT_NE(&next, c);
  const io::Resp3Owned pong = decoded("+PONG\r\n");
  std::thread io([&] { c->eval().done({}, pong.view()); });  // frees it (ASan: no leak, no reuse)
  io.join();
  next.word("PING");
  EXPECT_EQ(next.command().size(), 0u) << "not armed yet";
}

TEST(LentCall, AnAnswerInsideTheIssueAfterTheCallerGaveUpFreesItOnceTheIssueReturns) {
  LentCall* c = &LentCall::mine();
  c->word("PING");
  c->arm();
  EXPECT_FALSE(c->wait(Clock::now() + 1ms));  // gave up before the io thread took the call
  const io::Resp3Owned pong = decoded("+PONG\r\n");
  std::thread io([&] {
    // The answer fires inside the issue (a router that answers at once): the storage must outlive
    // the issue's return, then go.
    c->issue_on_io([&] {
      c->eval().done({}, pong.view());
      return std::error_code{};
    });
  });
  io.join();
}

TEST(LentCall, WordsKeepTheirStorageFromCallToCall) {
  LentCall& c = LentCall::mine();
  const std::string long_word(100, 'x');
  c.word(long_word);
  c.arm();
  const char* first = c.command()[0].data();
  c.issue_on_io([] { return std::make_error_code(std::errc::not_connected); });
  ASSERT_TRUE(c.wait(Clock::now() + 10s));

  LentCall& again = LentCall::mine();
  ASSERT_EQ(&again, &c);
  again.word(std::string(100, 'y'));
  again.arm();
  ASSERT_EQ(again.command().size(), 1u);
  EXPECT_EQ(again.command()[0].data(), first) << "the word's storage was kept";
  EXPECT_EQ(again.command()[0], std::string(100, 'y'));
  again.issue_on_io([] { return std::make_error_code(std::errc::not_connected); });
  ASSERT_TRUE(again.wait(Clock::now() + 10s));
}

TEST(LentCall, AScriptCallHeadsItsWordsWithEvalshaTheShaAndTheKeyCount) {
  const io::Script s{"0123456789abcdef0123456789abcdef01234567", "return 1"};
  LentCall& c = LentCall::mine();
  c.script(s, 2);
  c.word("k1");
  c.word("k2");
  c.word("a1");
  c.word(std::uint64_t{5000});
  c.arm();
  ASSERT_EQ(c.command().size(), 7u);
  EXPECT_EQ(c.command()[0], "EVALSHA");
  EXPECT_EQ(c.command()[1], s.sha);
  EXPECT_EQ(c.command()[2], "2");
  ASSERT_EQ(c.keys().size(), 2u);
  EXPECT_EQ(c.keys()[1], "k2");
  ASSERT_EQ(c.argv().size(), 2u);
  EXPECT_EQ(c.argv()[1], "5000");
  EXPECT_EQ(c.script(), &s);
  EXPECT_EQ(c.eval().script, &s);
  EXPECT_EQ(c.eval().command.size(), 7u);
  c.issue_on_io([] { return std::make_error_code(std::errc::not_connected); });
  ASSERT_TRUE(c.wait(Clock::now() + 10s));
}

}  // namespace
}  // namespace echo::engine
