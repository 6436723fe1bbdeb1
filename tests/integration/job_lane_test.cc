// SPDX-License-Identifier: MIT
// The job lane's gates against a real server: F5 with a consumer process killed by SIGKILL while it
// holds its job, F6 with both lanes measured on one row, fencing under pauses longer than the
// lease, fan-out to three nodes with one killed and restarted mid-stream, garbage payloads retried
// to dead, credits under a held writer, and a parked consumer's silence and prompt wake (bus gate
// 3.4 G5). Consumer processes are this binary re-executed through /proc/self/exe with --child-node
// (main, at the bottom, routes them): a fresh process, no threads inherited from the test.
#include <echo/engine/job_consumer.h>
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
#include "support/child_process.h"
#include "support/script_client.h"

namespace echo::test {
namespace {

// A writer's failed calls, counted, with the first one's answer kept: a failure then says what
// the engine answered (a soak beside a cold rebuild counted 97 with no word of why). Any thread.
class CallErrors {
 public:
  template <class R>
  void check(const R& result, const char* call) {
    if (result) return;
    if (count_.fetch_add(1) != 0) return;
    std::lock_guard lock(mu_);
    first_ = std::string(call) + ": " + result.error().message();
  }
  std::uint64_t count() const { return count_.load(); }
  std::string first() {
    std::lock_guard lock(mu_);
    return first_;
  }

 private:
  std::atomic<std::uint64_t> count_{0};
  std::mutex mu_;
  std::string first_;
};

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

// A job-lane table of kind AST: this node consumes its member queue.
engine::TableSpec lane_spec(const std::string& table, const LaneKnobs& k) {
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
engine::TableSpec writer_spec(const std::string& table, std::int64_t lease_ms) {
  auto s = table_spec(table, "AST", CoherenceMode::kNone, answering("loaded"));
  s.job_lease_ms = lease_ms;
  return s;
}

std::string member_base(const std::string& table, unsigned node) {
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


std::string describe(const engine::Result<engine::Got>& g) {
  if (!g) return "error " + g.error().message();
  return std::string(engine::to_string(g->source)) + " " + (g->version ? g->version->str() : "-") +
         " " + g->value;
}

// Reads `name` twice on `n`: true iff the second read came from L1 (the table caches).
bool caches(Engine& n, const std::string& t, const BrandedId& name) {
  auto first = n.get(t, name.view());
  auto second = n.get(t, name.view());
  EXPECT_TRUE(first && second) << "a read failed";
  return first && second && second->source == Source::kL1;
}

std::optional<engine::JobConsumerStats> consumer_of(const Engine& e, const std::string& table) {
  for (const auto& t : e.stats().tables) {
    if (t.name == table) return t.consumer;
  }
  return std::nullopt;
}

// One line of name=value counters: the consumer's, the job ring's and the writer's.
std::string stats_line(const Engine& e, const std::string& table) {
  const auto c = consumer_of(e, table).value_or(engine::JobConsumerStats{});
  const engine::TableWriter* w = e.writer(table);
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

Counters parse_counters(const std::string& line) {
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

Counters counters_of(const Engine& e, const std::string& table) {
  return parse_counters(stats_line(e, table));
}

// ---- a node in its own process ----

// The child's side: one Engine with one job-lane table, driven by lines on stdin, answering on
// stdout: "hold" / "release" its writer, "get <id>", "stats", anything else (or EOF) stops.
int child_main(int argc, char** argv) {
  if (argc != 11) return 64;
  const int port = std::atoi(argv[2]);
  const unsigned node = static_cast<unsigned>(std::atoi(argv[3]));
  const std::string table = argv[4];
  LaneKnobs k;
  k.lease_ms = std::atoll(argv[5]);
  k.beat_ms = std::atoll(argv[6]);
  k.retry_delay_ms = std::atoll(argv[7]);
  k.max_attempts = std::atoi(argv[8]);
  k.ring_capacity = static_cast<std::size_t>(std::atoll(argv[9]));
  k.credits = static_cast<std::size_t>(std::atoll(argv[10]));
  Engine e(node_options("127.0.0.1", port, node), {lane_spec(table, k)});
  if (auto ec = e.start()) {
    write_line(1, "error start " + ec.message());
    return 2;
  }
  write_line(1, "ready");
  std::unique_ptr<WriterHold> hold;
  while (auto line = read_line(0, std::chrono::hours(1))) {
    if (*line == "hold") {
      hold = std::make_unique<WriterHold>(e, table);
      write_line(1, hold->entered(std::chrono::seconds(10)) ? "held" : "error hold");
    } else if (*line == "release") {
      hold.reset();
      write_line(1, "released");
    } else if (line->starts_with("get ")) {
      write_line(1, describe(e.get(table, line->substr(4))));
    } else if (*line == "stats") {
      write_line(1, stats_line(e, table));
    } else {
      break;
    }
  }
  hold.reset();
  e.stop();
  return 0;
}

// The parent's side: spawns the child (a ChildProcess), asks it lines, kills it.
class ChildNode {
 public:
  static std::unique_ptr<ChildNode> spawn(int port, unsigned node, const std::string& table,
                                          const LaneKnobs& k) {
    auto process = ChildProcess::spawn({"--child-node", std::to_string(port), std::to_string(node),
                                        table, std::to_string(k.lease_ms), std::to_string(k.beat_ms),
                                        std::to_string(k.retry_delay_ms), std::to_string(k.max_attempts),
                                        std::to_string(k.ring_capacity), std::to_string(k.credits)});
    if (!process) return nullptr;
    const auto ready = process->receive(std::chrono::seconds(20));
    EXPECT_EQ(ready.value_or("(nothing)"), "ready") << "child node " << node;
    if (!ready || *ready != "ready") return nullptr;
    return std::unique_ptr<ChildNode>(new ChildNode(std::move(process)));
  }

  std::string ask(const std::string& line,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    process_->send(line);
    return process_->receive(timeout).value_or("(no answer)");
  }
  Counters stats() { return parse_counters(ask("stats")); }

  // SIGKILL and reap; true iff the child died of it.
  bool kill_now() { return process_->kill_now(); }
  void pause() { process_->pause(); }
  void resume() { process_->resume(); }

 private:
  explicit ChildNode(std::unique_ptr<ChildProcess> p) : process_(std::move(p)) {}
  std::unique_ptr<ChildProcess> process_;
};

// ---- the server side ----

std::string hget(redisContext* c, const std::string& key, const std::string& field) {
  return text(command_argv(c, {"HGET", key, field}).get());
}

long long integer_of(redisContext* c, const std::vector<std::string>& args) {
  RedisReply r = command_argv(c, args);
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

std::vector<std::string> strings_of(redisContext* c, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  RedisReply r = command_argv(c, args);
  if (!r || r->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
  return out;
}

// Polls every millisecond until `pred` holds or `timeout` passes.
template <class Pred>
bool within(std::chrono::milliseconds timeout, Pred pred) {
  return poll_until(pred, timeout, 1ms);
}

// A consumer's counters once its member queue `base` has settled: the server holds no job row
// and lists nothing to deliver, and every delivery the counters count (claimed + handed_off) is
// answered (completed, refused stale or gone, an error, malformed). nullopt while not settled.
// The server is read FIRST, the counters after (the chaos test once flaked on this). Read the other
// way round, a job claimed and completed between the two reads is in neither: the counters showed
// every delivery answered while that job still waited in its lane (or its hand-off was on the
// wire), then the server showed no row, and the run ended short of that job's delivery and
// completion (completed 1107 for 1109 jobs). In this order, once no row is left no completion
// can be accepted any more (complete needs the row), so every accepted completion was sent before
// the counters are read, after its delivery was counted: until its reply is counted, its
// delivery is unanswered and the queue is not settled. What may still arrive is a hand-off popped
// before the row went (a late delivery of a completed job): counted with its refusal, or with
// neither, either way the counters stay balanced.
std::optional<Counters> settled_counters(redisContext* c, const std::string& base,
                                         const std::function<Counters()>& read_counters) {
  if (count_keys(c, (base + "job:*").c_str()) != 0) return std::nullopt;
  if (integer_of(c, {"LLEN", base + "deliver"}) != 0) return std::nullopt;
  Counters s = read_counters();
  const std::uint64_t deliveries = s["claimed"] + s["handed_off"];
  const std::uint64_t answered = s["completed"] + s["complete_stale"] + s["complete_gone"] +
                                 s["complete_errors"] + s["malformed"];
  if (deliveries != answered) return std::nullopt;
  return s;
}

// Sum of `calls` over INFO commandstats, leaving out INFO itself (the probe's own command).
// Sends `commands` pipelined on `c` (one write, then every reply in order); an empty pointer for
// a command whose reply could not be read.
std::vector<RedisReply> pipelined(redisContext* c,
                                  const std::vector<std::vector<std::string>>& commands) {
  for (const auto& args : commands) {
    std::vector<const char*> p;
    std::vector<std::size_t> len;
    for (const auto& a : args) {
      p.push_back(a.data());
      len.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(args.size()), p.data(), len.data());
  }
  std::vector<RedisReply> replies;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) raw = nullptr;
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

long long commands_served(redisContext* c) {
  const std::string info = text(command(c, "INFO commandstats").get());
  long long total = 0;
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("cmdstat_") || line.starts_with("cmdstat_info:")) continue;
    const auto at = line.find("calls=");
    if (at != std::string::npos) total += std::atoll(line.c_str() + at + 6);
  }
  return total;
}

double median_us(std::vector<double> v) { return percentile(std::move(v), 0.5); }

class JobLane : public SingleServerTest {};

// ---- F5: a real crash ----

TEST_F(JobLane, F5AConsumerKilledHoldingItsJobIsReapedAndTheRestartedNodeAppliesItWithToken2Once) {
  const std::string t = "f5";
  LaneKnobs k;  // lease 250 ms, beat 100 ms
  const std::string base = member_base(t, 5);
  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  const BrandedId v1 = fresh_id("AST");
  const std::string key = l2_key(t, name), f1 = engine::frame_l2_value(v1, "px=100.00");
  ASSERT_TRUE(command_argv(client(), {"SET", key, f1, "PX", "60000"}));

  auto w = node(40, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(w);
  auto a = ChildNode::spawn(server().port(), 5, t, k);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->ask("get " + name.str()), "l2 " + v1.str() + " px=100.00");
  ASSERT_EQ(a->ask("hold"), "held");

  // The message for v2; the consumer process takes it and holds it (its writer is held).
  const BrandedId v2 = w->mint("AST").value();
  auto admitted = w->enqueue(t, group, name.view(), v2);
  ASSERT_TRUE(admitted) << admitted.error().message();
  ASSERT_EQ(admitted->size(), 1u);
  EXPECT_EQ((*admitted)[0].member, "5");
  EXPECT_NE((*admitted)[0].admission, Admission::kDuplicate);
  std::string job;
  ASSERT_TRUE(within(5s, [&] {
    const auto active = strings_of(client(), {"ZRANGE", base + "active", "0", "-1"});
    if (active.size() == 1) job = active[0];
    return !job.empty();
  })) << "the claim never showed in the member queue's active zset";
  const std::string job_key = base + "job:" + job;
  EXPECT_EQ(hget(client(), job_key, "attempts"), "1");
  ASSERT_TRUE(within(5s, [&] {
    auto s = a->stats();
    return s["claimed"] + s["handed_off"] == 1;
  })) << "the consumer never took the job";
  EXPECT_EQ(a->stats()["completed"], 0u);
  // Keep the reaped job out of the ring until the restarted node holds the row it must drop.
  // (gpause: it also takes the hand-off credits down, see member_park.lua.)
  EXPECT_EQ(
      text(run_script(client(), "gpause", {base + "paused", base + "ring"}, {group.str()}).get()),
      "1");

  ASSERT_TRUE(a->kill_now()) << "the consumer process did not die of SIGKILL";
  const auto killed_at = Clock::now();

  // The same node id restarts (in this process, so its writer can be held and read).
  auto b = node(5, {lane_spec(t, k)});
  ASSERT_TRUE(b);
  auto filled = b->get(t, name.view());
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->version, v1);
  ASSERT_TRUE(l1_holds(*b, t, name));
  // The writer's L2 write of v2 is staged after that fill, so the restarted node holds the older
  // row the redelivered job must drop (newer-wins does not depend on this order).
  ASSERT_TRUE(w->put(t, name.view(), "px=107.00", v2));

  // The reaper returns the job: pending again, attempts untouched.
  ASSERT_TRUE(within(5s, [&] { return hget(client(), job_key, "state") == "pending"; }))
      << "the job was never reaped; state " << hget(client(), job_key, "state");
  const double reaped_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - killed_at).count();
  EXPECT_EQ(hget(client(), job_key, "attempts"), "1");
  // The reap's reply reaches the consumer after the server state changed: wait for its count.
  EXPECT_TRUE(within(5s, [&] { return consumer_of(*b, t)->reaped >= 1u; }))
      << "the restarted node's reaper never counted the job it returned";

  // Resume the group with the writer held: the claim with token 2 is visible before the apply.
  {
    WriterHold hold(*b, t);
    ASSERT_TRUE(hold.entered(5s));
    RedisReply resumed = run_script(
        client(), "gresume",
        {base + "paused", base + "ring", base + "glimit", base + "gactive", base + "wake"},
        {base, group.str()});
    ASSERT_EQ(text(resumed.get()), "1");
    ASSERT_TRUE(within(5s, [&] { return hget(client(), job_key, "attempts") == "2"; }))
        << "never re-claimed; attempts " << hget(client(), job_key, "attempts");
    EXPECT_EQ(hget(client(), job_key, "state"), "active");
    // The dead holder's token is superseded: its completion is refused.
    RedisReply late =
        run_script(client(), "complete", {base + "active", job_key}, {job, "1", base});
    EXPECT_TRUE(late && late->type == REDIS_REPLY_ERROR && text(late.get()).starts_with("EMQSTALE"))
        << text(late.get());
  }
  // The row goes when the script runs; the consumer counts the verdict when its reply lands.
  ASSERT_TRUE(within(5s, [&] {
    return integer_of(client(), {"EXISTS", job_key}) == 0 && consumer_of(*b, t)->completed == 1;
  })) << "the job row is still there, or its completion was not answered";
  auto s = consumer_of(*b, t).value();
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(s.stale_applies, 0u);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(s.complete_stale, 0u);
  EXPECT_EQ(hget(client(), base + "metrics:completed", "count"), "1");
  EXPECT_EQ(writer_of(*b, t).stats().applied, 1u);
  auto after = b->get(t, name.view());
  ASSERT_TRUE(after);
  EXPECT_EQ(describe(after), "l2 " + v2.str() + " px=107.00");

  // Replaying the same version: a new job, applied again, answers stale; one effective drop.
  auto replayed = w->enqueue(t, group, name.view(), v2);
  ASSERT_TRUE(replayed);
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*b, t)->completed == 2; }));
  s = consumer_of(*b, t).value();
  EXPECT_EQ(s.stale_applies, 1u);
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(writer_of(*b, t).stats().applied, 1u) << "exactly one effective drop";
  auto kept = b->get(t, name.view());
  ASSERT_TRUE(kept);
  EXPECT_EQ(describe(kept), "l1 " + v2.str() + " px=107.00");
  std::printf(
      "[ F5 ] killed holding %s at token 1; reaped %.0f ms after the kill (lease %lld ms); "
      "re-applied with token 2; replay stale\n",
      job.c_str(), reaped_ms, static_cast<long long>(k.lease_ms));
}

