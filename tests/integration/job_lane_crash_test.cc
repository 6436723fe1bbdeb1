// SPDX-License-Identifier: MIT
// The job lane when a consumer's process dies or stalls: killed by SIGKILL holding its job (F5),
// paused longer than its lease (no stale completion accepted), killed and restarted mid fan-out.
// Consumer processes are this binary re-executed with --child-node (main, at the bottom).

#include <echo/engine/internal/job_consumer.h>
#include "support/child_process.h"

#include "job_lane_fixture.h"

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
    auto process =
        ChildProcess::spawn({"--child-node", std::to_string(port), std::to_string(node), table,
                             std::to_string(k.lease_ms), std::to_string(k.beat_ms),
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

// A consumer's counters once its member queue `base` has settled: the server holds no job row
// and lists nothing to deliver, and every delivery the counters count (claimed + handed_off) is
// answered (completed, refused stale or gone, an error, malformed). nullopt while not settled.
// The server is read FIRST, the counters after (the chaos test's flake). Read the other
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
  EXPECT_FALSE(early.has_value()) << "settled while the job waited: completed "
                                  << early.value_or(Counters{})["completed"] << " of 1";
  if (!resumed) {
    ASSERT_TRUE(command_argv(client(), {"HDEL", base + "meta", "paused"}));
  }
  std::optional<Counters> s;
  ASSERT_TRUE(within(5s,
                     [&] {
                       s = settled_counters(client(), base, [&] { return counters_of(*n, t); });
                       return s.has_value();
                     }))
      << "never settled: " << stats_line(*n, t);
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

}  // namespace
}  // namespace echo::test

// A consumer node in its own process when re-executed with --child-node (see ChildNode);
// otherwise the tests.
int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--child-node", echo::test::child_main);
}
