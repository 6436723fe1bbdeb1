// SPDX-License-Identifier: MIT
// The connector against a real redis-server (docs/wire.md, "The connector"): boot and fence, 10,000
// pipelined commands, pushes interleaved with replies, requires_resp3 on RESP2, NOSCRIPT after
// SCRIPT FLUSH, reconnect after CLIENT KILL and after a real restart (subscriptions restored),
// overloaded, AUTH right and wrong, the version fence, heartbeat, Unix sockets, blocking calls.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <echo/testing/local_server.h>

#include "support/io_backend.h"
#include "support/on_loop.h"
#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::io {
namespace {

using namespace std::chrono_literals;
using test::command;
using test::RedisReply;
using test::SingleServerTest;
using test::text;

// Pushes and owner events, recorded from the loop thread, read by the test thread.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> messages;  // payloads of ["message", ch, payload] pushes
  std::vector<ConnEvent> events;
  std::vector<std::error_code> causes;

  PushFn push_fn() {
    return [this](const Resp3Value& v) {
      if (v.size() == 3 && v[0].str() == "message") {
        std::lock_guard lock(mu);
        messages.emplace_back(v[2].str());
      }
    };
  }
  EventFn event_fn() {
    return [this](ConnEvent e, std::error_code cause) {
      std::lock_guard lock(mu);
      events.push_back(e);
      causes.push_back(cause);
    };
  }
  std::size_t message_count() {
    std::lock_guard lock(mu);
    return messages.size();
  }
  bool saw(ConnEvent e) {
    std::lock_guard lock(mu);
    for (ConnEvent x : events) {
      if (x == e) return true;
    }
    return false;
  }
};

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 10s) {
  return test::poll_until(pred, timeout, 2ms);
}

using test::on_loop;  // a Connection verb runs on its loop thread

class ConnectionTest : public SingleServerTest {
 protected:
  ConnectionOptions options() {
    ConnectionOptions o;
    o.host = server().host();
    o.port = server().port();
    o.backoff_initial = 20ms;
    o.backoff_max = 200ms;
    return o;
  }
  LoopThread lt_{test::test_loop_options()};
};

TEST_F(ConnectionTest, BootsOnResp3SelectsNamesAndClaimsTheFence) {
  ConnectionOptions o = options();
  o.db = 2;
  o.client_name = "echo-conn-test";
  Connection conn(lt_.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.stats().protocol, 3);
  auto set = conn.call_blocking({"SET", "in-db-2", "yes"});
  ASSERT_FALSE(set.ec) << set.ec.message();
  command(client(), "SELECT 2");  // the fence is checked after SELECT (the boot order)
  auto v = command(client(), "GET {emq}:version");
  ASSERT_TRUE(v && v->type == REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(v->str, v->len), "echomq:2.0.0");
  auto got = command(client(), "GET in-db-2");
  ASSERT_TRUE(got && got->type == REDIS_REPLY_STRING);
  auto list = command(client(), "CLIENT LIST");
  ASSERT_TRUE(list && list->type == REDIS_REPLY_STRING);
  EXPECT_NE(std::string(list->str, list->len).find("name=echo-conn-test"), std::string::npos);
}

TEST_F(ConnectionTest, PairsTenThousandPipelinedRepliesWithTheirCallersInOrder) {
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  constexpr int kCount = 10000;
  std::vector<long long> seen;
  seen.reserve(kCount);
  std::promise<void> all;
  const auto before = conn.stats();
  const std::error_code issued = on_loop(lt_.loop(), [&] {
    for (int i = 0; i < kCount; ++i) {
      auto ec = conn.call({"INCR", "counter"}, [&](std::error_code e, const Resp3Value& v) {
        seen.push_back(e ? -1 : v.integer());
        if (seen.size() == kCount) all.set_value();
      });
      if (ec) return ec;
    }
    return std::error_code{};
  });
  ASSERT_FALSE(issued) << issued.message();
  ASSERT_EQ(all.get_future().wait_for(20s), std::future_status::ready);
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(seen[i], i + 1) << "reply " << i;
  const auto after = conn.stats();
  EXPECT_EQ(after.commands - before.commands, static_cast<std::uint64_t>(kCount));
  EXPECT_EQ(after.replies - before.replies, static_cast<std::uint64_t>(kCount));
  EXPECT_LT(after.pipelines - before.pipelines, 100u) << "one pass of calls leaves in few sends";
  EXPECT_EQ(after.pending, 0u);
  EXPECT_EQ(after.wire_errors, 0u);
}