// ---- F6: the price of the job lane ----

TEST_F(JobLane, F6BothLanesCarryAThousandMessagesToOneRowAndTheirMediansAreRecorded) {
  constexpr int kMessages = 1000;
  auto bspec = table_spec("f6b", "AST", CoherenceMode::kBroadcast, answering("px=1"));
  auto jspec = lane_spec("f6j", LaneKnobs{.lease_ms = 30000, .beat_ms = 1000});
  auto r = node(61, {bspec, jspec});
  auto s = node(60, {writer_spec("f6j", 30000)});
  ASSERT_TRUE(r && s);
  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  const engine::TableWriter& rb = writer_of(*r, "f6b");
  const engine::TableWriter& rj = writer_of(*r, "f6j");
  std::vector<double> broadcast_us, job_us;
  // Both lanes on the same name, alternating, each message timed from the writer's call to the
  // receiving writer's apply.
  // Through the ring, or (broadcast, writer parked) applied by the io thread: direct_apply.
  auto applied = [](const engine::TableWriter& w) {
    return w.ring_stats().front().applied + w.stats().direct_applies;
  };
  for (int i = 0; i < kMessages; ++i) {
    const BrandedId v = s->mint("AST").value();
    auto t0 = Clock::now();
    auto heard = s->broadcast("f6b", name.view(), v);
    ASSERT_TRUE(heard && *heard == 1);
    ASSERT_TRUE(within(5s, [&] { return applied(rb) == static_cast<std::uint64_t>(i + 1); }));
    broadcast_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    t0 = Clock::now();
    auto admitted = s->enqueue("f6j", group, name.view(), v);
    ASSERT_TRUE(admitted && admitted->size() == 1);
    // The job's own ring (a job always goes through the writer; its lead may have been applied
    // by the io thread, counted in direct_applies, and is not the message timed here).
    ASSERT_TRUE(within(5s, [&] {
      return rj.ring_stats().front().applied == static_cast<std::uint64_t>(i + 1);
    }));
    job_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*r, "f6j")->completed == kMessages; }));
  const auto c = consumer_of(*r, "f6j").value();
  EXPECT_EQ(c.complete_stale + c.complete_gone + c.complete_errors + c.dead, 0u);
  EXPECT_EQ(count_keys(client(), (member_base("f6j", 61) + "job:*").c_str()), 0u);
  const double b50 = median_us(broadcast_us), j50 = median_us(job_us);
  std::printf(
      "[ F6 ] %d messages each: broadcast median %.1f us (p99 %.1f), job lane median %.1f us "
      "(p99 %.1f), %.2fx; %llu of the jobs handed off to the parked consumer\n",
      kMessages, b50, percentile(broadcast_us, 0.99), j50, percentile(job_us, 0.99), j50 / b50,
      static_cast<unsigned long long>(c.handed_off));
  // Loose sanity only: the benchmark owns the figures.
  EXPECT_GT(b50, 0.0);
  EXPECT_LT(b50, 50000.0);
  EXPECT_LT(j50, 50000.0);
}

