// SPDX-License-Identifier: MIT
// Engine::stop against a real server that goes away at varied moments: a node with a job-lane
// table (its consumer parks a BLMPOP on its own connection) and a broadcast table is started,
// fed jobs and stopped, again and again, with the server killed, restarted or its queue keys
// deleted before the stop, during it, while the consumer is parked or while it reconnects. A
// connection (or consumer) whose close does not end within 10 s aborts the process through its
// watchdog, so a stop that would leave the ring a reference, or hang, fails this test.
// ECHO_ENGINE_STOP_ROUNDS overrides the round count (70: ten of each moment).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <echo/engine/internal/job_consumer.h>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;

class EngineStop : public SingleServerTest {};

std::vector<engine::TableSpec> tables() {
  auto lane = table_spec("estop", "AST", CoherenceMode::kJob,
                         [](const table::BrandedId&) -> engine::LoadResult {
                           return engine::Loaded{"loaded", std::nullopt};
                         });
  lane.job_lease_ms = 2000;
  lane.job_beat_ms = 100;  // BLMPOP times out every 100 ms: parks and re-parks often
  lane.job_retry_delay_ms = 20;
  auto bcast = table_spec("estopb", "AST", CoherenceMode::kBroadcast,
                          [](const table::BrandedId&) -> engine::LoadResult {
                            return engine::Loaded{"loaded", std::nullopt};
                          });
  return {lane, bcast};
}

std::uint64_t parks(const Engine& e) {
  for (const auto& t : e.stats().tables) {
    if (t.name == "estop" && t.consumer) return t.consumer->parks;
  }
  return 0;
}

enum class Moment : int {
  kQuiet,            // the server stays: stop a parked consumer
  kKeysDeleted,      // the lane's keys deleted while parked (drill H4), then stop
  kKilledBefore,     // SIGKILL, then stop at once (connections failing, first backoff)
  kKilledInBackoff,  // SIGKILL, then stop 50-400 ms later (backoff, connects refused)
  kRestartedBefore,  // a hard restart on the same port, then stop (reconnecting, booting)
  kKilledDuring,     // SIGKILL from another thread 0-3 ms into the stop
  kRestartedDuring,  // a restart from another thread while the stop runs
  kCount
};

const char* name(Moment m) {
  static const char* names[] = {"quiet",           "keys-deleted",     "killed-before",
                                "killed-backoff",  "restarted-before", "killed-during",
                                "restarted-during"};
  return names[static_cast<int>(m)];
}

// An Engine runs once: its writers' rings belong to the threads of that run, and the job items
// its consumers published carry tickets the next run's consumers would reuse.
TEST_F(EngineStop, AStartAfterAStopOrAfterAFailedStartAnswersStopped) {
  Engine e(node_options(server(), 120), tables());
  ASSERT_EQ(e.start(), std::error_code{});
  EXPECT_EQ(e.start(), std::error_code{}) << "start() while running";
  e.stop();
  EXPECT_EQ(e.start(), make_error_code(engine::Errc::kStopped));
  EXPECT_FALSE(e.running());
  e.stop();  // idempotent

  engine::EngineOptions nowhere = node_options(server(), 121);
  nowhere.port = 1;  // nothing listens there
  Engine f(nowhere, tables());
  EXPECT_TRUE(f.start(std::chrono::milliseconds(200)));
  EXPECT_EQ(f.start(std::chrono::milliseconds(200)), make_error_code(engine::Errc::kStopped));
}

