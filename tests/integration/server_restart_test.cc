// SPDX-License-Identifier: MIT
// The server losing or refusing data: a restart without persistence (L2 empty afterwards), a crash
// and restart with AOF (appendfsync always: the data returns), and maxmemory with noeviction
// refusing writes (a put, a publish, and a journal's enqueue). Each test states the engine's
// promise, then stages the fault on a real redis-server and asserts it.
#include <echo/engine/internal/job_consumer.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "journal_lane.h"
#include "server_faults.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Journal;
using engine::Source;
using table::BrandedId;

// The suite's server as LocalServer starts it: no RDB, no AOF, so a restart loses every key.
class ServerRestart : public SingleServerTest {};

// The same with an append-only file fsynced on every write: a crash (SIGKILL) loses nothing the
// server answered.
class AofServerRestart : public SingleServerTest {
 protected:
  static void SetUpTestSuite() {
    start_server({.extra_args = {"--appendonly", "yes", "--appendfsync", "always"}});
  }
};

// maxmemory is set per test (CONFIG SET) and lifted by Refusals::TearDown whatever the test did.
class Refusals : public SingleServerTest {
 protected:
  void TearDown() override { lift(); }
  void refuse_writes() {
    RedisReply p = command(client(), "CONFIG SET maxmemory-policy noeviction");
    ASSERT_TRUE(p && p->type == REDIS_REPLY_STATUS) << text(p.get());
    // One byte: whatever the server holds is over it, so every write is refused with OOM.
    RedisReply m = command(client(), "CONFIG SET maxmemory 1");
    ASSERT_TRUE(m && m->type == REDIS_REPLY_STATUS) << text(m.get());
  }
  void lift() {
    RedisReply m = command(client(), "CONFIG SET maxmemory 0");
    EXPECT_TRUE(m && m->type == REDIS_REPLY_STATUS) << text(m.get());
  }
};

// What the disconnect policy (TableSpec::disconnect, docs/configuration.md; docs/wire.md,
// "Table semantics") promises across a restart: a broadcast table's subscription is lost with the
// server, so at the resubscribe its rows are flushed (the policy kFlush, the default); the engine
// cannot know which messages it missed, and here the data itself is gone. So no row cached before
// the restart is served afterwards: a read misses L1, finds no key in L2 and runs the loader. The
// node keeps working: it re-fences, takes its node lease again and puts land.
TEST_F(ServerRestart, ARestartWithoutPersistenceFlushesL1SoNoRowWhoseKeyVanishedIsServed) {
  LoaderProbe loader;
  EventLog events;
  engine::EngineOptions o = node_options(server(), 1);
  o.on_event = events.sink();
  auto a = start_node(o, {quotes_spec(loader)});
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  const BrandedId v1 = a->mint("AST").value();
  ASSERT_TRUE(a->put("quotes", name.view(), "px=101.00", v1));
  auto cached = a->get("quotes", name.view());
  ASSERT_TRUE(cached && cached->source == Source::kL1 && cached->version == v1);
  const auto reconnects = conn_stats(*a, "sub").reconnects;
  const auto flushes = writer_of(*a, "quotes").stats().disconnect_flushes;

  server().restart();
  RedisClient fresh = connect_client(server());
  ASSERT_TRUE(fresh);
  EXPECT_EQ(l2_raw(fresh.get(), l2_key("quotes", name)), "(nil)") << "the restart kept the key";
  ASSERT_TRUE(subscription_recovered(*a, "quotes", reconnects, flushes)) << events.text();
  // A call while the command connection redials answers disconnected at once (it does not wait
  // for the reconnect): wait for it to be back before reading.
  ASSERT_TRUE(eventually([&] { return conn_stats(*a, "cmd").reconnects >= 1; }, 10s));

  const int loads = loader.runs();
  auto after = a->get("quotes", name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->source, Source::kLoader) << "served a row whose L2 key vanished";
  EXPECT_EQ(after->value, "px=100.00");
  EXPECT_NE(after->version, v1);
  EXPECT_EQ(loader.runs(), loads + 1);

  const auto minted = mint_when_leased(*a, "AST");  // the restart lost the lease key too
  ASSERT_TRUE(minted);
  const BrandedId v2 = *minted;
  auto put = a->put("quotes", name.view(), "px=102.00", v2);
  ASSERT_TRUE(put) << put.error().message();
  EXPECT_EQ(l2_raw(fresh.get(), l2_key("quotes", name)), engine::frame_l2_value(v2, "px=102.00"));
  std::printf("[ restart, no AOF ] the row read from the %s after the flush; events:\n%s",
              std::string(engine::to_string(after->source)).c_str(), events.text().c_str());
}

