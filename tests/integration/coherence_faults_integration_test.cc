// SPDX-License-Identifier: MIT
// The broadcast lane under the faults the gates do not stage: the fill/invalidate race across the
// wire (a randomized writer node against concurrent readers on another node, with an oracle that
// knows which drops the reader node has applied), a lost subscription under each disconnect
// policy, a node in a second OS process, and bad input from the wire and from the loader.
#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <latch>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine_nodes.h"
#include "support/child_process.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::DisconnectPolicy;
using engine::Engine;
using engine::Errc;
using engine::Source;
using table::BrandedId;

class CoherenceFaults : public SingleServerTest {};

const io::ConnectionStats* connection(const engine::EngineStats& s, std::string_view label) {
  for (const auto& c : s.connections) {
    if (c.label == label) return &c;
  }
  return nullptr;
}

// ---- the fill/invalidate race across the wire ----
//
// Writer node w: for each scheduled round k, put (name_k, "v=" + v_k) at v_k to L2, then
// broadcast (name_k, v_k). Versions rise with k. Reader node r serves reads on two threads while
// this runs. r's only ring carries exactly w's broadcasts, in publish order, so when r's ring has
// applied c messages, rounds 0..c-1 are applied on r. Before each read a reader thread takes c
// and raises its per-name floor to the newest round among 0..c-1 for that name; the version the
// read returns must be no older than the floor. The schedule is fixed before any thread starts,
// so the oracle reads immutable data.
TEST_F(CoherenceFaults, NoReadIssuedAfterADropWasAppliedReturnsTheOlderValue) {
  constexpr int kRounds = 10000;
  constexpr int kNames = 16;
  constexpr int kReaders = 2;
  const std::uint64_t seed = std::random_device{}();
  std::printf("[ race ] seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);

  auto loader_runs = std::make_shared<std::atomic<int>>(0);
  auto refusing = [loader_runs](const BrandedId&) -> engine::LoadResult {
    loader_runs->fetch_add(1);  // every name is in L2 for the whole run: never called
    return engine::LoadError{"the race test never loads"};
  };
  auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast, refusing);
  // The writer node needs no subscription of its own: broadcast is a PUBLISH.
  auto writer_spec = spec;
  writer_spec.coherence = CoherenceMode::kNone;
  auto w = node(1, {writer_spec});
  auto r = node(2, {spec});
  ASSERT_TRUE(w && r);

  std::vector<BrandedId> names;
  std::unordered_map<std::string, int> round_of;  // version -> round; initial versions -> -1
  for (int i = 0; i < kNames; ++i) {
    names.push_back(fresh_id("AST"));
    const BrandedId v0 = fresh_id("AST");
    round_of[v0.str()] = -1;
    ASSERT_TRUE(w->put("quotes", names.back().view(), "v=" + v0.str(), v0));
  }
  struct Round {
    int name;
    BrandedId version;
  };
  std::vector<Round> schedule;
  schedule.reserve(kRounds);
  std::uniform_int_distribution<int> pick(0, kNames - 1);
  for (int k = 0; k < kRounds; ++k) {
    schedule.push_back(Round{pick(rng), fresh_id("AST")});
    round_of[schedule.back().version.str()] = k;
  }
  const std::uint64_t applied_before = ring_applied(*r, "quotes");
  ASSERT_EQ(applied_before, 0u);

  std::atomic<bool> writing{true};
  std::atomic<int> write_errors{0};
  std::thread writer([&] {
    std::mt19937_64 pace(seed ^ 0x5bd1e995);
    for (int k = 0; k < kRounds; ++k) {
      const Round& round = schedule[k];
      const BrandedId& name = names[round.name];
      if (!w->put("quotes", name.view(), "v=" + round.version.str(), round.version)) {
        write_errors.fetch_add(1);
      }
      if (!w->broadcast("quotes", name.view(), round.version)) write_errors.fetch_add(1);
      if (pace() % 8 == 0) std::this_thread::yield();
    }
    writing.store(false);
  });

  struct Tally {
    std::uint64_t reads = 0, guarded = 0, l1 = 0, l2 = 0, contended = 0, errors = 0, violations = 0;
    std::string first_violation;
  };
  std::vector<Tally> tallies(kReaders);
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      Tally& tally = tallies[t];
      std::mt19937_64 local(seed + 1 + t);
      std::vector<int> floor(kNames, -1);
      std::uint64_t seen = 0;
      while (writing.load(std::memory_order_relaxed)) {
        const std::uint64_t c = ring_applied(*r, "quotes");
        for (; seen < c && seen < schedule.size(); ++seen) {
          const Round& done = schedule[seen];
          floor[done.name] = std::max(floor[done.name], static_cast<int>(seen));
        }
        // Mostly the names the writer touched last: those are the ones whose rows are in motion.
        const int which = (local() % 4 != 0 && seen > 0)
                              ? schedule[seen - 1 - local() % std::min<std::uint64_t>(seen, 4)].name
                              : static_cast<int>(local() % kNames);
        auto got = r->get("quotes", names[which].view());
        ++tally.reads;
        // Paced, so that two readers do not starve the writer node of the VM's cores.
        std::this_thread::sleep_for(std::chrono::microseconds(50 + local() % 100));
        if (!got) {
          if (got.error() == Errc::kContended) {
            ++tally.contended;
          } else {
            ++tally.errors;
          }
          continue;
        }
        (got->source == Source::kL1 ? tally.l1 : tally.l2) += 1;
        const auto it = got->version ? round_of.find(got->version->str()) : round_of.end();
        const bool known = it != round_of.end() && got->value == "v=" + got->version->str();
        if (floor[which] >= 0) ++tally.guarded;
        if (!known || it->second < floor[which]) {
          if (tally.violations++ == 0) {
            tally.first_violation = "name " + std::to_string(which) + ": floor round " +
                                    std::to_string(floor[which]) + ", read round " +
                                    (known ? std::to_string(it->second) : "unknown") + " from " +
                                    std::string(engine::to_string(got->source));
          }
        }
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();

  Tally sum;
  for (const auto& t : tallies) {
    sum.reads += t.reads;
    sum.guarded += t.guarded;
    sum.l1 += t.l1;
    sum.l2 += t.l2;
    sum.contended += t.contended;
    sum.errors += t.errors;
    sum.violations += t.violations;
    if (sum.first_violation.empty()) sum.first_violation = t.first_violation;
  }
  ASSERT_TRUE(eventually([&] { return ring_applied(*r, "quotes") == kRounds; }));
  const auto ws = writer_of(*r, "quotes").stats();
  std::printf(
      "[ race ] %d rounds over %d names: %llu reads (%llu under a floor), %llu l1, %llu l2, "
      "%llu contended; r applied %llu, stale %llu, flight restarts %llu; violations %llu\n",
      kRounds, kNames, static_cast<unsigned long long>(sum.reads),
      static_cast<unsigned long long>(sum.guarded), static_cast<unsigned long long>(sum.l1),
      static_cast<unsigned long long>(sum.l2), static_cast<unsigned long long>(sum.contended),
      static_cast<unsigned long long>(ws.applied), static_cast<unsigned long long>(ws.stale),
      static_cast<unsigned long long>(ws.flight_restarts),
      static_cast<unsigned long long>(sum.violations));
  EXPECT_EQ(sum.violations, 0u) << sum.first_violation;
  EXPECT_EQ(write_errors.load(), 0);
  EXPECT_EQ(sum.errors, 0u);
  EXPECT_EQ(loader_runs->load(), 0);
  EXPECT_EQ(writer_of(*r, "quotes").ring_stats().front().dropped, 0u);
  // The oracle had work to do: reads under a floor, both from L1 and through refills.
  EXPECT_GT(sum.guarded, 1000u);
  EXPECT_GT(sum.l1, 100u);
  EXPECT_GT(sum.l2, 100u);
}

// ---- disconnect policy: flush ----
TEST_F(CoherenceFaults, AKilledSubscriptionFlushesAndTheResubscribedTableServesNoStaleRow) {
  LoaderProbe loader;
  auto b =
      node(2, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"))});
  ASSERT_TRUE(b);
  const BrandedId name = fresh_id("AST");
  const std::string key = l2_key("quotes", name);
  ASSERT_TRUE(b->get("quotes", name.view()));
  auto hit = b->get("quotes", name.view());
  ASSERT_TRUE(hit);
  ASSERT_EQ(hit->source, Source::kL1);

  RedisReply killed = command(client(), "CLIENT KILL TYPE pubsub");
  ASSERT_TRUE(killed && killed->type == REDIS_REPLY_INTEGER);
  EXPECT_GE(killed->integer, 1);
  // The writer's change while the subscriber is gone: nobody hears it.
  const BrandedId v2 = fresh_id("AST");
  const std::string framed = engine::frame_l2_value(v2, "px=107.00");
  ASSERT_TRUE(command(client(), "SET %b %b PX 60000", key.data(), key.size(), framed.data(),
                      framed.size()));
  const std::string channel = table::coherence_channel("quotes").value();
  const std::string frame = frame_text(name, v2);
  RedisReply heard = command(client(), "PUBLISH %b %b", channel.data(), channel.size(),
                             frame.data(), frame.size());
  ASSERT_TRUE(heard && heard->type == REDIS_REPLY_INTEGER);
  EXPECT_EQ(heard->integer, 0) << "the message was meant to be lost";

  ASSERT_TRUE(eventually([&] { return writer_of(*b, "quotes").stats().disconnect_flushes >= 1; }));
  ASSERT_TRUE(eventually(
      [&] {
        const auto s = b->stats();
        const auto* sub = connection(s, "sub");
        return sub != nullptr && sub->reconnects >= 1 && !s.tables[0].writer.suspended;
      },
      10s));
  auto after = b->get("quotes", name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_NE(after->source, Source::kL1) << "a row from before the loss was served";
  EXPECT_EQ(after->value, "px=107.00");
  EXPECT_EQ(after->version, v2);
  auto cached = b->get("quotes", name.view());
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->source, Source::kL1) << "caching resumes after the confirmation";
  EXPECT_EQ(cached->version, v2);
  EXPECT_EQ(writer_of(*b, "quotes").stats().disconnect_flushes, 1u);

  // And the lane works again: a newer message drops the row.
  const BrandedId v3 = fresh_id("AST");
  const std::string frame3 = frame_text(name, v3);
  heard = command(client(), "PUBLISH %b %b", channel.data(), channel.size(), frame3.data(),
                  frame3.size());
  ASSERT_TRUE(heard && heard->type == REDIS_REPLY_INTEGER);
  EXPECT_EQ(heard->integer, 1);
  EXPECT_TRUE(eventually([&] { return !l1_holds(*b, "quotes", name); }));
}

// ---- a node in a second OS process ----

std::string describe(const engine::Result<engine::Got>& g) {
  if (!g) return "error " + g.error().message();
  return std::string(engine::to_string(g->source)) + " " + (g->version ? g->version->str() : "-") +
         " " + g->value;
}

// The child: one node that reads, waits to be told how many messages to expect, reads again.
[[noreturn]] void run_child_node(int port, const BrandedId& name, int in, int out) {
  const engine::EngineOptions o = node_options("127.0.0.1", port, 7);
  auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast,
                         [](const BrandedId&) -> engine::LoadResult {
                           return engine::Loaded{"loaded", std::nullopt};
                         });
  {
    Engine e(o, {spec});
    if (auto ec = e.start()) {
      write_line(out, "error start " + ec.message());
      ::_exit(2);
    }
    write_line(out, "ready " + describe(e.get("quotes", name.view())));
    while (auto cmd = read_line(in, std::chrono::seconds(30))) {
      if (cmd->rfind("read ", 0) != 0) break;
      const std::uint64_t expect = std::stoull(cmd->substr(5));
      const bool applied = eventually([&] { return ring_applied(e, "quotes") >= expect; }, 5s);
      write_line(
          out, std::string(applied ? "got " : "timeout ") + describe(e.get("quotes", name.view())));
    }
    e.stop();
  }
  ::_exit(0);
}

TEST_F(CoherenceFaults, ANodeInAnotherProcessAppliesThisProcesssBroadcast) {
  const BrandedId name = fresh_id("AST");
  const std::string key = l2_key("quotes", name);
  const std::string channel = table::coherence_channel("quotes").value();
  const BrandedId v1 = fresh_id("AST");
  const std::string f1 = engine::frame_l2_value(v1, "px=100.00");
  ASSERT_TRUE(
      command(client(), "SET %b %b PX 60000", key.data(), key.size(), f1.data(), f1.size()));

  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    run_child_node(server().port(), name, to_child[0], from_child[1]);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  // Whatever happens below, the child does not outlive the test.
  struct Reap {
    pid_t pid;
    int in, out;
    bool reaped = false;
    ~Reap() {
      if (!reaped) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      ::close(in);
      ::close(out);
    }
  } reap{pid, to_child[1], from_child[0]};

  auto ready = read_line(from_child[0], 15s);
  ASSERT_TRUE(ready) << "the child node never reported";
  EXPECT_EQ(*ready, "ready l2 " + v1.str() + " px=100.00");

  const BrandedId v2 = fresh_id("AST");
  const std::string f2 = engine::frame_l2_value(v2, "px=108.00");
  ASSERT_TRUE(
      command(client(), "SET %b %b PX 60000", key.data(), key.size(), f2.data(), f2.size()));
  const std::string frame = frame_text(name, v2);
  RedisReply heard = command(client(), "PUBLISH %b %b", channel.data(), channel.size(),
                             frame.data(), frame.size());
  ASSERT_TRUE(heard && heard->type == REDIS_REPLY_INTEGER);
  EXPECT_EQ(heard->integer, 1) << "the child's subscriber";
  write_line(to_child[1], "read 1");
  auto got = read_line(from_child[0], 15s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, "got l2 " + v2.str() + " px=108.00");

  // SIGKILL: the server sees the subscriber go, and nothing is left subscribed.
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  reap.reaped = true;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(eventually(
      [&] {
        RedisReply n = command(client(), "PUBSUB NUMSUB %b", channel.data(), channel.size());
        return n && n->type == REDIS_REPLY_ARRAY && n->elements == 2 && n->element[1]->integer == 0;
      },
      5s));
}

// ---- bad input ----
TEST_F(CoherenceFaults, GarbageOnTheChannelIsCountedAndIgnored) {
  LoaderProbe loader;
  auto b =
      node(2, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"))});
  ASSERT_TRUE(b);
  const BrandedId name = fresh_id("AST");
  auto filled = b->get("quotes", name.view());
  ASSERT_TRUE(filled);
  const std::string channel = table::coherence_channel("quotes").value();
  const std::string bad[] = {"garbage", "AST:short", "AAAAAAAAAAAAAA:BBBBBBBBBBBBBB",
                             std::string(name.view()) + "!" + fresh_id("AST").str(),
                             std::string(29, '\0')};
  for (const auto& payload : bad) {
    RedisReply r = command(client(), "PUBLISH %b %b", channel.data(), channel.size(),
                           payload.data(), payload.size());
    ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER);
    EXPECT_EQ(r->integer, 1);
  }
  ASSERT_TRUE(eventually([&] { return b->stats().tables[0].garbage == std::size(bad); }));
  const auto s = b->stats().tables[0];
  EXPECT_EQ(s.pushes, std::size(bad));
  EXPECT_EQ(s.rings.front().published, 0u);
  EXPECT_EQ(s.writer.applied + s.writer.stale, 0u);
  auto still = b->get("quotes", name.view());
  ASSERT_TRUE(still);
  EXPECT_EQ(still->source, Source::kL1);
  EXPECT_EQ(still->version, filled->version);

  // The lane still works after the garbage.
  ASSERT_TRUE(filled->version);
  const std::string good = frame_text(name, newer_than("AST", *filled->version));
  ASSERT_TRUE(
      command(client(), "PUBLISH %b %b", channel.data(), channel.size(), good.data(), good.size()));
  EXPECT_TRUE(eventually([&] { return !l1_holds(*b, "quotes", name); }));
  EXPECT_EQ(b->stats().tables[0].garbage, std::size(bad));
}

TEST_F(CoherenceFaults, AShortL2FrameIsCorruptForEveryWaiterAndNothingIsCachedOrDeleted) {
  constexpr int kWaiters = 8;
  LoaderProbe loader;
  auto b =
      node(2, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"))});
  ASSERT_TRUE(b);
  const BrandedId name = fresh_id("AST");
  const std::string key = l2_key("quotes", name);
  ASSERT_TRUE(command(client(), "SET %b abcde", key.data(), key.size()));

  std::atomic<int> corrupt{0}, other{0};
  std::latch done(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    b->get_async("quotes", name.view(), [&](engine::Result<engine::Got> r) {
      (!r && r.error() == Errc::kCorruptL2Frame ? corrupt : other).fetch_add(1);
      done.count_down();
    });
  }
  done.wait();
  EXPECT_EQ(corrupt.load(), kWaiters);
  EXPECT_EQ(other.load(), 0);
  auto ws = writer_of(*b, "quotes").stats();
  EXPECT_EQ(ws.corrupt_frames + ws.coalesced, static_cast<std::uint64_t>(kWaiters))
      << "one answer per flight, shared by its riders";
  EXPECT_EQ(b->stats().tables[0].l1.size, 0u);
  EXPECT_EQ(l2_raw(client(), key), "abcde") << "a corrupt frame is not deleted";
  EXPECT_EQ(loader.runs(), 0);

  auto again = b->get("quotes", name.view());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), Errc::kCorruptL2Frame);
  ws = writer_of(*b, "quotes").stats();
  EXPECT_EQ(ws.fills + ws.l2_hits, 0u);
}