// Under the block policy the io thread waits for room in a full ring; the writers are its only
// consumers, so stop() must close the push path before it stops them, or the io thread waits for
// ever and stop() with it (helper-28's repro: still blocked after 10 s).
TEST_F(EngineStop, AStopUnderAFloodIntoABlockPolicyRingReturns) {
  auto spec = table_spec("estopk", "AST", CoherenceMode::kBroadcast,
                         [](const table::BrandedId&) -> engine::LoadResult {
                           return engine::Loaded{"loaded", std::nullopt};
                         });
  spec.ring_capacity = 2;
  spec.max_batch = 2;
  spec.full_policy = ring::FullPolicy::kBlock;
  for (int round = 0; round < 5; ++round) {
    auto e = node(122, {spec});
    ASSERT_TRUE(e);
    std::atomic<bool> quit{false};
    std::atomic<long> sent{0};
    std::thread publisher([&] {
      RedisClient pub = connect_client(server());
      while (!quit.load()) {
        const auto f = table::make_frame(fresh_id("AST"), fresh_id("TXN"));
        command_argv(pub.get(), {"PUBLISH", "ecc:{estopk}:coh", std::string(table::view(f))});
        sent.fetch_add(1);
      }
    });
    while (sent.load() < 200) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto stopping = std::async(std::launch::async, [&] { e->stop(); });
    const auto st = stopping.wait_for(std::chrono::seconds(10));
    quit = true;
    publisher.join();
    if (st != std::future_status::ready) {
      std::fprintf(stderr, "round %d: Engine::stop() still blocked after 10 s (%ld publishes)\n",
                   round, sent.load());
      std::_Exit(3);  // the io thread is stuck in the ring: no clean way out of this process
    }
    EXPECT_GT(e->stats().tables.front().pushes, 0u) << "round " << round;
  }
}

TEST_F(EngineStop, AJobLaneEngineStopsCleanlyWhateverTheServerIsDoingAtTheTime) {
  int rounds = 70;
  if (const char* env = std::getenv("ECHO_ENGINE_STOP_ROUNDS")) {
    rounds = std::max(1, std::atoi(env));
  }
  std::mt19937 rng(20261130);
  double worst_stop_ms = 0;
  int per_moment[static_cast<int>(Moment::kCount)] = {};
  for (int round = 0; round < rounds; ++round) {
    const auto moment = static_cast<Moment>(round % static_cast<int>(Moment::kCount));
    if (!server().running()) server().restart();
    auto e = node(610, tables());
    ASSERT_TRUE(e) << "round " << round;
    // Parked at least once (mostly parked now: the BLMPOP is re-issued every 100 ms).
    ASSERT_TRUE(eventually([&] { return parks(*e) >= 1; }, 5s)) << "round " << round;
    for (int i = 0; i < 5; ++i) {
      (void)e->enqueue("estop", fresh_id("PRT"), fresh_id("AST").view(), e->mint("AST").value());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 30));
    switch (moment) {
      case Moment::kQuiet:
        break;
      case Moment::kKeysDeleted: {
        auto c = connect_client(server());
        RedisReply keys = command(c.get(), "KEYS emq:{ecc.coh.estop[}|]*");
        if (keys && keys->type == REDIS_REPLY_ARRAY) {
          for (std::size_t i = 0; i < keys->elements; ++i) {
            RedisReply d = command(c.get(), "DEL %b", keys->element[i]->str, keys->element[i]->len);
          }
        }
        break;
      }
      case Moment::kKilledBefore:
        server().kill();
        break;
      case Moment::kKilledInBackoff:
        server().kill();
        std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 350));
        break;
      case Moment::kRestartedBefore:
        server().restart(/*hard=*/true);
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
        break;
      case Moment::kKilledDuring:
      case Moment::kRestartedDuring:
        break;  // below: the stop runs on another thread, the server goes on this one
      case Moment::kCount:
        break;
    }
    const auto t0 = Clock::now();
    if (moment == Moment::kKilledDuring || moment == Moment::kRestartedDuring) {
      // The server is a child of this thread (it dies with the thread that forked it: its
      // PDEATHSIG), so the stop is the one that moves to another thread.
      std::thread stopper([&e] { e->stop(); });
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      if (moment == Moment::kKilledDuring) {
        server().kill();
      } else {
        server().restart(/*hard=*/true);
      }
      stopper.join();
    } else {
      e->stop();  // aborts (Connection's close watchdog) if the ring keeps a reference
    }
    e.reset();
    worst_stop_ms = std::max(worst_stop_ms,
                             std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ++per_moment[static_cast<int>(moment)];
  }
  if (!server().running()) server().restart();
  std::string by_moment;
  for (int m = 0; m < static_cast<int>(Moment::kCount); ++m) {
    by_moment += std::string(by_moment.empty() ? "" : ", ") + name(static_cast<Moment>(m)) + " " +
                 std::to_string(per_moment[m]);
  }
  std::printf("[ stop ] %d rounds (%s); slowest stop %.1f ms\n", rounds, by_moment.c_str(),
              worst_stop_ms);
}

}  // namespace
}  // namespace echo::test
