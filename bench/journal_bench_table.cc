// SPDX-License-Identifier: MIT
// journal_bench's closing table (journal_bench.cc says what the bench measures): the goals'
// ratios from the figures every benchmark that ran left in g_figures.
#include "journal_bench.h"

#include <cstdio>
#include <string>

namespace journal_bench {

// ---- the closing table ----

namespace {

double fig(const std::string& k) {
  const auto it = g_figures.find(k);
  return it == g_figures.end() ? 0.0 : it->second;
}
const char* verdict(bool met) { return met ? "met" : "NOT met"; }

// A single pair against a plain commit: through the journal's VFS, SQLite's share, and FULL.
void print_single_pair() {
  const double plain = fig("plain"), pair = fig("pair");
  if (plain > 0 && pair > 0) {
    std::printf(
        "single pair (NORMAL, unpinned): %.1f us vs a plain WAL commit %.1f us = %.2fx (goal <= "
        "2x: %s)\n",
        pair, plain, pair / plain, verdict(pair <= 2 * plain));
  }
  const double vfs_d = fig("vfs_default"), vfs_1 = fig("vfs_one_write"), vfs_j = fig("vfs_journal");
  if (vfs_d > 0 && vfs_1 > 0 && vfs_j > 0) {
    std::printf(
        "a plain commit through the journal's VFS: %.1f us vs SQLite's default %.1f us = %.2fx "
        "(frames in one write alone: %.1f us = %.2fx; and the process's lock held: no fcntl) "
        "(alternating, medians)\n",
        vfs_j, vfs_d, vfs_j / vfs_d, vfs_1, vfs_1 / vfs_d);
  }
  const double wire = fig("wire");
  if (plain > 0 && wire > 0 && pair > 0) {
    // The two medians come from separate benchmark runs, so their difference is only as good as
    // the run's noise: a negative one says the journal's share is below it, not that it is < 0.
    std::printf(
        "of which SQLite on the journal's schema (the same BEGIN, mark, INSERT, COMMIT, "
        "no journal): %.1f us = %.2fx the plain commit; the journal's own share "
        "%+.1f us%s\n",
        wire, wire / plain, pair - wire, pair < wire ? " (below this run's noise)" : "");
  }
  const double plain_full = fig("plain_full"), pair_full = fig("pair_full");
  if (plain_full > 0 && pair_full > 0) {
    std::printf("single pair (FULL, unpinned):   %.1f us vs a plain WAL commit %.1f us = %.2fx\n",
                pair_full, plain_full, pair_full / plain_full);
  }
}

// Pairs amortized under writers, and the record's tail against a plain commit's.
void print_writers_and_tails() {
  const double plain = fig("plain");
  for (int w : {2, 4, 8}) {
    const double us = fig("pair_" + std::to_string(w));
    if (us <= 0) continue;
    std::printf(
        "amortized pair, %d writers (unpinned): %.1f us = %.2fx the plain commit (goal <= 10 us: "
        "%s)\n",
        w, us, plain > 0 ? us / plain : 0, verdict(us <= 10));
  }
  for (const char* key : {"tail_", "tail_bursts_"}) {
    const std::string k = key;
    if (fig(k + "n") <= 0) continue;
    std::printf(
        "record tail, a writer pausing 100 us%s (%.0f pairs): record+mark p50 / p99 / p99.9 / max "
        "%.1f / %.1f / %.0f / %.0f us vs a plain commit checkpointing inline as SQLite does "
        "%.1f / %.1f / %.0f / %.0f us (p99.9 %.2fx); the journal's checkpoints %.0f on its "
        "flusher, %.0f inline\n",
        k == "tail_" ? "" : ", an applier remembering 2,000 at once every 10 ms", fig(k + "n"),
        fig(k + "rec_p50"), fig(k + "rec_p99"), fig(k + "rec_p999"), fig(k + "rec_max"),
        fig(k + "plain_p50"), fig(k + "plain_p99"), fig(k + "plain_p999"), fig(k + "plain_max"),
        fig(k + "plain_p999") > 0 ? fig(k + "rec_p999") / fig(k + "plain_p999") : 0,
        fig(k + "checkpoints"), fig(k + "inline"));
  }
}

// The remembered lane against the bare one, per placement, with the record's floor.
void print_lanes() {
  for (const Placement& p : kPlacements) {
    const double bare = fig(std::string("bare_") + p.name), mem = fig(std::string("mem_") + p.name);
    if (bare <= 0 || mem <= 0) continue;
    std::printf(
        "lane median (%s): remembered %.0f us vs bare %.0f us = %.2fx (goal <= 1.3x: %s); the "
        "record's "
        "commit inside it %.0f us (median)\n",
        p.name, mem, bare, mem / bare, verdict(mem <= 1.3 * bare),
        fig(std::string("rec_") + p.name));
    const double bare_a = fig(std::string("bare_applied_") + p.name),
                 mem_a = fig(std::string("mem_applied_") + p.name);
    if (bare_a > 0 && mem_a > 0) {
      std::printf(
          "  send -> the receiver's apply (its own clock, no observer) (%s): remembered %.0f us vs "
          "bare %.0f us "
          "= %.2fx; remembered - bare = %.0f us\n",
          p.name, mem_a, bare_a, mem_a / bare_a, mem_a - bare_a);
    }
    const double cold = fig(std::string("plain_cold_") + p.name);
    if (cold > 0) {
      std::printf(
          "  the record's floor (%s): a plain WAL commit at the same point of the cycle %.0f us "
          "(the record "
          "%.2fx it); the lane's ratio with a record at that floor: %.2fx observed, %.2fx at the "
          "apply\n",
          p.name, cold, fig(std::string("rec_") + p.name) / cold, (bare + cold) / bare,
          bare_a > 0 ? (bare_a + cold) / bare_a : 0);
    }
  }
}

}  // namespace

void print_table() {
  std::printf("\njournal price (baselines in this run)\n");
  print_single_pair();
  print_writers_and_tails();
  print_lanes();
  std::printf("the original: 143 us per pair; remembered lane 524 us vs bare 148 us, 3.5x\n");
}

}  // namespace journal_bench
