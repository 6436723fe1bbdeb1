// SPDX-License-Identifier: MIT
// `echostore`: the command-line program. Subcommands: id (mint, decode), drill, journal, stats,
// bench, referee.
#include <hiredis/hiredis.h>
#include <sqlite3.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <echo/engine/engine.h>
#include <echo/harness/machine.h>
#include <echo/harness/stage.h>
#include <echo/io/cluster_map.h>
#include <echo/table/branded_id.h>
#include <echo/testing/local_server.h>
#include <echo/testing/local_tls.h>

#include "bench_cmd.h"
#include "drill/chaos.h"
#include "drill/drill.h"
#include "git_commit.h"
#include "journal_cmd.h"
#include "referee/referee.h"
#include "server_target.h"
#include "stats_cmd.h"

namespace {

using namespace echo;

int id_mint(const std::string& ns, unsigned node) {
  table::Minter minter(node);
  auto id = minter.mint(ns);
  if (!id) {
    std::cerr << "echostore: cannot mint in namespace '" << ns << "': gate "
              << table::to_string(id.error()) << " (a namespace is 3 bytes A-Z)\n";
    return 2;
  }
  std::cout << id->view() << '\n';
  return 0;
}

int id_decode(const std::string& text) {
  auto id = table::BrandedId::parse(text);
  if (!id) {
    std::cerr << "echostore: '" << text << "' is not a branded id: gate "
              << table::to_string(id.error()) << " refused it\n";
    return 2;
  }
  const std::uint64_t s = id->snowflake();
  const std::int64_t ms = table::unix_ms(s);
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char iso[96];
  std::snprintf(iso, sizeof iso, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  std::cout << "id         " << id->view() << '\n'
            << "namespace  " << id->ns() << '\n'
            << "snowflake  " << s << '\n'
            << "unix_ms    " << ms << '\n'
            << "time       " << iso << '\n'
            << "node       " << table::node_of(s) << '\n'
            << "seq        " << table::seq_of(s) << '\n'
            << "hash32     " << table::hash32(s) << '\n';
  return 0;
}

// Before any gate: one connection boots as the engine's do (engine::probe_server) within 2 s,
// or the drill stops with the cause in words: a wrong password, an ACL denial, a peer that is
// not Redis, a foreign fence, or nothing answering.
bool server_answers(const cli::DrillTarget& target) {
  const auto options = harness::node_options(target.host, target.port, 0);
  const engine::Error e = engine::probe_server(options, std::chrono::seconds(2));
  if (!e) return true;
  std::cerr << "echostore drill: the server at " << target.host << ':' << target.port
            << " cannot be used (" << e.code.message() << "): " << e.message() << '\n';
  return false;
}

int drill(const std::string& server, const cli::TlsArgs& tls) {
  std::unique_ptr<testing::LocalTlsFiles> own_tls;
  std::unique_ptr<testing::LocalServer> own;
  cli::DrillTarget target;
  try {
    if (server.empty()) {
      // The drill's server also listens for TLS (gate T1), with certificates made now.
      own_tls = std::make_unique<testing::LocalTlsFiles>();
      testing::LocalServerOptions o;
      o.tls.cert_file = own_tls->server_cert();
      o.tls.key_file = own_tls->server_key();
      o.tls.ca_file = own_tls->ca_file();
      own = std::make_unique<testing::LocalServer>(o);
      target = {own->host(), own->port()};
      target.tls_port = own->tls_port();
      target.tls.enabled = true;
      target.tls.ca_file = own_tls->ca_file();
    } else {
      const auto address = io::parse_address(server);
      if (!address) {
        throw std::invalid_argument("--server wants HOST:PORT (port 1..65535), got '" + server +
                                    "'");
      }
      target = {address->host, address->port};
      if (tls.given() || !tls.port.empty()) {
        const auto port = io::parse_address("h:" + tls.port);
        if (!tls.given() || !port) {
          throw std::invalid_argument(
              "TLS against --server wants --tls-port PORT (1..65535) and --tls-ca (or another "
              "--tls-* flag)");
        }
        target.tls_port = port->port;
        target.tls = cli::tls_options(tls);
      }
    }
  } catch (const std::invalid_argument& e) {  // the command line: a usage error
    std::cerr << "echostore drill: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {  // its own server did not start: the machine's
    std::cerr << "echostore drill: " << e.what() << '\n';
    return 1;
  }
  if (!server_answers(target)) return 1;
  std::string version = "unknown";
  if (own) version = own->version();
  std::cout << "header: redis-server " << version << " on " << target.host << ':' << target.port
            << (own ? " (started by the drill)" : " (given)") << " | echostore " << ECHO_VERSION
            << " (" << cli::git_commit() << ") | liburing " << ECHO_LIBURING_VERSION
            << " | hiredis " << HIREDIS_MAJOR << '.' << HIREDIS_MINOR << '.' << HIREDIS_PATCH
            << " | SQLite " << sqlite3_libversion() << " | " << harness::compiler() << " | cores "
            << std::thread::hardware_concurrency() << "\n\n";
  const std::vector<cli::Gate> gates = cli::registered_gates();
  return cli::run_drill(gates, target, std::cout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"echostore: keeps an in-process cache coherent with a shared Valkey/Redis server"};
  app.require_subcommand(1);

  auto* id = app.add_subcommand("id", "Mint and decode branded ids");
  id->require_subcommand(1);
  std::string ns;
  unsigned node = 0;
  auto* mint = id->add_subcommand("mint", "Mint one id in namespace NS");
  mint->add_option("NS", ns, "namespace: 3 bytes A-Z")->required();
  mint->add_option("--node", node, "node id")->check(CLI::Range(0u, 1023u));
  std::string text;
  auto* decode =
      id->add_subcommand("decode", "Decode an id: namespace, snowflake, time, node, seq");
  decode->add_option("ID", text, "a 14-byte branded id")->required();

  std::string server;
  auto* drill_cmd = app.add_subcommand("drill", "Run every gate against a real server");
  drill_cmd->add_option("--server", server,
                        "HOST:PORT of a server to use (default: start redis-server on loopback)");
  cli::AuthArgs auth;
  cli::add_auth_options(drill_cmd, auth);
  cli::TlsArgs drill_tls;
  cli::add_tls_flags(drill_cmd, drill_tls);
  drill_cmd->add_option("--tls-port", drill_tls.port,
                        "the TLS port of --server, for gate T1 (a started server listens on one "
                        "with certificates made at run time)");
  bool cluster = false;
  drill_cmd->add_flag("--cluster", cluster,
                      "start a local cluster (3 masters, 3 replicas) and run the cluster gates");
  cli::chaos::ChaosConfig chaos;
  auto* chaos_opt =
      drill_cmd
          ->add_option("--chaos", chaos.seconds,
                       "run only the chaos drill for SECONDS (10..86400): three nodes behind fault "
                       "proxies, random "
                       "network and server faults, every read judged, every heal converged")
          ->check(CLI::Range(10, 86400));
  drill_cmd
      ->add_option("--seed", chaos.seed,
                   "the chaos drill's seed (default: drawn, and printed for a replay)")
      ->needs(chaos_opt);
  chaos_opt->excludes("--cluster");

  int journal_exit = 0;
  cli::add_journal_command(app, journal_exit);
  int stats_exit = 0;
  cli::add_stats_command(app, stats_exit);
  int bench_exit = 0;
  cli::add_bench_command(app, bench_exit);
  int referee_exit = 0;
  cli::referee::add_referee_command(app, referee_exit);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every usage error is exit 2, as the README promises (CLI11's own
    // codes are 105..109 and others).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (app.got_subcommand("journal")) return journal_exit;
  if (app.got_subcommand("stats")) return stats_exit;
  if (app.got_subcommand("bench")) return bench_exit;
  if (app.got_subcommand("referee")) return referee_exit;
  if (mint->parsed()) return id_mint(ns, node);
  if (decode->parsed()) return id_decode(text);
  if (drill_cmd->parsed()) cli::apply_auth(auth);
  if (drill_cmd->parsed() && chaos_opt->count() > 0) {
    chaos.server = server;
    return cli::chaos::drill_chaos(chaos, std::cout);
  }
  if (drill_cmd->parsed())
    return cluster ? cli::drill_cluster(std::cout) : drill(server, drill_tls);
  return 2;
}
