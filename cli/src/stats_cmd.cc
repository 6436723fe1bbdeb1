// SPDX-License-Identifier: MIT
// Reads the snapshots nodes publish under ecc:{<table>}:stats:<node> (SCAN on the table's hash
// tag, then GET each; on a cluster, on every master CLUSTER SLOTS names, so a table whose slot
// moved is still found) and prints them as one Prometheus exposition (label node=), with --json
// as a JSON array of the snapshots as published, or with --watch as a one-screen view redrawn
// every period (stats_watch.h). A value that is not a snapshot (not JSON, not the format, a
// negative counter) is reported on stderr by node and left out. Exit 0 when every node's
// snapshot was printed, 1 when no node publishes, any was refused or the server cannot be
// reached, 2 on bad arguments.
#include "stats_cmd.h"

#include "server_target.h"

#include <echo/engine/stats_export.h>
#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/io/cluster_map.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "stats_watch.h"

namespace echo::cli {
namespace {

struct StatsArgs {
  std::string server;
  std::vector<std::string> tables;
  bool json = false;
  bool cluster = false;  // --cluster: the server must be a cluster node (else found by asking)
  double watch_s = 0;    // --watch [SECONDS]: 0 = print once
  int count = 0;         // --count N: with --watch, refreshes before exiting; 0 = until killed
  TlsArgs tls;
  AuthArgs auth;
};

// The tables as one word for messages: "quotes" or "quotes, users".
std::string table_list(const StatsArgs& a) {
  std::string out;
  for (const auto& t : a.tables) out += (out.empty() ? "" : ", ") + t;
  return out;
}

// CLUSTER SLOTS' masters (host:port of each range's first node; an empty host is the one asked),
// without repeats. Replies of another shape answer an empty list.
template <class Reply, class Each>
std::vector<io::NodeAddress> masters_of(const Reply& ranges, const io::NodeAddress& asked,
                                        Each each) {
  std::vector<io::NodeAddress> out;
  std::set<std::string> seen;
  each(ranges, [&](const std::string& host, int port) {
    io::NodeAddress m{host.empty() ? asked.host : host, port};
    if (port > 0 && seen.insert(m.text()).second) out.push_back(m);
  });
  return out;
}

// Over TLS (hiredis 0.14 has none): the connector itself, one blocking call at a time. Every
// (key, value) of the stats keys matching each of `patterns`; false (after saying why) when the
// server cannot be reached or a SCAN fails. With `masters`, first asks CLUSTER SLOTS: a cluster
// node fills it with every master (and scans nothing), another answers an error and leaves it
// empty (then it scans).
bool read_over_tls(const StatsArgs& a, const io::NodeAddress& at,
                   const std::vector<std::string>& patterns,
                   std::vector<std::pair<std::string, std::string>>& out,
                   std::vector<io::NodeAddress>* masters = nullptr) {
  io::LoopThread loop;
  io::ConnectionOptions o;
  o.host = at.host;
  o.port = at.port;
  o.fence = false;
  o.label = "stats";
  o.tls = tls_options(a.tls);
  o.username = harness::credentials().username;  // --user/--password, as the plain path's AUTH
  o.password = harness::credentials().password;
  bool ok = true;
  try {
    io::Connection c(loop.loop(), o);
    c.start();
    if (auto ec = c.wait_ready(std::chrono::seconds(5))) {
      const std::string why = c.cause();
      std::cerr << "echostore stats: cannot reach " << at.text() << ": " << ec.message()
                << (why.empty() ? "" : " (" + why + ")") << "\n";
      ok = false;
    }
    bool cluster = false;  // the caller scans each master instead
    if (ok && masters != nullptr) {
      auto r = c.call_blocking({"CLUSTER", "SLOTS"});
      const io::Resp3Value v = r.reply.view();
      if (!r.ec && v.type() == io::Resp3Type::array) {
        *masters = masters_of(v, at, [](const io::Resp3Value& ranges, auto add) {
          for (const io::Resp3Value range : ranges) {
            if (range.size() >= 3 && range[2].size() >= 2) {
              add(std::string(range[2][0].str()), static_cast<int>(range[2][1].integer()));
            }
          }
        });
        cluster = !masters->empty();
      }
    }
    for (std::size_t p = 0; ok && !cluster && p < patterns.size(); ++p) {
      std::string cursor = "0";
      while (ok) {
        auto r = c.call_blocking({"SCAN", cursor, "MATCH", patterns[p], "COUNT", "1000"});
        const io::Resp3Value v = r.reply.view();
        if (r.ec || v.size() != 2) {
          std::cerr << "echostore stats: SCAN failed on " << at.text() << "\n";
          ok = false;
          break;
        }
        cursor = std::string(v[0].str());
        for (const io::Resp3Value k : v[1]) {
          auto g = c.call_blocking({"GET", std::string(k.str())});
          if (!g.ec && g.reply.view().has_text()) {
            out.emplace_back(std::string(k.str()), std::string(g.reply.view().str()));
          }
        }
        if (cursor == "0") break;
      }
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "echostore stats: " << e.what() << "\n";
    ok = false;
  }
  loop.join();
  return ok;
}

using harness::Context;
using harness::Reply;

// SCAN's MATCH is a glob: a table name may hold glob bytes (names refuse only braces, spaces,
// control bytes and what is not UTF-8), so they are escaped.
std::string glob_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

int read_plain(const StatsArgs& a, const io::NodeAddress& at,
               const std::vector<std::string>& patterns,
               std::vector<std::pair<std::string, std::string>>& values,
               std::vector<io::NodeAddress>* masters = nullptr);
std::vector<std::string> checked(const StatsArgs& a,
                                 std::vector<std::pair<std::string, std::string>>& values,
                                 std::size_t& refused);
int print(const StatsArgs& a, std::vector<std::pair<std::string, std::string>>& values);

// Every (key, value) of the tables' stats keys: from --server, or on a cluster (--cluster, or
// a server that answers CLUSTER SLOTS) from every master. 0, or the exit code after saying why.
int collect(const StatsArgs& a, const io::NodeAddress& address,
            std::vector<std::pair<std::string, std::string>>& values) {
  std::vector<std::string> patterns;
  for (const auto& t : a.tables) patterns.push_back(glob_escape(engine::stats_key(t, "")) + "*");
  const auto read = [&](const io::NodeAddress& at, std::vector<io::NodeAddress>* masters) {
    if (a.tls.given()) return read_over_tls(a, at, patterns, values, masters) ? 0 : 1;
    return read_plain(a, at, patterns, values, masters);
  };
  std::vector<io::NodeAddress> masters;
  if (const int rc = read(address, &masters); rc != 0) return rc;
  if (masters.empty()) {
    if (a.cluster) {
      std::cerr << "echostore stats: --cluster, but " << a.server
                << " answers no CLUSTER SLOTS (not a cluster node)\n";
      return 1;
    }
    return 0;  // a single server: read above
  }
  // One table's keys share its hash tag, so they sit on one master; scanning each master (not
  // only the slot's owner by the map) still finds them while a slot migrates.
  for (const auto& m : masters) {
    if (const int rc = read(m, nullptr); rc != 0) return rc;
  }
  std::set<std::string> seen;  // a key met on two masters mid-migration: once
  std::erase_if(values, [&seen](const auto& kv) { return !seen.insert(kv.first).second; });
  return 0;
}

int watch(const StatsArgs& a, const io::NodeAddress& address) {
  const auto period = std::chrono::milliseconds(static_cast<long long>(a.watch_s * 1000));
  std::map<std::string, TableHeadline> before;
  bool have_before = false;
  auto last = std::chrono::steady_clock::now();
  for (int n = 0; a.count == 0 || n < a.count; ++n) {
    if (n > 0) std::this_thread::sleep_for(period);
    std::vector<std::pair<std::string, std::string>> values;
    if (const int rc = collect(a, address, values); rc != 0) return rc;
    std::size_t refused = 0;
    const auto now_at = std::chrono::steady_clock::now();
    auto now = headlines(checked(a, values, refused));
    std::cout << render_screen(a.server, period, now, have_before ? &before : nullptr,
                               now_at - last)
              << std::flush;
    before = std::move(now);
    have_before = true;
    last = now_at;
  }
  return 0;
}

int run(const StatsArgs& a) {
  const auto address = io::parse_address(a.server);
  if (!address) {
    std::cerr << "echostore stats: --server wants HOST:PORT (port 1..65535), got '" << a.server
              << "'\n";
    return 2;
  }
  if (a.watch_s > 0) return watch(a, *address);
  std::vector<std::pair<std::string, std::string>> values;
  if (const int rc = collect(a, *address, values); rc != 0) return rc;
  return print(a, values);
}

int read_plain(const StatsArgs& /*a*/, const io::NodeAddress& at,
               const std::vector<std::string>& patterns,
               std::vector<std::pair<std::string, std::string>>& values,
               std::vector<io::NodeAddress>* masters) {
  const timeval tv{5, 0};
  Context c(redisConnectWithTimeout(at.host.c_str(), at.port, tv));
  if (!c || c->err) {
    std::cerr << "echostore stats: cannot reach " << at.text() << ": "
              << (c ? c->errstr : "out of memory") << "\n";
    return 1;
  }
  if (const std::string refused = harness::authenticate(c.get()); !refused.empty()) {
    std::cerr << "echostore stats: " << at.text() << " refused AUTH: " << refused << "\n";
    return 1;
  }
  if (masters != nullptr) {
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "CLUSTER SLOTS")));
    if (r && r->type == REDIS_REPLY_ARRAY) {
      *masters = masters_of(*r, at, [](const redisReply& ranges, auto add) {
        for (std::size_t i = 0; i < ranges.elements; ++i) {
          const redisReply* range = ranges.element[i];
          if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
          const redisReply* node = range->element[2];
          if (node->type != REDIS_REPLY_ARRAY || node->elements < 2) continue;
          add(std::string(node->element[0]->str, node->element[0]->len),
              static_cast<int>(node->element[1]->integer));
        }
      });
      if (!masters->empty()) return 0;  // the caller scans each master
    }
  }
  std::vector<std::string> keys;
  for (const std::string& pattern : patterns) {
    std::string cursor = "0";
    do {
      Reply r(static_cast<redisReply*>(redisCommand(
          c.get(), "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size())));
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        std::cerr << "echostore stats: SCAN failed on " << at.text() << "\n";
        return 1;
      }
      cursor.assign(r->element[0]->str, r->element[0]->len);
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        keys.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
      }
    } while (cursor != "0");
  }
  for (const auto& key : keys) {
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "GET %b", key.data(), key.size())));
    if (!r || r->type != REDIS_REPLY_STRING) continue;  // nil: expired
    values.emplace_back(key, std::string(r->str, r->len));
  }
  return 0;
}

