// SPDX-License-Identifier: MIT
// The engine's per-thread storage (a thread's call storage, its caller links, its job fan-out
// round) outlives the thread's own thread_local destructors, against a real redis-server: an
// application thread_local made before the thread's first call, whose destructor publishes on
// both lanes and reads, runs after the engine's storage was made and still finds it whole; and a
// static Engine destroyed by exit() (after the main thread's thread_locals) stops and releases
// its node lease. Under ASan a use after free in either aborts the thread's process.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using table::BrandedId;

std::vector<engine::TableSpec> lanes() {
  return {table_spec("tx_b", "AST", CoherenceMode::kBroadcast, answering("loaded")),
          table_spec("tx_j", "AST", CoherenceMode::kJob, answering("loaded"))};
}

// What the application's thread_local did on its way out, for the test thread to check.
struct Outcome {
  std::atomic<int> published{0}, read{0}, ran{0};
};

// An application's per-thread object whose destructor writes through the engine.
struct Farewell {
  Engine* engine = nullptr;
  BrandedId name = fresh_id("AST");
  Outcome* out = nullptr;
  ~Farewell() {
    if (engine == nullptr) return;
    out->ran.store(1);
    if (engine->publish("tx_b", name.view(), "bye-b")) out->published.fetch_add(1);
    if (engine->publish("tx_j", name.view(), "bye-j")) out->published.fetch_add(1);
    const auto got = engine->get("tx_b", name.view());
    if (got && got->value == "bye-b") out->read.store(1);
  }
};

class ThreadExit : public SingleServerTest {};

TEST_F(ThreadExit, AThreadLocalWhoseDestructorPublishesFindsTheEnginesStorageWhole) {
  auto a = node(1, lanes());
  ASSERT_TRUE(a);
  Outcome out;
  BrandedId name = fresh_id("AST");
  std::thread t([&] {
    // Made before the thread's first call, so destroyed after the engine's per-thread objects
    // would be, were they plain thread_locals.
    thread_local Farewell farewell;
    farewell.engine = a.get();
    farewell.out = &out;
    name = farewell.name;
    ASSERT_TRUE(a->publish("tx_b", fresh_id("AST").view(), "first-b"));  // the link, the call
    ASSERT_TRUE(a->publish("tx_j", fresh_id("AST").view(), "first-j"));  // the fan-out's round
  });
  t.join();
  EXPECT_EQ(out.ran.load(), 1);
  EXPECT_EQ(out.published.load(), 2) << "a publish from a thread_local's destructor failed";
  EXPECT_EQ(out.read.load(), 1);
  EXPECT_EQ(l2_raw(client(), l2_key("tx_b", name)).substr(14), "bye-b");
  EXPECT_EQ(l2_raw(client(), l2_key("tx_j", name)).substr(14), "bye-j");
}

TEST_F(ThreadExit, AStaticEngineDestroyedAtExitStopsAndReleasesItsLease) {
  const std::string host = server().host();
  const int port = server().port();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: an engine held by a static, destroyed by exit() after the main thread's
    // thread_locals; its stop() releases the node lease through a script on this thread.
    static std::unique_ptr<Engine> held;
    held = start_node(node_options(host, port, 7), lanes());
    if (!held) std::_Exit(3);
    if (!held->publish("tx_b", fresh_id("AST").view(), "static-b")) std::_Exit(4);
    if (!held->publish("tx_j", fresh_id("AST").view(), "static-j")) std::_Exit(5);
    std::exit(0);  // NOLINT(concurrency-mt-unsafe): the child's one thread that calls exit
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The lease was released by the static's stop: node 7's lease key is gone.
  EXPECT_EQ(l2_raw(client(), "{ecc}:node:7"), "(nil)");
}

}  // namespace
}  // namespace echo::test
