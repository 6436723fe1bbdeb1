// SPDX-License-Identifier: MIT
// Engine::enqueue_async against a real server: the call returns once the lead is answered (a raw
// subscriber of the lead channel already holds the message when it returns), the admissions and the
// callback follow on the job-send thread with enqueue's answer, refusals of the payload are the
// call's own (no callback), a lane with no live member answers kNoLiveMember through the callback,
// and stop() runs every handed-off job's admissions and callback before it returns; after it, the
// call answers kStopped.
#include <echo/engine/internal/job_consumer.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "job_lane_fixture.h"

namespace echo::test {
namespace {

using engine::MemberAdmission;
using Admitted = engine::Result<std::vector<MemberAdmission>>;

// Callbacks' answers, in arrival order, and the thread they ran on. Any thread.
class Answers {
 public:
  Engine::EnqueueDone sink() {
    return [this](const Admitted& a) {
      std::lock_guard lock(mu_);
      answers_.push_back(a);
      threads_.push_back(std::this_thread::get_id());
      cv_.notify_all();
    };
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds limit = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return answers_.size() >= n; });
  }
  std::vector<Admitted> answers() {
    std::lock_guard lock(mu_);
    return answers_;
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Admitted> answers_;
  std::vector<std::thread::id> threads_;
};

bool is_member(redisContext* c, const std::string& t, unsigned node) {
  RedisReply z =
      command_argv(c, {"ZSCORE", engine::JobLaneKeys::for_table(t).members, std::to_string(node)});
  return z && z->type == REDIS_REPLY_STRING;
}

TEST_F(JobLane, ReturnsOnceTheLeadIsAnsweredThenTheCallbackGetsTheAdmissions) {
  const std::string t = "asyncjob";
  auto r = node(61, {lane_spec(t, kQuickBeat)});
  auto w = node(62, {writer_spec(t, kQuickBeat.lease_ms)});
  ASSERT_TRUE(r && w);
  ASSERT_TRUE(eventually([&] { return is_member(client(), t, 61); })) << "R never joined";
  const BrandedId group = fresh_id("PRT"), name = fresh_id("AST");
  ASSERT_TRUE(r->put(t, name.view(), "px=1", r->mint("AST").value()));
  ASSERT_TRUE(l1_holds(*r, t, name));

  // A raw subscriber of the lead channel: PUBLISH's reply leaves after the push to it, so once
  // the call returned (the lead answered) the message is already on its socket.
  RedisClient sub = connect_client(server());
  ASSERT_TRUE(sub);
  const std::string lead = engine::JobLaneKeys::for_table(t).lead;
  RedisReply ok = command_argv(sub.get(), {"SUBSCRIBE", lead});
  ASSERT_TRUE(ok && ok->type == REDIS_REPLY_ARRAY);

  Answers answers;
  const BrandedId v = newer_than("AST", r->mint("AST").value());
  auto job = w->enqueue_async(t, group, name.view(), v, answers.sink());
  ASSERT_TRUE(job) << job.error().message();
  EXPECT_EQ(job->ns(), "JOB");
  const timeval no_wait{0, 200000};  // 200 ms: generous, the bytes are there already
  redisSetTimeout(sub.get(), no_wait);
  void* raw = nullptr;
  ASSERT_EQ(redisGetReply(sub.get(), &raw), REDIS_OK) << "no lead message after the call";
  RedisReply pushed(static_cast<redisReply*>(raw));
  ASSERT_TRUE(pushed->type == REDIS_REPLY_ARRAY && pushed->elements == 3);
  EXPECT_EQ(std::string(pushed->element[2]->str, pushed->element[2]->len), frame_text(name, v));

  ASSERT_TRUE(answers.wait_for(1)) << "the callback never ran";
  const Admitted a = answers.answers().front();
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0].member, "61");
  EXPECT_NE((*a)[0].admission, Admission::kDuplicate);
  EXPECT_NE(answers.threads().front(), std::this_thread::get_id());
  EXPECT_TRUE(eventually([&] { return !l1_holds(*r, t, name); })) << "R kept its row";
  // One call: one fan-out, one lead (the caller's, not the fan-out's), one admission.
  const engine::FanOutCounters f = w->stats().fan_out;
  EXPECT_EQ(f.enqueues, 1u);
  EXPECT_EQ(f.leads, 1u);
  EXPECT_EQ(f.admitted, 1u);
  EXPECT_EQ(f.errors, 0u);
}

TEST_F(JobLane, APayloadRefusalIsTheCallsOwnAndNoLiveMemberComesThroughTheCallback) {
  const std::string t = "asyncnomember";
  auto w = node(63, {writer_spec(t, kQuickBeat.lease_ms)});
  ASSERT_TRUE(w);
  Answers answers;
  const BrandedId group = fresh_id("PRT");
  // A name of another kind: refused before anything leaves, no callback.
  auto wrong = w->enqueue_async(t, group, fresh_id("TXN").view(), fresh_id("AST"), answers.sink());
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error(), engine::Errc::kKind);
  auto bad_table = w->enqueue_async("no such table!", group, fresh_id("AST").view(),
                                    fresh_id("AST"), answers.sink());
  ASSERT_FALSE(bad_table);
  EXPECT_EQ(bad_table.error(), engine::Errc::kNoSuchCache);
  // No member: handed off, then answered kNoLiveMember, counted as an error.
  auto job = w->enqueue_async(t, group, fresh_id("AST").view(), fresh_id("AST"), answers.sink());
  ASSERT_TRUE(job) << job.error().message();
  ASSERT_TRUE(answers.wait_for(1));
  const auto got = answers.answers();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_FALSE(got[0]);
  EXPECT_EQ(got[0].error(), engine::Errc::kNoLiveMember);
  EXPECT_EQ(w->stats().fan_out.errors, 1u);
  EXPECT_EQ(w->stats().fan_out.enqueues, 1u);
}

TEST_F(JobLane, StopRunsEveryHandedOffJobsAdmissionsAndCallbackFirst) {
  const std::string t = "asyncstop";
  auto r = node(64, {lane_spec(t, kQuickBeat)});
  auto w = node(65, {writer_spec(t, kQuickBeat.lease_ms)});
  ASSERT_TRUE(r && w);
  ASSERT_TRUE(eventually([&] { return is_member(client(), t, 64); })) << "R never joined";
  Answers answers;
  const BrandedId group = fresh_id("PRT");
  constexpr std::size_t kJobs = 40;
  for (std::size_t i = 0; i < kJobs; ++i) {
    auto job = w->enqueue_async(t, group, fresh_id("AST").view(), fresh_id("AST"), answers.sink());
    ASSERT_TRUE(job) << job.error().message();
  }
  w->stop();  // no wait before it: the admissions are still queued or in flight
  const auto got = answers.answers();
  ASSERT_EQ(got.size(), kJobs) << "stop() returned before every callback ran";
  for (const auto& a : got) {
    ASSERT_TRUE(a) << a.error().message();
    EXPECT_EQ(a->size(), 1u);
  }
  auto late = w->enqueue_async(t, group, fresh_id("AST").view(), fresh_id("AST"), answers.sink());
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), engine::Errc::kStopped);
  EXPECT_EQ(answers.answers().size(), kJobs) << "a refused call ran its callback";
}

}  // namespace
}  // namespace echo::test