TEST_F(ConnectionTest, PushesInterleavedWithRepliesBypassTheFifo) {
  Recorder rec;
  Connection conn(lt_.loop(), options(), rec.push_fn());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  ASSERT_FALSE(conn.subscribe_blocking("ch:interleave"));
  ASSERT_TRUE(eventually([&] { return conn.stats().pushes >= 1; }));  // the subscribe push
  constexpr int kCount = 500;
  std::vector<std::string> echoes;
  std::vector<long long> published;
  std::promise<void> all;
  on_loop(lt_.loop(), [&] {
    for (int i = 0; i < kCount; ++i) {
      const std::string n = std::to_string(i);
      // PUBLISH to our own channel: its push and its reply race on the same socket.
      conn.call({"PUBLISH", "ch:interleave", n}, [&](std::error_code e, const Resp3Value& v) {
        published.push_back(e ? -1 : v.integer());
      });
      conn.call({"ECHO", n}, [&](std::error_code e, const Resp3Value& v) {
        echoes.emplace_back(e ? "error" : std::string(v.str()));
        if (echoes.size() == kCount) all.set_value();
      });
    }
    return 0;
  });
  ASSERT_EQ(all.get_future().wait_for(20s), std::future_status::ready);
  ASSERT_TRUE(eventually([&] { return rec.message_count() == kCount; }));
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(echoes[i], std::to_string(i));
    EXPECT_EQ(published[i], 1);
    EXPECT_EQ(rec.messages[i], std::to_string(i));
  }
  EXPECT_EQ(conn.stats().wire_errors, 0u);
  EXPECT_EQ(conn.stats().pushes, 1u + kCount);
}

// A push verb the server refuses answers with an error reply, not a push: it must end at the
// verb's own place in the FIFO (counted in push_refusals), never at the caller behind it
// (helper-29's repro: GET b was answered NOPERM and its own reply dropped as a wire error).
TEST_F(ConnectionTest, ASubscribeTheServerRefusesIsCountedAndNeverAnswersTheNextCaller) {
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  ASSERT_FALSE(conn.call_blocking({"SET", "refused:a", "value-of-a"}).ec);
  ASSERT_FALSE(conn.call_blocking({"SET", "refused:b", "value-of-b"}).ec);
  ASSERT_FALSE(conn.call_blocking({"ACL", "SETUSER", "default", "resetchannels", "&allowed*"}).ec);
  std::string a, b;
  std::error_code a_ec, b_ec;
  std::promise<void> done;
  on_loop(lt_.loop(), [&] {
    conn.call({"GET", "refused:a"}, [&](std::error_code e, const Resp3Value& v) {
      a_ec = e;
      a = std::string(v.str());
    });
    EXPECT_FALSE(conn.subscribe("forbidden-channel"));  // sent: the refusal comes later
    EXPECT_FALSE(conn.subscribe("allowed-channel"));
    conn.call({"GET", "refused:b"}, [&](std::error_code e, const Resp3Value& v) {
      b_ec = e;
      b = std::string(v.str());
      done.set_value();
    });
    return 0;
  });
  ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  ASSERT_FALSE(conn.call_blocking({"ACL", "SETUSER", "default", "allchannels"}).ec);
  EXPECT_FALSE(a_ec);
  EXPECT_EQ(a, "value-of-a");
  EXPECT_FALSE(b_ec) << b;
  EXPECT_EQ(b, "value-of-b");
  const auto st = conn.stats();
  EXPECT_EQ(st.push_refusals, 1u);
  EXPECT_EQ(st.wire_errors, 0u);
  EXPECT_EQ(st.pending, 0u) << "the allowed channel's confirmation took its place";
}

