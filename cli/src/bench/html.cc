// SPDX-License-Identifier: MIT
// `echostore bench --html FILE`: the run as one self-contained page (no script, no external
// file): the machine and knobs, every row's ratio as a bar against 1.0 on a log scale, each
// latency row's percentile curve beside its baseline's (both axes logarithmic: latency in us,
// percentile in nines), and the table. The page is well-formed XML (XHTML syntax) so a test can
// check it with a plain parser.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace echo::cli::bench {
namespace {

// Length of the valid UTF-8 sequence at s[i], 0 when it is not one.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const std::size_t n = b < 0x80           ? 1
                        : (b >> 5) == 0x6  ? 2
                        : (b >> 4) == 0xE  ? 3
                        : (b >> 3) == 0x1E ? 4
                                           : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// Text for the page: XML's five escapes; control bytes (not allowed in XML 1.0) become spaces and
// bytes that are not UTF-8 (the command line may hold such a path) become U+FFFD, so the page
// stays well-formed whatever the run's strings hold.
std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const char ch = s[i];
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default: {
        const std::size_t n = utf8_length(s, i);
        if (n == 0) {
          out += "\xEF\xBF\xBD";
          ++i;
          continue;
        }
        if (n == 1 && static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') {
          out += ' ';
        } else {
          out.append(s, i, n);
        }
        i += n;
        continue;
      }
    }
    ++i;
  }
  return out;
}

