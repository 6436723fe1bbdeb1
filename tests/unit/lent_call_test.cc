// SPDX-License-Identifier: MIT
// LentCall, the calling thread's reusable blocking call or batch, without a server: a stand-in
// issuer plays the connection and a second thread (or the test thread) the io thread. The answer
// wakes the caller; an immediate error ends the part; leading parts go first and the rest only
// once each of them answered; a caller that gives up hands the storage over, and the io thread
// frees it when the last answer comes (inside its own issuing or later), so a late answer never
// lands in a call the thread has moved on to; the words keep their storage from call to call.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

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

// The connection's stand-in: records each part it is asked to issue; refuses with `refuse`, or
// answers at once when `at_once` (a router that answers inside the call).
struct FakeIo {
  std::vector<LentCall::Part*> issued;
  std::error_code refuse;
  bool at_once = false;
  io::Resp3Owned pong = decoded("+PONG\r\n");
  static std::error_code issue(void* owner, LentCall::Part& p) {
    auto& io = *static_cast<FakeIo*>(owner);
    io.issued.push_back(&p);
    if (io.refuse) return io.refuse;
    if (io.at_once) p.eval.done({}, io.pong.view());
    return {};
  }
};

void ping(LentCall& c) {
  c.begin();
  c.word("PING");
}

TEST(LentCall, TheAnswerWakesTheCaller) {
  FakeIo io;
  LentCall& c = LentCall::mine();
  ping(c);
  c.arm(&FakeIo::issue, &io);
  std::thread loop([&] {
    c.issue_on_io();  // issued: the answer comes later
    std::this_thread::sleep_for(5ms);
    io.issued.at(0)->eval.done({}, io.pong.view());
  });
  EXPECT_TRUE(c.wait(Clock::now() + 10s));
  loop.join();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c.part(0).ec);
  EXPECT_EQ(c.part(0).reply.view().str(), "PONG");
  EXPECT_EQ(&LentCall::mine(), &c) << "a finished call's storage stays the thread's";
}

TEST(LentCall, AnImmediateErrorEndsThePart) {
  FakeIo io;
  io.refuse = std::make_error_code(std::errc::not_connected);
  LentCall& c = LentCall::mine();
  ping(c);
  c.arm(&FakeIo::issue, &io);
  std::thread loop([&] { c.issue_on_io(); });
  EXPECT_TRUE(c.wait(Clock::now() + 10s));
  loop.join();
  EXPECT_EQ(c.part(0).ec, std::make_error_code(std::errc::not_connected));
  EXPECT_TRUE(c.part(0).reply.view().is_null());
}

TEST(LentCall, LeadingPartsGoFirstAndTheRestOnceEachAnswered) {
  FakeIo io;
  LentCall& c = LentCall::mine();
  c.begin(nullptr, 0, /*lead=*/true);
  c.word("SET");
  c.begin(nullptr, 0, /*lead=*/true);
  c.word("PUBLISH");
  c.begin();
  c.word("EVALSHA");
  c.arm(&FakeIo::issue, &io);
  c.issue_on_io();
  ASSERT_EQ(io.issued.size(), 2u) << "only the leading prefix leaves first";
  io.issued[0]->eval.done({}, io.pong.view());
  EXPECT_EQ(io.issued.size(), 2u) << "one leading part still unanswered";
  io.issued[1]->eval.done({}, io.pong.view());
  ASSERT_EQ(io.issued.size(), 3u) << "the last leading answer sends the rest";
  EXPECT_EQ(io.issued[2]->command()[0], "EVALSHA");
  io.issued[1]->eval.done({}, io.pong.view());  // a second answer to one part is ignored
  EXPECT_EQ(io.issued.size(), 3u);
  io.issued[2]->eval.done({}, io.pong.view());
  ASSERT_TRUE(c.wait(Clock::now() + 10s));
  EXPECT_EQ(c.part(2).reply.view().str(), "PONG");
}

TEST(LentCall, StoppingEndsEveryPartWithNothingIssued) {
  FakeIo io;
  LentCall& c = LentCall::mine();
  c.begin(nullptr, 0, /*lead=*/true);
  c.word("SET");
  c.begin();
  c.word("GET");
  c.arm(&FakeIo::issue, &io);
  c.fail_on_io(std::make_error_code(std::errc::operation_canceled));
  EXPECT_TRUE(io.issued.empty());
  ASSERT_TRUE(c.wait(Clock::now() + 10s));
  EXPECT_EQ(c.part(0).ec, std::make_error_code(std::errc::operation_canceled));
  EXPECT_EQ(c.part(1).ec, std::make_error_code(std::errc::operation_canceled));
}

