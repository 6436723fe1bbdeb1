// SPDX-License-Identifier: MIT
// Engine::publish against a real redis-server: the write other nodes must see in one call. On the
// broadcast lane another node's row goes and its next read is the new value from L2; the row and
// its message land together or not at all, even with the writer's command connection killed
// mid-call over and over (a raw subscriber hears every message; every key is read at the end); a
// table of coherence none takes a put; on the job lane the members drop the row, by the engine's
// own lane group or a given one, and a publish with no live member still writes the row.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <echo/engine/internal/job_consumer.h>
#include <echo/lua/scripts.h>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::Errc;
using engine::Source;
using table::BrandedId;

class Publish : public SingleServerTest {};

// The version framed in the L2 row under `key`, or nullopt when there is no row.
std::optional<BrandedId> l2_version(redisContext* c, const std::string& key) {
  const std::string raw = l2_raw(c, key);
  if (raw == "(nil)") return std::nullopt;
  auto row = engine::split_l2_frame(raw);
  EXPECT_TRUE(row) << "corrupt L2 row under " << key;
  if (!row) return std::nullopt;
  return row->version;
}

// ---- (a) the broadcast lane, two nodes ----

TEST_F(Publish, OnTheBroadcastLaneAnotherNodesRowGoesAndItsNextReadIsTheNewValueFromL2) {
  constexpr std::int64_t kTtl = 4000;
  LoaderProbe loader;
  auto spec =
      table_spec("quotes", "AST", CoherenceMode::kBroadcast, loader.answer("px=100.00"), kTtl);
  // The publisher under the higher node id: versions minted in one millisecond order by node id
  // first (docs/wire.md, "Branded ids"), so a's publish right after b's fill (b's loader version)
  // is newer even within that millisecond; under the lower id it could be older and its message
  // stale at b.
  auto a = node(2, {spec});
  auto b = node(1, {spec});
  ASSERT_TRUE(a && b);
  const BrandedId name = fresh_id("AST");
  auto fill = b->get("quotes", name.view());
  ASSERT_TRUE(fill) << fill.error().message();
  EXPECT_EQ(fill->source, Source::kLoader);
  ASSERT_TRUE(l1_holds(*b, "quotes", name));

  const auto applied_before = writer_of(*b, "quotes").stats().applied;
  auto v = a->publish("quotes", name.view(), "px=101.00");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(v->ns(), "AST") << "minted in the table's kind";
  EXPECT_TRUE(table::newer(*v, *fill->version));
  // The row and its TTL (docs/wire.md, "L2 values": PX ttl, no jitter) are L2's before publish
  // answers.
  EXPECT_EQ(l2_raw(client(), l2_key("quotes", name)), v->str() + "px=101.00");
  const long long ttl = pttl(client(), l2_key("quotes", name));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, kTtl);
  // Read-your-writes on the publishing node: its L1 holds the new row when publish answers.
  auto own = a->get("quotes", name.view());
  ASSERT_TRUE(own);
  EXPECT_EQ(own->source, Source::kL1);
  EXPECT_EQ(own->value, "px=101.00");
  EXPECT_EQ(own->version, *v);

  ASSERT_TRUE(eventually([&] { return writer_of(*b, "quotes").stats().applied > applied_before; }));
  EXPECT_FALSE(l1_holds(*b, "quotes", name));
  auto after = b->get("quotes", name.view());
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->source, Source::kL2);
  EXPECT_EQ(after->value, "px=101.00");
  EXPECT_EQ(after->version, *v);
  EXPECT_EQ(loader.runs(), 1);

  // A given version is used as is; a wrong-kind id or an undeclared table touches nothing.
  const BrandedId given = a->mint("TXN").value();
  auto again = a->publish("quotes", name.view(), "px=102.00", given);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, given);
  const auto commands = a->stats().connections.at(0).commands;
  auto wrong = a->publish("quotes", "ORD0KHTOWnGLuC", "x");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error(), Errc::kKind);
  auto undeclared = a->publish("orders", name.view(), "x");
  ASSERT_FALSE(undeclared);
  EXPECT_EQ(undeclared.error(), Errc::kNoSuchCache);
  EXPECT_EQ(a->stats().connections.at(0).commands, commands)
      << "a refused publish reached the wire";
}