// With appendonly yes and appendfsync always, a SIGKILLed server restarts with every write it
// answered: the subscription's loss still flushes L1 (the node cannot know what it missed), and
// the next read finds the row in L2 at the version put before the crash; nothing is lost.
TEST_F(AofServerRestart, ACrashAndRestartWithAofFsyncAlwaysReturnsTheDataAndTheRowIsReadFromL2) {
  LoaderProbe loader;
  auto a = node(1, {quotes_spec(loader)});
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  const BrandedId v1 = a->mint("AST").value();
  ASSERT_TRUE(a->put("quotes", name.view(), "px=101.00", v1));
  ASSERT_EQ(a->get("quotes", name.view())->source, Source::kL1);
  const auto reconnects = conn_stats(*a, "sub").reconnects;
  const auto flushes = writer_of(*a, "quotes").stats().disconnect_flushes;

  server().restart(/*hard=*/true);
  RedisClient fresh = connect_client(server());
  ASSERT_TRUE(fresh);
  EXPECT_EQ(l2_raw(fresh.get(), l2_key("quotes", name)), engine::frame_l2_value(v1, "px=101.00"))
      << "the AOF lost an answered write";
  ASSERT_TRUE(subscription_recovered(*a, "quotes", reconnects, flushes));
  ASSERT_TRUE(eventually([&] { return conn_stats(*a, "cmd").reconnects >= 1; }, 10s));

  auto after = a->get("quotes", name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->source, Source::kL2);
  EXPECT_EQ(after->version, v1);
  EXPECT_EQ(after->value, "px=101.00");
  EXPECT_EQ(loader.runs(), 0);
  const auto minted = mint_when_leased(*a, "AST");
  ASSERT_TRUE(minted);
  ASSERT_TRUE(a->put("quotes", name.view(), "px=102.00", *minted));
}

// Expected, maxmemory 1 with noeviction: the SET is refused with the server's OOM error, which
// a put answers as io server_error with the server's words in the message ("OOM command not
// allowed when used memory > 'maxmemory'."); so does a broadcast publish (its script's SET). The
// node's L1 row is not touched: it still claims the old version, which is what L2 still holds.
// Reads go on. Once the limit is lifted the same put lands.
TEST_F(Refusals, MaxmemoryNoevictionRefusesAPutTypedWithTheServersWordsAndLeavesTheOldRow) {
  LoaderProbe loader;
  auto a = node(1, {quotes_spec(loader)});
  ASSERT_TRUE(a);
  const BrandedId name = fresh_id("AST");
  const BrandedId v1 = a->mint("AST").value();
  ASSERT_TRUE(a->put("quotes", name.view(), "px=101.00", v1));
  ASSERT_NO_FATAL_FAILURE(refuse_writes());

  const auto minted = mint_when_leased(*a, "AST");  // the restart lost the lease key too
  ASSERT_TRUE(minted);
  const BrandedId v2 = *minted;
  auto put = a->put("quotes", name.view(), "px=102.00", v2);
  ASSERT_FALSE(put) << "a SET over maxmemory succeeded";
  EXPECT_EQ(put.error(), io::IoErrc::kServerError) << put.error();
  EXPECT_NE(put.error().message().find("OOM"), std::string::npos) << put.error().message();
  const BrandedId v3 = a->mint("AST").value();
  auto published = a->publish("quotes", name.view(), "px=103.00", v3);
  ASSERT_FALSE(published) << "a publish over maxmemory succeeded";
  EXPECT_EQ(published.error(), io::IoErrc::kServerError) << published.error();
  EXPECT_NE(published.error().message().find("OOM"), std::string::npos)
      << published.error().message();

  auto read = a->get("quotes", name.view());
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->source, Source::kL1);
  EXPECT_EQ(read->version, v1) << "a refused write's version reached L1";
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)), engine::frame_l2_value(v1, "px=101.00"));

  lift();
  auto again = a->put("quotes", name.view(), "px=102.00", v2);
  ASSERT_TRUE(again) << again.error().message();
  auto after = a->get("quotes", name.view());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->version, v2);
  std::printf("[ maxmemory ] put: %s\n[ maxmemory ] publish: %s\n", put.error().message().c_str(),
              published.error().message().c_str());
}