TEST(LentCall, ACallerThatGivesUpHandsTheStorageToTheIoThread) {
  FakeIo io;
  LentCall* c = &LentCall::mine();
  ping(*c);
  c->arm(&FakeIo::issue, &io);
  c->issue_on_io();  // issued, never answered in time
  const Clock::time_point before = Clock::now();
  EXPECT_FALSE(c->wait(before + 20ms));
  EXPECT_GE(Clock::now() - before, 20ms);
  // The thread's next call is a new one: the late answer below cannot land in it.
  LentCall& next = LentCall::mine();
  EXPECT_NE(&next, c);
  LentCall::Part* late = io.issued.at(0);
  std::thread loop([&] { late->eval.done({}, io.pong.view()); });  // frees it (ASan: no leak)
  loop.join();
}

TEST(LentCall, AnAnswerInsideTheIssueAfterTheCallerGaveUpFreesItOnceTheIssueReturns) {
  FakeIo io;
  io.at_once = true;
  LentCall* c = &LentCall::mine();
  ping(*c);
  c->begin();
  c->word("PING");
  c->arm(&FakeIo::issue, &io);
  EXPECT_FALSE(c->wait(Clock::now() + 1ms));  // gave up before the io thread took the call
  // Both answers fire inside the issue: the storage must outlive the issue's loop, then go
  // (ASan: a use after free or a leak fails here).
  std::thread loop([&] { c->issue_on_io(); });
  loop.join();
  EXPECT_EQ(io.issued.size(), 2u);
}

TEST(LentCall, WordsKeepTheirStorageFromCallToCall) {
  FakeIo io;
  io.refuse = std::make_error_code(std::errc::not_connected);
  LentCall& c = LentCall::mine();
  c.word(std::string(100, 'x'));  // a word before any begin() starts a command
  c.arm(&FakeIo::issue, &io);
  const char* first = c.part(0).command()[0].data();
  c.issue_on_io();
  ASSERT_TRUE(c.wait(Clock::now() + 10s));

  LentCall& again = LentCall::mine();
  ASSERT_EQ(&again, &c);
  again.word(std::string(100, 'y'));
  again.arm(&FakeIo::issue, &io);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again.part(0).command().size(), 1u);
  EXPECT_EQ(again.part(0).command()[0].data(), first) << "the word's storage was kept";
  EXPECT_EQ(again.part(0).command()[0], std::string(100, 'y'));
  again.issue_on_io();
  ASSERT_TRUE(again.wait(Clock::now() + 10s));
}

TEST(LentCall, AScriptPartHeadsItsWordsWithEvalshaTheShaAndTheKeyCount) {
  FakeIo io;
  io.refuse = std::make_error_code(std::errc::not_connected);
  const io::Script s{"0123456789abcdef0123456789abcdef01234567", "return 1"};
  LentCall& c = LentCall::mine();
  ping(c);
  c.script(s, 2);
  c.word("k1");
  c.word("k2");
  c.word("a1");
  c.word(std::uint64_t{5000});
  c.arm(&FakeIo::issue, &io);
  ASSERT_EQ(c.size(), 2u);
  const LentCall::Part& p = c.part(1);
  ASSERT_EQ(p.command().size(), 7u);
  EXPECT_EQ(p.command()[0], "EVALSHA");
  EXPECT_EQ(p.command()[1], s.sha);
  EXPECT_EQ(p.command()[2], "2");
  ASSERT_EQ(p.keys_of().size(), 2u);
  EXPECT_EQ(p.keys_of()[1], "k2");
  ASSERT_EQ(p.argv().size(), 2u);
  EXPECT_EQ(p.argv()[1], "5000");
  EXPECT_EQ(p.eval.script, &s);
  EXPECT_EQ(c.part(0).command().size(), 1u);
  c.issue_on_io();
  ASSERT_TRUE(c.wait(Clock::now() + 10s));
}

}  // namespace
}  // namespace echo::engine