TEST_F(Publish, OnATableOfCoherenceNoneIsAPutThatAnnouncesNothing) {
  auto spec = table_spec("plain", "AST", CoherenceMode::kNone, answering("px=1"));
  auto a = node(1, {spec});
  ASSERT_TRUE(a);
  RedisClient listener = connect_client(server());
  const std::string channel = table::coherence_channel("plain").value();
  RedisReply subscribed = command(listener.get(), "SUBSCRIBE %s", channel.c_str());
  ASSERT_TRUE(subscribed);
  const BrandedId name = fresh_id("AST");
  auto v = a->publish("plain", name.view(), "px=2");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2_raw(client(), l2_key("plain", name)), v->str() + "px=2");
  auto own = a->get("plain", name.view());
  ASSERT_TRUE(own);
  EXPECT_EQ(own->source, Source::kL1);
  // Nothing was published: the listener's next message is this marker, not the row's.
  RedisReply marker = command(client(), "PUBLISH %s marker", channel.c_str());
  ASSERT_TRUE(marker && marker->type == REDIS_REPLY_INTEGER && marker->integer == 1);
  redisReply* heard = nullptr;
  ASSERT_EQ(redisGetReply(listener.get(), reinterpret_cast<void**>(&heard)), REDIS_OK);
  RedisReply owned(heard);
  ASSERT_TRUE(heard->type == REDIS_REPLY_ARRAY && heard->elements == 3);
  EXPECT_EQ(std::string(heard->element[2]->str, heard->element[2]->len), "marker");
}

// ---- (b) atomicity with the command connection killed mid-call ----

// Joins the threads it holds when it goes, after `stop`: a failed assertion that returns early
// still ends every thread before their captures go.
struct Joined {
  std::function<void()> stop;
  std::vector<std::thread> threads;
  ~Joined() {
    if (stop) stop();
    for (auto& th : threads) {
      if (th.joinable()) th.join();
    }
  }
};

// One publish as its caller saw it.
struct Attempt {
  BrandedId name, version;
  std::error_code ec;  // none: publish answered the version
};

// The ids of the server's clients named `name` (CLIENT LIST).
std::vector<std::string> client_ids(redisContext* c, std::string_view name) {
  std::vector<std::string> out;
  RedisReply list = command(c, "CLIENT LIST");
  if (!list || list->type != REDIS_REPLY_STRING) return out;
  const std::string text(list->str, list->len);
  const std::string want = " name=" + std::string(name) + " ";
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (line.find(want) != std::string::npos && line.starts_with("id=")) {
      out.push_back(line.substr(3, line.find(' ') - 3));
    }
    at = end + 1;
  }
  return out;
}

