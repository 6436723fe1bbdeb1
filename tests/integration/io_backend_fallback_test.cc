// SPDX-License-Identifier: MIT
// The broadcast lane where the kernel refuses io_uring (Docker's default seccomp profile): a child
// process installs a filter that answers io_uring_setup with EPERM, then runs two engine nodes on
// the real server. With io.backend auto they run on epoll, say why in their stats, and a publish
// on one drops the other's row; with io.backend uring the start fails with the kernel's error.
#include <sys/syscall.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <echo/engine/engine.h>

#include "engine_nodes.h"
#include "support/child_process.h"
#include "support/seccomp.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Source;

// The child: argv = --child-refused <port> <auto|uring>. Answers one line:
//   "filter-refused"                    the kernel refused the seccomp filter
//   "start-failed <errno> <message>"    a node's start() failed
//   "lane <a's backend> <b's backend> <source of a's read after the publish> <value> | <reason>"
int child_main(int argc, char** argv) {
  if (argc != 4) return 64;
  const int port = std::atoi(argv[2]);
  const std::string backend = argv[3];
  // On this thread and every thread it starts from here on: the engines' io threads included.
  if (!refuse_syscall_on_this_thread(__NR_io_uring_setup, EPERM)) {
    write_line(1, "filter-refused");
    return 0;
  }
  std::vector<std::unique_ptr<Engine>> nodes;
  for (unsigned id : {61u, 62u}) {
    engine::EngineOptions o = node_options("127.0.0.1", port, id);
    o.io.backend = backend == "uring" ? io::Backend::kUring : io::Backend::kAuto;
    auto e = std::make_unique<Engine>(
        o,
        std::vector{table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("px=100"))});
    if (const std::error_code ec = e->start()) {
      write_line(1, "start-failed " + std::to_string(ec.value()) + " " + ec.message());
      return 0;
    }
    nodes.push_back(std::move(e));
  }
  Engine& a = *nodes[0];
  Engine& b = *nodes[1];
  const table::BrandedId name = fresh_id("AST");
  auto fill = a.get("quotes", name.view());
  if (!fill || fill->source != Source::kLoader) {
    write_line(1, "error fill");
    return 0;
  }
  // b publishes a newer value: a's row goes, and a's next read is L2's.
  auto published = b.publish("quotes", name.view(), "px=101");
  if (!published) {
    write_line(1, "error publish " + published.error().message());
    return 0;
  }
  const bool dropped = eventually([&] { return writer_of(a, "quotes").stats().applied >= 1; });
  auto after = a.get("quotes", name.view());
  const auto sa = a.stats();
  const auto sb = b.stats();
  std::string read = "l1";  // where a's read after the publish came from
  if (!dropped) {
    read = "kept";
  } else if (!after) {
    read = "error";
  } else if (after->source == Source::kL2) {
    read = "l2";
  }
  write_line(1, "lane " + std::string(io::to_string(sa.io_backend)) + " " +
                    std::string(io::to_string(sb.io_backend)) + " " + read + " " +
                    (after ? after->value : "-") + " | " + sa.io_fallback_reason);
  return 0;
}

class IoBackendFallback : public SingleServerTest {
 protected:
  std::string run_child(const std::string& backend) {
    auto child = ChildProcess::spawn({"--child-refused", std::to_string(server().port()), backend});
    if (!child) return "(no child)";
    auto line = child->receive(std::chrono::seconds(30)).value_or("(no answer)");
    EXPECT_EQ(child->wait_exit(), 0) << "the child node process did not exit cleanly";
    return line;
  }
};

TEST_F(IoBackendFallback, AutoRunsTheBroadcastLaneOnEpollAndSaysWhy) {
  const std::string line = run_child("auto");
  ASSERT_NE(line, "filter-refused") << "the kernel refused the seccomp filter";
  EXPECT_EQ(line, "lane epoll epoll l2 px=101 | io_uring refused (Operation not permitted)");
}

TEST_F(IoBackendFallback, UringFailsTheStartWithTheKernelsError) {
  const std::string line = run_child("uring");
  ASSERT_NE(line, "filter-refused") << "the kernel refused the seccomp filter";
  EXPECT_EQ(line.rfind("start-failed " + std::to_string(EPERM) + " ", 0), 0u) << line;
}

TEST_F(IoBackendFallback, WithoutTheFilterAutoRunsOnIoUring) {
  // The control: the same node in this process, where io_uring is allowed, does not fall back.
  engine::EngineOptions o = node_options(server(), 63);
  o.io.backend = io::Backend::kAuto;
  Engine e(o, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, answering("x"))});
  ASSERT_EQ(e.start(), std::error_code{});
  EXPECT_EQ(e.stats().io_backend, io::Backend::kUring);
  EXPECT_TRUE(e.stats().io_fallback_reason.empty());
}

}  // namespace
}  // namespace echo::test

int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--child-refused", echo::test::child_main);
}
