// SPDX-License-Identifier: MIT
// lanes_bench's closing table: medians and ratios of every benchmark that ran, by placement.
#include "lanes_bench.h"

namespace lanes_bench {

// ---- the closing table ----

namespace {

// Percentile `p` of a benchmark's samples at a placement; 0 when it did not run there.
double pct(const std::string& bench, const char* place, double p) {
  const auto b = g_results.find(bench);
  if (b == g_results.end()) return 0.0;
  const auto s = b->second.find(place);
  return s == b->second.end() ? 0.0 : s->second.pct(p);
}
double median(const std::string& bench, const char* place) { return pct(bench, place, 0.5); }
double p99(const std::string& bench, const char* place) { return pct(bench, place, 0.99); }

// The lanes against their floor: one row per placement.
void print_lane_rows() {
  std::printf("\n%-10s | %-22s | %-22s | %-22s | %-22s | %-9s | %-9s | %-9s\n", "placement",
              "floor p50/p99 us", "broadcast (PUBLISH)", "broadcast (Engine)", "job lane",
              "bc/floor", "job/bc(E)", "job/bc(P)");
  for (const Placement& p : kPlacements) {
    const double f = median("floor", p.name), b = median("broadcast", p.name),
                 be = median("broadcast_engine", p.name), j = median("job", p.name);
    if (f == 0 && b == 0 && j == 0) continue;
    std::printf(
        "%-10s | %9.1f / %-10.1f | %9.1f / %-10.1f | %9.1f / %-10.1f | %9.1f / %-10.1f | %8.2fx | "
        "%8.2fx | %8.2fx\n",
        p.name, f, p99("floor", p.name), b, p99("broadcast", p.name), be,
        p99("broadcast_engine", p.name), j, p99("job", p.name), f > 0 ? b / f : 0,
        be > 0 ? j / be : 0, b > 0 ? j / b : 0);
  }
}

// The script's share (round trips, and the server's own time) and the job lane's floor with it.
void print_server_hop() {
  for (const Placement& p : kPlacements) {
    const double pub = median("publish_rtt", p.name), fan = median("fanout_rtt", p.name),
                 be = median("broadcast_engine", p.name), j = median("job", p.name);
    if (fan == 0) continue;
    const double floor = be + (fan - pub);
    std::printf(
        "%-10s | server hop: member_enqueue hand-off round trip %.1f us vs PUBLISH %.1f us (+%.1f "
        "us); "
        "job-lane floor with this script = bc(E) + %.1f = %.1f us (%.2fx bc(E)); job lane %.2fx "
        "that floor\n",
        p.name, fan, pub, fan - pub, fan - pub, floor, be > 0 ? floor / be : 0,
        floor > 0 ? j / floor : 0);
    const double se = median("server_evalsha", p.name), sp = median("server_publish", p.name);
    if (se > 0 && sp > 0) {
      std::printf(
          "%-10s | server time (INFO commandstats, no wakes in it): member_enqueue %.1f us vs "
          "PUBLISH %.1f us "
          "(+%.1f us); bc(E) + that = %.1f us (%.2fx bc(E))\n",
          p.name, se, sp, se - sp, be + se - sp, be > 0 ? (be + se - sp) / be : 0);
    }
  }
}

// Send -> the writer's apply, and the plain-client floors of both lanes.
void print_applies_and_floors() {
  for (const Placement& p : kPlacements) {
    const double be = median("broadcast_engine_applied", p.name), j = median("job_applied", p.name);
    if (be == 0 || j == 0) continue;
    std::printf(
        "%-10s | send -> the writer's apply (its own clock, no observer): broadcast (Engine) %.1f "
        "us, "
        "job lane %.1f us: %.2fx\n",
        p.name, be, j, j / be);
  }
  for (const Placement& p : kPlacements) {
    const double f = median("floor", p.name), jf = median("job_floor", p.name);
    if (f == 0 || jf == 0) continue;
    std::printf(
        "%-10s | plain-client floors: PUBLISH -> message %.1f us; member_enqueue -> the parked "
        "BLMPOP's "
        "hand-off %.1f us: %.2fx (what the script and the unblock cost the server, no engine in "
        "it; "
        "server time: the script %.1f us, the BLMPOP's service %.1f us)\n",
        p.name, f, jf, jf / f, median("handoff_server_evalsha", p.name),
        median("handoff_server_blmpop", p.name));
  }
}

// BM_Lanes_Alternating: both lanes (and the job lane without its lead) in one loop.
void print_alternating() {
  for (const Placement& p : kPlacements) {
    const double b = median("alt_bc", p.name), j = median("alt_job", p.name);
    const double ba = median("alt_bc_applied", p.name), ja = median("alt_job_applied", p.name);
    if (b == 0 || j == 0) continue;
    const double bd = median("alt_bc_decoded", p.name), jd = median("alt_job_decoded", p.name);
    std::printf(
        "%-10s | alternating, message by message: broadcast (Engine) %.1f us, job lane %.1f us: "
        "%.2fx; "
        "at the writer's apply %.1f vs %.1f us: %.2fx; at the receiving io thread's decode %.1f vs "
        "%.1f us: %.2fx\n",
        p.name, b, j, j / b, ba, ja, ba > 0 ? ja / ba : 0, bd, jd, bd > 0 ? jd / bd : 0);
    const double n = median("alt_bare", p.name), na = median("alt_bare_applied", p.name),
                 nd = median("alt_bare_decoded", p.name);
    if (n > 0) {
      std::printf(
          "%-10s | the same loop, the job lane without its lead (job_lead off): %.1f us: %.2fx bc; "
          "at the apply %.1f us: %.2fx bc; at the decode %.1f us: %.2fx bc; with the lead / "
          "without: "
          "sender %.2fx, apply %.2fx\n",
          p.name, n, n / b, na, ba > 0 ? na / ba : 0, nd, bd > 0 ? nd / bd : 0, j / n,
          na > 0 ? ja / na : 0);
    }
  }
}

// The job lane's throughput, and an L1 hit against L2 reads.
void print_throughput_and_reads() {
  for (const Placement& p : kPlacements) {
    const double t1 = median("throughput_1", p.name), t2 = median("throughput_2", p.name);
    if (t1 == 0 && t2 == 0) continue;
    std::printf(
        "%-10s | job lane throughput: 1 consumer %.0f jobs/s; 2 consumers %.0f jobs/s each (%.0f "
        "applies/s)\n",
        p.name, t1, t2, 2 * t2);
  }
  for (const Placement& p : kPlacements) {
    const double hit = median("l1_hit", p.name), get = median("l2_get", p.name),
                 miss = median("engine_l2", p.name);
    if (hit == 0) continue;
    std::printf(
        "%-10s | L1 hit %.0f ns vs plain L2 GET %.1f us (%.0fx) and an engine read from L2 %.1f us "
        "(the original: 762 ns vs 31 us, 40x)\n",
        p.name, hit * 1000, get, hit > 0 ? get / hit : 0, miss);
  }
}

// The broadcast lane over TLS against plain, and on epoll against the default backend.
void print_tls_and_backends() {
  for (const Placement& p : kPlacements) {
    const double plain = median("broadcast_engine", p.name),
                 tls = median("broadcast_engine_tls", p.name);
    if (plain == 0 || tls == 0) continue;
    std::printf(
        "%-10s | broadcast (Engine) over TLS %.1f / %.1f us (p50/p99) vs plain %.1f / %.1f us: "
        "tls/plain %.2fx (goal <= 1.10x)\n",
        p.name, tls, p99("broadcast_engine_tls", p.name), plain, p99("broadcast_engine", p.name),
        tls / plain);
  }
  for (const Placement& p : kPlacements) {
    for (const std::string key : {"broadcast", "broadcast_engine"}) {
      const std::string epoll = key + "_epoll";
      const double u = median(key, p.name), e = median(epoll, p.name);
      const double ua = median(key + "_applied", p.name), ea = median(epoll + "_applied", p.name);
      if (u == 0 || e == 0) continue;
      std::printf(
          "%-10s | %s on epoll %.1f us (p99 %.1f) vs on %s %.1f us (p99 %.1f): %.2fx; at the "
          "writer's apply %.1f vs %.1f us: %.2fx\n",
          p.name, key == "broadcast" ? "bc(P)" : "bc(E)", e, p99(epoll, p.name),
          std::string(echo::io::to_string(g_backend_of[key])).c_str(), u, p99(key, p.name), e / u,
          ea, ua, ua > 0 ? ea / ua : 0);
    }
  }
}

}  // namespace

void print_table() {
  print_lane_rows();
  print_server_hop();
  print_applies_and_floors();
  print_alternating();
  print_throughput_and_reads();
  print_tls_and_backends();
  std::printf(
      "goals: broadcast lane median <= 1.15x the floor; job lane median <= 1.3x the "
      "broadcast lane's. bc(E): sent by Engine::broadcast, the same verb shape as "
      "Engine::enqueue; bc(P): sent by a plain hiredis PUBLISH.\n");
}

}  // namespace lanes_bench
