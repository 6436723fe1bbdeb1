// SPDX-License-Identifier: MIT
// LoopOptions::backend when the kernel refuses io_uring_setup, staged with a seccomp filter on a
// fresh thread (the filter never leaves it): auto falls back to epoll for EPERM and ENOSYS and
// records why, uring throws the kernel's error, and any other refusal still throws under auto.
#include <sys/syscall.h>

#include <cerrno>
#include <cstdlib>
#include <future>
#include <string>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>

#include <echo/io/uring_loop.h>

#include "support/seccomp.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  bool filtered = false;
  Backend backend = Backend::kAuto;
  std::string reason;
  int error = 0;            // the std::system_error's errno when construction threw
  bool posted_ran = false;  // a post ran on the loop (it works, not merely constructs)
};

// Builds a loop with `backend` on a thread whose io_uring_setup answers `err`.
Outcome build_refused(Backend backend, int err) {
  Outcome out;
  std::thread t([&] {
    out.filtered = test::refuse_syscall_on_this_thread(__NR_io_uring_setup, err);
    if (!out.filtered) return;
    try {
      LoopThread lt(LoopOptions{.backend = backend});
      out.backend = lt.loop().backend();
      out.reason = std::string(lt.loop().fallback_reason());
      std::promise<void> ran;
      lt.loop().post([&] { ran.set_value(); });
      out.posted_ran = ran.get_future().wait_for(5s) == std::future_status::ready;
    } catch (const std::system_error& e) {
      out.error = e.code().value();
    }
  });
  t.join();
  return out;
}

TEST(BackendFallback, AutoRunsOnEpollWhenIoUringIsNotPermitted) {
  const Outcome o = build_refused(Backend::kAuto, EPERM);
  ASSERT_TRUE(o.filtered) << "the kernel refused the seccomp filter";
  EXPECT_EQ(o.error, 0);
  EXPECT_EQ(o.backend, Backend::kEpoll);
  EXPECT_EQ(o.reason, "io_uring refused (Operation not permitted)");
  EXPECT_TRUE(o.posted_ran);
}

TEST(BackendFallback, AutoRunsOnEpollWhenTheKernelLacksIoUring) {
  const Outcome o = build_refused(Backend::kAuto, ENOSYS);
  ASSERT_TRUE(o.filtered);
  EXPECT_EQ(o.backend, Backend::kEpoll);
  EXPECT_EQ(o.reason, "io_uring refused (Function not implemented)");
  EXPECT_TRUE(o.posted_ran);
}

TEST(BackendFallback, SaysSoOnceOnStderrHoweverManyLoopsFallBack) {
  // In a fresh process (the threadsafe death-test style re-executes this binary): no earlier
  // test's fallback has printed the line yet.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::testing::internal::CaptureStderr();
        const bool both = build_refused(Backend::kAuto, EPERM).backend == Backend::kEpoll &&
                          build_refused(Backend::kAuto, EPERM).backend == Backend::kEpoll;
        const std::string said = ::testing::internal::GetCapturedStderr();
        std::exit(both && said ==
                              "echostore: io_uring refused (Operation not permitted); using "
                              "epoll\n"
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(BackendFallback, AutoStillThrowsForAnyOtherRefusal) {
  const Outcome o = build_refused(Backend::kAuto, ENOMEM);
  ASSERT_TRUE(o.filtered);
  EXPECT_EQ(o.error, ENOMEM);
}

TEST(BackendFallback, UringNeverFallsBack) {
  const Outcome o = build_refused(Backend::kUring, EPERM);
  ASSERT_TRUE(o.filtered);
  EXPECT_EQ(o.error, EPERM);
}

TEST(BackendFallback, EpollNeverTriesIoUring) {
  // ENOMEM would make any io_uring attempt throw: an epoll loop must not make one.
  const Outcome o = build_refused(Backend::kEpoll, ENOMEM);
  ASSERT_TRUE(o.filtered);
  EXPECT_EQ(o.error, 0);
  EXPECT_EQ(o.backend, Backend::kEpoll);
  EXPECT_TRUE(o.reason.empty());
  EXPECT_TRUE(o.posted_ran);
}

TEST(BackendFallback, AutoRunsOnIoUringWhenTheKernelAllowsIt) {
  UringLoop loop(LoopOptions{.backend = Backend::kAuto});
  EXPECT_EQ(loop.backend(), Backend::kUring);
  EXPECT_TRUE(loop.fallback_reason().empty());
}

}  // namespace
}  // namespace echo::io
