// SPDX-License-Identifier: MIT
// Reads the snapshots nodes publish under ecc:{<table>}:stats:<node> (SCAN on the table's hash
// tag, then GET each) and prints them as one Prometheus exposition (label node=) or, with
// --json, as a JSON array of the snapshots as published. A value that is not a snapshot (not
// JSON, not the format, a negative counter) is reported on stderr by node and left out. Exit 0
// when every node's snapshot was printed, 1 when no node publishes, any was refused or the server
// cannot be reached, 2 on bad arguments.
#include "stats_cmd.h"

#include "server_target.h"

#include <echo/engine/stats_export.h>
#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/io/cluster_map.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>
#include <hiredis/hiredis.h>

#include <iostream>
#include <utility>
#include <string>
#include <vector>

#include "server_target.h"

namespace echo::cli {
namespace {

struct StatsArgs {
  std::string server, table;
  bool json = false;
  TlsArgs tls;
  AuthArgs auth;
};

// Over TLS (hiredis 0.14 has none): the connector itself, one blocking call at a time. Every
// (key, value) of the stats keys matching `pattern`; false (after saying why) when the server
// cannot be reached or a SCAN fails.
bool read_over_tls(const StatsArgs& a, const io::NodeAddress& at, const std::string& pattern,
                   std::vector<std::pair<std::string, std::string>>& out) {
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
      std::cerr << "echostore stats: cannot reach " << a.server << ": " << ec.message()
                << (why.empty() ? "" : " (" + why + ")") << "\n";
      ok = false;
    }
    std::string cursor = "0";
    while (ok) {
      auto r = c.call_blocking({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      const io::Resp3Value v = r.reply.view();
      if (r.ec || v.size() != 2) {
        std::cerr << "echostore stats: SCAN failed on " << a.server << "\n";
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

int read_plain(const StatsArgs& a, const io::NodeAddress& at, const std::string& pattern,
               std::vector<std::pair<std::string, std::string>>& values);
int print(const StatsArgs& a, std::vector<std::pair<std::string, std::string>>& values);

int run(const StatsArgs& a) {
  const auto address = io::parse_address(a.server);
  if (!address) {
    std::cerr << "echostore stats: --server wants HOST:PORT (port 1..65535), got '" << a.server
              << "'\n";
    return 2;
  }
  const std::string pattern = glob_escape(engine::stats_key(a.table, "")) + "*";
  std::vector<std::pair<std::string, std::string>> values;  // (key, value) over TLS
  if (a.tls.given()) {
    if (!read_over_tls(a, *address, pattern, values)) return 1;
  } else if (const int rc = read_plain(a, *address, pattern, values); rc != 0) {
    return rc;
  }
  return print(a, values);
}

int read_plain(const StatsArgs& a, const io::NodeAddress& at, const std::string& pattern,
               std::vector<std::pair<std::string, std::string>>& values) {
  const timeval tv{5, 0};
  Context c(redisConnectWithTimeout(at.host.c_str(), at.port, tv));
  if (!c || c->err) {
    std::cerr << "echostore stats: cannot reach " << a.server << ": "
              << (c ? c->errstr : "out of memory") << "\n";
    return 1;
  }
  if (const std::string refused = harness::authenticate(c.get()); !refused.empty()) {
    std::cerr << "echostore stats: " << a.server << " refused AUTH: " << refused << "\n";
    return 1;
  }
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "SCAN %s MATCH %b COUNT 1000",
                                                  cursor.c_str(), pattern.data(), pattern.size())));
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      std::cerr << "echostore stats: SCAN failed on " << a.server << "\n";
      return 1;
    }
    cursor.assign(r->element[0]->str, r->element[0]->len);
    for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
      keys.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
    }
  } while (cursor != "0");
  for (const auto& key : keys) {
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "GET %b", key.data(), key.size())));
    if (!r || r->type != REDIS_REPLY_STRING) continue;  // nil: expired
    values.emplace_back(key, std::string(r->str, r->len));
  }
  return 0;
}

int print(const StatsArgs& a, std::vector<std::pair<std::string, std::string>>& values) {
  // Each node's value is checked as a snapshot before anything is printed: what a node (or
  // anyone with the key) SET there is refused by node, never printed as if it were one.
  std::vector<std::string> snapshots;
  std::size_t refused = 0;
  const std::string prefix = engine::stats_key(a.table, "");
  for (auto& [key, value] : values) {
    try {
      (void)engine::prometheus_from_json({value});
      snapshots.push_back(std::move(value));
    } catch (const std::invalid_argument& e) {
      ++refused;
      std::cerr << "echostore stats: node '" << key.substr(prefix.size())
                << "': refused: " << e.what() << "\n";
    }
  }
  if (snapshots.empty()) {
    if (refused == 0) {
      std::cerr << "echostore stats: no node publishes table '" << a.table << "' on " << a.server
                << " (EngineOptions::stats_publish)\n";
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
  stats->add_option("--table", args->table, "the table")->required();
  stats->add_flag("--json", args->json, "print the snapshots as a JSON array");
  add_auth_options(stats, args->auth);
  add_tls_flags(stats, args->tls);
  stats->callback([args, &exit_code] {
    apply_auth(args->auth);
    exit_code = run(*args);
  });
}

}  // namespace echo::cli
