// SPDX-License-Identifier: MIT
// The chaos drill's report (chaos_report.h): one line per figure, then each goal with its verdict.
#include "drill/chaos_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>

#include "drill/chaos_stage.h"

namespace echo::cli::chaos {

namespace {

std::string fixed(double v, int digits = 0) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// "kind n, ..." over the kinds of fault injected.
std::string injected_kinds(const Figures& f) {
  std::string kinds;
  for (int k = 0; k < kFaultKinds; ++k) {
    if (f.injected[static_cast<std::size_t>(k)] == 0) continue;
    kinds += (kinds.empty() ? "" : ", ") + std::string(to_string(static_cast<FaultKind>(k))) + ' ' +
             std::to_string(f.injected[static_cast<std::size_t>(k)]);
  }
  return kinds;
}

// The longest staleness window and the kind of fault it followed (kFaultKinds: before any), and
// "kind ms, ..." over every kind with a window.
struct Staleness {
  double longest = 0;
  int longest_kind = kFaultKinds;
  std::string windows;
};

Staleness staleness(const Figures& f) {
  Staleness st;
  for (int k = 0; k <= kFaultKinds; ++k) {
    const double w = f.window_ms[static_cast<std::size_t>(k)];
    if (w <= 0) continue;
    if (w > st.longest) {
      st.longest = w;
      st.longest_kind = k;
    }
    st.windows +=
        (st.windows.empty() ? "" : ", ") +
        std::string(k == kFaultKinds ? "before any fault" : to_string(static_cast<FaultKind>(k))) +
        ' ' + fixed(w, 1);
  }
  return st;
}

// The bound: the longest detection of a silent connection seen in this run (or, when no fault
// silenced one, the knobs' own: heartbeat + call_timeout), plus the longest resubscribe.
struct Bound {
  double detect = 0, bound = 0;
};

Bound staleness_bound(const Figures& f) {
  Bound b;
  b.detect =
      f.detections > 0 ? f.detect_max_ms : static_cast<double>((kHeartbeat + kCallTimeout).count());
  b.bound = b.detect + f.resub_max_ms;
  return b;
}

// "kind ms, ..." over the kinds whose fault a subscriber's loss was told after.
std::string detections_by_kind(const Figures& f) {
  std::string detections;
  for (int k = 0; k < kFaultKinds; ++k) {
    const double d = f.detect_by_kind_ms[static_cast<std::size_t>(k)];
    if (d > 0)
      detections += (detections.empty() ? "" : ", ") +
                    std::string(to_string(static_cast<FaultKind>(k))) + ' ' + fixed(d, 1);
  }
  return detections;
}

void print_figures(std::ostream& out, const Figures& f, const Staleness& st, const Bound& b) {
  const std::string kinds = injected_kinds(f);
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
  out << "  longest staleness       " << fixed(st.longest, 1) << " ms ("
      << (st.longest_kind == kFaultKinds ? "before any fault"
                                         : to_string(static_cast<FaultKind>(st.longest_kind)))
      << "); bound " << fixed(b.bound, 1) << " ms = detection " << fixed(b.detect, 1) << " ms ("
      << f.detections << " silent connections noticed) + resubscribe " << fixed(f.resub_max_ms, 1)
      << " ms (" << f.resubscribes << " measured)\n";
  out << "  staleness by fault      " << (st.windows.empty() ? "none" : st.windows) << " (ms)\n";
  const std::string detections = detections_by_kind(f);
  out << "  detection by fault      " << (detections.empty() ? "none" : detections)
      << " (ms, fault start -> the subscriber's loss told)\n";
  out << "  journal intents         " << f.intents << " recorded, " << f.intent_errors
      << " writes or enqueues answered an error, " << f.replayed << " replayed (" << f.replay_errors
      << " replays failed), " << f.intents_lost << " lost\n";
  out << "  engine log lines        " << f.log_lines << " (kept off the report)\n";
}

// Each goal with its verdict, then PASS or FAIL; true when every goal held.
bool print_goals(std::ostream& out, const Figures& f, const Staleness& st, const Bound& b) {
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
  goal(st.longest <= b.bound,
       "longest staleness " + fixed(st.longest, 1) + " ms <= bound " + fixed(b.bound, 1) + " ms");
  goal(f.faults > 0, "faults were injected (" + std::to_string(f.faults) + ")");
  out << (ok ? "PASS" : "FAIL") << " chaos\n";
  return ok;
}

}  // namespace

bool print_report(std::ostream& out, const Figures& f) {
  const Staleness st = staleness(f);
  const Bound b = staleness_bound(f);
  print_figures(out, f, st, b);
  return print_goals(out, f, st, b);
}

}  // namespace echo::cli::chaos