TEST_F(ConnectionTest, PushVerbsOnResp2AnswerRequiresResp3AndSendNothing) {
  ConnectionOptions o = options();
  o.protocol = Protocol::kResp2;
  Connection conn(lt_.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.stats().protocol, 2);
  const auto before = conn.stats();
  EXPECT_EQ(conn.push_command_blocking({"SUBSCRIBE", "ch:resp2"}), IoErrc::kRequiresResp3);
  EXPECT_EQ(conn.subscribe_blocking("ch:resp2"), IoErrc::kRequiresResp3);
  std::this_thread::sleep_for(50ms);
  const auto after = conn.stats();
  EXPECT_EQ(after.bytes_out, before.bytes_out);
  EXPECT_EQ(after.commands, before.commands);
  auto numsub = command(client(), "PUBSUB NUMSUB ch:resp2");
  ASSERT_TRUE(numsub && numsub->type == REDIS_REPLY_ARRAY && numsub->elements == 2);
  EXPECT_EQ(numsub->element[1]->integer, 0);
  // The connection still serves ordinary calls.
  auto pong = conn.call_blocking({"PING"});
  ASSERT_FALSE(pong.ec);
  EXPECT_EQ(pong.reply.view().str(), "PONG");
}

TEST_F(ConnectionTest, EvalshaReloadsOnceAfterScriptFlush) {
  const std::string source = "return ARGV[1] .. KEYS[1]";
  auto loaded = command(client(), "SCRIPT LOAD %s", source.c_str());
  ASSERT_TRUE(loaded && loaded->type == REDIS_REPLY_STRING);
  const Script script{std::string(loaded->str, loaded->len), source};
  command(client(), "SCRIPT FLUSH");
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto run = [&] {
    return on_loop(lt_.loop(),
                   [&] {
                     auto p = std::make_shared<std::promise<OwnedResult>>();
                     const std::string_view keys[] = {"k"};
                     const std::string_view argv[] = {"v-"};
                     auto ec = conn.evalsha(script, keys, argv,
                                            [p](std::error_code e, const Resp3Value& v) {
                                              p->set_value({e, v.to_owned()});
                                            });
                     if (ec) p->set_value({ec, {}});
                     return p;
                   })
        ->get_future()
        .get();
  };
  auto first = run();
  ASSERT_FALSE(first.ec) << first.ec.message();
  EXPECT_EQ(first.reply.view().str(), "v-k");
  EXPECT_EQ(conn.stats().script_loads, 1u);
  auto second = run();
  ASSERT_FALSE(second.ec);
  EXPECT_EQ(conn.stats().script_loads, 1u) << "a loaded script is not reloaded";
  EXPECT_EQ(conn.stats().evalsha_calls, 3u) << "first try, the resend, the second call";
}

TEST_F(ConnectionTest, EvalshaRefusesAScriptWhoseShaDoesNotMatchItsSource) {
  const Script wrong{"0000000000000000000000000000000000000000", "return 1"};
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto p = std::make_shared<std::promise<OwnedResult>>();
  on_loop(lt_.loop(), [&] {
    return conn.evalsha(wrong, {}, {}, [p](std::error_code e, const Resp3Value& v) {
      p->set_value({e, v.to_owned()});
    });
  });
  auto r = p->get_future().get();
  EXPECT_EQ(r.ec, IoErrc::kShaMismatch);
  EXPECT_EQ(r.reply.view().str().size(), 40u) << "the server's SHA rides along";
}

TEST_F(ConnectionTest, ServerErrorRepliesArriveAsTypedErrorsWithTheirText) {
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto r = conn.call_blocking({"NOSUCHCOMMAND"});
  EXPECT_EQ(r.ec, IoErrc::kServerError);
  EXPECT_TRUE(r.reply.view().is_error());
  EXPECT_NE(r.reply.view().str().find("unknown command"), std::string_view::npos);
}

