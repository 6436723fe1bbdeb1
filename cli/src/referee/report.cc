// SPDX-License-Identifier: MIT
// `echostore referee`'s output: the verdicts (what makes the run fail), one Markdown table with
// a row per contestant (it pastes into the README as it is), the oracle's definition under it,
// and with --json the same figures with the workload and the machine.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "drill/floors.h"
#include "referee/referee.h"

namespace echo::cli::referee {
namespace {

constexpr const char* kOracle =
    "A read at node n that began at t_b and returned write r of name k is stale if a write s > r "
    "of k had its message reach n (applied by n's cache) before t_b. A versioned message "
    "(broadcast, job) covers the writes of k up to its version; an unversioned one (tracking, "
    "classic tracking, deletion-synchronised) covers every write of k acknowledged before it "
    "reached n. permanently_stale: rows, over all nodes, that hold an older write than L2 once "
    "the writers stopped, every late message was sent and the quiet passed. max_stale_ms: the "
    "longest time from the first message that made a read stale to that read. p50_us/p99_us: "
    "write start -> the node's message applied, where it dropped a row; writes whose message "
    "the late mailer held back are left out.";

const Figures* find(const std::vector<Figures>& figures, std::string_view name) {
  for (const Figures& f : figures) {
    if (f.name == name && f.failure.empty()) return &f;
  }
  return nullptr;
}

// echostore_tracking's p50 over echostore_broadcast's (the goal: at most 1.1x); NaN when
// either did not run or measured nothing.
double tracking_over_broadcast(const std::vector<Figures>& figures) {
  const Figures* t = find(figures, "echostore_tracking");
  const Figures* b = find(figures, "echostore_broadcast");
  if (t == nullptr || b == nullptr || t->judged.latency_samples == 0 ||
      b->judged.latency_samples == 0 || b->judged.p50_us <= 0) {
    return std::nan("");
  }
  return t->judged.p50_us / b->judged.p50_us;
}

std::string workload(const RefereeConfig& c) {
  return std::to_string(c.names) + " names, Zipf(" + floors::fmt("%.2f", c.zipf) + ") | " +
         std::to_string(c.writers) + " writers, " + floors::grouped(c.writes_per_s) +
         " writes/s paced | " + std::to_string(c.nodes) + " nodes x " +
         std::to_string(c.readers_per_node) + " readers, bursts of " +
         std::to_string(c.read_burst) + " reads with " + std::to_string(c.read_pause.count()) +
         " us pauses | fill hold " + floors::fmt("%.1f", c.fill_hold.count() / 1e3) + " ms | " +
         floors::fmt("%.0f", c.late_fraction * 100) + "% of the messages the referee sends held " +
         floors::fmt("%.0f", c.late_min.count() / 1e3) + ".." +
         floors::fmt("%.0f", c.late_max.count() / 1e3) + " ms by the late mailer | " +
         std::to_string(c.seconds) + " s per contestant, " + std::to_string(c.quiet.count()) +
         " ms quiet" + (c.quick ? " (--quick)" : "");
}

// What a contestant is: one of EchoStore's lanes, a textbook design (built as the documentation
// draws it, fills unguarded), or a real client run as its README draws it.
std::string design_of(const Figures& f) {
  if (f.echostore) return "EchoStore lane";
  if (f.name == "node_redis_csc") return "real client";
  return "textbook design";
}

}  // namespace

std::vector<std::string> verdicts(const std::vector<Figures>& figures) {
  std::vector<std::string> failed;
  int classic = 0, classic_saw_race = 0;
  for (const Figures& f : figures) {
    if (!f.failure.empty()) {
      failed.push_back(f.name + " did not run: " + f.failure);
      continue;
    }
    if (f.echostore && (f.judged.stale_reads > 0 || f.permanently_stale > 0)) {
      failed.push_back(f.name + ": " + std::to_string(f.judged.stale_reads) + " stale reads, " +
                       std::to_string(f.permanently_stale) +
                       " permanently stale rows (EchoStore's lanes must show 0 and 0)");
    }
    if (design_of(f) == "textbook design") {
      ++classic;
      if (f.permanently_stale > 0) ++classic_saw_race;
    }
  }
  if (classic > 0 && classic_saw_race == 0) {
    failed.push_back(
        "no classic contestant was left with a permanently stale row: the referee did not show "
        "that it can see the race it measures (a longer --seconds makes it likelier)");
  }
  return failed;
}

void print_results(std::ostream& out, const RunHeader& header, const RefereeConfig& config,
                   const std::vector<Figures>& figures, const std::vector<std::string>& failed) {
  out << header.command << '\n'
      << "echostore referee | " << header.server << " | " << header.machine << '\n'
      << "workload: " << workload(config) << "\n\n"
      << "| contestant | reads | stale_reads | permanently_stale | max_stale_ms | p50_us | "
         "p99_us | reads/s | writes | read errors |\n"
      << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Figures& f : figures) {
    if (!f.failure.empty()) {
      out << "| " << f.name << " | did not run | | | | | | | | |\n";
      continue;
    }
    const Judgement& j = f.judged;
    const auto us = [&](double v) {
      return j.latency_samples == 0 ? std::string("n/a") : floors::fmt("%.0f", v);
    };
    out << "| " << f.name << " | " << floors::grouped(static_cast<double>(f.reads)) << " | "
        << j.stale_reads << " | " << f.permanently_stale << " | "
        << floors::fmt("%.1f", j.max_stale_ms) << " | " << us(j.p50_us) << " | " << us(j.p99_us)
        << " | " << floors::grouped(f.reads_per_s()) << " | "
        << floors::grouped(static_cast<double>(f.writes)) << " | " << f.read_errors << " |\n";
  }
  out << '\n';
  const double ratio = tracking_over_broadcast(figures);
  if (std::isfinite(ratio)) {
    out << "echostore_tracking p50 / echostore_broadcast p50: " << floors::fmt("%.2fx", ratio)
        << (ratio <= 1.1 ? " (goal: at most 1.1x, met)" : " (goal: at most 1.1x, missed)") << '\n';
  }
  for (const Figures& f : figures) {
    if (f.failure.empty() && f.read_errors > 0) {
      out << f.name << ": " << f.read_errors
          << " reads answered an error, first: " << f.first_read_error << '\n';
    }
    if (f.failure.empty() && f.judged.unmatched > 0) {
      out << f.name << ": " << f.judged.unmatched
          << " messages came before the write matched to them (left out of p50/p99)\n";
    }
  }
  for (const Figures& f : figures) {
    if (design_of(f) == "real client") {
      out << "classic_tracking and deletion_synchronised are textbook designs (fills unguarded, as "
             "their documentation draws them); "
          << f.name
          << " is a real client (node-redis's client-side cache, fills guarded; the fill hold "
             "and the late mailer cannot reach it from outside)\n";
    }
  }
  out << "oracle: " << kOracle << "\n\n";
  for (const std::string& why : failed) out << "FAIL " << why << '\n';
  if (failed.empty()) {
    out << "PASS EchoStore's lanes: 0 stale reads, 0 permanently stale rows; the textbook "
           "contestants left stale rows the referee saw\n";
  }
}