// Kills the connection the publishes go on (`on_links`: the publishers' own links, else io thread
// 0's command connection, the links off) again and again while three threads publish.
void kill_mid_call(const testing::LocalServer& server, redisContext* client, bool on_links) {
  constexpr int kPublishers = 3;
  constexpr int kKills = 40;
  const std::string t = on_links ? "killed_links" : "killed";
  // The connection is down most of the run (killed as soon as it answers a few calls): a lease
  // that outlives the run, or its renewals (on that connection) would let it lapse and the
  // publishers' mints fail no_node_lease, as they should.
  engine::EngineOptions o = node_options(server, 1);
  o.node_lease = std::chrono::minutes(5);
  o.caller_links = on_links ? 16 : 0;
  auto a = start_node(o, {table_spec(t, "AST", CoherenceMode::kBroadcast, answering("px=0"))});
  ASSERT_TRUE(a);
  const std::string channel = table::coherence_channel(t).value();

  // The raw subscriber: every message on the channel, in the server's order, until the end
  // marker (a publish of `end` once every other publish has answered and the kills stopped).
  const BrandedId end = a->mint("AST").value();
  RedisClient listener = connect_client(server);
  const timeval patience{30, 0};  // a missing end marker fails the test instead of hanging it
  ASSERT_EQ(redisSetTimeout(listener.get(), patience), REDIS_OK);
  RedisReply subscribed = command(listener.get(), "SUBSCRIBE %s", channel.c_str());
  ASSERT_TRUE(subscribed && subscribed->type == REDIS_REPLY_ARRAY);
  std::vector<table::CoherenceMessage> heard;
  std::atomic<bool> listener_ok{false};
  Joined listening;  // joined after the publishers (declared first); ends by the marker or 30 s
  listening.threads.emplace_back([&] {
    for (;;) {
      redisReply* r = nullptr;
      if (redisGetReply(listener.get(), reinterpret_cast<void**>(&r)) != REDIS_OK) return;
      RedisReply owned(r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) continue;
      auto m = table::parse_frame(std::string_view(r->element[2]->str, r->element[2]->len));
      if (!m) continue;
      if (m->name == end) {
        listener_ok.store(true, std::memory_order_release);  // pairs with the acquire after join
        return;
      }
      heard.push_back(*m);
    }
  });

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> answered{0};
  std::vector<std::vector<Attempt>> attempts(kPublishers);
  auto ready = [&] { return a->stats().connections.at(0).status == io::ConnStatus::kReady; };
  Joined publishers{[&] { stop.store(true, std::memory_order_relaxed); }, {}};
  for (int p = 0; p < kPublishers; ++p) {
    publishers.threads.emplace_back([&, p] {
      // One fresh name per publish: its row is present iff its message was heard.
      while (!stop.load(std::memory_order_relaxed)) {
        const BrandedId name = a->mint("AST").value(), version = a->mint("AST").value();
        auto r = a->publish(t, name.view(), "px=1.00", version);
        attempts[p].push_back({name, version, r ? std::error_code() : std::error_code(r.error())});
        answered.fetch_add(1, std::memory_order_relaxed);
        // A call while the connection is down fails at once without reaching the server: wait
        // for it to be back rather than pile up such calls through the reconnect's backoff.
        if (!r) {
          EXPECT_TRUE(eventually([&] { return ready(); }, 10s)) << "no reconnect";
        }
      }
    });
  }

  // The killer: each kill waits until the connection is back and a few more calls answered, so
  // kills land on a busy connection at unrelated points of the calls in flight.
  RedisClient killer = connect_client(server);
  int kills = 0;
  auto reconnects = [&] { return a->stats().connections.at(0).reconnects; };
  for (int k = 0; k < kKills; ++k) {
    const auto back = reconnects();
    const auto before = answered.load(std::memory_order_relaxed);
    ASSERT_TRUE(eventually(
        [&] { return answered.load(std::memory_order_relaxed) >= before + 3 + k % 5; }, 10s));
    const auto ids = client_ids(killer.get(), on_links ? "echostore-caller" : "echostore-cmd");
    if (on_links) {
      ASSERT_GE(ids.size(), 1u) << "no publisher's link";  // one a thread, redialled at its call
    } else {
      ASSERT_EQ(ids.size(), 1u) << "node a's command connection";
    }
    RedisReply killed = command(killer.get(), "CLIENT KILL ID %s", ids.front().c_str());
    ASSERT_TRUE(killed && killed->type == REDIS_REPLY_INTEGER) << text(killed.get());
    kills += static_cast<int>(killed->integer);
    if (on_links) continue;  // a link is dialled again at its thread's next publish
    ASSERT_TRUE(eventually([&] { return reconnects() > back; }, 10s))
        << "no reconnect after kill " << k;
  }
  // A few calls on the last connection, then every publisher stops and joins: from then on no
  // call of theirs is in flight on any connection.
  const auto last = answered.load(std::memory_order_relaxed);
  ASSERT_TRUE(
      eventually([&] { return answered.load(std::memory_order_relaxed) >= last + 10; }, 10s));
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : publishers.threads) th.join();
  ASSERT_TRUE(a->publish(t, end.view(), "end")) << "the end marker";
  listening.threads.front().join();
  ASSERT_TRUE(listener_ok.load(std::memory_order_acquire)) << "the listener lost the channel";

  std::map<std::string, BrandedId> heard_by_name;
  for (const auto& m : heard) {
    EXPECT_TRUE(heard_by_name.emplace(m.name.str(), m.version).second)
        << "heard twice: " << m.name.str();
  }
  std::size_t ok = 0, failed_landed = 0, failed_absent = 0, message_without_row = 0,
              row_without_message = 0, wrong = 0;
  std::map<std::string, std::size_t> errors;
  std::size_t total = 0;
  for (const auto& per : attempts) {
    for (const Attempt& at : per) {
      ++total;
      const auto row = l2_version(client, l2_key(t, at.name));
      const auto it = heard_by_name.find(at.name.str());
      const bool was_heard = it != heard_by_name.end();
      if (was_heard && it->second != at.version) ++wrong;
      if (row && *row != at.version) ++wrong;
      if (was_heard) heard_by_name.erase(it);
      if (was_heard && !row) ++message_without_row;
      if (row && !was_heard) ++row_without_message;
      if (!at.ec) {
        ++ok;
        EXPECT_TRUE(was_heard && row) << "publish answered OK but heard " << was_heard << ", row "
                                      << row.has_value() << ": " << at.name.str();
      } else {
        ++errors[at.ec.message()];
        if (row && was_heard) ++failed_landed;
        if (!row && !was_heard) ++failed_absent;
      }
    }
  }
  std::string error_text;
  for (const auto& [what, n] : errors) error_text += " " + what + " x" + std::to_string(n);
  std::printf(
      "[ publish/kill %s ] %d kills, %zu publishes: %zu ok, %zu failed with row and message, %zu "
      "failed with neither; message without row %zu, row without message %zu; errors:%s\n",
      on_links ? "links" : "cmd", kills, total, ok, failed_landed, failed_absent,
      message_without_row, row_without_message, error_text.c_str());
  EXPECT_EQ(message_without_row, 0u) << "a message was heard whose row is not in L2";
  EXPECT_EQ(row_without_message, 0u) << "a row landed whose message was never heard";
  EXPECT_EQ(wrong, 0u) << "a row or message carried another publish's version";
  EXPECT_TRUE(heard_by_name.empty()) << heard_by_name.size() << " messages no publish sent";
  EXPECT_GE(kills, kKills);
  EXPECT_GT(failed_landed + failed_absent, 0u) << "no kill landed on a call";
}

