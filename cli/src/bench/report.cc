// SPDX-License-Identifier: MIT
// `echostore bench`'s output: one Markdown table (each figure beside its same-run baseline and
// their ratio, so it pastes into the README as it is) and, with --json, the same figures with
// every round's value, the machine, the compiler, the commit and the thread placement.
#include <sys/utsname.h>

#include <echo/harness/machine.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "bench/bench.h"
#include "drill/floors.h"
#include "git_commit.h"

namespace echo::cli::bench {
double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  floors::Samples s{std::move(v)};
  s.sort();
  return s.median();
}

namespace {

std::string value(double v, const std::string& unit) {
  if (!std::isfinite(v)) return "n/a";
  if (unit == "us") return floors::fmt(v < 10 ? "%.3f us" : "%.1f us", v);
  if (unit == "% hits") return floors::fmt("%.2f %% hits", v);
  return floors::grouped(v) + ' ' + unit;
}

}  // namespace

std::string placement_of(const BenchConfig& c, const std::string& threads, bool with_server) {
  std::string out = threads + ": ";
  out += c.process_cpu < 0 ? "unpinned" : "on CPU " + std::to_string(c.process_cpu);
  if (with_server) {
    out += c.server_cpu < 0 ? "; redis-server unpinned"
                            : "; redis-server on CPU " + std::to_string(c.server_cpu);
  }
  return out;
}

double Row::ours_median() const { return median_of(ours_rounds); }
double Row::base_median() const { return median_of(base_rounds); }
double Row::ratio() const {
  return (ours_median() + ratio_offset) / (base_median() + ratio_offset);
}

void Progress::step(const std::string& what, int round, int rounds) {
  ++at_;
  err_ << "bench [" << at_ << '/' << total_ << "] " << what << ", round " << round + 1 << " of "
       << rounds << '\n'
       << std::flush;
}

RunInfo machine_info() {
  RunInfo info;
  info.commit = git_commit();
  info.version = ECHO_VERSION;
  info.compiler = harness::compiler();
  info.model = harness::cpu_model();
  info.cores = std::thread::hardware_concurrency();
  utsname u{};
  info.kernel = uname(&u) == 0 ? std::string(u.sysname) + ' ' + u.release : "unknown";
  return info;
}

void print_table(std::ostream& out, const RunInfo& info, const BenchConfig& c,
                 const std::vector<Row>& rows) {
  out << info.command << '\n'
      << "echostore bench | " << info.server << " | echostore " << info.version << " ("
      << info.commit << ") | " << info.compiler << " | " << info.cores << " cores, " << info.model
      << " | " << info.kernel << '\n';
  if (!info.peers.empty()) {
    out << "peers:";
    for (const auto& [name, version] : info.peers) out << ' ' << name << ' ' << version << ';';
    out << '\n';
  }
  out << "knobs: ring_capacity " << c.ring_capacity << ", max_batch " << c.max_batch << ", wait "
      << ring::to_string(c.wait) << " | medians of " << c.rounds << " rounds"
      << (c.quick ? " (--quick)" : "") << ", each row's contenders interleaved in every round | "
      << "placement " << c.placement << " | " << floors::fmt("%.0f", info.seconds) << " s\n\n"
      << "| row | ours | baseline (same run) | ours / baseline | better |\n"
      << "|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    std::string also;
    for (const auto& [name, figure] : r.also) {
      also += (also.empty() ? " (" : ", ") + name + ' ' + value(figure, r.unit);
    }
    if (!also.empty()) also += ')';
    out << "| " << r.what << ": " << r.ours << " vs " << r.baseline << also << " | "
        << value(r.ours_median(), r.unit) << " | " << value(r.base_median(), r.unit) << " | "
        << floors::fmt("%.2fx", r.ratio()) << " | " << (r.higher_better ? "higher" : "lower")
        << " |\n";
  }
}

bool write_json(const std::string& path, const RunInfo& info, const BenchConfig& c,
                const std::vector<Row>& rows) {
  using nlohmann::json;
  json j;
  j["command"] = info.command;
  j["version"] = info.version;
  j["commit"] = info.commit;
  j["compiler"] = info.compiler;
  j["server"] = info.server;
  j["seconds"] = info.seconds;
  j["machine"] = {{"cores", info.cores}, {"model", info.model}, {"kernel", info.kernel}};
  j["knobs"] = {{"ring_capacity", c.ring_capacity},
                {"max_batch", c.max_batch},
                {"wait", std::string(ring::to_string(c.wait))}};
  if (!info.peers.empty()) {
    json peers = json::object();
    for (const auto& [name, version] : info.peers) peers[name] = version;
    j["peers"] = std::move(peers);
  }
  j["rounds"] = c.rounds;
  j["quick"] = c.quick;
  j["statistic"] =
      "median of rounds; ratio = ours / baseline (each plus the row's ratio_offset, where given)";
  j["placement"] = {{"name", c.placement},
                    {"process_cpu", c.process_cpu},
                    {"server_cpu", c.server_cpu},
                    {"note", "-1 = unpinned (the scheduler's choice); each row names its threads"}};
  json out = json::array();
  for (const Row& r : rows) {
    // nlohmann writes a non-finite double as null, so a broken row cannot pass for a figure.
    json also = json::object();
    for (const auto& [name, figure] : r.also) also[name] = figure;
    out.push_back({{"id", r.id},
                   {"what", r.what},
                   {"ours", r.ours},
                   {"baseline", r.baseline},
                   {"unit", r.unit},
                   {"higher_better", r.higher_better},
                   {"ours_median", r.ours_median()},
                   {"baseline_median", r.base_median()},
                   {"ratio", r.ratio()},
                   {"ours_rounds", r.ours_rounds},
                   {"baseline_rounds", r.base_rounds},
                   {"placement", r.placement},
                   {"also", also}});
    if (r.ratio_offset != 0) out.back()["ratio_offset"] = r.ratio_offset;
    if (!r.beside.empty()) {
      json beside = json::object();
      for (const auto& [name, figure] : r.beside) beside[name] = figure;
      out.back()["beside"] = std::move(beside);
    }
  }
  j["rows"] = std::move(out);
  std::ofstream f(path);
  // The command line carries --json's path, which need not be UTF-8: replaced, not thrown.
  f << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  return static_cast<bool>(f);
}

}  // namespace echo::cli::bench