// ---- fencing under pauses longer than the lease ----

TEST_F(JobLane, FencingChaosPausesLongerThanTheLeaseNeverGetAStaleCompletionAccepted) {
  const std::string t = "chaos";
  // Lease 50 ms; pauses 100..200 ms, longer than the lease and shorter than the member ttl
  // (3 beats = 300 ms), so the node stays a member and keeps being handed jobs it cannot run.
  const LaneKnobs k{.lease_ms = 50, .beat_ms = 100};
  const std::string base = member_base(t, 71);
  auto w = node(70, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(w);
  auto c = ChildNode::spawn(server().port(), 71, t, k);
  ASSERT_TRUE(c);
  constexpr int kNames = 16;
  std::vector<BrandedId> names;
  std::vector<std::optional<BrandedId>> last(kNames);
  for (int i = 0; i < kNames; ++i) names.push_back(fresh_id("AST"));
  const BrandedId group = fresh_id("PRT");

  std::atomic<bool> streaming{true};
  std::atomic<std::uint64_t> admitted{0};
  CallErrors errors;
  std::thread writer([&] {
    for (int i = 0; streaming.load(); ++i) {
      const int n = i % kNames;
      const BrandedId v = w->mint("AST").value();
      errors.check(w->put(t, names[n].view(), "v=" + v.str(), v), "put");
      auto r = w->enqueue(t, group, names[n].view(), v);
      errors.check(r, "enqueue");
      if (r) {
        for (const auto& m : *r) {
          if (m.member == "71" && m.admission != Admission::kDuplicate) admitted.fetch_add(1);
        }
      }
      last[n] = v;
      std::this_thread::sleep_for(1ms);
    }
  });

  std::mt19937 rng(std::random_device{}());
  int reclaimed_rounds = 0;
  constexpr int kRounds = 12;
  for (int round = 0; round < kRounds; ++round) {
    // Even rounds hold the writer across the pause: the jobs in its ring outlive their lease and
    // are re-claimed with a newer token before the old one is acked, which forces the race.
    const bool held = round % 2 == 0;
    if (held) {
      ASSERT_EQ(c->ask("hold"), "held");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 20));
    c->pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 100));
    c->resume();
    if (held) {
      const bool reclaimed = within(5s, [&] {
        for (const auto& key : strings_of(client(), {"KEYS", base + "job:*"})) {
          if (std::atoll(hget(client(), key, "attempts").c_str()) >= 2) return true;
        }
        return false;
      });
      if (reclaimed) ++reclaimed_rounds;
      ASSERT_EQ(c->ask("release"), "released");
    }
  }
  streaming.store(false);
  writer.join();
  EXPECT_EQ(errors.count(), 0u) << errors.first();
  EXPECT_EQ(reclaimed_rounds, kRounds / 2) << "a held round saw no job re-claimed past its lease";

  // Drained: no job left, nothing on the deliver list, then every delivery answered (in this
  // order: settled_counters).
  Counters s;
  const bool drained = within(20s, [&] {
    auto settled = settled_counters(client(), base, [&] { return c->stats(); });
    if (settled) s = std::move(*settled);
    return settled.has_value();
  });
  ASSERT_TRUE(drained) << "not drained: " << c->ask("stats");
  const std::uint64_t jobs = admitted.load();
  const std::uint64_t deliveries = s["claimed"] + s["handed_off"];
  std::printf(
      "[ chaos ] %d pauses of 100-200 ms over a 50 ms lease: %llu jobs, %llu deliveries, "
      "%llu completed, %llu refused stale, %llu gone, %llu reaped, %llu rejoins\n",
      kRounds, static_cast<unsigned long long>(jobs), static_cast<unsigned long long>(deliveries),
      static_cast<unsigned long long>(s["completed"]),
      static_cast<unsigned long long>(s["complete_stale"]),
      static_cast<unsigned long long>(s["complete_gone"]),
      static_cast<unsigned long long>(s["reaped"]), static_cast<unsigned long long>(s["rejoins"]));
  // Each job completed exactly once, by the script's count and by the consumer's.
  EXPECT_EQ(s["completed"], jobs);
  EXPECT_EQ(hget(client(), base + "metrics:completed", "count"), std::to_string(jobs));
  // Every delivery beyond a job's first was answered by a refusal (stale token, or gone after the
  // newer holder completed): none was accepted.
  EXPECT_EQ(deliveries - jobs, s["complete_stale"] + s["complete_gone"]);
  EXPECT_GE(s["complete_stale"], 1u) << "the chaos never reached the fence";
  EXPECT_EQ(s["complete_errors"] + s["dead"] + s["malformed"], 0u);
  EXPECT_EQ(s["ring_dropped"], 0u);
  // And the effect: the node serves every name at its last version.
  for (int n = 0; n < kNames; ++n) {
    if (!last[n]) continue;
    EXPECT_EQ(c->ask("get " + names[n].str()).substr(3), last[n]->str() + " v=" + last[n]->str());
  }
}

// The chaos test's end, staged: its settled counters must not be read while a job
// still waits unclaimed. A job waits in a paused member queue: the consumer has answered every
// delivery it counted, yet the job is still to come. The window between the counters' read and
// the server's is staged by the read itself: it takes the counters, then resumes the queue and
// waits until the consumer has claimed and completed the job. Read in that order (counters
// first), the job was in neither read and the queue looked settled with the job's completion
// missing; settled_counters reads the server first, sees the row, and waits.
TEST_F(JobLane, SettledCountersAreNeverReadWhileAJobStillWaitsForItsClaim) {
  const std::string t = "settle";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  auto n = node(88, {lane_spec(t, k)});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 88);
  const std::string g = fresh_id("PRT").str(), job = fresh_id("JOB").str();
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  // Paused: no claim takes the job (two empty claims after the HSET: every claim from then on
  // asked after it, see APausedMemberQueueIsNotClaimedFromOrHandedOffToUntilItsResume), and no
  // hand-off either (the credits go with the DEL, and every member_park after the HSET lists
  // none).
  ASSERT_TRUE(command_argv(client(), {"HSET", base + "meta", "paused", "1"}));
  ASSERT_TRUE(command_argv(client(), {"DEL", base + "parked"}));
  const std::uint64_t tried = consumer_of(*n, t)->empty_claims;
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->empty_claims >= tried + 2; }));
  RedisReply queued =
      run_script(client(), "member_enqueue", {base + "live"},
                 {base, job, frame_text(fresh_id("AST"), fresh_id("AST")), g, "30000"});
  ASSERT_EQ(text(queued.get()), "1");  // into the lane, not handed off

  bool resumed = false;
  const auto counters_then_claim = [&] {
    Counters now = counters_of(*n, t);
    EXPECT_TRUE(command_argv(client(), {"HDEL", base + "meta", "paused"}));
    resumed = true;  // no wake: the next beat claims it
    EXPECT_TRUE(within(5s, [&] { return consumer_of(*n, t)->completed == 1; }))
        << "the resumed job was never completed";
    return now;
  };
  const auto early = settled_counters(client(), base, counters_then_claim);
  EXPECT_FALSE(early.has_value())
      << "settled while the job waited: completed " << early.value_or(Counters{})["completed"]
      << " of 1";
  if (!resumed) {
    ASSERT_TRUE(command_argv(client(), {"HDEL", base + "meta", "paused"}));
  }
  std::optional<Counters> s;
  ASSERT_TRUE(within(5s, [&] {
    s = settled_counters(client(), base, [&] { return counters_of(*n, t); });
    return s.has_value();
  })) << "never settled: " << stats_line(*n, t);
  EXPECT_EQ((*s)["claimed"] + (*s)["handed_off"], 1u);
  EXPECT_EQ((*s)["completed"], 1u);
  EXPECT_EQ(hget(client(), base + "metrics:completed", "count"), "1");
}

// ---- fan-out: three nodes, one killed and restarted mid-stream ----