TEST_F(Publish, WithTheCommandConnectionKilledMidCallNoMessageLacksItsRowAndNoRowLacksItsMessage) {
  kill_mid_call(server(), client(), false);
}

TEST_F(Publish, WithTheCallersLinksKilledMidCallNoMessageLacksItsRowAndNoRowLacksItsMessage) {
  kill_mid_call(server(), client(), true);
}

// ---- (c) the job lane ----

// A job-lane table of kind AST whose consumers beat fast (a member is live within a beat).
engine::TableSpec lane_spec(const std::string& table) {
  auto s = table_spec(table, "AST", CoherenceMode::kJob, answering("loaded"));
  s.job_lease_ms = 30000;
  s.job_beat_ms = 100;
  return s;
}

// The writer's declaration: not a member (coherence none), the members' lease for a hand-off.
engine::TableSpec writer_spec(const std::string& table) {
  auto s = table_spec(table, "AST", CoherenceMode::kNone, answering("loaded"));
  s.job_lease_ms = 30000;
  return s;
}

TEST_F(Publish, OnTheJobLaneEveryMemberDropsTheRowAndReadsTheNewValueFromL2) {
  const std::string t = "lane";
  auto m1 = node(71, {lane_spec(t)});
  auto m2 = node(72, {lane_spec(t)});
  auto w = node(70, {writer_spec(t)});
  ASSERT_TRUE(m1 && m2 && w);
  const BrandedId name = fresh_id("AST");
  ASSERT_TRUE(w->put(t, name.view(), "px=100.00"));
  for (Engine* m : {m1.get(), m2.get()}) {
    ASSERT_TRUE(m->get(t, name.view()));
    ASSERT_TRUE(l1_holds(*m, t, name));
  }

  // A writer that is not a member publishes under a lane group it names (as enqueue does).
  auto v = w->publish(t, fresh_id("PRT"), name.view(), "px=101.00");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2_raw(client(), l2_key(t, name)), v->str() + "px=101.00");
  EXPECT_EQ(w->stats().fan_out.enqueues, 1u);
  for (Engine* m : {m1.get(), m2.get()}) {
    ASSERT_TRUE(eventually([&] { return !l1_holds(*m, t, name); })) << "a member kept the row";
    auto r = m->get(t, name.view());
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->source, Source::kL2);
    EXPECT_EQ(r->value, "px=101.00");
    EXPECT_EQ(r->version, *v);
  }

  // A member publishes on its own job-lane table without a group: the engine's lane group. The
  // other member drops its row; the publisher reads its own write from L1.
  ASSERT_TRUE(l1_holds(*m2, t, name));
  auto v2 = m1->publish(t, name.view(), "px=102.00");
  ASSERT_TRUE(v2) << v2.error().message();
  EXPECT_TRUE(table::newer(*v2, *v));
  ASSERT_TRUE(eventually([&] { return !l1_holds(*m2, t, name); }));
  auto r2 = m2->get(t, name.view());
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->source, Source::kL2);
  EXPECT_EQ(r2->value, "px=102.00");
  auto own = m1->get(t, name.view());
  ASSERT_TRUE(own);
  EXPECT_EQ(own->source, Source::kL1);
  EXPECT_EQ(own->version, *v2);
}