TEST_F(ConnectionTest, ReconnectsAfterClientKillFailingInFlightCallersAndResubscribing) {
  Recorder rec;
  Connection conn(lt_.loop(), options(), rec.push_fn(), rec.event_fn());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  ASSERT_FALSE(conn.subscribe_blocking("ch:kill"));
  auto id = conn.call_blocking({"CLIENT", "ID"});
  ASSERT_FALSE(id.ec);
  // A BLPOP that can only end by the socket going away.
  std::promise<std::error_code> blpop;
  on_loop(lt_.loop(), [&] {
    return conn.call({"BLPOP", "never-pushed", "0"},
                     [&](std::error_code e, const Resp3Value&) { blpop.set_value(e); });
  });
  ASSERT_TRUE(eventually([&] {
    auto info = command(client(), "INFO clients");
    return info && std::string(info->str, info->len).find("blocked_clients:1") != std::string::npos;
  }));
  auto killed =
      command(client(), "CLIENT KILL ID %lld", static_cast<long long>(id.reply.view().integer()));
  ASSERT_TRUE(killed && killed->integer == 1);
  auto f = blpop.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), IoErrc::kDisconnected);
  ASSERT_TRUE(eventually([&] { return rec.saw(ConnEvent::kReconnected); }));
  EXPECT_TRUE(rec.saw(ConnEvent::kDisconnected));
  EXPECT_EQ(conn.stats().reconnects, 1u);
  // The recorded channel was resubscribed: a publish reaches us again.
  ASSERT_TRUE(eventually([&] {
    auto n = command(client(), "PUBLISH ch:kill after-kill");
    return n && n->integer == 1;
  }));
  ASSERT_TRUE(eventually([&] { return rec.message_count() >= 1; }));
  EXPECT_EQ(rec.messages.back(), "after-kill");
}

TEST_F(ConnectionTest, OverloadedWhenMaxPendingCallsWait) {
  ConnectionOptions o = options();
  o.max_pending = 8;
  Connection conn(lt_.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  std::atomic<int> answered{0};
  const auto results = on_loop(lt_.loop(), [&] {
    std::vector<std::error_code> r;
    for (int i = 0; i < 10; ++i) {
      r.push_back(conn.call({"PING"}, [&](std::error_code, const Resp3Value&) {
        answered.fetch_add(1, std::memory_order_relaxed);
      }));
    }
    return r;
  });
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(results[i]) << i;
  EXPECT_EQ(results[8], IoErrc::kOverloaded);
  EXPECT_EQ(results[9], IoErrc::kOverloaded);
  EXPECT_EQ(conn.stats().overloads, 2u);
  EXPECT_TRUE(eventually([&] { return answered.load(std::memory_order_relaxed) == 8; }));
  EXPECT_FALSE(conn.call_blocking({"PING"}).ec) << "room again once replies drained the FIFO";
}

TEST_F(ConnectionTest, VersionFenceStopsOnAForeignVersion) {
  command(client(), "SET {emq}:version echomq:1.0.0");
  Recorder rec;
  Connection conn(lt_.loop(), options(), {}, rec.event_fn());
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kVersionFence);
  EXPECT_EQ(conn.status(), ConnStatus::kStopped);
  EXPECT_TRUE(eventually([&] { return rec.saw(ConnEvent::kStopped); }));
  EXPECT_EQ(conn.call_blocking({"PING"}).ec, IoErrc::kDisconnected);
}

TEST_F(ConnectionTest, ABootThatMeetsABusyServerBacksOffAndBootsOnceTheScriptIsKilled) {
  // A script past busy-reply-threshold: the server answers BUSY to nearly every command
  // (CLIENT SETNAME and the fence's GET among them) until SCRIPT KILL. Not a refusal of us: the
  // boot is retried as a loss, never stopped.
  command(client(), "CONFIG SET busy-reply-threshold 50");
  const auto fresh = [&] { return redisConnect(server().host().c_str(), server().port()); };
  std::thread busy([&] {
    redisContext* c = fresh();
    RedisReply r = command(c, "EVAL %s 0", "while true do end");
    redisFree(c);
  });
  ASSERT_TRUE(eventually([&] {
    redisContext* c = fresh();
    RedisReply r = command(c, "GET x");
    const bool is_busy =
        r && r->type == REDIS_REPLY_ERROR && std::string(r->str).starts_with("BUSY");
    redisFree(c);
    return is_busy;
  })) << "the server never went busy";
  Recorder rec;
  ConnectionOptions o = options();
  o.client_name = "echo-busy-test";
  Connection conn(lt_.loop(), o, {}, rec.event_fn());
  conn.start();
  ASSERT_TRUE(eventually([&] { return conn.stats().boot_retries >= 2; }))
      << conn.stats().boot_retries << " boot retries, status " << static_cast<int>(conn.status());
  EXPECT_NE(conn.status(), ConnStatus::kStopped);
  EXPECT_NE(conn.status(), ConnStatus::kReady);
  {
    redisContext* c = fresh();
    RedisReply killed = command(c, "SCRIPT KILL");
    EXPECT_EQ(text(killed.get()), "OK");
    redisFree(c);
  }
  busy.join();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_FALSE(rec.saw(ConnEvent::kStopped));
  auto pong = conn.call_blocking({"PING"});
  EXPECT_FALSE(pong.ec) << pong.ec.message();
  command(client(), "CONFIG SET busy-reply-threshold 5000");
}