TEST_F(JobLane, FanOutEveryNodeEndsWithEveryNameAtItsFinalVersionThoughOneWasKilledAndRestarted) {
  const std::string t = "fan";
  const LaneKnobs k{.lease_ms = 300, .beat_ms = 100};
  auto w = node(80, {writer_spec(t, k.lease_ms)});
  auto p1 = node(81, {lane_spec(t, k)});
  auto p2 = node(82, {lane_spec(t, k)});
  ASSERT_TRUE(w && p1 && p2);
  auto p3 = ChildNode::spawn(server().port(), 83, t, k);
  ASSERT_TRUE(p3);
  constexpr int kNames = 32;
  std::vector<BrandedId> names, last;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(fresh_id("AST"));
    last.push_back(w->mint("AST").value());
    ASSERT_TRUE(w->put(t, names[i].view(), "v=" + last[i].str(), last[i]));
  }
  auto read_all_in_child = [&](ChildNode& child) {
    for (const auto& n : names) EXPECT_FALSE(child.ask("get " + n.str()).starts_with("error"));
  };
  for (const auto& n : names) {
    ASSERT_TRUE(p1->get(t, n.view()));
    ASSERT_TRUE(p2->get(t, n.view()));
  }
  read_all_in_child(*p3);

  std::atomic<bool> streaming{true}, restarted{false};
  std::atomic<int> written{0}, restart_at{0};
  CallErrors errors;
  const BrandedId group = fresh_id("PRT");
  std::thread writer([&] {
    for (int i = 0;; ++i) {
      if (i >= 1500 && restarted.load() && i >= restart_at.load() + 300) break;
      if (i >= 20000) break;  // the restart never came: the main thread reports it
      const int n = i % kNames;
      const BrandedId v = w->mint("AST").value();
      errors.check(w->put(t, names[n].view(), "v=" + v.str(), v), "put");
      errors.check(w->enqueue(t, group, names[n].view(), v), "enqueue");
      last[n] = v;
      written.store(i + 1);
    }
    streaming.store(false);
  });
  std::vector<std::thread> readers;
  std::atomic<std::uint64_t> reads{0};
  for (Engine* node : {p1.get(), p2.get()}) {
    readers.emplace_back([&, node] {
      std::mt19937 rng(std::random_device{}());
      while (streaming.load()) {
        if (node->get(t, names[rng() % kNames].view())) reads.fetch_add(1);
        std::this_thread::sleep_for(50us);  // two cores: leave the writer and the io threads room
      }
    });
  }

  ASSERT_TRUE(within(20s, [&] { return written.load() >= 400; }));
  ASSERT_TRUE(p3->kill_now()) << "node 83 did not die of SIGKILL";
  const int killed_at = written.load();
  p3 = ChildNode::spawn(server().port(), 83, t, k);
  ASSERT_TRUE(p3) << "node 83 did not restart";
  read_all_in_child(*p3);
  restart_at.store(written.load());
  restarted.store(true);
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(errors.count(), 0u) << errors.first();
  ASSERT_GT(written.load(), restart_at.load()) << "the restart was not mid-stream";

  // Every member queue's job rows: emq:{ecc.coh.<t>|<m>}:job:<id>.
  const std::string member_jobs = "emq:{" + engine::JobLaneKeys::for_table(t).queue + "|*}:job:*";
  const bool drained = within(20s, [&] {
    if (count_keys(client(), member_jobs.c_str()) != 0) return false;
    for (unsigned m : {81u, 82u, 83u}) {
      if (integer_of(client(), {"LLEN", member_base(t, m) + "deliver"}) != 0) return false;
    }
    return true;
  });
  ASSERT_TRUE(drained) << count_keys(client(), member_jobs.c_str()) << " jobs left";

  for (int i = 0; i < kNames; ++i) {
    const std::string want = last[i].str() + " v=" + last[i].str();
    for (Engine* node : {p1.get(), p2.get()}) {
      for (int pass = 0; pass < 2; ++pass) {  // the fill, then what L1 serves
        auto got = node->get(t, names[i].view());
        ASSERT_TRUE(got);
        EXPECT_EQ(got->version, last[i]) << "a surviving node serves " << describe(got);
        EXPECT_EQ(got->value, "v=" + last[i].str());
      }
    }
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_EQ(p3->ask("get " + names[i].str()).substr(3), want) << "the restarted node";
    }
  }
  const auto c1 = consumer_of(*p1, t).value(), c2 = consumer_of(*p2, t).value();
  auto c3 = p3->stats();
  EXPECT_EQ(c1.dead + c2.dead + c3["dead"], 0u);
  EXPECT_EQ(c1.complete_errors + c2.complete_errors + c3["complete_errors"], 0u);
  std::printf(
      "[ fan-out ] %d versions over %d names; node 83 killed after %d, back at %d; "
      "completed %llu / %llu / %llu (restarted), applied %llu / %llu / %llu; %llu reads\n",
      written.load(), kNames, killed_at, restart_at.load(),
      static_cast<unsigned long long>(c1.completed), static_cast<unsigned long long>(c2.completed),
      static_cast<unsigned long long>(c3["completed"]), static_cast<unsigned long long>(c1.applied),
      static_cast<unsigned long long>(c2.applied), static_cast<unsigned long long>(c3["applied"]),
      static_cast<unsigned long long>(reads.load()));
}

// ---- the server loses its data ----

// The writer keeps the membership it read beside the epoch it read with it, and reads it again
// only when the epoch moves. After the server lost its data the epoch key starts anew; were it a
// counter from 1, the rejoins could bring it back to the value the writer holds while the
// membership is another, and a member that joined after the loss would never be sent a job.
TEST_F(JobLane, AfterTheServerLosesItsDataAWriterAdmitsEveryMemberThatJoinedSoNoneServesAStaleRow) {
  const std::string t = "lost";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  const auto keys = engine::JobLaneKeys::for_table(t);
  auto w = node(112, {writer_spec(t, k.lease_ms)});
  auto r1 = node(113, {lane_spec(t, k)});
  auto r2 = node(114, {lane_spec(t, k)});
  ASSERT_TRUE(w && r1 && r2);
  const BrandedId group = fresh_id("PRT"), name = fresh_id("AST");
  auto first = w->enqueue(t, group, name.view(), w->mint("AST").value());
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_EQ(first->size(), 2u);  // the writer holds the epoch of two entries, and 113 and 114
  r2.reset();
  RedisReply flushed = command(client(), "FLUSHALL");  // a restart without persistence
  ASSERT_EQ(text(flushed.get()), "OK");
  auto r3 = node(115, {lane_spec(t, k)});
  ASSERT_TRUE(r3);
  // 113's next beat finds its live key gone and enters again: two entries since the loss.
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"ZCARD", keys.members}) == 2; }));

  const BrandedId v1 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "v1", v1));
  ASSERT_TRUE(caches(*r3, t, name));  // 115 serves v1 from L1
  const BrandedId v2 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "v2", v2));
  auto admitted = w->enqueue(t, group, name.view(), v2);
  ASSERT_TRUE(admitted) << admitted.error().message();
  std::string who;
  for (const auto& a : *admitted) who += a.member + " ";
  EXPECT_NE(who.find("115"), std::string::npos) << "admitted to " << who << "only";
  ASSERT_TRUE(within(5s, [&] {
    auto got = r3->get(t, name.view());
    return got && got->version == v2;
  })) << "node 115 still serves " << describe(r3->get(t, name.view()));
}

// After a server restart a member's live key is gone, so writers skip it (member_enqueue answers
// -1) until its next beat; its lost parking connection is that news already: from the moment it
// drops, the node serves nothing from L1 until a beat lands (the reconnect beats at once).
TEST_F(JobLane, AfterAServerRestartANodeServesNoRowItCachedBeforeUntilABeatLands) {
  const std::string t = "restarted";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 3000};  // a beat far off: the window it left
  auto w = node(116, {writer_spec(t, k.lease_ms)});
  auto r = node(117, {lane_spec(t, k)});
  ASSERT_TRUE(w && r);
  const BrandedId name = fresh_id("AST"), group = fresh_id("PRT");
  const BrandedId v1 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "v1", v1));
  ASSERT_TRUE(within(5s, [&] { return caches(*r, t, name); }));
  const auto beats = consumer_of(*r, t)->beats;
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*r, t)->beats > beats; }));  // just beat
  server().restart(true);
  const BrandedId v2 = w->mint("AST").value();
  ASSERT_TRUE(within(10s, [&] { return w->put(t, name.view(), "v2", v2).has_value(); }));
  (void)w->enqueue(t, group, name.view(), v2);  // 117 may not be live again yet: -1, skipped
  int stale = 0, reads = 0;
  bool fresh = false;
  const auto until = Clock::now() + std::chrono::milliseconds(k.beat_ms + 2000);
  while (Clock::now() < until && !fresh) {
    auto got = r->get(t, name.view());
    ++reads;
    if (got && got->version == v1) ++stale;
    fresh = got && got->version == v2;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(stale, 0) << "v1 served after v2 was in L2, " << stale << " of " << reads << " reads";
  EXPECT_TRUE(fresh) << "v2 never served";
  ASSERT_TRUE(within(5s, [&] { return caches(*r, t, name); })) << "the node never cached again";
  EXPECT_GE(consumer_of(*r, t)->rejoins, 1u);
}

// A completion the command connection refuses inline (the server is down) answers nothing: it is
// counted as a completion error there and then, and the job stays active for the reaper.
TEST_F(JobLane, CompletionsRefusedWhileTheServerIsDownAreCountedAsErrors) {
  const std::string t = "refused";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 200};
  auto w = node(118, {writer_spec(t, k.lease_ms)});
  auto n = node(119, {lane_spec(t, k)});
  ASSERT_TRUE(w && n);
  const BrandedId group = fresh_id("PRT");
  constexpr std::uint64_t kJobs = 20;
  std::uint64_t taken = 0;
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    for (std::uint64_t i = 0; i < kJobs; ++i) {
      ASSERT_TRUE(w->enqueue(t, group, fresh_id("AST").view(), w->mint("AST").value()));
    }
    // A hand-off into a held writer: the consumer blocks again only after that ack, so it holds
    // one or a few; the rest wait listed, leased.
    ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->in_flight >= 1; })) << stats_line(*n, t);
    std::this_thread::sleep_for(300ms);
    const auto c = consumer_of(*n, t).value();
    taken = c.claimed + c.handed_off;
    server().stop();
    std::this_thread::sleep_for(300ms);  // both connections have seen the loss
  }
  // The apply is counted before its completion is sent, and the refused completion after: wait
  // for both (a soak under load read the counters between them: applied 1, complete_errors 0).
  const bool accounted = within(10s, [&] {
    const auto c = consumer_of(*n, t).value();
    return c.applied + c.stale_applies == taken &&
           c.completed + c.complete_gone + c.complete_stale + c.complete_errors == taken;
  });
  EXPECT_TRUE(accounted) << "completions accounted for nowhere: " << stats_line(*n, t);
  const auto c = consumer_of(*n, t).value();
  EXPECT_EQ(c.complete_errors, taken) << stats_line(*n, t);
  server().restart(true);
}

