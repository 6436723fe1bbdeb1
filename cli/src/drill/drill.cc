// SPDX-License-Identifier: MIT
// The drill runner: one block per gate, a one-line verdict with its figures, PASS n/n.
#include "drill/drill.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace echo::cli {
namespace {

std::vector<std::pair<int, AddGates>>& groups() {
  static std::vector<std::pair<int, AddGates>> g;  // function-local: no init-order hazard
  return g;
}

}  // namespace

GateGroup::GateGroup(int order, AddGates add) { groups().emplace_back(order, add); }

std::vector<Gate> registered_gates(bool cluster) {
  std::vector<std::pair<int, AddGates>> sorted;
  for (const auto& g : groups()) {
    if ((g.first >= kClusterGateOrder) == cluster) sorted.push_back(g);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Gate> gates;
  for (const auto& [order, add] : sorted) add(gates);
  return gates;
}

int run_drill(const std::vector<Gate>& gates, const DrillTarget& target, std::ostream& out) {
  int passed = 0;
  for (const Gate& gate : gates) {
    out << gate.id << ' ' << gate.title << '\n';
    GateRun run(out, gate.id);
    try {
      gate.run(run, target);
    } catch (const std::exception& e) {
      run.expect(false, std::string("gate threw: ") + e.what());
    }
    std::string figures;
    for (const auto& f : run.figures()) figures += (figures.empty() ? "" : "; ") + f;
    const bool ok = run.passed() && run.checks() > 0;
    if (run.checks() == 0) out << "  FAIL   the gate asserted nothing\n";
    out << gate.id << ' ' << gate.title << (ok ? " ok" : " FAILED") << " -- " << run.checks()
        << " checks" << (figures.empty() ? "" : " -- " + figures) << "\n\n";
    if (ok) ++passed;
  }
  out << (passed == static_cast<int>(gates.size()) ? "PASS " : "FAIL ") << passed << '/'
      << gates.size() << '\n';
  return static_cast<int>(gates.size()) - passed;
}

}  // namespace echo::cli