// Expected, the job lane with a journal, writes refused by maxmemory + noeviction: the writer
// announces only what L2 holds (put, then record and enqueue), so a put the server refuses (OOM,
// typed) is neither recorded nor announced, and the consumer keeps the row L2 still holds. An
// intent recorded for a put that landed before the refusals began is admitted even over
// maxmemory: member_enqueue's first write is an LPOP of a hand-off credit, which the server does
// not refuse, and a script that has written is allowed its later writes (redis-server 7's rule:
// it cannot stop a script half-way), so the job reaches the consumer and it applies it. Once the
// limit is lifted, the refused put lands and its intent is recorded and applied. No intent is lost
// or left pending: every one is marked, and a replay finds nothing uncovered.
TEST_F(Refusals, MaxmemoryNoevictionLosesNoJournaledIntentARefusedPutIsNotAnnouncedTheRestApply) {
  TempDir dir;
  const std::string t = "oomlane";
  const BrandedId group = fresh_id("PRT");
  Journal j(journal_options(dir.path(), group, 301));
  auto w = node(300, {writer_spec(t)});
  auto c = node(302, {lane_spec(t)}, &j);
  ASSERT_TRUE(w && c);
  const auto enqueue = lane_enqueue(*w, t, group);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(eventually(
      [&] {
        RedisReply r =
            command_argv(client(), {"ZSCORE", engine::JobLaneKeys::for_table(t).members, "302"});
        return r && r->type == REDIS_REPLY_STRING;
      },
      10s))
      << "the consumer never beat into the membership";

  // v1: put, announced, applied, then read into the consumer's L1.
  const BrandedId v1 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "v1", v1));
  auto first = j.intend_and_enqueue(name, v1, enqueue);
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_TRUE(eventually([&] { return j.last_applied(name) == v1; }, 10s));
  ASSERT_TRUE(c->get(t, name.view()));
  auto cached = c->get(t, name.view());
  ASSERT_TRUE(cached && cached->source == Source::kL1 && cached->version == v1);

  // v2: the put lands; then the server refuses writes; the intent is recorded and admitted.
  const BrandedId v2 = w->mint("AST").value();
  ASSERT_TRUE(w->put(t, name.view(), "v2", v2));
  ASSERT_NO_FATAL_FAILURE(refuse_writes());
  auto admitted = j.intend_and_enqueue(name, v2, enqueue);
  ASSERT_TRUE(admitted) << "the enqueue over maxmemory was refused: " << admitted.error();
  // v3: refused, typed; the writer records nothing for it; the consumer's row is untouched by it.
  const std::uint64_t intents = j.stats().intents;
  const BrandedId v3 = w->mint("AST").value();
  auto refused = w->put(t, name.view(), "v3", v3);
  ASSERT_FALSE(refused) << "a SET over maxmemory succeeded";
  EXPECT_EQ(refused.error(), io::IoErrc::kServerError) << refused.error();
  EXPECT_NE(refused.error().message().find("OOM"), std::string::npos) << refused.error().message();
  EXPECT_EQ(j.stats().intents, intents);
  ASSERT_TRUE(eventually([&] { return j.last_applied(name) == v2; }, 10s))
      << "the admitted intent was not applied while writes were refused";
  auto during = c->get(t, name.view());
  ASSERT_TRUE(during) << during.error().message();
  EXPECT_EQ(during->version, v2) << "the consumer served other than what L2 holds";

  lift();
  ASSERT_TRUE(w->put(t, name.view(), "v3", v3));
  auto last = j.intend_and_enqueue(name, v3, enqueue);
  ASSERT_TRUE(last) << last.error().message();
  ASSERT_TRUE(eventually([&] { return j.last_applied(name) == v3; }, 10s));
  auto after = c->get(t, name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->version, v3);
  EXPECT_EQ(after->value, "v3");
  ASSERT_TRUE(eventually([&] { return j.flush() && j.stats().pending_enqueue == 0; }, 5s))
      << "an intent was left unmarked";
  auto replayed = j.replay(enqueue);
  ASSERT_TRUE(replayed) << replayed.error().message();
  EXPECT_EQ(replayed->replayed, 0u) << "an intent was uncovered: its message never applied";
  EXPECT_EQ(replayed->deduplicated, 0u);
  EXPECT_EQ(j.stats().intents, 3u);
  std::printf("[ maxmemory, journal ] put v3: %s; 3 intents, all applied and marked\n",
              refused.error().message().c_str());
}