TEST_F(ConnectionTest, VersionFenceAcceptsAConfiguredValue) {
  command(client(), "SET {emq}:version my-app:7");
  ConnectionOptions o = options();
  o.version_value = "my-app:7";
  Connection conn(lt_.loop(), o);
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), std::error_code{});
}

TEST_F(ConnectionTest, HeartbeatPingsWhenIdleAndConsumesTheReplies) {
  ConnectionOptions o = options();
  o.heartbeat = 20ms;
  Connection conn(lt_.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  const auto before = conn.stats();
  std::this_thread::sleep_for(300ms);
  const auto after = conn.stats();
  EXPECT_GE(after.commands - before.commands, 3u);
  EXPECT_GE(after.replies - before.replies, 3u);
  EXPECT_EQ(after.wire_errors, 0u);
}

TEST_F(ConnectionTest, BlockingCallsFromManyThreads) {
  Connection conn(lt_.loop(), options());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string v = std::to_string(t * 1000 + i);
        auto r = conn.call_blocking({"ECHO", v});
        if (!r.ec && r.reply.view().str() == v) ok.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(std::memory_order_relaxed), 800);
}

TEST_F(ConnectionTest, ShutdownAnswersWaitersClosed) {
  std::promise<std::error_code> blpop;
  {
    Connection conn(lt_.loop(), options());
    conn.start();
    ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
    on_loop(lt_.loop(), [&] {
      return conn.call({"BLPOP", "never-pushed", "0"},
                       [&](std::error_code e, const Resp3Value&) { blpop.set_value(e); });
    });
  }
  EXPECT_EQ(blpop.get_future().get(), IoErrc::kClosed);
}

// Last in the suite: it restarts the shared server.
TEST_F(ConnectionTest, ReconnectsAfterAServerRestartAndRestoresSubscriptions) {
  Recorder rec;
  Connection conn(lt_.loop(), options(), rec.push_fn(), rec.event_fn());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  ASSERT_FALSE(conn.subscribe_blocking("ch:restart"));
  server().restart();
  ASSERT_TRUE(eventually([&] { return rec.saw(ConnEvent::kReconnected); }, 15s));
  EXPECT_GE(conn.stats().reconnects, 1u);
  auto c = test::connect_client(server());
  auto v = command(c.get(), "GET {emq}:version");
  ASSERT_TRUE(v && v->type == REDIS_REPLY_STRING)
      << "the fence was claimed again on the new server";
  ASSERT_TRUE(eventually([&] {
    auto n = command(c.get(), "PUBLISH ch:restart after-restart");
    return n && n->integer == 1;
  }));
  ASSERT_TRUE(eventually([&] { return rec.message_count() >= 1; }));
  EXPECT_EQ(rec.messages.back(), "after-restart");
}

TEST_F(ConnectionTest, RedialFollowsTheTargetAndKeepsTheLastOneForANonNumericHost) {
  testing::LocalServer other;  // where the target moves (a promoted replica, say)
  std::mutex mu;
  DialTarget next;  // empty host: keep dialling the current one
  ConnectionOptions o = options();
  o.target = [&] {
    std::lock_guard lock(mu);
    return next;
  };
  Recorder rec;
  Connection conn(lt_.loop(), o, rec.push_fn(), rec.event_fn());
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto port_now = [&] { return on_loop(lt_.loop(), [&] { return conn.options().port; }); };
  EXPECT_EQ(port_now(), server().port());
  {
    std::lock_guard lock(mu);
    next = DialTarget{other.host(), other.port()};
  }
  on_loop(lt_.loop(), [&] { conn.redial(); });
  ASSERT_TRUE(eventually([&] { return rec.saw(ConnEvent::kReconnected); }));
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(port_now(), other.port());
  ASSERT_FALSE(conn.call_blocking({"SET", "redial:k", "on-other"}).ec);
  auto c = test::connect_client(other);
  auto v = command(c.get(), "GET redial:k");
  ASSERT_TRUE(v && v->type == REDIS_REPLY_STRING) << "the command went to the new target";
  EXPECT_EQ(std::string(v->str, v->len), "on-other");

  // A host name is not resolved on the loop thread: the last numeric target is kept.
  {
    std::lock_guard lock(mu);
    next = DialTarget{"localhost", server().port()};
  }
  const auto reconnects = conn.stats().reconnects;
  on_loop(lt_.loop(), [&] { conn.redial(); });
  ASSERT_TRUE(eventually([&] { return conn.stats().reconnects > reconnects; }));
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(port_now(), other.port());
}

