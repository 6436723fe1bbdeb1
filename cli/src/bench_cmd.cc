// SPDX-License-Identifier: MIT
// `echostore bench`: checks the knobs the way the engine will (engine::validate on the lane
// tables it is about to declare, so a bad value gets the engine's own message and exit 2 before
// anything runs), starts a redis-server on a free loopback port unless --server names one, runs
// the in-process rows and then the lane rows, and prints the table (and the JSON).
#include "bench_cmd.h"

#include <echo/harness/placement.h>
#include <echo/testing/local_server.h>

#include <charconv>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "server_target.h"

namespace echo::cli {
namespace {

struct BenchArgs {
  std::string server, json, html, ring_capacity, max_batch, wait, rounds, placement, only;
  std::optional<std::string> load;  // --load given: its rates ("" when bare)
  std::string load_text;            // what CLI11 parsed into --load
  bool quick = false;
  bool peers = false;     // --peers: as --only peers
  std::string peers_dir;  // --peers-dir
  TlsArgs tls;
  AuthArgs auth;
};

// Whole decimal numbers only ("4096", not "4k", "-1" or "4096x").
std::optional<std::uint64_t> parse_count(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || at != end) return std::nullopt;
  return v;
}

bool bad(const std::string& what) {
  std::cerr << "echostore bench: " << what << '\n';
  return false;
}

void quick_sizes(bench::BenchConfig& c) {
  c.quick = true;
  c.rounds = 3;
  c.ring_items = 1u << 17;
  c.gets = 1u << 17;
  c.decode_streams = 30;
  c.messages = 50;
}

// --peers and --only: which part runs, and the rounds of the parts that take minutes.
bool choose_part(const BenchArgs& a, bench::BenchConfig& c) {
  if (a.peers) {
    if (!a.only.empty() && a.only != "peers") {
      return bad("--peers runs the peer rows alone; drop --only " + a.only);
    }
    c.only = "peers";
  }
  c.peers_dir = a.peers_dir.empty() ? ECHO_PEERS_DIR : a.peers_dir;
  if (!a.only.empty()) {
    if (a.only != "micro" && a.only != "hit_ratio" && a.only != "lanes" && a.only != "publish" &&
        a.only != "io_threads" && a.only != "neighbour" && a.only != "open_loop" &&
        a.only != "churn" && a.only != "peers") {
      const std::string parts =
          "micro, hit_ratio, lanes, publish, io_threads, neighbour, open_loop, churn or peers";
      return bad("--only wants " + parts + ", got '" + a.only + "'");
    }
    c.only = a.only;
  }
  // 3 rates x carried on and off x 2 windows of 2 s per round: 3 rounds keep it near 80 s.
  if (c.only == "churn" && a.rounds.empty() && !a.quick) c.rounds = 3;
  // 2 backlogs of 10,000 jobs per contender per round (BullMQ's at about 1,000-3,000 jobs/s):
  // 3 rounds keep the part near a minute.
  if (c.only == "peers" && a.rounds.empty() && !a.quick) c.rounds = 3;
  return true;
}

// --load (or --only open_loop): the open-loop rows alone, at the rates given.
bool choose_load(const BenchArgs& a, bench::BenchConfig& c) {
  if (!a.load && c.only != "open_loop") return true;
  if (!c.only.empty() && c.only != "open_loop") {
    return bad("--load runs the open-loop rows alone; drop --only " + c.only);
  }
  c.only = "open_loop";
  const std::string rates = a.load && !a.load->empty() ? *a.load : "10000,50000,100000";
  for (std::size_t at = 0; at <= rates.size();) {
    const std::size_t end = std::min(rates.find(',', at), rates.size());
    const auto v = parse_count(rates.substr(at, end - at));
    if (!v || *v < 100 || *v > 1'000'000) {
      return bad("--load wants rates in 100..1000000 messages/s, comma-separated, got '" + rates +
                 "'");
    }
    c.load.push_back(static_cast<double>(*v));
    at = end + 1;
  }
  // 3 rates x 2 contenders x 1 s per round: 5 rounds keep the part under a minute.
  if (a.rounds.empty() && !a.quick) c.rounds = 5;
  return true;
}

// --ring-capacity, --max-batch and --wait: the lane tables' writer knobs.
bool set_writer_knobs(const BenchArgs& a, bench::BenchConfig& c) {
  if (!a.ring_capacity.empty()) {
    const auto v = parse_count(a.ring_capacity);
    if (!v)
      return bad("--ring-capacity wants a power of two in 2..2^30, got '" + a.ring_capacity + "'");
    c.ring_capacity = *v;
  }
  if (!a.max_batch.empty()) {
    const auto v = parse_count(a.max_batch);
    if (!v) return bad("--max-batch wants a count in 1..ring capacity, got '" + a.max_batch + "'");
    c.max_batch = *v;
  }
  if (!a.wait.empty()) {
    if (a.wait == "spin") {
      c.wait = ring::WaitStrategy::kSpin;
    } else if (a.wait == "yield") {
      c.wait = ring::WaitStrategy::kYield;
    } else if (a.wait == "park") {
      c.wait = ring::WaitStrategy::kPark;
    } else {
      return bad("--wait wants spin, yield or park, got '" + a.wait + "'");
    }
  }
  return true;
}

// --rounds, and --placement: where the bench (and a server it starts) run.
bool set_rounds_and_placement(const BenchArgs& a, bench::BenchConfig& c) {
  if (!a.rounds.empty()) {
    const auto v = parse_count(a.rounds);
    if (!v || *v < 1 || *v > 100) return bad("--rounds wants 1..100, got '" + a.rounds + "'");
    c.rounds = static_cast<int>(*v);
  }
  if (a.placement.empty() || a.placement == "unpinned") return true;
  const unsigned cores = std::thread::hardware_concurrency();
  if (a.placement == "one-core") {
    c.process_cpu = 0;
    c.server_cpu = a.server.empty() ? 0 : -1;
  } else if (a.placement == "spread" && cores >= 2) {
    c.process_cpu = 0;
    c.server_cpu = a.server.empty() ? 1 : -1;
  } else if (a.placement == "spread") {
    return bad("--placement spread needs 2 CPUs, this machine has " + std::to_string(cores));
  } else {
    return bad("--placement wants unpinned, one-core or spread, got '" + a.placement + "'");
  }
  c.placement = a.placement;
  return true;
}

// The knobs as the engine checks them, on the lane tables the bench is about to declare.
bool engine_accepts(const bench::BenchConfig& c) {
  try {
    for (auto mode : {engine::CoherenceMode::kBroadcast, engine::CoherenceMode::kJob}) {
      engine::validate(bench::lane_spec("bench", mode, c));
    }
  } catch (const engine::ConfigError& e) {
    return bad(std::string("the engine refuses the knob: ") + e.what());
  }
  return true;
}

// Fills `c` from the arguments; false (after one line on stderr) when one is bad.
bool configure(const BenchArgs& a, bench::BenchConfig& c) {
  if (a.quick) quick_sizes(c);
  return choose_part(a, c) && choose_load(a, c) && set_writer_knobs(a, c) &&
         set_rounds_and_placement(a, c) && engine_accepts(c);
}

// The run as a command line (the JSON and the table header carry it, so a figure names how to
// reproduce it).
std::string command_line(const BenchArgs& a) {
  std::string out = "echostore bench";
  auto add = [&](const char* flag, const std::string& v) {
    if (!v.empty()) out += std::string(" ") + flag + ' ' + v;
  };
  add("--server", a.server);
  if (a.quick) out += " --quick";
  add("--rounds", a.rounds);
  add("--ring-capacity", a.ring_capacity);
  add("--max-batch", a.max_batch);
  add("--wait", a.wait);
  add("--placement", a.placement);
  add("--only", a.only);
  if (a.peers) out += " --peers";
  add("--peers-dir", a.peers_dir);
  if (a.load) out += a.load->empty() ? " --load" : " --load " + *a.load;
  add("--json", a.json);
  add("--html", a.html);
  add("--tls-port", a.tls.port);
  add("--tls-ca", a.tls.ca);
  add("--tls-cert", a.tls.cert);
  add("--tls-key", a.tls.key);
  add("--tls-server-name", a.tls.server_name);
  return out;
}

int run(const BenchArgs& a) {
  bench::BenchConfig c;
  if (!configure(a, c)) return 2;
  bench::RunInfo info = bench::machine_info();
  info.command = command_line(a);
  ServerTarget server;
  if (!c.only.empty() && c.only != "lanes" && c.only != "publish" && c.only != "io_threads" &&
      c.only != "neighbour" && c.only != "open_loop" && c.only != "churn" && c.only != "peers") {
    info.server = "no server (--only " + c.only + ")";
  } else if (const int rc = open_server("bench", a.server, server, &a.tls); rc != 0) {
    return rc;
  } else {
    info.server = server.described;
  }
  const DrillTarget& target = server.target;
  if (c.process_cpu >= 0 && !harness::pin_thread(c.process_cpu)) {
    std::cerr << "echostore bench: cannot pin the bench to CPU " << c.process_cpu << '\n';
    return 1;
  }
  if (server.own && c.server_cpu >= 0 && !harness::pin_process(server.own->pid(), c.server_cpu)) {
    std::cerr << "echostore bench: cannot pin redis-server to CPU " << c.server_cpu << '\n';
    return 1;
  }
  std::vector<bench::Row> rows;
  // Every part but open_loop, churn and peers, which run only when asked (--load, --only
  // open_loop, --only churn, --peers): each takes a minute or more of its own, and the peers need
  // Node.js, which neither the default suite nor CI installs.
  const auto part = [&c](const std::string& name) {
    return c.only == name ||
           (c.only.empty() && name != "open_loop" && name != "churn" && name != "peers");
  };
  const int open_loop_steps =
      bench::kOpenLoopStepsPerRate * static_cast<int>(c.load.size()) * c.rounds;
  const int neighbour_steps = bench::kNeighbourSteps * c.rounds;
  bench::Progress progress(
      std::cerr, (part("micro") ? bench::kMicroSteps * c.rounds : 0) +
                     (part("hit_ratio") ? bench::kHitRatioSteps : 0) +
                     (part("lanes") ? bench::kLaneSteps * c.rounds : 0) +
                     (part("publish") ? bench::kPublishSteps * c.rounds : 0) +
                     (part("io_threads") ? bench::kIoThreadsSteps * c.rounds : 0) +
                     (part("neighbour") ? neighbour_steps : 0) +
                     (part("open_loop") ? open_loop_steps : 0) +
                     (part("churn") ? bench::kChurnSteps * c.rounds : 0) +
                     (part("peers") ? bench::kPeersSteps * c.rounds + bench::kPeersCacheSteps : 0));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (part("micro")) bench::run_micro(c, progress, rows);
    if (part("hit_ratio")) bench::run_hit_ratio(c, progress, rows);
    if (part("lanes")) bench::run_lanes(c, target, progress, rows);
    if (part("publish")) bench::run_publish_floor(c, target, progress, rows);
    if (part("io_threads")) bench::run_io_threads(c, target, progress, rows);
    if (part("neighbour")) {
      bench::run_neighbour(c, target, server.own ? server.own->pid() : 0, progress, rows);
    }
    if (part("open_loop")) bench::run_open_loop(c, target, progress, rows);
    if (part("churn")) {
      bench::run_churn(c, target, server.own ? server.own->pid() : 0, progress, rows);
    }
    if (part("peers"))
      bench::run_peers(c, target, server.own != nullptr, progress, rows, info.peers);
  } catch (const std::exception& e) {
    std::cerr << "echostore bench: " << e.what() << '\n';
    return 1;
  }
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bench::print_table(std::cout, info, c, rows);
  if (!a.json.empty()) {
    bool written = false;
    try {
      written = bench::write_json(a.json, info, c, rows);
    } catch (const std::exception& e) {
      std::cerr << "echostore bench: " << e.what() << '\n';
    }
    if (!written) {
      std::cerr << "echostore bench: cannot write " << a.json << '\n';
      return 1;
    }
  }
  if (!a.html.empty() && !bench::write_html(a.html, info, c, rows)) {
    std::cerr << "echostore bench: cannot write " << a.html << '\n';
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand(
      "bench",
      "Every figure beside its baseline from the same run: ring, L1, RESP3, lanes, journal");
  bench->add_option("--server", args->server,
                    "HOST:PORT of a server to use (default: start redis-server on loopback)");
  bench->add_option("--json", args->json, "also write the figures, machine and commit to FILE");
  bench->add_option("--html", args->html,
                    "also write one self-contained page to FILE: ratio bars, the lanes' "
                    "percentile curves beside their baselines', the table");
  bench->add_flag("--quick", args->quick, "3 short rounds instead of 7 (a smoke run)");
  bench->add_option("--ring-capacity", args->ring_capacity,
                    "the lane tables' and the ring row's capacity (power of two, default 4096)");
  bench->add_option("--max-batch", args->max_batch,
                    "items per drain pass (1..ring capacity, default 256)");
  bench->add_option("--wait", args->wait, "how the writer waits: spin, yield or park (default)");
  bench->add_option("--placement", args->placement,
                    "unpinned (default); one-core: the bench and the server it starts on CPU 0; "
                    "spread: the bench on CPU 0, that server on CPU 1");
  bench->add_option("--rounds", args->rounds, "rounds per row, 1..100 (default 7, --quick 3)");
  bench->add_option("--only", args->only,
                    "one part of the suite: micro (ring, L1, RESP3), hit_ratio (eviction "
                    "policies on generated traces), lanes (the rows against a server), "
                    "publish (Engine::publish against hiredis sending the same wire), "
                    "io_threads (a 4-table flood on 2 io threads vs 1), neighbour (a spinner "
                    "pinned to CPU 1: its loop gaps beside 2 engines on CPU 0 vs alone), "
                    "open_loop (as --load), churn (a reader's reads/s while another node "
                    "publishes at 1k, 10k, 50k/s vs quiet, carried values on and off, and a "
                    "carried value's publish -> visible vs a bare PUBLISH; 3 rounds) or peers "
                    "(as --peers)");
  bench->add_flag("--peers", args->peers,
                  "the peer rows alone (as --only peers): the job lane against BullMQ, and the "
                  "tracking lane and carried values against node-redis's client-side cache "
                  "under the referee's workload (on a server the bench started), run by Node.js "
                  "from bench/peers on the same server in the same run (3 rounds); "
                  "scripts/setup.sh --peers installs Node.js and the pinned packages");
  bench->add_option("--peers-dir", args->peers_dir,
                    "the peers' package directory (default: the source tree's bench/peers)");
  auto* load =
      bench
          ->add_option(
              "--load", args->load_text,
              "the open-loop rows alone: PUBLISH at each RATE[,RATE...] msg/s on a fixed "
              "schedule, the broadcast lane's p50/p99/p99.9 from each message's scheduled "
              "time beside a bare subscriber's (bare --load: 10000,50000,100000; 5 rounds)")
          ->expected(0, 1);
  add_auth_options(bench, args->auth);
  add_tls_flags(bench, args->tls);
  bench->add_option("--tls-port", args->tls.port,
                    "the TLS port of --server, for the tls_vs_plain row (a started server "
                    "listens on one with certificates made at run time)");
  bench->callback([args, load, &exit_code] {
    if (load->count() > 0) args->load = args->load_text;
    apply_auth(args->auth);
    exit_code = run(*args);
  });
}

}  // namespace echo::cli