// ---- a paused member queue ----

TEST_F(JobLane, APausedMemberQueueIsNotClaimedFromOrHandedOffToUntilItsResume) {
  const std::string t = "qpause";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  auto n = node(87, {lane_spec(t, k)});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 87);
  const std::string g = fresh_id("PRT").str();
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  // Queue pause (WIRE §5.1 meta paused): the hand-off and the claim both hold off. A claim whose
  // HGET ran before the HSET may still be in flight: wait for two more (claims never overlap), so
  // every claim from then on asked after the pause. The plain HSET takes no credit down itself:
  // the consumer's member_park, sent before the claim on every beat, finds the pause and lists
  // none (member_park.lua), so once the list is gone the hand-off holds off too.
  ASSERT_TRUE(command_argv(client(), {"HSET", base + "meta", "paused", "1"}));
  const std::uint64_t tried = consumer_of(*n, t)->empty_claims;
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->empty_claims >= tried + 2; }));
  // Two empty claims do not prove a member_park ran after the HSET: a claim may follow a wake or
  // an ack rather than a beat, with no member_park before it (a soak run under load handed a job
  // off on credits listed before the pause). Wait for what the hand-off reads: the credit list,
  // gone once a member_park has seen the pause.
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 0; }))
      << "the consumer's member_park never took its hand-off credits down";
  const std::string via_lane = fresh_id("JOB").str(), via_writer = fresh_id("JOB").str();
  RedisReply a = run_script(client(), "genqueue",
                            {base + "job:" + via_lane, base + "g:" + g + ":pending", base + "ring",
                             base + "paused", base + "glimit", base + "gactive", base + "wake"},
                            {via_lane, frame_text(fresh_id("AST"), fresh_id("AST")), g});
  ASSERT_EQ(text(a.get()), "1");
  RedisReply b = run_script(client(), "member_enqueue", {base + "live"},
                            {base, via_writer, frame_text(fresh_id("AST"), fresh_id("AST")), g, "30000"});
  ASSERT_EQ(text(b.get()), "1");  // into the lane, not handed off
  const auto before = consumer_of(*n, t).value();
  std::this_thread::sleep_for(500ms);  // five beats, each of which would claim
  const auto paused = consumer_of(*n, t).value();
  EXPECT_EQ(paused.claimed + paused.handed_off, before.claimed + before.handed_off);
  EXPECT_GT(paused.empty_claims, before.empty_claims) << "no claim was even tried";
  EXPECT_EQ(hget(client(), base + "job:" + via_lane, "state"), "pending");
  EXPECT_EQ(hget(client(), base + "job:" + via_writer, "state"), "pending");
  // Resume: no wake is pushed, the next beat claims both.
  ASSERT_TRUE(command_argv(client(), {"HDEL", base + "meta", "paused"}));
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->completed == before.completed + 2; }));
  EXPECT_EQ(consumer_of(*n, t)->claimed, before.claimed + 2);
}

// ---- malformed payloads ----

TEST_F(JobLane, MalformedPayloadsAreRetriedWithTheirReasonAndGoDeadAfterMaxAttempts) {
  const std::string t = "bad";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .retry_delay_ms = 20, .max_attempts = 3};
  auto m = node(90, {lane_spec(t, k)});
  ASSERT_TRUE(m);
  const std::string base = member_base(t, 90);
  const std::string g = fresh_id("PRT").str();

  // Through the lane (a claim): garbage.
  const std::string job_a = fresh_id("JOB").str();
  RedisReply a = run_script(client(), "genqueue",
                            {base + "job:" + job_a, base + "g:" + g + ":pending", base + "ring",
                             base + "paused", base + "glimit", base + "gactive", base + "wake"},
                            {job_a, "garbage", g});
  ASSERT_EQ(text(a.get()), "1");
  // Through the writer's fanout (a hand-off when the node is parked): a well-formed message of
  // the wrong kind.
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  const std::string job_b = fresh_id("JOB").str();
  const std::string wrong_kind = frame_text(fresh_id("ORD"), fresh_id("ORD"));
  RedisReply b = run_script(client(), "member_enqueue", {base + "live"},
                            {base, job_b, wrong_kind, g, "30000"});
  ASSERT_TRUE(b && b->type == REDIS_REPLY_INTEGER && (b->integer == 1 || b->integer == 2))
      << text(b.get());

  for (const std::string& job : {job_a, job_b}) {
    ASSERT_TRUE(within(10s, [&] { return hget(client(), base + "job:" + job, "state") == "dead"; }))
        << job << " state " << hget(client(), base + "job:" + job, "state");
    EXPECT_EQ(hget(client(), base + "job:" + job, "attempts"), "3");
    EXPECT_EQ(text(command_argv(client(), {"ZSCORE", base + "dead", job}).get()), "0");
  }
  EXPECT_TRUE(hget(client(), base + "job:" + job_a, "last_error")
                  .starts_with("malformed coherence payload"))
      << hget(client(), base + "job:" + job_a, "last_error");
  EXPECT_EQ(hget(client(), base + "job:" + job_b, "last_error"), "kind: ORD is not AST");
  EXPECT_EQ(hget(client(), base + "metrics:failed", "count"), "2");
  // The row is dead when the script runs; the consumer counts it when the reply lands.
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*m, t)->dead == 2; }));
  auto s = consumer_of(*m, t).value();
  EXPECT_EQ(s.malformed, 6u);
  EXPECT_EQ(s.retried, 4u);
  EXPECT_EQ(s.dead, 2u);
  EXPECT_EQ(s.completed + s.applied + s.stale_applies, 0u);
  std::printf(
      "[ malformed ] 2 jobs x 3 attempts: malformed %llu, retried %llu, dead %llu (%llu handed "
      "off)\n",
      static_cast<unsigned long long>(s.malformed), static_cast<unsigned long long>(s.retried),
      static_cast<unsigned long long>(s.dead), static_cast<unsigned long long>(s.handed_off));

  // The lane carries on: a good message after the garbage is applied and completed.
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(m->get(t, name.view()));
  // fresh_id's node (1000) orders it after the fill's version even within the same ms.
  ASSERT_TRUE(m->enqueue(t, fresh_id("PRT"), name.view(), fresh_id("AST")));
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*m, t)->completed == 1; }));
  // The job finds the row gone when the lead (job_lead) dropped it first: applied or stale.
  EXPECT_EQ(consumer_of(*m, t)->applied + consumer_of(*m, t)->stale_applies, 1u);
  EXPECT_FALSE(l1_holds(*m, t, name));
}

// ---- credits ----

TEST_F(JobLane, CreditsBoundWhatAHeldWriterIsOwedAndEverythingDrainsWithoutADropAfter) {
  const std::string t = "cred";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .ring_capacity = 8, .credits = 4};
  auto n = node(91, {lane_spec(t, k)});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 91);
  const std::string g = fresh_id("PRT").str();
  constexpr int kJobs = 40;
  std::uint64_t most_held = 0;
  long long most_active = 0;
  auto sample = [&] {
    most_held = std::max(most_held, consumer_of(*n, t)->in_flight);
    most_active = std::max(most_active, integer_of(client(), {"ZCARD", base + "active"}));
  };
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    // Phase 1, the claim path: jobs straight into the node's lane (genqueue never hands off).
    for (int i = 0; i < kJobs; ++i) {
      const std::string job = fresh_id("JOB").str();
      const std::string payload = frame_text(fresh_id("AST"), fresh_id("AST"));
      RedisReply r = run_script(client(), "genqueue",
                                {base + "job:" + job, base + "g:" + g + ":pending", base + "ring",
                                 base + "paused", base + "glimit", base + "gactive", base + "wake"},
                                {job, payload, g});
      ASSERT_EQ(text(r.get()), "1");
      sample();
    }
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"ZCARD", base + "active"}) == 4; }));
    for (int i = 0; i < 30; ++i) {  // 300 ms, three beats: it claims no more
      sample();
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(integer_of(client(), {"ZCARD", base + "g:" + g + ":pending"}), kJobs - 4);
    EXPECT_EQ(consumer_of(*n, t)->in_flight, 4u);
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == kJobs; }))
      << counters_of(*n, t)["completed"] << " completed";
  EXPECT_LE(most_held, k.credits);
  EXPECT_LE(most_active, static_cast<long long>(k.credits));

  // Phase 2, the hand-off path: a burst of fanouts, pipelined, while the node is parked.
  std::uint64_t handed = 0;
  {
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    const lua::Script* fan = lua::find_script("member_enqueue");
    ASSERT_NE(fan, nullptr);
    RedisReply loaded = command_argv(client(), {"SCRIPT", "LOAD", std::string(fan->source)});
    ASSERT_EQ(text(loaded.get()), fan->sha1);
    std::vector<std::vector<std::string>> batch;
    for (int i = 0; i < kJobs; ++i) {
      batch.push_back({"EVALSHA", std::string(fan->sha1), "1", base + "live", base,
                       fresh_id("JOB").str(), frame_text(fresh_id("AST"), fresh_id("AST")), g,
                       "30000"});
    }
    for (const RedisReply& r : pipelined(client(), batch)) {
      ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1) << text(r.get());
      if (r->integer == 2) ++handed;
    }
    for (int i = 0; i < 30; ++i) {
      sample();
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_LE(consumer_of(*n, t)->in_flight, k.credits) << handed << " handed off in the burst";
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == 2 * kJobs; }))
      << counters_of(*n, t)["completed"] << " completed";
  EXPECT_LE(most_held, k.credits);
  auto c = counters_of(*n, t);
  EXPECT_EQ(c["ring_dropped"], 0u);
  EXPECT_EQ(c["complete_stale"] + c["complete_gone"] + c["complete_errors"], 0u);
  EXPECT_EQ(count_keys(client(), (base + "job:*").c_str()), 0u);
  std::printf(
      "[ credits ] ring 8, credits 4: most held %llu, most active on the server %lld; "
      "%llu of %d handed off in the burst; %llu completed, ring dropped %llu\n",
      static_cast<unsigned long long>(most_held), most_active,
      static_cast<unsigned long long>(handed), kJobs,
      static_cast<unsigned long long>(c["completed"]),
      static_cast<unsigned long long>(c["ring_dropped"]));
}