// Each node's value checked as a snapshot: what a node (or anyone with the key) SET there is
// refused by node on stderr, never shown as if it were one.
std::vector<std::string> checked(const StatsArgs& /*a*/,
                                 std::vector<std::pair<std::string, std::string>>& values,
                                 std::size_t& refused) {
  std::vector<std::string> snapshots;
  for (auto& [key, value] : values) {
    try {
      (void)engine::prometheus_from_json({value});
      snapshots.push_back(std::move(value));
    } catch (const std::invalid_argument& e) {
      ++refused;
      // ecc:{<table>}:stats:<node>
      const std::size_t at = key.rfind(":stats:");
      std::cerr << "echostore stats: node '" << (at == std::string::npos ? key : key.substr(at + 7))
                << "': refused: " << e.what() << "\n";
    }
  }
  return snapshots;
}

int print(const StatsArgs& a, std::vector<std::pair<std::string, std::string>>& values) {
  std::size_t refused = 0;
  const std::vector<std::string> snapshots = checked(a, values, refused);
  if (snapshots.empty()) {
    if (refused == 0) {
      std::cerr << "echostore stats: no node publishes table '" << table_list(a) << "' on "
                << a.server << " (EngineOptions::stats_publish)\n";
    }
    return 1;
  }
  if (a.json) {
    std::cout << '[';
    for (std::size_t i = 0; i < snapshots.size(); ++i) std::cout << (i ? "," : "") << snapshots[i];
    std::cout << "]\n";
  } else {
    std::cout << engine::prometheus_from_json(snapshots);  // each one rendered above
  }
  return refused == 0 ? 0 : 1;
}

}  // namespace

void add_stats_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<StatsArgs>();
  auto* stats = app.add_subcommand(
      "stats", "Every live node's published stats of a table (Prometheus text, or --json)");
  stats->add_option("--server", args->server, "HOST:PORT of the table's server")->required();
  stats->add_option("--table", args->tables, "the table (repeat for several)")->required();
  stats->add_flag("--json", args->json, "print the snapshots as a JSON array");
  stats->add_flag("--cluster", args->cluster,
                  "the server is a cluster node: read every master (found by asking without it)");
  stats
      ->add_option("--watch", args->watch_s,
                   "redraw a one-screen view every SECONDS (default 2) until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::Range(0.1, 3600.0));
  stats->add_option("--count", args->count, "with --watch: refreshes before exiting (0: no end)")
      ->check(CLI::Range(0, 1000000));
  add_auth_options(stats, args->auth);
  add_tls_flags(stats, args->tls);
  stats->callback([args, &exit_code] {
    apply_auth(args->auth);
    exit_code = run(*args);
  });
}

}  // namespace echo::cli