std::string num(double v, const char* format = "%.3g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Percentile p (0..1) of sorted values, nearest rank.
double at(const std::vector<double>& sorted, double p) {
  const auto n = sorted.size();
  const auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
  return sorted[std::min(n - 1, i == 0 ? 0 : i - 1)];
}

// The ratio bars: one per row, from 1.0 to the ratio on a log2 axis clamped to [1/16, 16]; green
// when the row is better than its baseline, red when worse.
void ratio_bars(std::ostream& o, const std::vector<Row>& rows) {
  constexpr double kLabel = 300, kWidth = 420, kRow = 22, kSpan = 4;  // log2 16
  const double height = kRow * static_cast<double>(rows.size()) + 40;
  const double mid = kLabel + kWidth / 2;
  auto x_of = [&](double ratio) {
    const double l = std::clamp(std::log2(ratio), -kSpan, kSpan);
    return mid + l / kSpan * (kWidth / 2);
  };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLabel + kWidth + 90
    << "\" height=\"" << height << "\" role=\"img\">\n"
    << "<title>each row's ratio to its baseline (log scale, 1/16 to 16)</title>\n";
  for (const double t : {1.0 / 16, 1.0 / 4, 1.0, 4.0, 16.0}) {
    o << "<line x1=\"" << x_of(t) << "\" y1=\"10\" x2=\"" << x_of(t) << "\" y2=\"" << height - 20
      << "\" stroke=\"" << (t == 1.0 ? "#000" : "#ccc") << "\"/>"
      << "<text x=\"" << x_of(t) << "\" y=\"" << height - 5
      << "\" font-size=\"11\" text-anchor=\"middle\">" << (t < 1 ? "1/" + num(1 / t) : num(t))
      << "x</text>\n";
  }
  double y = 12;
  for (const Row& r : rows) {
    const double ratio = r.ratio();
    const bool finite = std::isfinite(ratio) && ratio > 0;
    const bool better = finite && (r.higher_better ? ratio >= 1 : ratio <= 1);
    o << "<g class=\"bar\" data-row=\"" << esc(r.id) << "\"><text x=\"" << kLabel - 6 << "\" y=\""
      << y + 13 << "\" font-size=\"12\" text-anchor=\"end\">" << esc(r.id) << "</text>";
    if (finite) {
      const double a = std::min(mid, x_of(ratio)), b = std::max(mid, x_of(ratio));
      o << "<rect x=\"" << a << "\" y=\"" << y + 3 << "\" width=\"" << std::max(1.0, b - a)
        << "\" height=\"" << kRow - 8 << "\" fill=\"" << (better ? "#3a8f4b" : "#c0392b")
        << "\"/><text x=\"" << b + 4 << "\" y=\"" << y + 13 << "\" font-size=\"11\">"
        << num(ratio, "%.2f") << "x "
        << (r.higher_better ? "(higher is better)" : "(lower is better)") << "</text>";
    } else {
      o << "<text x=\"" << mid + 4 << "\" y=\"" << y + 13 << "\" font-size=\"11\">n/a</text>";
    }
    o << "</g>\n";
    y += kRow;
  }
  o << "</svg>\n";
}

// One latency row: ours and the baseline as percentile curves. x: nines, -log10(1 - p), from p0
// to p99.99 (or as far as the samples reach); y: log10 of the latency in us.
void percentile_curves(std::ostream& o, const Row& r) {
  std::vector<double> ours = r.ours_samples, base = r.base_samples;
  std::sort(ours.begin(), ours.end());
  std::sort(base.begin(), base.end());
  const std::size_t n = std::min(ours.size(), base.size());
  const double max_nines = std::clamp(std::log10(static_cast<double>(n)), 1.0, 4.0);
  double lo = std::min(ours.front(), base.front()), hi = std::max(ours.back(), base.back());
  lo = std::pow(10, std::floor(std::log10(std::max(lo, 1e-3))));
  hi = std::pow(10, std::ceil(std::log10(std::max(hi, lo * 10))));
  constexpr double kW = 560, kH = 260, kLeft = 60, kTop = 14, kBottom = 34;
  auto x_of = [&](double nines) { return kLeft + nines / max_nines * (kW - kLeft - 20); };
  auto y_of = [&](double us) {
    const double f =
        (std::log10(std::max(us, lo)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return kTop + (1 - f) * (kH - kTop - kBottom);
  };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" role=\"img\" data-row=\"" << esc(r.id) << "\">\n<title>" << esc(r.id)
    << ": latency by percentile, " << esc(r.ours) << " vs " << esc(r.baseline) << "</title>\n";
  for (double d = lo; d <= hi * 1.0001; d *= 10) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << y_of(d) << "\" x2=\"" << kW - 20 << "\" y2=\""
      << y_of(d) << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 4 << "\" y=\"" << y_of(d) + 4
      << "\" font-size=\"11\" text-anchor=\"end\">" << num(d, "%g") << " us</text>\n";
  }
  const char* labels[] = {"p0", "p90", "p99", "p99.9", "p99.99"};
  for (int k = 0; k <= static_cast<int>(max_nines); ++k) {
    o << "<line x1=\"" << x_of(k) << "\" y1=\"" << kTop << "\" x2=\"" << x_of(k) << "\" y2=\""
      << kH - kBottom << "\" stroke=\"#ddd\"/><text x=\"" << x_of(k) << "\" y=\""
      << kH - kBottom + 14 << "\" font-size=\"11\" text-anchor=\"middle\">" << labels[k]
      << "</text>\n";
  }
  o << "<text x=\"" << x_of(std::log10(2.0)) << "\" y=\"" << kH - kBottom + 26
    << "\" font-size=\"10\" text-anchor=\"middle\">p50</text>\n";
  auto curve = [&](const std::vector<double>& s, const char* colour, const std::string& name) {
    o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
    constexpr int kSteps = 200;
    for (int i = 0; i <= kSteps; ++i) {
      const double nines = max_nines * i / kSteps;
      o << x_of(nines) << ',' << y_of(at(s, 1 - std::pow(10, -nines))) << ' ';
    }
    o << "\"><title>" << esc(name) << "</title></polyline>\n";
  };
  curve(base, "#888", r.baseline);
  curve(ours, "#1f5fbf", r.ours);
  o << "<text x=\"" << kLeft + 8 << "\" y=\"" << kTop + 12
    << "\" font-size=\"12\" fill=\"#1f5fbf\">" << esc(r.ours) << " (p50 " << num(at(ours, 0.5))
    << " us, p99 " << num(at(ours, 0.99)) << " us)</text><text x=\"" << kLeft + 8 << "\" y=\""
    << kTop + 28 << "\" font-size=\"12\" fill=\"#666\">" << esc(r.baseline) << " (p50 "
    << num(at(base, 0.5)) << " us, p99 " << num(at(base, 0.99)) << " us)</text>\n</svg>\n";
}

}  // namespace

bool write_html(const std::string& path, const RunInfo& info, const BenchConfig& c,
                const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>"
    << "<meta charset=\"utf-8\"/><title>echostore bench " << esc(info.commit) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:72em}"
    << "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
    << "text-align:left}td.n{text-align:right}.curves{display:flex;flex-wrap:wrap;gap:1em}"
    << "figure{margin:0}figcaption{font-size:12px;color:#444;max-width:560px}</style>\n"
    << "</head>\n<body>\n<h1>echostore bench</h1>\n<table class=\"run\">\n";
  auto fact = [&](const std::string& k, const std::string& v) {
    o << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>\n";
  };
  fact("command", info.command);
  fact("echostore", info.version + " (" + info.commit + ")");
  fact("server", info.server);
  fact("machine", std::to_string(info.cores) + " cores, " + info.model + ", " + info.kernel);
  fact("compiler", info.compiler);
  fact("knobs", "ring_capacity " + std::to_string(c.ring_capacity) + ", max_batch " +
                    std::to_string(c.max_batch) + ", wait " + std::string(ring::to_string(c.wait)));
  fact("statistic",
       "median of " + std::to_string(c.rounds) + " rounds" + (c.quick ? " (--quick)" : "") +
           "; each row's contenders interleaved in every round; ratio = ours / baseline");
  fact("placement", c.placement);
  fact("seconds", num(info.seconds, "%.0f"));
  o << "</table>\n<h2>Ratios to the same run's baselines</h2>\n";
  ratio_bars(o, rows);
  o << "<h2>Latency by percentile</h2>\n<div class=\"curves\">\n";
  for (const Row& r : rows) {
    if (r.ours_samples.empty() || r.base_samples.empty()) continue;
    o << "<figure>\n";
    percentile_curves(o, r);
    o << "<figcaption>" << esc(r.id) << ": " << esc(r.what) << "; " << r.ours_samples.size()
      << " and " << r.base_samples.size() << " messages; " << esc(r.placement)
      << "</figcaption>\n</figure>\n";
  }
  o << "</div>\n<h2>Every row</h2>\n<table class=\"rows\">\n<tr><th>id</th><th>what</th>"
    << "<th>ours</th><th>baseline</th><th>ours</th><th>baseline</th><th>ratio</th>"
    << "<th>better</th><th>placement</th></tr>\n";
  for (const Row& r : rows) {
    o << "<tr data-row=\"" << esc(r.id) << "\"><td>" << esc(r.id) << "</td><td>" << esc(r.what)
      << "</td><td>" << esc(r.ours) << "</td><td>" << esc(r.baseline) << "</td><td class=\"n\">"
      << num(r.ours_median(), "%.4g") << ' ' << esc(r.unit) << "</td><td class=\"n\">"
      << num(r.base_median(), "%.4g") << ' ' << esc(r.unit) << "</td><td class=\"n\">"
      << num(r.ratio(), "%.2f") << "x</td><td>" << (r.higher_better ? "higher" : "lower")
      << "</td><td>" << esc(r.placement) << "</td></tr>\n";
  }
  o << "</table>\n</body>\n</html>\n";
  std::ofstream f(path);
  f << o.str();
  return static_cast<bool>(f);
}

}  // namespace echo::cli::bench
