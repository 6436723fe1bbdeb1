// SPDX-License-Identifier: MIT
// CallerLinks under TSan, against a real redis-server: threads come and go (each takes a link at
// its first call and gives it back as it ends), more of them than the limit, while another thread
// reads the counters; then the engine's stop protocol (running off, wait for the calls in flight,
// close_all) runs under threads still calling. Every call a link answered was answered PONG, the
// links held never exceed the limit, and none is held after close_all.
#include <atomic>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <echo/testing/local_server.h>

#include "caller_links.h"

namespace echo::engine {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(CallerLinksStress, ThreadsComeAndGoUnderTheLimitAndStopClosesEveryLink) {
  testing::LocalServer server;
  constexpr std::size_t kLimit = 3;
  constexpr int kWorkers = 6, kGenerations = 8, kCallsPerThread = 20;
  CallerLinks links(
      kLimit,
      [&] {
        io::LinkTarget t;
        t.host = server.host();
        t.port = server.port();
        t.client_name = "echo-stress";
        return t;
      },
      1s);
  // The engine's protocol (Engine::Impl::Inflight): count in, check running, call, count out.
  std::atomic<bool> running{true};
  std::atomic<int> inflight{0};
  std::atomic<int> pongs{0}, wrong{0}, without_link{0};
  auto one_call = [&] {
    inflight.fetch_add(1, std::memory_order_seq_cst);
    if (running.load(std::memory_order_seq_cst)) {
      if (io::BlockingLink* link = links.mine()) {
        io::Resp3Owned r;
        bool sent = false;
        const std::string_view ping[] = {"PING"};
        const std::error_code ec = link->call(ping, nullptr, Clock::now() + 2s, r, sent);
        (ec || r.view().str() != "PONG" ? wrong : pongs).fetch_add(1);
        if (!ec) links.answered();
      } else {
        without_link.fetch_add(1);
      }
    }
    inflight.fetch_sub(1, std::memory_order_seq_cst);
  };
  std::atomic<bool> watching{true};
  std::atomic<std::uint64_t> most_held{0};
  std::thread watcher([&] {
    while (watching.load()) {
      const std::uint64_t held = links.counters().open;
      if (held > most_held.load()) most_held.store(held);
    }
  });
  // Generations of short-lived threads, then a last one still calling while stop runs.
  for (int g = 0; g < kGenerations; ++g) {
    std::vector<std::jthread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&] {
        for (int i = 0; i < kCallsPerThread; ++i) one_call();
      });
    }
  }
  std::atomic<bool> calling{true};
  std::vector<std::jthread> last;
  for (int w = 0; w < kWorkers; ++w) {
    last.emplace_back([&] {
      while (calling.load()) one_call();
    });
  }
  std::this_thread::sleep_for(50ms);
  running.store(false, std::memory_order_seq_cst);
  while (inflight.load(std::memory_order_seq_cst) != 0) std::this_thread::sleep_for(1ms);
  links.close_all();
  EXPECT_EQ(links.counters().open, 0u);
  calling.store(false);
  last.clear();  // joins; their links were closed under them, between calls
  watching.store(false);
  watcher.join();

  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(pongs.load(), kCallsPerThread);
  EXPECT_LE(most_held.load(), kLimit);
  EXPECT_GT(without_link.load(), 0) << "no thread was ever beyond the limit";
  EXPECT_EQ(links.counters().calls, static_cast<std::uint64_t>(pongs.load()));
  EXPECT_EQ(links.counters().open, 0u);
}

}  // namespace
}  // namespace echo::engine