TEST_F(JobLane, AcksBeyondOneDrainPassAllCompleteWithoutWaitingForTheirLease) {
  // 6,000 jobs claimed while the writer is held, then applied in one batch: 6,000 acks in one
  // post, more than one 4,096-ack drain pass. Every job completes now, not after its lease
  // (60 s here, so the reaper cannot be what finishes them).
  const std::string t = "acks";
  const LaneKnobs k{.lease_ms = 60000, .beat_ms = 100, .ring_capacity = 16384, .credits = 8192};
  auto spec = lane_spec(t, k);
  spec.max_batch = k.ring_capacity;  // the held-back jobs apply (and ack) in one batch
  auto n = node(92, {spec});
  ASSERT_TRUE(n);
  const std::string base = member_base(t, 92);
  const std::string g = fresh_id("PRT").str();
  constexpr int kJobs = 6000;
  const lua::Script* genqueue = lua::find_script("genqueue");
  ASSERT_NE(genqueue, nullptr);
  RedisReply loaded = command_argv(client(), {"SCRIPT", "LOAD", std::string(genqueue->source)});
  ASSERT_EQ(text(loaded.get()), genqueue->sha1);
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    std::vector<std::vector<std::string>> batch;
    for (int i = 0; i < kJobs; ++i) {
      const std::string job = fresh_id("JOB").str();
      batch.push_back({"EVALSHA", std::string(genqueue->sha1), "7", base + "job:" + job,
                       base + "g:" + g + ":pending", base + "ring", base + "paused",
                       base + "glimit", base + "gactive", base + "wake", job,
                       frame_text(fresh_id("AST"), fresh_id("AST")), g});
    }
    for (const RedisReply& r : pipelined(client(), batch)) ASSERT_EQ(text(r.get()), "1");
    ASSERT_TRUE(within(60s, [&] { return consumer_of(*n, t)->in_flight == kJobs; }))
        << consumer_of(*n, t)->in_flight << " of " << kJobs << " claimed";
  }
  ASSERT_TRUE(within(20s, [&] { return consumer_of(*n, t)->completed == kJobs; }))
      << counters_of(*n, t)["completed"] << " of " << kJobs << " completed; "
      << integer_of(client(), {"ZCARD", base + "active"}) << " still active on the server";
  auto c = counters_of(*n, t);
  EXPECT_EQ(c["reaped"], 0u);
  EXPECT_EQ(c["complete_stale"] + c["complete_gone"] + c["complete_errors"], 0u);
  EXPECT_EQ(c["ring_dropped"], 0u);
  EXPECT_EQ(integer_of(client(), {"ZCARD", base + "active"}), 0);
}

// ---- the hand-off credits ----

TEST_F(JobLane, TheListedCreditsAreTheFreeOnesFallPerHandOffAndAreListedAgainBelowHalf) {
  const std::string t = "flag";
  LaneKnobs k{.lease_ms = 30000, .beat_ms = 5000};
  k.credits = 8;
  auto p = node(97, {lane_spec(t, k)});
  auto w = node(98, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(p && w);
  const std::string parked = member_base(t, 97) + "parked";
  auto flag = [&] { return text(command_argv(client(), {"LLEN", parked}).get()); };
  ASSERT_TRUE(within(5s, [&] { return flag() == "8"; })) << flag();
  const long long pttl = integer_of(client(), {"PTTL", parked});
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 2 * k.beat_ms + 1000);  // renewed by every beat, gone two beats after a crash
  const BrandedId group = fresh_id("PRT");
  const auto start = consumer_of(*p, t).value();
  for (int i = 1; i <= 5; ++i) {
    const auto before = consumer_of(*p, t).value();
    auto admitted = w->enqueue(t, group, fresh_id("AST").view(), w->mint("AST").value());
    ASSERT_TRUE(admitted && admitted->size() == 1);
    EXPECT_EQ((*admitted)[0].admission, Admission::kHandedOff) << "job " << i;
    // Completed, and blocked again (the re-block waits for the writer's ack).
    ASSERT_TRUE(within(5s, [&] {
      const auto c = consumer_of(*p, t).value();
      return c.completed == static_cast<std::uint64_t>(i) && c.parks > before.parks;
    }));
    if (i <= 4) {
      // Each hand-off takes one credit; with half of them still listed, no refresh is sent.
      EXPECT_EQ(flag(), std::to_string(8 - i)) << "after job " << i;
    }
  }
  // The fifth took the list below half of the free credits: the ack's drain listed them again.
  EXPECT_TRUE(within(5s, [&] { return flag() == "8"; })) << flag();
  const auto c = consumer_of(*p, t).value();
  EXPECT_EQ(c.handed_off, 5u);
  EXPECT_EQ(c.claimed, 0u);
  EXPECT_EQ(c.empty_claims, start.empty_claims);  // no claim around a hand-off
}

// ---- no live member ----

TEST_F(JobLane, AnEnqueueWithNoLiveMemberIsTheTypedErrorNoLiveMemberNotADuplicate) {
  const std::string t = "nomember";
  auto w = node(95, {writer_spec(t, 30000)});
  ASSERT_TRUE(w);
  const BrandedId group = fresh_id("PRT"), name = fresh_id("AST");
  auto admitted = w->enqueue(t, group, name.view(), w->mint("AST").value());
  ASSERT_FALSE(admitted);
  EXPECT_EQ(admitted.error(), engine::Errc::kNoLiveMember);
  EXPECT_EQ(admitted.error().message(), "no_live_member");
  const BrandedId job = fresh_id("JOB");
  auto again = w->enqueue_job(t, group, job, name.view(), w->mint("AST").value());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), engine::Errc::kNoLiveMember);
  EXPECT_EQ(count_keys(client(), (engine::JobLaneKeys::for_table(t).qbase + "*").c_str()), 0u);
  // Once a member is live (a raw client's beat: no consumer completes the job) the same job id
  // is admitted (true), and a replay is a duplicate (false). The writer read the membership empty
  // above; the join moves the epoch, so its next enqueue reads the membership again.
  const auto keys = engine::JobLaneKeys::for_table(t);
  RedisReply live = command_argv(client(), {"SET", member_base(t, 97) + "live", "30000", "PX", "60000"});
  ASSERT_EQ(text(live.get()), "OK");
  RedisReply beat = run_script(client(), "member_beat", {keys.members, keys.epoch}, {"97", "60000"});
  ASSERT_TRUE(beat && beat->type == REDIS_REPLY_ARRAY && beat->elements == 2) << text(beat.get());
  EXPECT_EQ(beat->element[1]->integer, 1);  // entered: the epoch moved
  auto first = w->enqueue_job(t, group, job, name.view(), w->mint("AST").value());
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_TRUE(*first);
  auto dup = w->enqueue_job(t, group, job, name.view(), w->mint("AST").value());
  ASSERT_TRUE(dup) << dup.error().message();
  EXPECT_FALSE(*dup);
  // The member's live key gone: it is skipped (not live) and, the only one, no queue took it.
  RedisReply gone = command_argv(client(), {"DEL", member_base(t, 97) + "live"});
  auto skipped = w->enqueue(t, group, name.view(), w->mint("AST").value());
  ASSERT_FALSE(skipped);
  EXPECT_EQ(skipped.error(), engine::Errc::kNoLiveMember);
  // What the fan-out answered, in the writer's stats: five calls; the first two and the last
  // failed; one admission, one duplicate, one member skipped; the membership read at first use
  // and after the join.
  const engine::FanOutCounters f = w->stats().fan_out;
  EXPECT_EQ(f.enqueues, 5u);
  EXPECT_EQ(f.errors, 3u);
  EXPECT_EQ(f.admitted, 1u);
  EXPECT_EQ(f.duplicates, 1u);
  EXPECT_EQ(f.not_live, 1u);
  EXPECT_EQ(f.membership_reads, 2u);
}

