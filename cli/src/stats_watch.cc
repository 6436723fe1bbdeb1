// SPDX-License-Identifier: MIT
// The --watch view's arithmetic and layout (stats_watch.h). Read from the published JSON, not
// from the Prometheus text, so it sees each node's raw counters and histogram buckets.
#include "stats_watch.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

namespace echo::cli {
namespace {

using json = nlohmann::json;

std::uint64_t u64(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

std::string duration_text(std::uint64_t ns) {
  char buf[32];
  if (ns == 0) return "-";
  if (ns < 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.0fus", static_cast<double>(ns) / 1e3);
  } else if (ns < 1'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.1fms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ns) / 1e9);
  }
  return buf;
}

}  // namespace

std::map<std::string, TableHeadline> headlines(const std::vector<std::string>& snapshots) {
  std::map<std::string, TableHeadline> out;
  std::map<std::string, std::vector<std::uint64_t>> lag;  // merged buckets per table
  for (const std::string& text : snapshots) {
    const json s = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!s.is_object() || !s.contains("tables")) continue;
    std::uint64_t up = 0, down = 0;
    for (const json& c : s.value("connections", json::array())) {
      (c.value("status", "") == "ready" ? up : down) += 1;
    }
    for (const json& t : s["tables"]) {
      TableHeadline& h = out[t.value("name", "?")];
      ++h.nodes;
      const json& l1 = t.value("l1", json::object());
      h.rows += u64(l1, "size");
      h.hits += u64(l1, "hits");
      h.misses += u64(l1, "misses");
      for (const json& r : t.value("rings", json::array())) {
        h.dropped += u64(r, "dropped");
        h.occupancy += u64(r, "occupancy");
        h.capacity += u64(r, "capacity");
      }
      auto& buckets = lag[t.value("name", "?")];
      const json& w = t.value("writer", json::object());
      const json& hist = w.value("lag_ns_histogram", json::array());
      if (buckets.size() < hist.size()) buckets.resize(hist.size());
      for (std::size_t k = 0; k < hist.size(); ++k) {
        if (hist[k].is_number_unsigned()) buckets[k] += hist[k].get<std::uint64_t>();
      }
      // A node's connections serve all its tables: each table's row shows its nodes' links.
      h.conns_up += up;
      h.conns_down += down;
    }
  }
  for (auto& [name, buckets] : lag) {
    std::uint64_t total = 0;
    for (auto b : buckets) total += b;
    if (total == 0) continue;
    // The first bucket whose cumulative count reaches 99%: its upper bound, 2^(k+1) ns.
    const std::uint64_t want = total - total / 100;
    std::uint64_t seen = 0;
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      seen += buckets[k];
      if (seen >= want) {
        out[name].lag_p99_ns = std::uint64_t{1} << std::min<std::size_t>(k + 1, 62);
        break;
      }
    }
  }
  return out;
}

std::string render_screen(const std::string& where, std::chrono::milliseconds period,
                          const std::map<std::string, TableHeadline>& now,
                          const std::map<std::string, TableHeadline>* before,
                          std::chrono::duration<double> elapsed) {
  std::string out = "\x1b[H\x1b[2J";  // home, clear: one screen, redrawn
  char line[256];
  const std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&t));
  std::snprintf(line, sizeof line, "echostore stats  %s  %s  every %.1fs (Ctrl-C ends)\n\n",
                where.c_str(), when, static_cast<double>(period.count()) / 1000.0);
  out += line;
  std::snprintf(line, sizeof line, "%-24s %5s %10s %7s %9s %15s %9s %9s\n", "TABLE", "NODES",
                "ROWS", "HIT%", "DROPS/S", "RING", "LAG p99", "CONN u/d");
  out += line;
  for (const auto& [name, h] : now) {
    const TableHeadline* prev = nullptr;
    if (before != nullptr) {
      const auto it = before->find(name);
      if (it != before->end()) prev = &it->second;
    }
    // Between refreshes when there was one (a counter that went back, a node gone: since start).
    std::uint64_t hits = h.hits, misses = h.misses;
    if (prev != nullptr && h.hits >= prev->hits && h.misses >= prev->misses) {
      hits -= prev->hits;
      misses -= prev->misses;
    }
    char ratio[16] = "-";
    if (hits + misses > 0) {
      std::snprintf(ratio, sizeof ratio, "%.1f",
                    100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses));
    }
    char drops[24] = "-";
    if (prev != nullptr && elapsed.count() > 0 && h.dropped >= prev->dropped) {
      std::snprintf(drops, sizeof drops, "%.1f",
                    static_cast<double>(h.dropped - prev->dropped) / elapsed.count());
    }
    char ring[32] = "-";
    if (h.capacity > 0) {
      std::snprintf(ring, sizeof ring, "%llu/%llu", static_cast<unsigned long long>(h.occupancy),
                    static_cast<unsigned long long>(h.capacity));
    }
    char conns[24];
    std::snprintf(conns, sizeof conns, "%llu/%llu", static_cast<unsigned long long>(h.conns_up),
                  static_cast<unsigned long long>(h.conns_down));
    std::snprintf(line, sizeof line, "%-24.24s %5zu %10llu %7s %9s %15s %9s %9s\n", name.c_str(),
                  h.nodes, static_cast<unsigned long long>(h.rows), ratio, drops, ring,
                  duration_text(h.lag_p99_ns).c_str(), conns);
    out += line;
  }
  if (now.empty()) out += "(no node publishes these tables: EngineOptions::stats_publish)\n";
  return out;
}

}  // namespace echo::cli