bool write_json(const std::string& path, const RunHeader& header, const RefereeConfig& config,
                const std::vector<Figures>& figures, const std::vector<std::string>& failed) {
  using nlohmann::json;
  json contestants = json::array();
  for (const Figures& f : figures) {
    const Judgement& j = f.judged;
    json c = {{"name", f.name}, {"design", design_of(f)}, {"ran", f.failure.empty()}};
    if (!f.failure.empty()) {
      c["failure"] = f.failure;
    } else {
      c.update({{"reads", f.reads},
                {"stale_reads", j.stale_reads},
                {"permanently_stale", f.permanently_stale},
                {"max_stale_ms", j.max_stale_ms},
                {"p50_us", j.p50_us},
                {"p99_us", j.p99_us},
                {"latency_samples", j.latency_samples},
                {"reads_per_s", f.reads_per_s()},
                {"writes", f.writes},
                {"writes_per_s", f.writes_per_s()},
                {"late_messages", f.mailed},
                {"read_errors", f.read_errors},
                {"seconds", f.seconds}});
    }
    contestants.push_back(std::move(c));
  }
  // nlohmann writes a non-finite double as null: no ratio when a lane did not run.
  json j = {{"contestants", std::move(contestants)},
            {"seconds", config.seconds},
            {"server", header.server},
            {"command", header.command},
            {"machine", header.machine},
            {"workload", workload(config)},
            {"oracle", kOracle},
            {"tracking_over_broadcast_p50", tracking_over_broadcast(figures)},
            {"passed", failed.empty()},
            {"failures", failed}};
  std::ofstream file(path);
  // The command line carries --json's path, which need not be UTF-8: replaced, not thrown.
  file << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  return static_cast<bool>(file);
}

}  // namespace echo::cli::referee