// Expected: an error reply inside the job lane's fan-out pipeline (here WRONGTYPE: the member's
// hand-off list replaced by a string, so member_enqueue's LPOP is refused) answers enqueue_job and
// the job-lane publish as io server_error carrying the server's words, as every blocking verb's
// server error does; so does the job-lane publish's SET refused over maxmemory. (The fan-out used
// to answer the bare code, "server_error", whatever the server had said.)
TEST_F(Refusals, AJobLaneFanOutRefusalAnswersServerErrorWithTheServersWords) {
  const std::string t = "refusedlane";
  const BrandedId group = fresh_id("PRT");
  auto w = node(310, {writer_spec(t)});
  auto c = node(312, {lane_spec(t)});
  ASSERT_TRUE(w && c);
  const std::string members = engine::JobLaneKeys::for_table(t).members;
  ASSERT_TRUE(eventually(
      [&] {
        RedisReply r = command_argv(client(), {"ZSCORE", members, "312"});
        return r && r->type == REDIS_REPLY_STRING;
      },
      10s));
  const std::string parked = engine::JobLaneKeys::for_table(t).member_base("312") + "parked";
  RedisReply set = command_argv(client(), {"SET", parked, "not a list"});
  ASSERT_TRUE(set && set->type == REDIS_REPLY_STATUS) << text(set.get());
  const BrandedId name = fresh_id("AST");
  auto job = w->enqueue_job(t, group, fresh_id("JOB"), name.view(), w->mint("AST").value());
  ASSERT_FALSE(job) << "an enqueue into a member whose hand-off list is a string succeeded";
  EXPECT_EQ(job.error(), io::IoErrc::kServerError) << job.error();
  EXPECT_NE(job.error().message().find("WRONGTYPE"), std::string::npos) << job.error().message();
  RedisReply del = command_argv(client(), {"DEL", parked});
  ASSERT_TRUE(del && del->type == REDIS_REPLY_INTEGER) << text(del.get());

  ASSERT_NO_FATAL_FAILURE(refuse_writes());
  auto published = w->publish(t, group, name.view(), "v", w->mint("AST").value());
  ASSERT_FALSE(published) << "a job-lane publish's SET over maxmemory succeeded";
  EXPECT_EQ(published.error(), io::IoErrc::kServerError) << published.error();
  EXPECT_NE(published.error().message().find("OOM"), std::string::npos)
      << published.error().message();
  std::printf("[ fan-out refusal ] enqueue_job: %s\n[ fan-out refusal ] publish: %s\n",
              job.error().message().c_str(), published.error().message().c_str());
}

}  // namespace
}  // namespace echo::test
