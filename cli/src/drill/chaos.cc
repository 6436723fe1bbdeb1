// SPDX-License-Identifier: MIT
// The chaos drill's run (chaos.h): the server, three proxied nodes, the writers, the readers,
// the journal's writer, and the scheduler that injects a fault, holds it, heals it, and waits for
// every node to agree with L2 before the next. Figures and goals are printed at the end.
#include "drill/chaos.h"

#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>
#include <echo/io/cluster_map.h>
#include <echo/table/fill_guard.h>
#include <echo/table/names.h>
#include <echo/testing/local_server.h>

#include <algorithm>
#include <iomanip>
#include <random>
#include <stdexcept>
#include <thread>

#include "drill/chaos_report.h"
#include "drill/chaos_stage.h"

namespace echo::cli::chaos {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::EventKind;
using engine::TableSpec;
using referee::now_ns;
using table::BrandedId;

TableSpec spec(std::string_view name, CoherenceMode mode) {
  TableSpec s;
  s.name = std::string(name);
  s.kind = std::string(kKind);
  s.loader = [](const engine::Key&) -> engine::LoadResult {
    return engine::LoadError{"the chaos drill seeded every name: L2 never misses"};
  };
  s.ttl_ms = 24 * 3600 * 1000;  // no row expires during a run: only coherence may drop one
  s.jitter = 0;
  s.coherence = mode;
  s.l2_format = engine::L2Format::kFramed;
  s.job_lease_ms = 2000;
  s.job_beat_ms = 100;
  return s;
}

std::optional<std::uint32_t> seq_of(std::string_view value) {
  if (value.empty() || value.size() > 9) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint32_t>(c - '0');
  }
  return v;
}

// L2's write number for `name` (a framed value: 14 bytes of version, then the number).
std::optional<std::uint32_t> l2_seq(redisContext* c, const std::string& name) {
  const std::string key = table::l2_key(kTable, name).value();
  harness::Reply r = harness::command(c, "GET %b", key.data(), key.size());
  if (!r || r->type != REDIS_REPLY_STRING || r->len <= table::kIdSize) return std::nullopt;
  return seq_of(std::string_view(r->str + table::kIdSize, r->len - table::kIdSize));
}

class Run {
 public:
  Run(const ChaosConfig& config, std::ostream& out, std::string host, int port)
      : config_(config), out_(out), host_(std::move(host)), port_(port) {}

  void stage_nodes(harness::TempDir& dir);
  void start_threads();
  void stop_threads() { threads_.clear(); }  // jthreads: asked to stop, then joined
  void schedule(Clock::time_point end, FaultInjector& injector, Figures& fig);
  // Every node agrees with L2 on every name within `bound`: the disagreeing (node, name) pairs.
  std::vector<std::pair<int, std::size_t>> converge(std::chrono::milliseconds bound, Figures& fig,
                                                    double& took_ms);
  void replay(Figures& fig);
  std::uint64_t intents_lost(std::chrono::milliseconds bound);
  Stage& stage() { return s_; }
  std::vector<referee::ReadTally> tallies() { return tallies_; }

 private:
  void writer(std::stop_token stop, int node);
  void job_writer(std::stop_token stop);
  void reader(std::stop_token stop, int node);
  engine::Result<bool> enqueue(const BrandedId& job, std::string_view name,
                               const BrandedId& version) {
    return s_.nodes[1]->enqueue_job(kJobTable, *s_.group, job, name, version);
  }

  const ChaosConfig& config_;
  std::ostream& out_;
  std::string host_;
  int port_;
  Stage s_;
  harness::Context admin_;
  std::vector<referee::ReadTally> tallies_;
  std::vector<std::jthread> threads_;
};

