// SPDX-License-Identifier: MIT
// The loop on its own, on both backends (io_uring and epoll, one value-parametrized suite):
// cross-thread post and wake (both waiting modes), timers and their cancellation, connect with a
// deadline, send/recv on socketpairs, pinning, knob checks. backend_fallback_test.cc covers auto's
// fallback when the kernel refuses io_uring.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <echo/io/unique_fd.h>
#include <echo/io/uring_loop.h>

#include "support/loopback.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;

// A completion recorder: the result lands in a promise the test thread waits on.
struct Recorded {
  IoOp op;
  std::promise<int> result;
  Recorded() {
    op.context = this;
    op.complete = [](IoOp& o, int res) noexcept {
      static_cast<Recorded*>(o.context)->result.set_value(res);
    };
  }
};

class Loop : public ::testing::TestWithParam<Backend> {
 protected:
  // `o` on the backend under test.
  LoopOptions on_backend(LoopOptions o = {}) const {
    o.backend = GetParam();
    return o;
  }
};

void posts_from_many_threads_all_run(LoopOptions options) {
  LoopThread lt(options);
  constexpr int kThreads = 4, kEach = 20000;
  std::atomic<int> ran{0};
  // post() keeps each producer's order and no order between producers, even when one post
  // happens-before another (the MPSC queue's contract): so each producer ends with its own
  // fence, and the last fence to run finds every post run. A fence posted by this thread after
  // joining the producers could run before some of their posts (seen under load: 73479 of 80000).
  int fences = 0;  // loop thread only
  std::promise<void> all_fenced;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        lt.loop().post([&] { ran.fetch_add(1, std::memory_order_relaxed); });
      }
      lt.loop().post([&] {
        if (++fences == kThreads) all_fenced.set_value();
      });
    });
  }
  for (auto& p : producers) p.join();
  ASSERT_EQ(all_fenced.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ran.load(std::memory_order_relaxed), kThreads * kEach);
}

TEST_P(Loop, RunsOnTheBackendItWasAskedFor) {
  UringLoop loop(on_backend());
  EXPECT_EQ(loop.backend(), GetParam());
  EXPECT_TRUE(loop.fallback_reason().empty());
}

TEST_P(Loop, PostsFromManyThreadsAllRunWhenBlocking) {
  posts_from_many_threads_all_run(on_backend(LoopOptions{.wait = WaitMode::kBlock}));
}

TEST_P(Loop, PostsFromManyThreadsAllRunWhenBusyPolling) {
  posts_from_many_threads_all_run(on_backend(LoopOptions{.wait = WaitMode::kBusyPoll}));
}

TEST(UringLoopTaskrun, PostsRunWithSingleThreadTaskrun) {
  LoopThread lt(LoopOptions{.backend = Backend::kUring, .single_thread_taskrun = true});
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i)
    lt.loop().post([&] { ran.fetch_add(1, std::memory_order_relaxed); });
  std::promise<void> fence;
  lt.loop().post([&] { fence.set_value(); });
  ASSERT_EQ(fence.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ran.load(std::memory_order_relaxed), 1000);
}

TEST(UringLoopTaskrun, TimersAndSocketsWorkWithSingleThreadTaskrun) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  LoopThread lt(LoopOptions{.backend = Backend::kUring, .single_thread_taskrun = true});
  Recorded timer, got;
  char in[8] = {};
  lt.loop().post([&] {
    lt.loop().after(5ms, timer.op);
    lt.loop().recv(b.get(), in, sizeof in, got.op);
  });
  EXPECT_EQ(timer.result.get_future().get(), -ETIME);
  ASSERT_EQ(::send(a.get(), "xy", 2, 0), 2);
  EXPECT_EQ(got.result.get_future().get(), 2);
}