// The writer keeps a table's membership and checks it against the epoch after each fan-out; a
// moved epoch costs one more round on a list read then, and no more: that list was read after
// the caller's L2 write. Under churn that moves the epoch between every two reads (here a raw
// client INCRs it flat out, as members entering do), fan_out once went on round after round and
// answered a timeout after eight, though every round had admitted the job.
TEST_F(JobLane, AnEnqueueUnderEndlessMembershipChurnAdmitsEveryMemberInAtMostTwoRounds) {
  const std::string t = "churn";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  const auto keys = engine::JobLaneKeys::for_table(t);
  auto w = node(121, {writer_spec(t, k.lease_ms)});
  auto r = node(122, {lane_spec(t, k)});
  ASSERT_TRUE(w && r);
  const BrandedId group = fresh_id("PRT"), name = fresh_id("AST");
  auto first = w->enqueue(t, group, name.view(), w->mint("AST").value());  // keeps the list
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_EQ(first->size(), 1u);
  const std::uint64_t reads0 = w->stats().fan_out.membership_reads;

  std::atomic<long long> moves{0};
  std::jthread churn([&](std::stop_token stop) {  // stopped and joined however the test ends
    redisContext* c = redisConnect(server().host().c_str(), server().port());
    while (c != nullptr && !stop.stop_requested()) {
      RedisReply incr = command_argv(c, {"INCR", keys.epoch});
      if (!incr) break;
      moves.fetch_add(1);
    }
    if (c != nullptr) redisFree(c);
  });
  constexpr int kCalls = 40;
  int admitted = 0;
  for (int i = 0; i < kCalls; ++i) {
    const long long before = moves.load();
    auto a = w->enqueue(t, group, name.view(), w->mint("AST").value());
    ASSERT_TRUE(a) << "call " << i << ": " << a.error().message();
    ASSERT_EQ(a->size(), 1u);
    EXPECT_EQ(a->front().member, "122");
    admitted += a->front().admission != Admission::kDuplicate ? 1 : 0;
    // Wait for the epoch to move at least twice, so no call meets a quiet stretch.
    ASSERT_TRUE(within(5s, [&] { return moves.load() >= before + 2; }));
  }
  churn.request_stop();
  churn.join();
  EXPECT_EQ(admitted, kCalls);
  // One read per call at most (each call met a moved epoch and read once more).
  const std::uint64_t reads = w->stats().fan_out.membership_reads - reads0;
  EXPECT_LE(reads, static_cast<std::uint64_t>(kCalls));
  EXPECT_GE(reads, static_cast<std::uint64_t>(kCalls / 2)) << "the churn never moved the epoch";
  EXPECT_EQ(w->stats().fan_out.errors, 0u);
}

// ---- one node id twice ----

TEST_F(JobLane, ASecondProcessUnderOneNodeIdIsRefusedAndATwinStopsTheFirstCachingWhileItBeats) {
  const std::string t = "twin";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  const std::string owner = member_base(t, 110) + "owner";
  const BrandedId name = fresh_id("AST");
  // A restart under the same node id within the member ttl finds its predecessor's token once:
  // no conflict, and it caches once a member ttl of beats found its own token (start waits).
  {
    auto before = node(110, {lane_spec(t, k)});
    ASSERT_TRUE(before);
    ASSERT_TRUE(within(5s, [&] { return consumer_of(*before, t)->beats >= 2; }));
  }
  ASSERT_EQ(integer_of(client(), {"EXISTS", owner}), 1)
      << "the predecessor's token expired before the restart";
  auto a = node(110, {lane_spec(t, k)});
  ASSERT_TRUE(a);
  EXPECT_TRUE(caches(*a, t, name)) << "the restarted node does not cache";
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*a, t)->beats >= 6; }));
  EXPECT_EQ(consumer_of(*a, t)->member_conflicts, 0u) << "a predecessor's token taken for a twin";

  // A second engine under 110 while a runs: the node lease refuses its start (WIRE §5.5) before
  // it writes anything, so a never sees it. The member queue's owner check below still catches a
  // twin that takes no lease (the test's own client here; an original-era process).
  {
    Engine b(node_options(server(), 110), {lane_spec(t, k)});
    const auto t0 = Clock::now();
    const std::error_code refused = b.start(std::chrono::seconds(1));
    EXPECT_EQ(refused, make_error_code(engine::Errc::kNodeTaken));
    EXPECT_EQ(refused.message(), "node_taken");
    std::printf("[ twin ] the second start refused after %.0f ms (its start timeout 1000 ms)\n",
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  EXPECT_EQ(consumer_of(*a, t)->member_conflicts, 0u) << "the refused engine beat as the member";
  ASSERT_TRUE(caches(*a, t, name)) << "a stopped caching for an engine that never ran";

  // A twin that keeps beating (the test's own client, as another process's consumer would): a
  // finds it within a beat or two and caches nothing while it beats, yet takes and completes
  // its jobs, so nothing backs up.
  const auto conflicts_before = consumer_of(*a, t)->member_conflicts;
  std::atomic<bool> twin_beats{true};
  std::thread twin([&] {
    redisContext* c = redisConnect(server().host().c_str(), server().port());
    while (c && !c->err && twin_beats.load()) {
      RedisReply r = command_argv(c, {"SET", owner, "elsewhere:1:0", "PX", "300"});
      std::this_thread::sleep_for(50ms);
    }
    if (c) redisFree(c);
  });
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*a, t)->member_conflicts > conflicts_before; }));
  ASSERT_TRUE(within(5s, [&] { return !caches(*a, t, name); }));
  auto w = node(111, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(w);
  const BrandedId group = fresh_id("PRT");
  const auto completed = consumer_of(*a, t)->completed;
  std::uint64_t reads = 0;
  const auto until = Clock::now() + 1s;  // ten beats: not one of them lets a cache
  while (Clock::now() < until) {
    ASSERT_TRUE(w->enqueue(t, group, fresh_id("AST").view(), w->mint("AST").value()));
    ASSERT_FALSE(caches(*a, t, name)) << "a cached beside a twin after " << reads << " reads";
    reads += 2;
    std::this_thread::sleep_for(10ms);
  }
  const auto during = consumer_of(*a, t)->member_conflicts - conflicts_before;
  EXPECT_GE(during, 5u) << "a twin beating every 50 ms for a second";
  twin_beats.store(false);
  twin.join();
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*a, t)->completed >= completed + reads / 2; }))
      << "jobs backed up beside the twin";
  ASSERT_TRUE(within(5s, [&] { return caches(*a, t, name); })) << "a never cached again";
  const auto settled = consumer_of(*a, t)->member_conflicts;
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(consumer_of(*a, t)->member_conflicts, settled) << "conflicts counted after the twin went";
  EXPECT_TRUE(caches(*a, t, name));
  std::printf("[ twin ] %llu conflicts counted while the twin beat; %llu reads, none from L1\n",
              static_cast<unsigned long long>(during), static_cast<unsigned long long>(reads));
}

TEST_F(JobLane, ASecondProcessIsRefusedEvenWhenItsTwinBeatsSlowerThanItDoes) {
  // The twin writes its token every 150 ms, within the member ttl (300 ms at beat 100) but
  // slower than the starting node's beat; the node starts just after one of its writes, so its
  // second beat lands before the twin's next write and would take the token for a dead
  // predecessor's (a soak under load saw that start pass). Caching waits one member ttl
  // instead, within which the twin writes (150 ms to spare under load).
  const std::string t = "slowtwin";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  const std::string owner = member_base(t, 112) + "owner";
  std::atomic<bool> twin_beats{true};
  std::atomic<int> writes{0};
  std::thread twin([&] {
    redisContext* c = redisConnect(server().host().c_str(), server().port());
    while (c && !c->err && twin_beats.load()) {
      RedisReply r = command_argv(c, {"SET", owner, "elsewhere:2:0", "PX", "300"});
      writes.fetch_add(1);
      std::this_thread::sleep_for(150ms);
    }
    if (c) redisFree(c);
  });
  ASSERT_TRUE(within(5s, [&] { return writes.load() >= 1; }));
  Engine b(node_options(server(), 112), {lane_spec(t, k)});
  const std::error_code refused = b.start();
  twin_beats.store(false);
  twin.join();
  EXPECT_EQ(refused, make_error_code(engine::Errc::kMemberConflict))
      << "started beside a twin beating every 150 ms: " << refused.message();
}

// ---- parking (bus gate 3.4 G5) ----

TEST_F(JobLane, AParkedConsumerSendsNoCommandFor400msAndAnEnqueueWakesItWellUnderItsBeat) {
  const std::string t = "park";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 5000};
  engine::EngineOptions quiet = node_options(server(), 93);
  quiet.node_lease = std::chrono::hours(1);  // its renewal (every third) stays out of the 400 ms
  auto p = start_node(quiet, {lane_spec(t, k)});
  auto w = node(94, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(p && w);
  const std::string base = member_base(t, 93);
  ASSERT_TRUE(within(5s, [&] {
    return consumer_of(*p, t)->parks >= 1 && integer_of(client(), {"EXISTS", base + "parked"}) == 1;
  }));
  std::this_thread::sleep_for(20ms);  // the SET parked and the BLPOP have landed
  const long long before = commands_served(client());
  std::this_thread::sleep_for(400ms);
  const long long during = commands_served(client()) - before;
  EXPECT_EQ(during, 0) << "commands served while the only consumer was parked";

  const BrandedId name = fresh_id("AST");
  const auto t0 = Clock::now();
  auto admitted = w->enqueue(t, fresh_id("PRT"), name.view(), w->mint("AST").value());
  ASSERT_TRUE(admitted && admitted->size() == 1);
  EXPECT_EQ((*admitted)[0].admission, Admission::kHandedOff);
  ASSERT_TRUE(within(5s, [&] { return ring_applied(*p, t) == 1; }));
  const double woke_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(woke_ms, 500.0) << "the beat is 5000 ms";
  ASSERT_TRUE(within(5s, [&] { return consumer_of(*p, t)->completed == 1; }));
  std::printf(
      "[ G5 ] parked: %lld commands in 400 ms; woken and applied %.2f ms after the enqueue "
      "(beat %lld ms)\n",
      during, woke_ms, static_cast<long long>(k.beat_ms));
}