void Run::stage_nodes(harness::TempDir& dir) {
  admin_ = harness::connect(host_, port_);
  for (int n = 0; n < kNodes; ++n) {
    harness::FaultProxyOptions po;
    po.target_host = host_ == "localhost" ? "127.0.0.1" : host_;
    po.target_port = port_;
    po.seed = config_.seed + static_cast<std::uint64_t>(n) + 1;
    s_.proxies.push_back(std::make_unique<harness::FaultProxy>(po));
  }
  for (int n = 0; n < kNodes; ++n) {
    engine::EngineOptions o =
        harness::node_options("127.0.0.1", s_.proxies[static_cast<std::size_t>(n)]->port(),
                              engine::EngineOptions::kAutoNode);
    o.heartbeat = kHeartbeat;
    o.call_timeout = kCallTimeout;
    o.get_timeout = kGetTimeout;
    NodeLog& log = s_.logs[static_cast<std::size_t>(n)];
    o.on_event = [&log](const engine::Event& e) {
      const std::lock_guard lock(log.mu);
      log.told.push_back({e.kind, std::string(e.subject), now_ns()});
    };
    o.log = [this](engine::LogLevel, std::string_view, std::string_view) {
      s_.log_lines.fetch_add(1, std::memory_order_relaxed);
    };
    TableSpec b = spec(kTable, CoherenceMode::kBroadcast);
    b.on_message = [this, n](const engine::Heard& heard) {
      if (heard.all) return s_.oracle.reached_all(n);
      const auto it = s_.by_hash.find(heard.key_hash);
      if (it != s_.by_hash.end())
        s_.oracle.reached_version(n, it->second, heard.version, heard.dropped);
    };
    auto e = std::make_unique<Engine>(
        o, std::vector<TableSpec>{b, spec(kJobTable, CoherenceMode::kJob)});
    s_.nodes.push_back(std::move(e));
  }
  // The journal: node 1 records intents at the writer's edge, node 0 remembers what it applied at
  // the applier's edge (one group, one file, as gate H4 stages it); bound before node 0 starts.
  table::Minter minter(1023);
  s_.group = minter.mint("PRT").value();
  s_.journal = std::make_unique<engine::Journal>(
      harness::journal_options(dir.path(), s_.group->str(), 1022));
  s_.nodes[0]->use_journal(kJobTable, *s_.journal);
  for (int n = 0; n < kNodes; ++n) {
    if (auto ec = s_.nodes[static_cast<std::size_t>(n)]->start()) {
      throw std::runtime_error("node " + std::to_string(n) + " did not start: " + ec.message());
    }
  }
  // The names, and write 0 of each (the seed), told to the oracle as the referee does.
  for (std::size_t i = 0; i < kNames; ++i) {
    s_.names.push_back(std::string(s_.nodes[0]->mint(kKind).value().view()));
    s_.by_hash.emplace(table::hash_key(s_.names.back()), static_cast<std::uint32_t>(i));
    Engine& w = *s_.nodes[i % kNodes];
    const BrandedId v = w.mint(kKind).value();
    const table::IdBytes bytes = table::id_bytes(v);
    s_.oracle.begin_write(i, 0, &bytes, false);
    if (auto p = w.publish(kTable, s_.names.back(), "0", v); !p) {
      throw std::runtime_error("seeding failed: " + p.error().message());
    }
    s_.oracle.acked(i, 0);
    s_.history[i].ack_ns.push_back(now_ns());
  }
  for (std::size_t i = 0; i < kJobNames; ++i) {
    s_.job_names.push_back(std::string(s_.nodes[1]->mint(kKind).value().view()));
  }
  s_.intended.resize(kJobNames);
}

void Run::start_threads() {
  tallies_.resize(kNodes);
  for (int n = 0; n < kNodes; ++n) {
    tallies_[static_cast<std::size_t>(n)].node = n;
    threads_.emplace_back([this, n](std::stop_token st) { writer(st, n); });
    threads_.emplace_back([this, n](std::stop_token st) { reader(st, n); });
  }
  threads_.emplace_back([this](std::stop_token st) { job_writer(st); });
}

