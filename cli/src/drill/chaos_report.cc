// SPDX-License-Identifier: MIT
// The chaos drill's report (chaos_report.h): one line per figure, then each goal with its verdict.
#include "drill/chaos_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "drill/chaos_stage.h"

namespace echo::cli::chaos {

bool print_report(std::ostream& out, const Figures& f) {
  const auto fixed = [](double v, int digits = 0) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(digits) << v;
    return s.str();
  };
  std::string kinds;
  for (int k = 0; k < kFaultKinds; ++k) {
    if (f.injected[static_cast<std::size_t>(k)] == 0) continue;
    kinds += (kinds.empty() ? "" : ", ") + std::string(to_string(static_cast<FaultKind>(k))) + ' ' +
             std::to_string(f.injected[static_cast<std::size_t>(k)]);
  }
  double longest = 0;
  int longest_kind = kFaultKinds;
  std::string windows;
  for (int k = 0; k <= kFaultKinds; ++k) {
    const double w = f.window_ms[static_cast<std::size_t>(k)];
    if (w <= 0) continue;
    if (w > longest) {
      longest = w;
      longest_kind = k;
    }
    windows +=
        (windows.empty() ? "" : ", ") +
        std::string(k == kFaultKinds ? "before any fault" : to_string(static_cast<FaultKind>(k))) +
        ' ' + fixed(w, 1);
  }
  // The bound: the longest detection of a silent connection seen in this run (or, when no fault
  // silenced one, the knobs' own: heartbeat + call_timeout), plus the longest resubscribe.
  const double detect =
      f.detections > 0 ? f.detect_max_ms : static_cast<double>((kHeartbeat + kCallTimeout).count());
  const double bound = detect + f.resub_max_ms;

  out << "\nchaos report\n";
  out << "  faults injected         " << f.faults << " (" << kinds << ")"
      << (f.not_applied ? "; " + std::to_string(f.not_applied) + " refused by the server" : "")
      << '\n';
  out << "  reconnects              " << f.reconnects << " (every connection of the three nodes)\n";
  out << "  writes                  " << f.writes << " acknowledged, " << f.write_errors
      << " answered an error (a fault in the way)\n";
  out << "  reads                   " << f.reads << " (" << f.read_errors << " answered an error"
      << (f.first_read_error.empty() ? "" : ", first: " + f.first_read_error) << ")\n";
  out << "  stale reads             " << f.judged.stale_reads
      << " (the referee's definition: a read that began after a newer write's message was applied "
         "at its node)\n";
  out << "  phantom reads           " << f.phantom << " (a write never begun)\n";
  out << "  rows late to converge   " << f.late_rows.size() << " (node, name) pairs past "
      << std::chrono::duration_cast<std::chrono::milliseconds>(kConvergeBound).count()
      << " ms after some heal; longest convergence " << fixed(f.converge_max_ms) << " ms\n";
  out << "  permanently stale rows  " << f.permanently_stale << '\n';
  out << "  writes lost in L2       " << f.l2_regressions
      << " (L2 found older than an acknowledged write)\n";
  out << "  longest staleness       " << fixed(longest, 1) << " ms ("
      << (longest_kind == kFaultKinds ? "before any fault"
                                      : to_string(static_cast<FaultKind>(longest_kind)))
      << "); bound " << fixed(bound, 1) << " ms = detection " << fixed(detect, 1) << " ms ("
      << f.detections << " silent connections noticed) + resubscribe " << fixed(f.resub_max_ms, 1)
      << " ms (" << f.resubscribes << " measured)\n";
  out << "  staleness by fault      " << (windows.empty() ? "none" : windows) << " (ms)\n";
  std::string detections;
  for (int k = 0; k < kFaultKinds; ++k) {
    const double d = f.detect_by_kind_ms[static_cast<std::size_t>(k)];
    if (d > 0)
      detections += (detections.empty() ? "" : ", ") +
                    std::string(to_string(static_cast<FaultKind>(k))) + ' ' + fixed(d, 1);
  }
  out << "  detection by fault      " << (detections.empty() ? "none" : detections)
      << " (ms, fault start -> the subscriber's loss told)\n";
  out << "  journal intents         " << f.intents << " recorded, " << f.intent_errors
      << " writes or enqueues answered an error, " << f.replayed << " replayed (" << f.replay_errors
      << " replays failed), " << f.intents_lost << " lost\n";
  out << "  engine log lines        " << f.log_lines << " (kept off the report)\n";

  bool ok = true;
  const auto goal = [&](bool held, const std::string& what) {
    out << "  goal " << (held ? "ok    " : "FAILED") << ' ' << what << '\n';
    ok = ok && held;
  };
  out << '\n';
  goal(f.phantom == 0, "0 crashes or phantom reads");
  goal(f.judged.stale_reads == 0, "0 stale reads (" + std::to_string(f.judged.stale_reads) + ")");
  goal(f.permanently_stale == 0,
       "0 permanently stale rows (" + std::to_string(f.permanently_stale) + ")");
  goal(f.l2_regressions == 0, "0 writes lost in L2 (" + std::to_string(f.l2_regressions) + ")");
  goal(f.intents_lost == 0, "0 journal intents lost (" + std::to_string(f.intents_lost) + ")");
  goal(longest <= bound,
       "longest staleness " + fixed(longest, 1) + " ms <= bound " + fixed(bound, 1) + " ms");
  goal(f.faults > 0, "faults were injected (" + std::to_string(f.faults) + ")");
  out << (ok ? "PASS" : "FAIL") << " chaos\n";
  return ok;
}

}  // namespace echo::cli::chaos