TEST_P(Loop, TimersAndSocketsWorkWhenBusyPolling) {
  // Busy-poll never sleeps in the kernel: a timer and a receive must still complete.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  LoopThread lt(on_backend(LoopOptions{.wait = WaitMode::kBusyPoll}));
  Recorded timer, got;
  char in[8] = {};
  const auto t0 = std::chrono::steady_clock::now();
  lt.loop().post([&] {
    lt.loop().after(20ms, timer.op);
    lt.loop().recv(b.get(), in, sizeof in, got.op, /*poll_first=*/true);
  });
  auto fired = timer.result.get_future();
  ASSERT_EQ(fired.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fired.get(), -ETIME);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 19ms);
  ASSERT_EQ(::send(a.get(), "xy", 2, 0), 2);
  auto received = got.result.get_future();
  ASSERT_EQ(received.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(received.get(), 2);
}

TEST_P(Loop, PostedWorkRunsOnTheLoopThread) {
  LoopThread lt(on_backend());
  std::promise<bool> on_loop;
  lt.loop().post([&] { on_loop.set_value(lt.loop().in_loop_thread()); });
  EXPECT_TRUE(on_loop.get_future().get());
  EXPECT_FALSE(lt.loop().in_loop_thread());
  EXPECT_TRUE(lt.loop().running());
}

TEST_P(Loop, TimerFiresAfterItsDelay) {
  LoopThread lt(on_backend());
  Recorded r;
  const auto t0 = std::chrono::steady_clock::now();
  lt.loop().post([&] { lt.loop().after(30ms, r.op); });
  EXPECT_EQ(r.result.get_future().get(), -ETIME);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 29ms);
}

TEST_P(Loop, CancelledTimerCompletesWithEcanceled) {
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] {
    lt.loop().after(10s, r.op);
    lt.loop().cancel(r.op);
  });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), -ECANCELED);
}

TEST_P(Loop, SendAndRecvMoveBytesOverASocketpair) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  LoopThread lt(on_backend());
  Recorded sent, got;
  char out[] = "hello";
  char in[16] = {};
  lt.loop().post([&] {
    lt.loop().recv(b.get(), in, sizeof in, got.op);
    lt.loop().send(a.get(), out, 5, sent.op);
  });
  EXPECT_EQ(sent.result.get_future().get(), 5);
  EXPECT_EQ(got.result.get_future().get(), 5);
  EXPECT_EQ(std::string(in, 5), "hello");
}

TEST_P(Loop, ConnectReachesAListener) {
  const test::LoopbackSocket listener = test::loopback_socket(4);
  ASSERT_NE(listener.port, 0);
  const sockaddr_in addr = listener.addr;
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] {
    lt.loop().connect(client.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr, 1000ms,
                      r.op);
  });
  EXPECT_EQ(r.result.get_future().get(), 0);
}

TEST_P(Loop, ConnectToAClosedPortFailsWithAnErrno) {
  // Bind then close: the port was free a moment ago and nobody listens on it.
  const sockaddr_in addr = test::loopback_socket(-1).addr;
  ASSERT_NE(addr.sin_port, 0);
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] {
    lt.loop().connect(client.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr, 1000ms,
                      r.op);
  });
  EXPECT_EQ(r.result.get_future().get(), -ECONNREFUSED);
}

TEST_P(Loop, RunUntilReturnsWhenTheConditionHolds) {
  UringLoop loop(on_backend());
  Recorded r;
  bool fired = false;
  r.op.context = &fired;
  r.op.complete = [](IoOp& o, int) noexcept { *static_cast<bool*>(o.context) = true; };
  std::thread helper([&] { loop.post([&] { loop.after(5ms, r.op); }); });
  helper.join();
  EXPECT_TRUE(loop.run_until([&] { return fired; }, 5000ms));
  EXPECT_FALSE(loop.running());
}

TEST_P(Loop, DeferredWorkRunsBeforeTheLoopSleeps) {
  // A blocking loop with nothing in flight would sleep forever; the deferred op must run first.
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] { lt.loop().defer(r.op); });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), 0);
}

TEST_P(Loop, StopFromAnotherThreadEndsRun) {
  UringLoop loop(on_backend());
  std::thread runner([&] { loop.run(); });
  while (!loop.running()) std::this_thread::yield();
  loop.stop();
  runner.join();
  EXPECT_FALSE(loop.running());
}

