// SPDX-License-Identifier: MIT
// `echostore referee [--server H:P] [--seconds N] [--json FILE] [--quick]`: starts a
// redis-server on a free loopback port unless --server names one, mints the names, runs every
// contestant in turn (progress on stderr), prints the table and the verdicts, and exits 1 when a
// verdict fails or a contestant could not run.
#include <echo/table/branded_id.h>

#include <iostream>
#include <memory>

#include "bench/bench.h"
#include "peer_process.h"
#include "referee/referee.h"
#include "server_target.h"

namespace echo::cli::referee {
namespace {

constexpr unsigned kNamesNode = 959;  // the minting node of the names (the lanes use 960..)

struct RefereeArgs {
  std::string server, json;
  int seconds = 0;  // 0: the default (10, or 3 with --quick)
  bool quick = false;
  bool peers = false;  // --peers: the real client too
  std::string peers_dir;
  AuthArgs auth;
};

std::string command_line(const RefereeArgs& a) {
  std::string out = "echostore referee";
  if (!a.server.empty()) out += " --server " + a.server;
  if (a.seconds > 0) out += " --seconds " + std::to_string(a.seconds);
  if (a.quick) out += " --quick";
  if (a.peers) out += " --peers";
  if (!a.peers_dir.empty()) out += " --peers-dir " + a.peers_dir;
  if (!a.json.empty()) out += " --json " + a.json;
  return out;
}

int run(const RefereeArgs& a) {
  RefereeConfig config;
  if (a.quick) {
    config.quick = true;
    config.names = 500;
    config.seconds = 3;
  }
  if (a.seconds > 0) config.seconds = a.seconds;

  RunHeader header;
  header.command = command_line(a);
  ServerTarget server;
  if (const int rc = open_server("referee", a.server, server); rc != 0) return rc;
  header.server = server.described;
  const DrillTarget& target = server.target;
  const bench::RunInfo info = bench::machine_info();
  header.machine = "echostore " + info.version + " (" + info.commit + ") | " + info.compiler +
                   " | " + std::to_string(info.cores) + " cores, " + info.model + " | " +
                   info.kernel;

  std::vector<std::string> names;
  for (std::size_t i = 0; i < config.names; ++i) {
    names.push_back(table::process_minter().mint("REF", kNamesNode).value().str());
  }
  std::vector<std::unique_ptr<Contestant>> contestants = echostore_lanes();
  for (auto& c : classic_caches()) contestants.push_back(std::move(c));
  if (a.peers) {
    // Checked before any contestant runs: a missing Node.js is a setup step, not a result.
    const std::string dir = a.peers_dir.empty() ? ECHO_PEERS_DIR : a.peers_dir;
    try {
      (void)peer_node("echostore referee", dir, "csc_node.mjs", {"redis"});
    } catch (const PeersMissing& e) {
      std::cerr << e.what() << '\n';
      return 1;
    }
    for (auto& c : real_clients(dir)) contestants.push_back(std::move(c));
  }
  std::vector<Figures> figures;
  for (std::size_t i = 0; i < contestants.size(); ++i) {
    std::cerr << "referee [" << i + 1 << '/' << contestants.size() << "] " << contestants[i]->name()
              << '\n';
    figures.push_back(run_contestant(*contestants[i], config, target, names, std::cerr));
    if (!figures.back().failure.empty()) {
      std::cerr << "referee " << figures.back().name << ": " << figures.back().failure << '\n';
    }
  }
  const std::vector<std::string> failed = verdicts(figures);
  print_results(std::cout, header, config, figures, failed);
  if (!a.json.empty()) {
    bool written = false;
    try {
      written = write_json(a.json, header, config, figures, failed);
    } catch (const std::exception& e) {
      std::cerr << "echostore referee: " << e.what() << '\n';
    }
    if (!written) {
      std::cerr << "echostore referee: cannot write " << a.json << '\n';
      return 1;
    }
  }
  return failed.empty() ? 0 : 1;
}

}  // namespace

void add_referee_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RefereeArgs>();
  auto* cmd = app.add_subcommand(
      "referee",
      "The Cache Referee: EchoStore's three lanes beside classic tracking and "
      "deletion-synchronised caching, one workload, stale reads counted by one oracle");
  cmd->add_option("--server", args->server,
                  "HOST:PORT of a scratch server to use; the referee FLUSHALLs it before each "
                  "contestant (default: start redis-server on loopback)");
  cmd->add_option("--seconds", args->seconds, "seconds of workload per contestant (default 10)")
      ->check(CLI::Range(1, 600));
  cmd->add_option("--json", args->json, "also write the figures, workload and verdicts to FILE");
  cmd->add_flag("--quick", args->quick, "500 names and 3 s per contestant (a smoke run)");
  cmd->add_flag("--peers", args->peers,
                "also a real client: node-redis's client-side cache, run by Node.js from "
                "bench/peers (scripts/setup.sh --peers installs it)");
  cmd->add_option("--peers-dir", args->peers_dir,
                  "the peers' package directory (default: the source tree's bench/peers)");
  add_auth_options(cmd, args->auth);
  cmd->callback([args, &exit_code] {
    apply_auth(args->auth);
    exit_code = run(*args);
  });
}

}  // namespace echo::cli::referee
