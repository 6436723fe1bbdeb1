// SPDX-License-Identifier: MIT
// EngineOptions::io_threads against a real redis-server: broadcast tables dealt over two io
// threads land on distinct threads (their own subscriber connections, rings and thread names),
// both receive their pushes, a loss of one thread's subscriber suspends only that thread's
// tables, and the knob's range and mode are checked at construction.
#include <dirent.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine_nodes.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::ConfigError;
using engine::Engine;
using engine::EngineOptions;

class IoThreads : public SingleServerTest {
 protected:
  std::unique_ptr<Engine> two_threads(unsigned id, std::vector<engine::TableSpec> tables) {
    EngineOptions o = node_options(server(), id);
    o.io_threads = 2;
    return start_node(std::move(o), std::move(tables));
  }
};

std::set<std::string> thread_names() {
  std::set<std::string> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* d = ::readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + d->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    out.insert(name);
  }
  ::closedir(dir);
  return out;
}

int table_io_thread(const Engine& e, const std::string& table) {
  for (const auto& t : e.stats().tables) {
    if (t.name == table) return t.io_thread;
  }
  return -1;
}

bool has_connection(const Engine& e, const std::string& label) {
  const auto cs = e.stats().connections;
  return std::any_of(cs.begin(), cs.end(), [&](const auto& c) { return c.label == label; });
}

TEST_F(IoThreads, TablesLandOnDistinctIoThreadsAndBothReceiveTheirPushes) {
  LoaderProbe p;
  auto a = two_threads(1, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, p.answer("q")),
                           table_spec("fx", "FXR", CoherenceMode::kBroadcast, p.answer("f"))});
  auto b = node(2, {table_spec("quotes", "AST", CoherenceMode::kNone, p.answer("q")),
                    table_spec("fx", "FXR", CoherenceMode::kNone, p.answer("f"))});
  ASSERT_TRUE(a && b);
  // Dealt from the last io thread down: the first broadcast table on io thread 1.
  EXPECT_EQ(table_io_thread(*a, "quotes"), 1);
  EXPECT_EQ(table_io_thread(*a, "fx"), 0);
  EXPECT_TRUE(has_connection(*a, "sub")) << "io thread 0's subscriber";
  EXPECT_TRUE(has_connection(*a, "sub:1")) << "io thread 1's subscriber";
  const auto names = thread_names();
  EXPECT_TRUE(names.count("echo-io:0") == 1 && names.count("echo-io:1") == 1)
      << "io threads not named echo-io:0 and echo-io:1";

  const auto q = fresh_id("AST");
  const auto f = fresh_id("FXR");
  ASSERT_TRUE(a->put("quotes", q.view(), "px=1", a->mint("AST").value()));
  ASSERT_TRUE(a->put("fx", f.view(), "px=2", a->mint("FXR").value()));
  ASSERT_TRUE(l1_holds(*a, "quotes", q) && l1_holds(*a, "fx", f));
  auto hq = b->broadcast("quotes", q.view(), b->mint("AST").value());
  auto hf = b->broadcast("fx", f.view(), b->mint("FXR").value());
  ASSERT_TRUE(hq && hf);
  EXPECT_EQ(*hq, 1) << "one subscriber on quotes' channel (io thread 1's)";
  EXPECT_EQ(*hf, 1) << "one subscriber on fx's channel (io thread 0's)";
  EXPECT_TRUE(eventually([&] { return !l1_holds(*a, "quotes", q); })) << "quotes never dropped";
  EXPECT_TRUE(eventually([&] { return !l1_holds(*a, "fx", f); })) << "fx never dropped";
  // The apply is counted just after the row goes (ring or direct apply): wait for the counts too.
  const auto applied_once = [](const engine::EngineStats& st) {
    return std::all_of(st.tables.begin(), st.tables.end(), [](const auto& t) {
      return !t.rings.empty() && t.rings.front().applied + t.writer.direct_applies == 1;
    });
  };
  EXPECT_TRUE(eventually([&] { return applied_once(a->stats()); }));
  const auto s = a->stats();
  ASSERT_EQ(s.io_threads.size(), 2u);
  EXPECT_EQ(s.io_threads[1].tables, std::vector<std::string>{"quotes"});
  EXPECT_EQ(s.io_threads[0].tables, std::vector<std::string>{"fx"});
  EXPECT_GE(s.io_threads[1].pushes, 1u);
  EXPECT_GE(s.io_threads[0].pushes, 1u);
  for (const auto& t : s.tables) {
    ASSERT_EQ(t.rings.size(), 1u) << t.name << ": one io thread feeds it, one ring";
    // Applied once: through its ring, or by its io thread under the writer's token
    // (TableSpec::direct_apply), which bypasses the ring.
    EXPECT_EQ(t.rings.front().applied + t.writer.direct_applies, 1u) << t.name;
  }
}

