// SPDX-License-Identifier: MIT
// The loop's accept verb on both backends (one value-parametrized suite, as uring_loop_test.cc's):
// a connection already queued, one that arrives after the arming, the new fd's flags, cancel, and
// a socket that is not listening. Its own file because uring_loop_test.cc is at its size limit.
#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include <echo/io/unique_fd.h>
#include <echo/io/uring_loop.h>

#include "support/loopback.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;

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

// A loopback listener on a kernel-chosen port (support/loopback.h), and clients dialled to it.
struct Listener : test::LoopbackSocket {
  Listener() : LoopbackSocket(test::loopback_socket(8)) { EXPECT_GT(port, 0) << "no listener"; }
  UniqueFd dial() const {
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(c.get(), where(), sizeof addr), 0);
    return c;
  }
};

class LoopAccept : public ::testing::TestWithParam<Backend> {
 protected:
  LoopOptions on_backend() const { return LoopOptions{.backend = GetParam()}; }
};

// The accepted fd carries the flags the verb promises, and bytes flow on it.
void expect_usable(int fd, const UniqueFd& client) {
  ASSERT_GE(fd, 0) << "accept failed: " << -fd;
  UniqueFd accepted(fd);
  EXPECT_NE(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << "the new socket must be non-blocking";
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "the new socket must be close-on-exec";
  ASSERT_EQ(::send(client.get(), "ping", 4, 0), 4);
  char in[8] = {};
  ssize_t n = -1;
  for (int i = 0; i < 500 && n < 0; ++i) {
    n = ::recv(fd, in, sizeof in, 0);
    if (n < 0) std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(n, 4);
  EXPECT_EQ(std::string_view(in, 4), "ping");
}

TEST_P(LoopAccept, TakesAConnectionAlreadyQueued) {
  Listener l;
  UniqueFd client = l.dial();  // queued in the backlog before the verb is armed
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] { lt.loop().accept(l.fd.get(), r.op); });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  expect_usable(f.get(), client);
}

TEST_P(LoopAccept, WaitsForAConnectionThatArrivesLater) {
  Listener l;
  LoopThread lt(on_backend());
  Recorded r, timer;
  lt.loop().post([&] { lt.loop().accept(l.fd.get(), r.op); });
  auto f = r.result.get_future();
  EXPECT_EQ(f.wait_for(50ms), std::future_status::timeout) << "nothing to accept yet";
  // The loop is not blocked by the waiting accept: a timer armed meanwhile fires.
  lt.loop().post([&] { lt.loop().after(1ms, timer.op); });
  EXPECT_EQ(timer.result.get_future().get(), -ETIME);
  UniqueFd client = l.dial();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  expect_usable(f.get(), client);
}

TEST_P(LoopAccept, TakesOneConnectionPerArming) {
  Listener l;
  UniqueFd c1 = l.dial(), c2 = l.dial();
  LoopThread lt(on_backend());
  Recorded a, b;
  lt.loop().post([&] {
    lt.loop().accept(l.fd.get(), a.op);
    lt.loop().accept(l.fd.get(), b.op);
  });
  const int fa = a.result.get_future().get();
  const int fb = b.result.get_future().get();
  ASSERT_GE(fa, 0);
  ASSERT_GE(fb, 0);
  EXPECT_NE(fa, fb);
  UniqueFd ua(fa), ub(fb);
}

TEST_P(LoopAccept, CancelledAcceptCompletesWithEcanceled) {
  Listener l;
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] {
    lt.loop().accept(l.fd.get(), r.op);
    lt.loop().cancel(r.op);
  });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), -ECANCELED);
}

TEST_P(LoopAccept, ASocketThatDoesNotListenFailsWithEinval) {
  UniqueFd idle(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  LoopThread lt(on_backend());
  Recorded r;
  lt.loop().post([&] { lt.loop().accept(idle.get(), r.op); });
  auto f = r.result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), -EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Backends, LoopAccept, ::testing::Values(Backend::kUring, Backend::kEpoll),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return std::string(to_string(p.param));
                         });

}  // namespace
}  // namespace echo::io
