// SPDX-License-Identifier: MIT
// Shared by the job lane's integration tests (job_lane_*_test.cc): the lane's knobs and the two
// declarations of its table, a held writer, a consumer's counters, a few plain server reads, and
// the JobLane fixture (one real redis-server per test).
#pragma once

#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/lua/scripts.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_nodes.h"
#include "support/script_client.h"

namespace echo::test {

using engine::Admission;
using engine::CoherenceMode;
using engine::Engine;
using engine::Source;
using table::BrandedId;
using Counters = std::map<std::string, std::uint64_t>;

// ---- the lane's knobs, shared by in-process nodes and child processes ----

struct LaneKnobs {
  std::int64_t lease_ms = 250;
  std::int64_t beat_ms = 100;
  std::int64_t retry_delay_ms = 20;
  int max_attempts = 3;
  std::size_t ring_capacity = 4096;
  std::size_t credits = 1024;
};

// A lease no test outlives and a 100 ms beat: members join, lapse and see a twin within a few
// beats, and no job goes back to the lane by its lease running out.
inline constexpr LaneKnobs kQuickBeat{.lease_ms = 30000, .beat_ms = 100};

// A job-lane table of kind AST: this node consumes its member queue.
inline engine::TableSpec lane_spec(const std::string& table, const LaneKnobs& k) {
  auto s = table_spec(table, "AST", CoherenceMode::kJob, answering("loaded"));
  s.job_lease_ms = k.lease_ms;
  s.job_beat_ms = k.beat_ms;
  s.job_retry_delay_ms = k.retry_delay_ms;
  s.job_max_attempts = k.max_attempts;
  s.ring_capacity = k.ring_capacity;
  s.max_batch = std::min<std::size_t>(s.max_batch, k.ring_capacity);
  s.job_credits = k.credits;
  s.job_relay = false;  // the member lane alone (the relay: interop_test)
  return s;
}

// The writer's declaration of the same table: not a member (no consumer), but its job_lease_ms is
// the lease member_enqueue gives a hand-off when the live key holds none, so it must match the
// consumers'.
inline engine::TableSpec writer_spec(const std::string& table, std::int64_t lease_ms) {
  auto s = table_spec(table, "AST", CoherenceMode::kNone, answering("loaded"));
  s.job_lease_ms = lease_ms;
  return s;
}

inline std::string member_base(const std::string& table, unsigned node) {
  return engine::JobLaneKeys::for_table(table).member_base(std::to_string(node));
}

// ---- holding a writer ----

// Holds a table's writer thread: a miss whose callback (run on the writer thread) blocks until
// release(). While held the writer applies nothing, so nothing is acked, so nothing completes.
class WriterHold {
 public:
  WriterHold(Engine& e, const std::string& table) : state_(std::make_shared<State>()) {
    const BrandedId dummy = e.mint("AST").value();
    const auto here = std::this_thread::get_id();
    e.get_async(table, dummy.view(), [s = state_, here](engine::Result<engine::Got>) {
      if (std::this_thread::get_id() == here) return;  // answered inline: no writer to hold
      std::unique_lock lock(s->mu);
      s->entered = true;
      s->cv.notify_all();
      s->cv.wait(lock, [&] { return s->released; });
    });
  }
  ~WriterHold() { release(); }
  WriterHold(const WriterHold&) = delete;
  WriterHold& operator=(const WriterHold&) = delete;

  bool entered(std::chrono::milliseconds timeout) {
    std::unique_lock lock(state_->mu);
    return state_->cv.wait_for(lock, timeout, [&] { return state_->entered; });
  }
  void release() {
    std::lock_guard lock(state_->mu);
    state_->released = true;
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false, released = false;
  };
  std::shared_ptr<State> state_;
};

inline std::string describe(const engine::Result<engine::Got>& g) {
  if (!g) return "error " + g.error().message();
  return std::string(engine::to_string(g->source)) + " " + (g->version ? g->version->str() : "-") +
         " " + g->value;
}

// Reads `name` twice on `n`: true iff the second read came from L1 (the table caches).
inline bool caches(Engine& n, const std::string& t, const BrandedId& name) {
  auto first = n.get(t, name.view());
  auto second = n.get(t, name.view());
  EXPECT_TRUE(first && second) << "a read failed";
  return first && second && second->source == Source::kL1;
}

inline std::optional<engine::JobConsumerStats> consumer_of(const Engine& e,
                                                           const std::string& table) {
  for (const auto& t : e.stats().tables) {
    if (t.name == table) return t.consumer;
  }
  return std::nullopt;
}

// One line of name=value counters: the consumer's, the job ring's and the writer's.
inline std::string stats_line(const Engine& e, const std::string& table) {
  const auto c = consumer_of(e, table).value_or(engine::JobConsumerStats{});
  const engine::TableWriter* w = engine::internal::writer_of(e, table);
  const auto rings = w->ring_stats();
  const auto ws = w->stats();
  std::ostringstream out;
  out << "claimed=" << c.claimed << " handed_off=" << c.handed_off << " applied=" << c.applied
      << " stale_applies=" << c.stale_applies << " completed=" << c.completed
      << " complete_gone=" << c.complete_gone << " complete_stale=" << c.complete_stale
      << " complete_errors=" << c.complete_errors << " malformed=" << c.malformed
      << " retried=" << c.retried << " dead=" << c.dead << " beats=" << c.beats
      << " rejoins=" << c.rejoins << " reaped=" << c.reaped << " parks=" << c.parks
      << " in_flight=" << c.in_flight << " ring_published=" << rings.front().published
      << " ring_dropped=" << rings.front().dropped << " writer_applied=" << ws.applied
      << " writer_stale=" << ws.stale;
  return out.str();
}

inline Counters parse_counters(const std::string& line) {
  Counters out;
  std::istringstream in(line);
  std::string field;
  while (in >> field) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) continue;
    out[field.substr(0, eq)] = std::stoull(field.substr(eq + 1));
  }
  return out;
}

inline Counters counters_of(const Engine& e, const std::string& table) {
  return parse_counters(stats_line(e, table));
}

// ---- the server side ----

inline std::string hget(redisContext* c, const std::string& key, const std::string& field) {
  return text(command_argv(c, {"HGET", key, field}).get());
}

inline long long integer_of(redisContext* c, const std::vector<std::string>& args) {
  RedisReply r = command_argv(c, args);
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

inline std::vector<std::string> strings_of(redisContext* c, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  RedisReply r = command_argv(c, args);
  if (!r || r->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
  return out;
}

// Polls every millisecond until `pred` holds or `timeout` passes.
template <class Pred>
inline bool within(std::chrono::milliseconds timeout, Pred pred) {
  return poll_until(pred, timeout, 1ms);
}

class JobLane : public SingleServerTest {};

}  // namespace echo::test
