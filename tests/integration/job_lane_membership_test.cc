// SPDX-License-Identifier: MIT
// The job lane's membership: an enqueue with no live member is a typed error, churn admits every
// member within two rounds, and a second process under one node id is refused.

#include <echo/engine/internal/job_consumer.h>
#include "job_lane_fixture.h"

namespace echo::test {
namespace {

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
  RedisReply live =
      command_argv(client(), {"SET", member_base(t, 97) + "live", "30000", "PX", "60000"});
  ASSERT_EQ(text(live.get()), "OK");
  RedisReply beat =
      run_script(client(), "member_beat", {keys.members, keys.epoch}, {"97", "60000"});
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
  const LaneKnobs k = kQuickBeat;
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
  const LaneKnobs k = kQuickBeat;
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

  // A second engine under 110 while a runs: the node lease refuses its start (docs/wire.md,
  // "Node leases") before it writes anything, so a never sees it. The member queue's owner check
  // below still catches a twin that takes no lease (the test's own client here; an original-era
  // process).
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
  EXPECT_EQ(consumer_of(*a, t)->member_conflicts, settled)
      << "conflicts counted after the twin went";
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
  const LaneKnobs k = kQuickBeat;
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

}  // namespace
}  // namespace echo::test