TEST_P(Loop, PinsItsThreadToTheChosenCpu) {
  // The last CPU this process may use (a CI cpuset need not include CPU 0).
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int target = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) target = c;
  }
  ASSERT_GE(target, 0);
  LoopThread lt(on_backend(LoopOptions{.cpu = target}));
  std::promise<int> cpu;
  lt.loop().post([&] { cpu.set_value(sched_getcpu()); });
  EXPECT_EQ(cpu.get_future().get(), target);
}

TEST_P(Loop, CancelledRecvCompletesWithEcanceled) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  LoopThread lt(on_backend());
  Recorded got;
  char in[8] = {};
  lt.loop().post([&] {
    lt.loop().recv(b.get(), in, sizeof in, got.op, /*poll_first=*/true);
    lt.loop().cancel(got.op);
  });
  auto f = got.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), -ECANCELED);
}

TEST_P(Loop, CancelFdCompletesEveryOpOnItWithEcanceled) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  LoopThread lt(on_backend());
  Recorded first, second;
  char in1[8] = {}, in2[8] = {};
  lt.loop().post([&] {
    lt.loop().recv(b.get(), in1, sizeof in1, first.op);
    lt.loop().recv(b.get(), in2, sizeof in2, second.op);
  });
  // A fence: both receives are armed (and found nothing) before the cancel is posted.
  std::promise<void> armed;
  lt.loop().post([&] { armed.set_value(); });
  armed.get_future().get();
  lt.loop().post([&] { lt.loop().cancel_fd(b.get()); });
  auto f1 = first.result.get_future(), f2 = second.result.get_future();
  ASSERT_EQ(f1.wait_for(5s), std::future_status::ready);
  ASSERT_EQ(f2.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f1.get(), -ECANCELED);
  EXPECT_EQ(f2.get(), -ECANCELED);
}

TEST_P(Loop, ACompletionNeverRunsInsideTheVerbThatArmedIt) {
  // The data is there before the receive is armed, so a backend that tries the syscall at once
  // finds it: the completion must still wait for the loop's next pass.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  ASSERT_EQ(::send(a.get(), "abc", 3, 0), 3);
  LoopThread lt(on_backend());
  struct Inline {
    IoOp op;
    bool verb_returned = false;  // loop thread only
    std::promise<std::pair<int, bool>> result;
  } got;
  got.op.context = &got;
  got.op.complete = [](IoOp& o, int res) noexcept {
    auto* g = static_cast<Inline*>(o.context);
    g->result.set_value({res, g->verb_returned});
  };
  char in[8] = {};
  lt.loop().post([&] {
    lt.loop().recv(b.get(), in, sizeof in, got.op);
    EXPECT_TRUE(got.op.armed);
    got.verb_returned = true;
  });
  const auto [res, after_verb] = got.result.get_future().get();
  EXPECT_EQ(res, 3);
  EXPECT_TRUE(after_verb);
}

TEST_P(Loop, ConnectTimeoutCompletesWithEcanceled) {
  // A listener with backlog 0 whose one queue place is taken drops further SYNs: the next
  // connect can only end by its deadline.
  const test::LoopbackSocket listener = test::loopback_socket(0);
  ASSERT_NE(listener.port, 0);
  const sockaddr_in addr = listener.addr;
  UniqueFd filler(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(filler.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  std::this_thread::sleep_for(50ms);  // the filler's final ACK lands it in the accept queue
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  LoopThread lt(on_backend());
  Recorded r;
  const auto t0 = std::chrono::steady_clock::now();
  lt.loop().post([&] {
    lt.loop().connect(client.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr, 100ms,
                      r.op);
  });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), -ECANCELED);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 99ms);
}