// The server's command log (a MONITOR client) up to the ECHO of `marker` sent through `c`.
std::vector<std::string> monitored_until(redisContext* monitor, redisContext* c,
                                         const std::string& marker) {
  RedisReply echo = command(c, "ECHO %s", marker.c_str());
  EXPECT_TRUE(echo) << "ECHO " << marker;
  std::vector<std::string> lines;
  for (;;) {
    redisReply* r = nullptr;
    if (redisGetReply(monitor, reinterpret_cast<void**>(&r)) != REDIS_OK) {
      ADD_FAILURE() << "the monitor lost the server before " << marker;
      return lines;
    }
    RedisReply owned(r);
    std::string line = text(r);
    if (line.find(marker) != std::string::npos) return lines;
    lines.push_back(std::move(line));
  }
}

// The index of the first line holding every one of `parts`, or lines.size().
std::size_t first_line(const std::vector<std::string>& lines,
                       std::initializer_list<std::string> parts) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (std::all_of(parts.begin(), parts.end(),
                    [&](const std::string& p) { return lines[i].find(p) != std::string::npos; })) {
      return i;
    }
  }
  return lines.size();
}

// No member may hear of a row before the row exists: on one server the SET leads the fan-out's
// pipeline, so the server runs it before the lead's PUBLISH and every member_enqueue, whether the
// membership is read in the same call (the writer's first) or known, with or without the lead.
TEST_F(Publish, OnTheJobLaneTheServerRunsTheSetBeforeTheLeadAndEveryAdmission) {
  const std::string enqueue_sha(lua::find_script("member_enqueue")->sha1);
  unsigned id = 80;
  for (const bool lead : {true, false}) {
    const std::string t = lead ? "ordered" : "unled";
    auto ms = lane_spec(t);
    ms.job_lead = lead;
    auto ws = writer_spec(t);
    ws.job_lead = lead;
    auto m = node(id++, {ms});
    auto w = node(id++, {ws});
    ASSERT_TRUE(m && w);
    const auto keys = engine::JobLaneKeys::for_table(t);
    RedisClient monitor = connect_client(server());
    const timeval patience{10, 0};
    ASSERT_EQ(redisSetTimeout(monitor.get(), patience), REDIS_OK);
    RedisReply monitoring = command(monitor.get(), "MONITOR");
    ASSERT_TRUE(monitoring && text(monitoring.get()) == "OK") << text(monitoring.get());
    for (const char* round : {"first", "known"}) {
      const BrandedId name = fresh_id("AST");
      auto v = w->publish(t, fresh_id("PRT"), name.view(), "px=1.00");
      ASSERT_TRUE(v) << v.error().message();
      const auto lines = monitored_until(monitor.get(), client(), "end-" + t + "-" + round);
      const std::size_t set = first_line(lines, {"\"SET\"", "\"" + l2_key(t, name) + "\""});
      const std::size_t admit = first_line(lines, {enqueue_sha});
      const std::size_t heralded = first_line(lines, {"\"PUBLISH\"", "\"" + keys.lead + "\""});
      ASSERT_LT(set, lines.size()) << t << " " << round << ": no SET seen";
      ASSERT_LT(admit, lines.size()) << t << " " << round << ": no member_enqueue seen";
      EXPECT_LT(set, admit) << t << " " << round << ": an admission ran before the row was written";
      if (lead) {
        ASSERT_LT(heralded, lines.size()) << t << " " << round << ": no lead seen";
        EXPECT_LT(set, heralded) << t << " " << round
                                 << ": the lead ran before the row was written";
      } else {
        EXPECT_EQ(heralded, lines.size()) << "job_lead off: no lead";
      }
    }
  }
}

TEST_F(Publish, OnAJobLaneWithNoLiveMemberTheRowIsWrittenAndPublishAnswersItsVersion) {
  auto w = node(70, {writer_spec("nobody")});
  ASSERT_TRUE(w);
  const BrandedId name = fresh_id("AST");
  auto v = w->publish("nobody", fresh_id("PRT"), name.view(), "px=1.00");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(l2_raw(client(), l2_key("nobody", name)), v->str() + "px=1.00");
  EXPECT_EQ(w->stats().fan_out.errors, 0u);
  auto undeclared = w->publish("undeclared", fresh_id("PRT"), name.view(), "px=1.00");
  ASSERT_FALSE(undeclared);
  EXPECT_EQ(undeclared.error(), Errc::kNoSuchCache);
}

}  // namespace
}  // namespace echo::test