TEST_F(CoherenceFaults, ALoaderErrorOrThrowIsLoaderFailedAndNeverCached) {
  auto runs = std::make_shared<std::atomic<int>>(0);
  auto failing = [runs](const BrandedId&) -> engine::LoadResult {
    if (runs->fetch_add(1) % 2 == 0) return engine::LoadError{"upstream down"};
    throw std::runtime_error("upstream threw");
  };
  auto b = node(2, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, failing)});
  ASSERT_TRUE(b);
  const BrandedId name = fresh_id("AST");
  for (int i = 0; i < 4; ++i) {
    auto r = b->get("quotes", name.view());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), Errc::kLoaderFailed);
  }
  EXPECT_EQ(runs->load(), 4) << "a failure is never cached: every read asks the loader again";
  const auto s = b->stats().tables[0];
  EXPECT_EQ(s.writer.load_errors, 4u);
  EXPECT_EQ(s.writer.fills, 0u);
  EXPECT_EQ(s.l1.size, 0u);
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)), "(nil)");
}

// ---- disconnect policy: serve_stale (last: it stops and restarts the suite's server) ----
TEST_F(CoherenceFaults, ServeStaleKeepsServingUntilItsMaxAgeWhileFlushDropsAtOnce) {
  constexpr std::int64_t kMaxAge = 800;
  LoaderProbe loader;
  auto flushing =
      table_spec("flushy", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"));
  auto stale = table_spec("stale", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"));
  stale.disconnect = DisconnectPolicy::kServeStale;
  stale.serve_stale_max_ms = kMaxAge;
  stale.sweep_ms = 5000;  // the max age, not the sweep period, must end the serving
  auto b = node(2, {flushing, stale});
  ASSERT_TRUE(b);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(b->get("flushy", name.view()));
  ASSERT_TRUE(b->get("stale", name.view()));

  server().kill();  // the subscription is lost and stays lost
  ASSERT_TRUE(eventually([&] { return writer_of(*b, "flushy").stats().disconnect_flushes >= 1; }));
  const auto lost = Clock::now();
  // The counter moves just before the rows go (same writer pass): allow that pass to finish.
  EXPECT_TRUE(eventually([&] { return !l1_holds(*b, "flushy", name); }, 100ms))
      << "flush drops at once";
  auto served = b->get("stale", name.view());
  ASSERT_TRUE(served) << served.error().message();
  EXPECT_EQ(served->source, Source::kL1) << "serve_stale keeps serving while under its max age";
  ASSERT_TRUE(eventually([&] { return !l1_holds(*b, "stale", name); }, 5s));
  const auto served_ms = std::chrono::duration<double, std::milli>(Clock::now() - lost).count();
  std::printf("[ disconnect ] flush dropped at once; serve_stale served %.0f ms of its %lld ms\n",
              served_ms, static_cast<long long>(kMaxAge));
  EXPECT_GE(served_ms, kMaxAge - 150.0);
  EXPECT_LE(served_ms, kMaxAge + 400.0);
  EXPECT_EQ(writer_of(*b, "stale").stats().disconnect_flushes, 1u);

  server().restart();
  ASSERT_TRUE(eventually(
      [&] {
        const auto s = b->stats();
        const auto* cmd = connection(s, "cmd");
        return !s.tables[0].writer.suspended && !s.tables[1].writer.suspended && cmd != nullptr &&
               cmd->status == io::ConnStatus::kReady;
      },
      15s))
      << "the node never resubscribed after the server came back";
  auto refill = b->get("stale", name.view());
  ASSERT_TRUE(refill) << refill.error().message();
  EXPECT_EQ(refill->source, Source::kLoader) << "the restarted server holds nothing";
}

}  // namespace
}  // namespace echo::test
