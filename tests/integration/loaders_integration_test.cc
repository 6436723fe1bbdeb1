// SPDX-License-Identifier: MIT
// Each table's loaders against a real redis-server: a table's loader runs on the table's own
// threads (a loader blocked in one table never holds up another table's miss, and with
// loader_threads = 2 not another name of its own table), a loader that misses its loader_timeout
// answers loader_timeout and its late answer is discarded (L2 and L1 never see it; a later get
// loads again), and what a loader says when it fails (a LoadError's reason, an exception's
// what()) reaches the caller in the Error's message.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Errc;
using table::BrandedId;

class Loaders : public SingleServerTest {};

// A loader that holds every call until the test opens it, and says when a call has entered.
// Bounded: a call gives up after 60 s, so a test that fails before it opens cannot hang stop().
class Gate {
 public:
  engine::Loader loader(std::string value) {
    return [this, value = std::move(value)](const BrandedId&) -> engine::LoadResult {
      std::unique_lock lock(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(60), [this] { return open_; });
      return engine::Loaded{value, std::nullopt};
    };
  }
  bool wait_entered(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return entered_ >= n; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

// Opens the gate when it goes, before the engine declared ahead of it stops (stop() waits for
// the loader calls under way).
struct OpenOnExit {
  Gate& gate;
  ~OpenOnExit() { gate.open(); }
};

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Fails on the one shared loader thread (before loader_threads): B's miss waited behind A's
// blocked loader until get_timeout and answered `timeout`.
TEST_F(Loaders, ABlockedLoaderOfOneTableDoesNotDelayAnotherTablesMiss) {
  Gate gate;
  LoaderProbe quick;
  std::promise<std::string> slow;  // before the engine: its stop() may still answer it
  auto options = node_options(server(), 41);
  options.get_timeout = std::chrono::seconds(3);
  Engine e(options, {table_spec("slowt", "AST", CoherenceMode::kNone, gate.loader("slow")),
                     table_spec("quickt", "AST", CoherenceMode::kNone, quick.answer("quick"))});
  ASSERT_EQ(e.start(), std::error_code{});
  const OpenOnExit opener{gate};

  e.get_async("slowt", fresh_id("AST").view(),
              [&slow](auto r) { slow.set_value(r ? r->value : "error " + r.error().message()); });
  ASSERT_TRUE(gate.wait_entered(1)) << "table A's loader never ran";

  const auto t0 = Clock::now();
  auto got = e.get("quickt", fresh_id("AST").view());
  const long long took = ms_since(t0);
  ASSERT_TRUE(got) << "table B's miss answered '" << got.error().message() << "' after " << took
                   << " ms while table A's loader was blocked";
  EXPECT_EQ(got->value, "quick");
  EXPECT_EQ(got->source, engine::Source::kLoader);
  EXPECT_EQ(quick.runs(), 1);

  gate.open();
  EXPECT_EQ(slow.get_future().get(), "slow");
  std::printf("[ loaders ] table B's miss answered in %lld ms while table A's loader was held\n",
              took);
}

TEST_F(Loaders, TwoLoaderThreadsLoadTwoNamesOfOneTableAtOnce) {
  // The first call holds its thread; with two, the second name loads on the other one.
  auto first = std::make_shared<Gate>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  engine::Loader held = first->loader("held");
  auto spec = table_spec("twot", "AST", CoherenceMode::kNone,
                         [calls, held](const BrandedId& name) -> engine::LoadResult {
                           if (calls->fetch_add(1) == 0) return held(engine::Key(name));
                           return engine::Loaded{"free", std::nullopt};
                         });
  spec.loader_threads = 2;
  std::promise<std::string> held_answer;  // before the engine: its stop() may still answer it
  auto options = node_options(server(), 42);
  options.get_timeout = std::chrono::seconds(3);
  Engine e(options, {spec});
  ASSERT_EQ(e.start(), std::error_code{});
  const OpenOnExit opener{*first};

  e.get_async("twot", fresh_id("AST").view(), [&held_answer](auto r) {
    held_answer.set_value(r ? r->value : "error " + r.error().message());
  });
  ASSERT_TRUE(first->wait_entered(1));
  auto got = e.get("twot", fresh_id("AST").view());
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->value, "free");
  first->open();
  EXPECT_EQ(held_answer.get_future().get(), "held");
}

TEST_F(Loaders, ALoaderPastItsTimeoutAnswersLoaderTimeoutAndItsLateAnswerIsDiscarded) {
  Gate gate;
  auto spec = table_spec("lazyt", "AST", CoherenceMode::kNone, gate.loader("late"));
  spec.loader_timeout = std::chrono::milliseconds(200);
  auto options = node_options(server(), 43);
  options.get_timeout = std::chrono::seconds(10);
  Engine e(options, {spec});
  ASSERT_EQ(e.start(), std::error_code{});
  const OpenOnExit opener{gate};
  const BrandedId name = fresh_id("AST");

  const auto t0 = Clock::now();
  auto got = e.get("lazyt", name.view());
  const long long took = ms_since(t0);
  ASSERT_FALSE(got) << "the held loader answered";
  EXPECT_EQ(got.error(), Errc::kLoaderTimeout) << got.error();
  EXPECT_NE(got.error().message().find("200 ms"), std::string::npos) << got.error().message();
  // The writer arms the deadline on its own millisecond clock, whose reading at the flight's
  // start may lie up to 1 ms behind this thread's t0 (whole milliseconds on either side): 199
  // whole ms here is on time (the fresh clone saw it once).
  EXPECT_GE(took, 199);
  EXPECT_LT(took, 5000) << "answered by get_timeout, not by loader_timeout";
  EXPECT_EQ(writer_of(e, "lazyt").stats().loader_timeouts, 1u);
  EXPECT_FALSE(l1_holds(e, "lazyt", name));

  // The loader answers now: its answer is counted and thrown away, L2 never sees it.
  gate.open();
  ASSERT_TRUE(eventually([&] { return writer_of(e, "lazyt").stats().loader_late == 1; }));
  EXPECT_EQ(l2_raw(client(), l2_key("lazyt", name)), "(nil)");
  EXPECT_FALSE(l1_holds(e, "lazyt", name));

  // A later get loads again, and the loader, free now, answers in time.
  auto again = e.get("lazyt", name.view());
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->value, "late");
  EXPECT_EQ(again->source, engine::Source::kLoader);
  std::printf("[ loaders ] loader_timeout 200 ms answered in %lld ms (%s); late answers %llu\n",
              took, got.error().message().c_str(),
              static_cast<unsigned long long>(writer_of(e, "lazyt").stats().loader_late));
}