void Run::writer(std::stop_token stop, int node) {
  Engine& e = *s_.nodes[static_cast<std::size_t>(node)];
  std::mt19937_64 rng(config_.seed * 31 + static_cast<std::uint64_t>(node));
  while (!stop.stop_requested()) {
    if (s_.paused.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(2ms);
      continue;
    }
    s_.writing.fetch_add(1, std::memory_order_acq_rel);
    if (!s_.paused.load(std::memory_order_acquire)) {  // pairs with converge()'s pause
      const std::size_t i =
          static_cast<std::size_t>(node) +
          kNodes * std::uniform_int_distribution<std::size_t>(0, kNames / kNodes - 1)(rng);
      if (auto v = e.mint(kKind)) {
        const std::uint32_t seq = ++s_.last_seq[i];
        const table::IdBytes bytes = table::id_bytes(*v);
        s_.oracle.begin_write(i, seq, &bytes, false);
        if (e.publish(kTable, s_.names[i], std::to_string(seq), *v)) {
          s_.oracle.acked(i, seq);
          History& h = s_.history[i];
          {
            const std::lock_guard lock(h.mu);
            if (h.ack_ns.size() <= seq) h.ack_ns.resize(seq + 1, 0);
            h.ack_ns[seq] = now_ns();
          }
          h.acked.store(seq, std::memory_order_release);  // pairs with reader()'s acquire
          s_.writes.fetch_add(1, std::memory_order_relaxed);
        } else {
          s_.write_errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
    s_.writing.fetch_sub(1, std::memory_order_acq_rel);
    std::this_thread::sleep_for(kWritePause);
  }
}

void Run::job_writer(std::stop_token stop) {
  Engine& w = *s_.nodes[1];
  std::size_t next = 0;
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(kJobWritePause);
    const std::size_t i = next++ % kJobNames;
    auto v = w.mint(kKind);
    if (!v || !w.put(kJobTable, s_.job_names[i], "job", *v)) {
      s_.intent_errors.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    {
      const std::lock_guard lock(s_.intended_mu);
      s_.intended[i] = *v;  // before the record: an intent is never newer than this
    }
    s_.intents.fetch_add(1, std::memory_order_relaxed);
    // The journal's refusal (journal_io) or the enqueue's: counted alike.
    auto job = s_.journal->intend_and_enqueue(
        s_.job_names[i], *v, [this](const BrandedId& j, std::string_view n, const BrandedId& ver) {
          return enqueue(j, n, ver);
        });
    if (!job) s_.intent_errors.fetch_add(1, std::memory_order_relaxed);
  }
}

void Run::reader(std::stop_token stop, int node) {
  Engine& e = *s_.nodes[static_cast<std::size_t>(node)];
  referee::ReadTally& t = tallies_[static_cast<std::size_t>(node)];
  std::mt19937_64 rng(config_.seed * 37 + static_cast<std::uint64_t>(node));
  while (!stop.stop_requested()) {
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, kNames - 1)(rng);
    // The oracle's order (oracle.h): covered, then t_b, then the read; the newest acknowledged
    // write likewise before t_b, so a write it names was acknowledged before the read began.
    const std::uint32_t covered = s_.oracle.covered(node, i);
    const std::uint32_t acked = s_.history[i].acked.load(std::memory_order_acquire);
    const std::int64_t tb = now_ns();
    auto got = e.get(kTable, s_.names[i]);
    std::optional<std::uint32_t> seq;
    if (got) seq = seq_of(got->value);
    if (!seq) {
      if (t.errors++ == 0)
        t.first_error = got ? "a value that is no write's number" : got.error().message();
    } else {
      ++t.reads;
      if (*seq > s_.oracle.started(i)) {
        ++t.phantom;
      } else if (*seq < covered) {
        ++t.stale;
        std::int64_t& latest = t.stale_latest[(std::uint64_t{i} << 32) | *seq];
        latest = std::max(latest, tb);
      }
      if (*seq < acked) {  // older than a write acknowledged before the read began
        History& h = s_.history[i];
        std::int64_t since = 0;
        {
          const std::lock_guard lock(h.mu);
          for (std::uint32_t k = *seq + 1; k <= acked && k < h.ack_ns.size(); ++k) {
            if (h.ack_ns[k] != 0) {
              since = h.ack_ns[k];
              break;
            }
          }
        }
        if (since != 0 && tb > since) {
          raise_max(s_.window_ns[static_cast<std::size_t>(
                        s_.current_kind.load(std::memory_order_relaxed))],
                    tb - since);
        }
      }
    }
    std::this_thread::sleep_for(500us);
  }
}

std::vector<std::pair<int, std::size_t>> Run::converge(std::chrono::milliseconds bound,
                                                       Figures& fig, double& took_ms) {
  const auto t0 = Clock::now();
  s_.paused.store(true, std::memory_order_release);
  while (s_.writing.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(1ms);
  std::vector<std::pair<int, std::size_t>> off;
  for (;;) {
    off.clear();
    for (std::size_t i = 0; i < kNames; ++i) {
      const auto in_l2 = l2_seq(admin_.get(), s_.names[i]);
      if (in_l2 && *in_l2 < s_.history[i].acked.load(std::memory_order_acquire)) {
        ++fig.l2_regressions;  // a failed write landed after a newer acknowledged one
      }
      for (int n = 0; n < kNodes; ++n) {
        auto got = s_.nodes[static_cast<std::size_t>(n)]->get(kTable, s_.names[i]);
        if (!in_l2 || !got || seq_of(got->value) != in_l2) off.emplace_back(n, i);
      }
    }
    if (off.empty() || Clock::now() - t0 >= bound) break;
    std::this_thread::sleep_for(20ms);
  }
  took_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  s_.paused.store(false, std::memory_order_release);
  return off;
}

void Run::replay(Figures& fig) {
  auto r = s_.journal->replay([this](const BrandedId& j, std::string_view n, const BrandedId& v) {
    return enqueue(j, n, v);
  });
  if (r)
    s_.replayed.fetch_add(r->replayed, std::memory_order_relaxed);
  else
    ++fig.replay_errors;
}

std::uint64_t Run::intents_lost(std::chrono::milliseconds bound) {
  const auto t0 = Clock::now();
  std::uint64_t lost = 0;
  for (;;) {
    lost = 0;
    {
      const std::lock_guard lock(s_.intended_mu);
      for (std::size_t i = 0; i < kJobNames; ++i) {
        if (!s_.intended[i]) continue;
        const auto applied = s_.journal->last_applied(s_.job_names[i]);
        if (!applied || table::newer(*s_.intended[i], *applied)) ++lost;
      }
    }
    if (lost == 0 || Clock::now() - t0 >= bound) return lost;
    std::this_thread::sleep_for(50ms);
  }
}

void Run::schedule(Clock::time_point end, FaultInjector& injector, Figures& fig) {
  std::mt19937_64 rng(config_.seed ^ 0xC4A05ull);
  while (Clock::now() < end) {
    Fault f = injector.draw();
    const std::int64_t start = now_ns();
    s_.current_kind.store(static_cast<int>(f.kind), std::memory_order_relaxed);
    injector.apply(f);
    ++fig.injected[static_cast<std::size_t>(f.kind)];
    if (!f.applied) ++fig.not_applied;
    std::this_thread::sleep_for(f.hold);
    injector.heal_all();
    const std::int64_t healed = now_ns();
    const bool silencing = f.kind == FaultKind::kStall || f.kind == FaultKind::kHalfOpen ||
                           f.kind == FaultKind::kHalfOpenUp || f.kind == FaultKind::kTrickle ||
                           f.kind == FaultKind::kCap;
    const bool abrupt = f.kind == FaultKind::kClose || f.kind == FaultKind::kKillPubsub;
    if (abrupt) {  // every subscriber cut is back before the rows are compared (and timed)
      const auto back = [&] {
        for (int n = 0; n < kNodes; ++n) {
          if (f.node >= 0 && n != f.node) continue;
          if (s_.logs[static_cast<std::size_t>(n)].first(EventKind::kResubscribed, "sub", start) <
              0)
            return false;
        }
        return true;
      };
      for (const auto until = Clock::now() + 5s; !back() && Clock::now() < until;) {
        std::this_thread::sleep_for(2ms);
      }
    }
    double took = 0;
    const auto off = converge(kConvergeBound, fig, took);
    fig.converge_max_ms = std::max(fig.converge_max_ms, took);
    for (const auto& p : off) fig.late_rows.insert(p);
    replay(fig);

    // What the fault showed about detection (a silent connection noticed) and resubscribe.
    std::string seen;
    const auto ms = [](std::int64_t ns) { return static_cast<double>(ns) / 1e6; };
    // A silent connection's loss counts when told before the heal (the fault caused it); an
    // abrupt one's whenever it was told (a killed subscriber may be told after the kill returned).
    const std::int64_t settled = now_ns();
    for (int n = 0; n < kNodes; ++n) {
      if (f.node >= 0 && n != f.node) continue;
      const NodeLog& log = s_.logs[static_cast<std::size_t>(n)];
      const std::int64_t lost =
          log.first(EventKind::kLost, "sub", start, silencing ? healed + 1 : settled);
      if (lost < 0) continue;
      const std::int64_t back = log.first(EventKind::kResubscribed, "sub", lost);
      if (silencing) {
        fig.detect_max_ms = std::max(fig.detect_max_ms, ms(lost - start));
        double& by_kind = fig.detect_by_kind_ms[static_cast<std::size_t>(f.kind)];
        by_kind = std::max(by_kind, ms(lost - start));
        ++fig.detections;
        seen += " sub lost after " + std::to_string(static_cast<int>(ms(lost - start))) + " ms;";
      }
      if (abrupt && back > 0) {
        fig.resub_max_ms = std::max(fig.resub_max_ms, ms(back - lost));
        ++fig.resubscribes;
        seen += " resubscribed in " + std::to_string(static_cast<int>(ms(back - lost))) + " ms;";
      }
    }
    out_ << "  fault " << std::setw(4) << ++fig.faults << ' ' << std::setw(14) << std::left
         << to_string(f.kind) << std::right << " node "
         << (f.node < 0 ? std::string("*") : std::to_string(f.node)) << ": " << f.detail << " ->"
         << seen << " converged in " << static_cast<int>(took) << " ms"
         << (off.empty() ? "" : " (" + std::to_string(off.size()) + " rows NOT converged)") << '\n'
         << std::flush;  // a long run's progress, visible in a log file as it goes
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 600)(rng)));
  }
}