TEST_P(Loop, ManySocketsEachDeliverTheirOwnBytes) {
  constexpr int kPairs = 300;
  std::vector<UniqueFd> near, far;
  for (int i = 0; i < kPairs; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    near.emplace_back(sv[0]);
    far.emplace_back(sv[1]);
  }
  LoopThread lt(on_backend());
  std::vector<Recorded> got(kPairs);
  std::vector<std::array<char, 16>> in(kPairs);
  lt.loop().post([&] {
    for (int i = 0; i < kPairs; ++i) {
      lt.loop().recv(far[i].get(), in[i].data(), in[i].size(), got[i].op, /*poll_first=*/true);
    }
  });
  for (int i = kPairs - 1; i >= 0; --i) {  // reverse order: no reliance on arming order
    const std::string msg = "m" + std::to_string(i);
    ASSERT_EQ(::send(near[i].get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  }
  for (int i = 0; i < kPairs; ++i) {
    const std::string msg = "m" + std::to_string(i);
    auto f = got[i].result.get_future();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "socket " << i;
    ASSERT_EQ(f.get(), static_cast<int>(msg.size()));
    EXPECT_EQ(std::string(in[i].data(), msg.size()), msg);
  }
}

TEST_P(Loop, AReusedFdNumberDeliversOnItsNewSocket) {
  // Connection's order: shut down and close the socket, then cancel its receive. The next socket
  // usually gets the same number; a receive on it must not wait on the old file's registration.
  LoopThread lt(on_backend());
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  const int old_number = b.get();
  Recorded old_recv;
  char in[8] = {};
  std::promise<void> closed;
  lt.loop().post([&] {
    lt.loop().recv(b.get(), in, sizeof in, old_recv.op, /*poll_first=*/true);
    lt.loop().post([&] {
      ::shutdown(b.get(), SHUT_RDWR);
      b.reset();
      lt.loop().cancel(old_recv.op);
      closed.set_value();
    });
  });
  closed.get_future().get();
  old_recv.result.get_future().get();  // -ECANCELED or 0 (the shutdown): either way it ended
  a.reset();
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd c(sv[0]), d(sv[1]);
  const bool reused = c.get() == old_number || d.get() == old_number;
  UniqueFd& reader = d.get() == old_number ? d : c;
  UniqueFd& writer = d.get() == old_number ? c : d;
  Recorded fresh;
  lt.loop().post([&] { lt.loop().recv(reader.get(), in, sizeof in, fresh.op, true); });
  std::this_thread::sleep_for(20ms);  // the receive waits before the bytes arrive
  ASSERT_EQ(::send(writer.get(), "new", 3, 0), 3);
  auto f = fresh.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "fd number reused: " << reused;
  EXPECT_EQ(f.get(), 3);
  EXPECT_TRUE(reused) << "the kernel gave a new number: the reuse was not exercised";
}

TEST_P(Loop, TimersFireInDeadlineOrder) {
  LoopThread lt(on_backend());
  std::vector<int> order;  // loop thread until `all` is set
  std::promise<void> all;
  struct Tagged {
    IoOp op;
    int tag = 0;
    std::vector<int>* order = nullptr;
    std::promise<void>* all = nullptr;
  };
  std::array<Tagged, 5> timers;
  const int delays_ms[] = {40, 10, 30, 20, 50};
  lt.loop().post([&] {
    for (std::size_t i = 0; i < timers.size(); ++i) {
      Tagged& t = timers[i];
      t.tag = delays_ms[i];
      t.order = &order;
      t.all = &all;
      t.op.context = &t;
      t.op.complete = [](IoOp& o, int res) noexcept {
        auto* self = static_cast<Tagged*>(o.context);
        self->order->push_back(res == -ETIME ? self->tag : -1);
        if (self->order->size() == 5) self->all->set_value();
      };
      lt.loop().after(std::chrono::milliseconds(delays_ms[i]), t.op);
    }
    lt.loop().cancel(timers[2].op);  // the 30 ms one: -ECANCELED, recorded as -1, first
  });
  ASSERT_EQ(all.get_future().wait_for(5s), std::future_status::ready);
  std::promise<std::vector<int>> seen;
  lt.loop().post([&] { seen.set_value(order); });
  EXPECT_EQ(seen.get_future().get(), (std::vector<int>{-1, 10, 20, 40, 50}));
}

TEST_P(Loop, RefusesAnOutOfRangeKnob) {
  EXPECT_THROW(UringLoop(on_backend(LoopOptions{.entries = 2})), std::invalid_argument);
  EXPECT_THROW(UringLoop(on_backend(LoopOptions{.cpu = -5})), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Backends, Loop, ::testing::Values(Backend::kUring, Backend::kEpoll),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return std::string(to_string(p.param));
                         });

}  // namespace
}  // namespace echo::io