// Fails before the Error's message: get answered "loader_failed" and the reason was lost.
TEST_F(Loaders, ALoadErrorsReasonReachesTheCaller) {
  auto spec =
      table_spec("failt", "AST", CoherenceMode::kNone, [](const BrandedId&) -> engine::LoadResult {
        return engine::LoadError{"no such quote in the feed"};
      });
  auto e = node(44, {spec});
  ASSERT_TRUE(e);
  auto got = e->get("failt", fresh_id("AST").view());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), Errc::kLoaderFailed);
  EXPECT_EQ(got.error().message(), "loader failed: no such quote in the feed");
}

// Fails before the Error's message: a throw was taken as LoadError{"loader threw"} and get
// answered "loader_failed".
TEST_F(Loaders, AThrowingLoadersWhatReachesTheCaller) {
  auto spec =
      table_spec("throwt", "AST", CoherenceMode::kNone, [](const BrandedId&) -> engine::LoadResult {
        throw std::runtime_error("feed connection reset");
      });
  auto e = node(45, {spec});
  ASSERT_TRUE(e);
  auto got = e->get("throwt", fresh_id("AST").view());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), Errc::kLoaderFailed);
  EXPECT_EQ(got.error().message(), "loader failed: feed connection reset");
}

TEST_F(Loaders, InvalidateAnswersWhetherL2HeldTheKey) {
  auto e = node(46, {table_spec("invt", "AST", CoherenceMode::kNone, answering("x"))});
  ASSERT_TRUE(e);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(e->put("invt", name.view(), "px=1"));
  auto gone = e->invalidate("invt", name.view());
  ASSERT_TRUE(gone) << gone.error();
  EXPECT_TRUE(*gone);
  EXPECT_FALSE(l1_holds(*e, "invt", name));
  auto again = e->invalidate("invt", name.view());
  ASSERT_TRUE(again) << again.error();
  EXPECT_FALSE(*again);
  EXPECT_EQ(e->invalidate("nosuch", name.view()).error(), Errc::kNoSuchCache);
}

}  // namespace
}  // namespace echo::test