// ---- the lead (TableSpec::job_lead) ----

// The lead drops a member's row before its job is even claimed: the member queue is paused, so
// the job waits pending, yet the row goes at once (the lead's PUBLISH, one server turn ahead of
// the admission). Resumed, the job is claimed, finds the row gone (stale) and completes. A table
// declared with job_lead off, on the same two nodes, holds no lead subscription, publishes no
// lead, and keeps its row until its job is applied.
TEST_F(JobLane, ALeadDropsTheRowWhileItsJobWaitsInAPausedQueueAndTheJobThenCompletesStale) {
  const std::string on = "leadon", off = "leadoff";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100};
  auto off_spec = lane_spec(off, k);
  off_spec.job_lead = false;
  auto off_writer = writer_spec(off, k.lease_ms);
  off_writer.job_lead = false;
  auto n = node(95, {lane_spec(on, k), off_spec});
  auto w = node(96, {writer_spec(on, k.lease_ms), off_writer});
  ASSERT_TRUE(n && w);
  const auto lead_on = engine::JobLaneKeys::for_table(on).lead;
  const auto lead_off = engine::JobLaneKeys::for_table(off).lead;
  RedisReply numsub = command_argv(client(), {"PUBSUB", "NUMSUB", lead_on, lead_off});
  ASSERT_TRUE(numsub && numsub->type == REDIS_REPLY_ARRAY && numsub->elements == 4);
  EXPECT_EQ(numsub->element[1]->integer, 1) << "the member listens on its table's lead";
  EXPECT_EQ(numsub->element[3]->integer, 0) << "job_lead off: no subscription";

  // Pause both member queues (as APausedMemberQueueIsNotClaimedFromOrHandedOffToUntilItsResume):
  // after two empty claims each and the credit list gone, neither claim nor hand-off takes a job.
  for (const auto& t : {on, off}) {
    const std::string base = member_base(t, 95);
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
    ASSERT_TRUE(command_argv(client(), {"HSET", base + "meta", "paused", "1"}));
    const std::uint64_t tried = consumer_of(*n, t)->empty_claims;
    ASSERT_TRUE(within(5s, [&] { return consumer_of(*n, t)->empty_claims >= tried + 2; }));
    ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 0; }))
        << "the consumer's member_park never took its hand-off credits down";
  }
  std::map<std::string, BrandedId> names;
  for (const auto& t : {on, off}) {
    const BrandedId name = fresh_id("AST");
    names.emplace(t, name);
    const BrandedId v1 = w->mint("AST").value();
    ASSERT_TRUE(w->put(t, name.view(), "px=100.00", v1));
    ASSERT_TRUE(n->get(t, name.view()));
    ASSERT_TRUE(l1_holds(*n, t, name));
    const BrandedId v2 = w->mint("AST").value();
    ASSERT_TRUE(w->put(t, name.view(), "px=101.00", v2));
    auto admitted = w->enqueue(t, fresh_id("PRT"), name.view(), v2);
    ASSERT_TRUE(admitted && admitted->size() == 1);
    EXPECT_EQ((*admitted)[0].admission, Admission::kEnqueued) << t << ": paused, not handed off";
  }
  EXPECT_EQ(w->stats().fan_out.leads, 1u) << "one lead, for the table that declares it";
  EXPECT_EQ(w->stats().fan_out.lead_receivers, 1u);
  ASSERT_TRUE(within(5s, [&] { return !l1_holds(*n, on, names.at(on)); }))
      << "the lead did not drop the row";
  std::this_thread::sleep_for(300ms);  // three beats: the paused queues still hold their jobs
  for (const auto& t : {on, off}) {
    const auto c = consumer_of(*n, t).value();
    EXPECT_EQ(c.claimed + c.handed_off, 0u) << t;
  }
  EXPECT_TRUE(l1_holds(*n, off, names.at(off))) << "job_lead off: the row waits for its job";
  EXPECT_EQ(n->writer(on)->stats().applied, 1u);
  // The lead's ring, or the io thread itself while the writer waited (direct_apply).
  EXPECT_EQ(n->writer(on)->ring_stats().at(1).applied + n->writer(on)->stats().direct_applies, 1u)
      << "the lead applied it";

  for (const auto& t : {on, off}) {
    ASSERT_TRUE(command_argv(client(), {"HDEL", member_base(t, 95) + "meta", "paused"}));
  }
  ASSERT_TRUE(within(5s, [&] {
    return consumer_of(*n, on)->completed == 1 && consumer_of(*n, off)->completed == 1;
  }));
  EXPECT_EQ(consumer_of(*n, on)->stale_applies, 1u) << "the job found the lead's drop";
  EXPECT_EQ(n->writer(on)->stats().applied, 1u) << "exactly one effective drop";
  EXPECT_EQ(consumer_of(*n, off)->applied, 1u);
  EXPECT_FALSE(l1_holds(*n, off, names.at(off)));
  EXPECT_EQ(n->writer(off)->ring_stats().size(), 1u) << "job_lead off: no lead ring";
  for (const auto& t : {on, off}) {
    auto after = n->get(t, names.at(t).view());
    ASSERT_TRUE(after);
    EXPECT_EQ(after->value, "px=101.00") << t;
  }
}

// Leads are at-most-once and cost nothing when lost: a held writer lets its small lead ring fill,
// the refused leads are counted and drop nothing (no flush: the jobs follow), a garbage frame on
// the lead channel is counted, and after the release every job drops its row.
TEST_F(JobLane, LeadsRefusedByAFullRingOrGarbledAreCountedAndTheJobsStillDropEveryRow) {
  const std::string t = "leadfull";
  const LaneKnobs k{.lease_ms = 30000, .beat_ms = 100, .ring_capacity = 4, .credits = 4};
  auto n = node(97, {lane_spec(t, k)});
  auto w = node(98, {writer_spec(t, k.lease_ms)});
  ASSERT_TRUE(n && w);
  const std::string base = member_base(t, 97);
  ASSERT_TRUE(within(5s, [&] { return integer_of(client(), {"EXISTS", base + "parked"}) == 1; }));
  constexpr int kNames = 12;
  std::vector<BrandedId> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back(fresh_id("AST"));
    ASSERT_TRUE(w->put(t, names.back().view(), "old", w->mint("AST").value()));
    ASSERT_TRUE(n->get(t, names.back().view()));
  }
  RedisReply garbage =
      command_argv(client(), {"PUBLISH", engine::JobLaneKeys::for_table(t).lead, "garbage"});
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->integer, 1);
  ASSERT_TRUE(within(5s, [&] {
    for (const auto& ts : n->stats().tables) {
      if (ts.name == t) return ts.garbage == 1;
    }
    return false;
  }));
  {
    WriterHold hold(*n, t);
    ASSERT_TRUE(hold.entered(5s));
    for (const auto& name : names) {
      const BrandedId v2 = w->mint("AST").value();
      ASSERT_TRUE(w->put(t, name.view(), "new", v2));
      ASSERT_TRUE(w->enqueue(t, fresh_id("PRT"), name.view(), v2));
    }
    // Every lead has reached the io thread: 4 fit the ring, the rest were refused.
    ASSERT_TRUE(within(5s, [&] {
      const auto lead = n->writer(t)->ring_stats().at(1);
      return lead.published + lead.dropped == kNames;
    }));
  }
  ASSERT_TRUE(within(10s, [&] { return consumer_of(*n, t)->completed == kNames; }))
      << stats_line(*n, t);
  const auto lead = n->writer(t)->ring_stats().at(1);
  EXPECT_EQ(lead.published, 4u);
  EXPECT_EQ(lead.dropped, kNames - 4u);
  EXPECT_EQ(n->writer(t)->stats().ring_flushes, 0u) << "a refused lead flushes nothing";
  EXPECT_EQ(n->writer(t)->stats().applied, static_cast<std::uint64_t>(kNames));
  for (const auto& name : names) {
    EXPECT_FALSE(l1_holds(*n, t, name)) << name.str();
    auto now = n->get(t, name.view());
    ASSERT_TRUE(now);
    EXPECT_EQ(now->value, "new");
  }
  std::printf("[ lead ] ring 4: %llu leads applied, %llu refused; %d jobs completed\n",
              static_cast<unsigned long long>(lead.published),
              static_cast<unsigned long long>(lead.dropped), kNames);
}

}  // namespace
}  // namespace echo::test

// A consumer node in its own process when re-executed with --child-node (see ChildNode);
// otherwise the tests.
int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--child-node", echo::test::child_main);
}