// The pubsub clients the server lists now, by client name (echostore-sub, echostore-sub:1): id.
std::map<std::string, std::string> pubsub_clients(redisContext* c) {
  std::map<std::string, std::string> out;
  RedisReply list = command(c, "CLIENT LIST TYPE pubsub");
  if (!list || list->type != REDIS_REPLY_STRING) return out;
  std::istringstream lines(std::string(list->str, list->len));
  for (std::string line; std::getline(lines, line);) {
    std::string id, name;
    std::istringstream fields(line);
    for (std::string f; fields >> f;) {
      if (f.rfind("id=", 0) == 0) id = f.substr(3);
      if (f.rfind("name=", 0) == 0) name = f.substr(5);
    }
    out[name] = id;
  }
  return out;
}

// CLIENT KILL of io thread 1's subscriber: quotes (its table) suspends and flushes when the
// subscription is back; fx, on io thread 0, never suspends and keeps its row.
TEST_F(IoThreads, LosingOneThreadsSubscriberSuspendsOnlyItsTables) {
  LoaderProbe p;
  auto a = two_threads(1, {table_spec("quotes", "AST", CoherenceMode::kBroadcast, p.answer("q")),
                           table_spec("fx", "FXR", CoherenceMode::kBroadcast, p.answer("f"))});
  ASSERT_TRUE(a);
  const auto q = fresh_id("AST");
  const auto f = fresh_id("FXR");
  auto flushes = [&](const char* t) { return writer_of(*a, t).stats().disconnect_flushes; };
  auto suspended = [&](const char* t) { return writer_of(*a, t).stats().suspended; };
  const auto subs = pubsub_clients(client());
  ASSERT_TRUE(subs.count("echostore-sub") == 1 && subs.count("echostore-sub:1") == 1)
      << "each io thread subscribes on its own connection";
  const auto quotes_flushes = flushes("quotes"), fx_flushes = flushes("fx");
  ASSERT_TRUE(a->put("quotes", q.view(), "px=1", a->mint("AST").value()));
  ASSERT_TRUE(a->put("fx", f.view(), "px=2", a->mint("FXR").value()));
  ASSERT_TRUE(l1_holds(*a, "quotes", q) && l1_holds(*a, "fx", f));
  // CLIENT KILL has no NAME filter: io thread 1's subscriber by its id.
  RedisReply killed = command(client(), "CLIENT KILL ID %s", subs.at("echostore-sub:1").c_str());
  ASSERT_TRUE(killed && killed->type == REDIS_REPLY_INTEGER && killed->integer == 1);
  ASSERT_TRUE(eventually([&] {
    return flushes("quotes") > quotes_flushes && !suspended("quotes") &&
           pubsub_clients(client()).count("echostore-sub:1") == 1;
  })) << "io thread 1's subscriber did not come back";
  EXPECT_EQ(flushes("fx"), fx_flushes)
      << "fx lives on io thread 0: another thread's loss must not flush it";
  EXPECT_FALSE(suspended("fx"));
  EXPECT_TRUE(l1_holds(*a, "fx", f)) << "fx kept its row";
  EXPECT_FALSE(l1_holds(*a, "quotes", q)) << "quotes flushed at its resubscribe";
  EXPECT_EQ(pubsub_clients(client()).at("echostore-sub"), subs.at("echostore-sub"))
      << "io thread 0's subscriber was never redialled";
}

TEST_F(IoThreads, KnobOutOfRangeOrOutsideModeSingleIsRefused) {
  LoaderProbe p;
  const auto spec = table_spec("quotes", "AST", CoherenceMode::kBroadcast, p.answer("q"));
  for (int bad : {0, 17, -1}) {
    EngineOptions o = node_options(server(), 1);
    o.io_threads = bad;
    try {
      Engine e(o, {spec});
      ADD_FAILURE() << "io_threads " << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("io_threads must lie in 1..16"), std::string::npos)
          << e.what();
    }
  }
  EngineOptions o;
  o.mode = engine::ServerMode::kCluster;
  o.cluster_seeds = "127.0.0.1:" + std::to_string(server().port());
  o.io_threads = 2;
  try {
    Engine e(o, {spec});
    ADD_FAILURE() << "io_threads 2 was accepted in cluster mode";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs mode single"), std::string::npos) << e.what();
  }
  EngineOptions sixteen = node_options(server(), 1);
  sixteen.io_threads = 16;
  EXPECT_NO_THROW(Engine(sixteen, {spec}));
}

}  // namespace
}  // namespace echo::test