// --- Servers of its own: a password, a Unix socket. ---

class ConnectionAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        std::make_unique<testing::LocalServer>(testing::LocalServerOptions{.password = "s3cret"});
  }
  static void TearDownTestSuite() { server_.reset(); }
  ConnectionOptions options(std::string password) {
    ConnectionOptions o;
    o.host = server_->host();
    o.port = server_->port();
    o.password = std::move(password);
    return o;
  }
  static std::unique_ptr<testing::LocalServer> server_;
  LoopThread lt_{test::test_loop_options()};
};
std::unique_ptr<testing::LocalServer> ConnectionAuthTest::server_;

TEST_F(ConnectionAuthTest, BootsWithTheRightPassword) {
  Connection conn(lt_.loop(), options("s3cret"));
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.stats().protocol, 3);
}

TEST_F(ConnectionAuthTest, BootsWithThePasswordOnExplicitResp2) {
  ConnectionOptions o = options("s3cret");
  o.protocol = Protocol::kResp2;
  Connection conn(lt_.loop(), o);
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), std::error_code{});
  EXPECT_EQ(conn.stats().protocol, 2);
}

TEST_F(ConnectionAuthTest, AWrongPasswordIsFatalAuthRefused) {
  Connection conn(lt_.loop(), options("wrong"));
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kAuthRefused);
  EXPECT_EQ(conn.status(), ConnStatus::kStopped);
}

TEST_F(ConnectionAuthTest, NoPasswordIsFatalAuthRefused) {
  Connection conn(lt_.loop(), options(""));
  conn.start();
  EXPECT_EQ(conn.wait_ready(5s), IoErrc::kAuthRefused);
}

TEST(ConnectionUnixSocket, BootsOverAUnixSocket) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("echo-conn-" + std::to_string(::getpid()) + ".sock"))
                               .string();
  testing::LocalServer server(
      testing::LocalServerOptions{.extra_args = {"--unixsocket", path, "--unixsocketperm", "700"}});
  LoopThread lt(test::test_loop_options());
  ConnectionOptions o;
  o.unix_path = path;
  Connection conn(lt.loop(), o);
  conn.start();
  ASSERT_EQ(conn.wait_ready(5s), std::error_code{});
  auto r = conn.call_blocking({"ECHO", "over-unix"});
  ASSERT_FALSE(r.ec);
  EXPECT_EQ(r.reply.view().str(), "over-unix");
}

TEST(ConnectionOptionsCheck, RefusesOutOfRangeKnobs) {
  LoopThread lt(test::test_loop_options());
  ConnectionOptions o;
  o.port = 0;
  EXPECT_THROW(Connection(lt.loop(), o), std::invalid_argument);
  o.port = 1;
  o.max_pending = 0;
  EXPECT_THROW(Connection(lt.loop(), o), std::invalid_argument);
  o.max_pending = 1;
  o.backoff_max = std::chrono::milliseconds(10);
  EXPECT_THROW(Connection(lt.loop(), o), std::invalid_argument);
}

TEST(ConnectionLoop, RunsOnTheBackendTheRunAsksFor) {
  // The epoll registration of this suite (tests/CMakeLists.txt) must not quietly run io_uring.
  LoopThread lt(test::test_loop_options());
  const Backend asked = test::test_io_backend();
  if (asked != Backend::kAuto) {
    EXPECT_EQ(lt.loop().backend(), asked);
  }
  EXPECT_NE(lt.loop().backend(), Backend::kAuto);
}

}  // namespace
}  // namespace echo::io