bool debug_allowed(const std::string& host, int port) {
  harness::Context c = harness::connect(host, port);
  harness::Reply r = harness::command(c.get(), "DEBUG SLEEP 0");
  return r && r->type == REDIS_REPLY_STATUS;
}

}  // namespace

int drill_chaos(const ChaosConfig& in, std::ostream& out) {
  ChaosConfig config = in;
  if (config.seconds < 10 || config.seconds > 86400) {
    out << "echostore drill: --chaos wants 10..86400 seconds, got " << config.seconds << '\n';
    return 2;
  }
  if (config.seed == 0) config.seed = std::random_device{}() | 1u;
  std::unique_ptr<testing::LocalServer> own;
  std::string host;
  int port = 0;
  Figures fig;
  try {
    if (config.server.empty()) {
      testing::LocalServerOptions o;
      o.extra_args = {"--enable-debug-command", "local"};  // DEBUG SLEEP, from loopback only
      own = std::make_unique<testing::LocalServer>(o);
      host = own->host();
      port = own->port();
    } else {
      const auto a = io::parse_address(config.server);
      if (!a) {
        out << "echostore drill: --server wants HOST:PORT, got '" << config.server << "'\n";
        return 2;
      }
      host = a->host;
      port = a->port;
    }
    harness::TempDir dir("echostore-chaos-");
    Run run(config, out, host, port);
    const bool debug = debug_allowed(host, port);
    out << "chaos: seed " << config.seed << " (replay: echostore drill --chaos " << config.seconds
        << " --seed " << config.seed << ") | " << config.seconds << " s | server " << host << ':'
        << port
        << (own ? " (redis-server " + own->version() + ", started by the drill)" : " (given)")
        << " | " << kNodes << " nodes, each behind its own fault proxy | heartbeat "
        << kHeartbeat.count() << " ms, call_timeout " << kCallTimeout.count() << " ms"
        << (debug ? "" : " | DEBUG refused by the server: debug_sleep not drawn") << '\n'
        << std::flush;
    run.stage_nodes(dir);
    std::vector<harness::FaultProxy*> proxies;
    for (auto& p : run.stage().proxies) proxies.push_back(p.get());
    FaultInjector injector(proxies, host, port, config.seed, debug);
    run.start_threads();
    run.schedule(Clock::now() + std::chrono::seconds(config.seconds), injector, fig);
    run.stop_threads();
    injector.heal_all();

    // The end: every fault healed, the writers stopped. Rows that missed a convergence bound get
    // one more; those still off are permanently stale. Then the journal's replay and coverage.
    double took = 0;
    fig.permanently_stale = run.converge(kConvergeBound, fig, took).size();
    fig.converge_max_ms = std::max(fig.converge_max_ms, took);
    run.replay(fig);
    fig.intents_lost = run.intents_lost(20s);
    Stage& s = run.stage();
    for (auto& e : s.nodes) {
      for (const auto& c : e->stats().connections) fig.reconnects += c.reconnects;
    }
    fig.judged = s.oracle.judge(run.tallies());
    for (const auto& t : run.tallies()) {
      fig.reads += t.reads;
      fig.read_errors += t.errors;
      fig.phantom += t.phantom;
      if (fig.first_read_error.empty()) fig.first_read_error = t.first_error;
    }
    // Relaxed: every thread that wrote these has joined (stop_threads), which orders them.
    const auto get = [](const auto& a) { return a.load(std::memory_order_relaxed); };
    for (std::size_t k = 0; k < s.window_ns.size(); ++k) {
      fig.window_ms[k] = static_cast<double>(get(s.window_ns[k])) / 1e6;
    }
    fig.writes = get(s.writes);
    fig.write_errors = get(s.write_errors);
    fig.intents = get(s.intents);
    fig.intent_errors = get(s.intent_errors);
    fig.replayed = get(s.replayed);
    fig.log_lines = get(s.log_lines);
    for (auto& e : s.nodes) e->stop();
  } catch (const std::exception& e) {
    out << "echostore drill --chaos: " << e.what() << '\n';
    return 1;
  }
  return print_report(out, fig) ? 0 : 1;
}

}  // namespace echo::cli::chaos
