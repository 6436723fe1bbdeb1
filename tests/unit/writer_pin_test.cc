// SPDX-License-Identifier: MIT
// writer_cpu: a pin the kernel refuses (a CPU outside the process's cpuset) is counted in
// WriterStats::pin_failures and the writer runs unpinned. The refusal is staged with a seccomp
// filter on one test thread (inherited by the writer thread it starts, and by nothing else) that
// answers sched_setaffinity with EINVAL, as the kernel does for a CPU the cpuset excludes.
#include <echo/engine/internal/table_writer.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "support/seccomp.h"

namespace echo::engine {
namespace {

TableSpec pinned_spec() {
  TableSpec s;
  s.name = "pinned";
  s.kind = "AST";
  s.loader = [](const table::BrandedId&) -> LoadResult { return LoadError{"unused"}; };
  s.writer_cpu = 0;
  return s;
}

WriterPorts idle_ports() {
  WriterPorts p;
  p.fetch = [](std::string_view, std::function<void(L2Fetch)>) {};
  p.load = [](std::string_view, const table::BrandedId&, bool, std::shared_ptr<LoadClaim>,
              std::function<void(LoadOutcome)>) {};
  return p;
}

// This thread, and every thread it starts from now on: sched_setaffinity fails with EINVAL.
bool refuse_affinity_on_this_thread() {
  return echo::test::refuse_syscall_on_this_thread(__NR_sched_setaffinity, EINVAL);
}

// Starts a writer pinned to CPU 0, waits for its first loop pass (the pin comes before it), and
// answers its stats.
WriterStats run_pinned_writer() {
  TableWriter w(pinned_spec(), idle_ports(), 1);
  w.start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.stats().passes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  WriterStats s = w.stats();
  w.stop();
  return s;
}

TEST(WriterPin, APinTheKernelAllowsCountsNoFailure) {
  const WriterStats s = run_pinned_writer();
  EXPECT_GT(s.passes, 0u);
  EXPECT_EQ(s.pin_failures, 0u);
}

TEST(WriterPin, ARefusedPinIsCountedAndTheWriterRunsUnpinned) {
  WriterStats s;
  bool filtered = false;
  std::thread([&] {
    filtered = refuse_affinity_on_this_thread();
    if (filtered) s = run_pinned_writer();
  }).join();
  ASSERT_TRUE(filtered) << "seccomp filter refused: " << errno;
  EXPECT_GT(s.passes, 0u) << "the writer runs";
  EXPECT_EQ(s.pin_failures, 1u);
}

}  // namespace
}  // namespace echo::engine
