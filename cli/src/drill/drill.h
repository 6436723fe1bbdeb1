// SPDX-License-Identifier: MIT
// The drill: the project's own record. Each gate states what it stages, derives its expected
// band from floors measured in the same run, asserts, and prints its figure; the run ends with
// `PASS n/n` and exits non-zero on any failure.
#pragma once

#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <echo/io/tls_options.h>

namespace echo::testing {
class LocalCluster;
}

namespace echo::cli {

// Where the drill's server lives (one it started itself, or --server).
struct DrillTarget {
  std::string host;
  int port = 0;
  // drill --cluster: the seed list, and the cluster the drill started (its failover gate kills
  // a master of it). Empty / null for the single-server gates.
  std::string cluster_seeds;
  testing::LocalCluster* cluster = nullptr;
  // The server's TLS listener (tls_port > 0) and how to reach it: bench's tls_vs_plain row.
  int tls_port = 0;
  io::TlsOptions tls;
};

// One gate's run: its narration and its assertions.
class GateRun {
 public:
  GateRun(std::ostream& out, std::string id) : out_(out), id_(std::move(id)) {}

  // What the gate sets up, and the band it derives before it measures.
  void stage(const std::string& text) { out_ << "  stage  " << text << '\n'; }
  void derive(const std::string& text) { out_ << "  derive " << text << '\n'; }
  // One assertion; a failure is printed at once and fails the gate.
  bool expect(bool ok, const std::string& claim) {
    ++checks_;
    if (!ok) {
      failures_.push_back(claim);
      out_ << "  FAIL   " << claim << '\n';
    }
    return ok;
  }
  // The figure the gate reports.
  void figure(const std::string& text) { figures_.push_back(text); }

  bool passed() const { return failures_.empty(); }
  int checks() const { return checks_; }
  const std::vector<std::string>& figures() const { return figures_; }
  std::ostream& out() { return out_; }

 private:
  std::ostream& out_;
  std::string id_;
  int checks_ = 0;
  std::vector<std::string> failures_;
  std::vector<std::string> figures_;
};

struct Gate {
  std::string id;     // "F1"
  std::string title;  // "surface"
  std::function<void(GateRun&, const DrillTarget&)> run;
};

// Gate groups register themselves, one file per group, with an order key (the order of
// docs/wire.md, "The gates": 41xx = E gates, 42xx = F, 43xx = G, 44xx = H; ties keep link order;
// 9xxx = the cluster gates, which only `drill --cluster` runs). Usage, at namespace scope
// in the group's file:   static const GateGroup kGroup{4210, add_my_gates};
using AddGates = void (*)(std::vector<Gate>&);
struct GateGroup {
  GateGroup(int order, AddGates add);
};

inline constexpr int kClusterGateOrder = 9000;

// Every registered gate, in order: the single-server ones, or with `cluster` the cluster ones.
std::vector<Gate> registered_gates(bool cluster = false);

// `echostore drill --cluster`: starts a local cluster (3 masters, 3 replicas), prints the header
// and runs the cluster gates against it. The process's exit code.
int drill_cluster(std::ostream& out);

// Runs every gate against `target`, printing to `out`; returns the number of failed gates.
int run_drill(const std::vector<Gate>& gates, const DrillTarget& target, std::ostream& out);

}  // namespace echo::cli
