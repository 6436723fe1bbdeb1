// SPDX-License-Identifier: MIT
// What the docs and the alert rules say about the exported series, checked against a live
// exposition: every metric name README.md, docs/*.md (but the benchmark pages) and
// docs/alerts.yml reference (and each member docs/operations.md's family table lists) must be
// exported, every label matcher (`connection=~"cmd(@.*)?"`) must match a sample's label, every
// `by (...)` label of a rule must be on its series; and every family the exposition has must be
// documented. Used by
// metric_refs_test.cc (one server, every table kind and lane) and by the cluster and Sentinel
// suites for the families only their modes export.
#pragma once

#include <regex.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace echo::test::metric_refs {

// One reference: a metric name (a trailing '_' or "_*" makes it a family prefix), optionally one
// label matcher, and where it was found ("docs/alerts.yml:131").
struct Ref {
  std::string name;
  std::string label, value;  // empty label: none
  bool regex = false;        // =~ rather than =
  std::string where;
};

// One alert rule's expression: the metrics it reads and the labels its `by (...)` clauses keep.
struct Rule {
  std::string alert, where;
  std::vector<std::string> metrics;
  std::set<std::string> by_labels;
};

// Samples of an exposition: metric name -> each sample's labels.
using Labels = std::map<std::string, std::string>;
using Samples = std::map<std::string, std::vector<Labels>>;

inline std::string source_dir() {
  const char* dir = std::getenv("ECHO_SOURCE_DIR");  // set by tests/CMakeLists.txt
  return dir != nullptr ? dir : ".";
}

inline std::vector<std::string> lines_of_file(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// Parses `{a="x",b=~"y"}` from text[at] (just past the name); appends one Ref per matcher.
inline void take_matchers(const std::string& text, std::size_t at, const Ref& base,
                          std::vector<Ref>& out) {
  if (at >= text.size() || text[at] != '{') {
    out.push_back(base);
    return;
  }
  const std::size_t end = text.find('}', at);
  if (end == std::string::npos) return;
  std::string body = text.substr(at + 1, end - at - 1);
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t eq = body.find('=', i);
    if (eq == std::string::npos) break;
    Ref r = base;
    r.label = body.substr(i, eq - i);
    while (!r.label.empty() && (r.label.front() == ' ' || r.label.front() == ',')) {
      r.label.erase(0, 1);
    }
    r.regex = eq + 1 < body.size() && body[eq + 1] == '~';
    const std::size_t open = body.find('"', eq);
    const std::size_t close = open == std::string::npos ? open : body.find('"', open + 1);
    if (close == std::string::npos) break;
    r.value = body.substr(open + 1, close - open - 1);
    out.push_back(r);
    i = close + 1;
  }
}

// Every `echostore_...` name on line `l`, with its matchers, found at `where`.
inline void scan_line(const std::string& l, const std::string& where, std::vector<Ref>& out) {
  for (std::size_t at = l.find("echostore_"); at != std::string::npos;
       at = l.find("echostore_", at + 1)) {
    if (at > 0 && (word_char(l[at - 1]) || l[at - 1] == '.' || l[at - 1] == '/')) continue;
    std::size_t end = at;
    while (end < l.size() && word_char(l[end])) ++end;
    Ref r;
    r.name = l.substr(at, end - at);
    if (end < l.size() && l[end] == '*') r.name += '*';
    r.where = where;
    take_matchers(l, end, r, out);
    at = end - 1;
  }
}

// Every `echostore_...` name in `path` (relative to the source tree).
inline void scan_names(const std::string& path, std::vector<Ref>& out) {
  const auto lines = lines_of_file(source_dir() + "/" + path);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    scan_line(lines[n], path + ":" + std::to_string(n + 1), out);
  }
}

// docs/operations.md's family table: "| `echostore_writer_*` | table | `applied_total`, ..." gives
// echostore_writer_applied_total (backticked words inside parentheses are prose, not members).
inline void scan_family_table(const std::string& path, std::vector<Ref>& out) {
  const auto lines = lines_of_file(source_dir() + "/" + path);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::string& l = lines[n];
    if (l.rfind("| `echostore_", 0) != 0) continue;
    const std::size_t star = l.find("_*`");
    if (star == std::string::npos || star > l.find('|', 1)) continue;
    const std::string family = l.substr(3, star - 3 + 1);  // "echostore_writer_"
    const std::size_t cells = l.find('|', l.find('|', 1) + 1);
    std::string members;
    int depth = 0;
    for (std::size_t i = cells + 1; i < l.size(); ++i) {
      if (l[i] == '(') ++depth;
      if (depth == 0) members += l[i];
      if (l[i] == ')' && depth > 0) --depth;
    }
    for (std::size_t a = members.find('`'); a != std::string::npos;) {
      const std::size_t b = members.find('`', a + 1);
      if (b == std::string::npos) break;
      Ref r;
      r.name = family + members.substr(a + 1, b - a - 1);
      r.where = path + ":" + std::to_string(n + 1) + " (family table)";
      out.push_back(r);
      a = members.find('`', b + 1);
    }
  }
}

// Every reference in README.md, docs/*.md and docs/alerts.yml. Not docs/benchmarks.md and
// docs/notebook.md: they name the Cache Referee's contestants (`echostore_broadcast`, ...),
// which are not series.
inline std::vector<Ref> documented() {
  std::vector<Ref> out;
  for (const char* path :
       {"README.md", "docs/alerts.yml", "docs/architecture.md", "docs/capacity.md",
        "docs/configuration.md", "docs/guide.md", "docs/operations.md", "docs/releases.md",
        "docs/support.md", "docs/troubleshooting.md", "docs/wire.md"}) {
    scan_names(path, out);
  }
  scan_family_table("docs/operations.md", out);
  return out;
}

// docs/alerts.yml's rules: each `expr:` line's metrics and `by (...)` labels.
inline std::vector<Rule> alert_rules() {
  const std::string path = "docs/alerts.yml";
  const auto lines = lines_of_file(source_dir() + "/" + path);
  std::vector<Rule> out;
  std::string alert;
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::string& l = lines[n];
    if (const auto a = l.find("- alert: "); a != std::string::npos) alert = l.substr(a + 9);
    const auto e = l.find("expr: ");
    if (e == std::string::npos) continue;
    Rule r{alert, path + ":" + std::to_string(n + 1), {}, {}};
    std::vector<Ref> names;
    scan_line(l, r.where, names);
    for (const Ref& ref : names) r.metrics.push_back(ref.name);
    for (std::size_t b = l.find("by ("); b != std::string::npos; b = l.find("by (", b + 1)) {
      std::stringstream labels(l.substr(b + 4, l.find(')', b) - b - 4));
      for (std::string label; std::getline(labels, label, ',');) {
        while (!label.empty() && label.front() == ' ') label.erase(0, 1);
        r.by_labels.insert(label);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The samples of a Prometheus text exposition (comments skipped; label values unescaped).
inline Samples parse_exposition(const std::string& text) {
  Samples out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    std::size_t i = 0;
    while (i < l.size() && (word_char(l[i]) || l[i] == ':')) ++i;
    Labels labels;
    if (i < l.size() && l[i] == '{') {
      ++i;
      while (i < l.size() && l[i] != '}') {
        const std::size_t eq = l.find('=', i);
        if (eq == std::string::npos || eq + 1 >= l.size() || l[eq + 1] != '"') break;
        std::string value;
        std::size_t j = eq + 2;
        for (; j < l.size() && l[j] != '"'; ++j) {
          if (l[j] == '\\' && j + 1 < l.size()) ++j;
          value += l[j];
        }
        labels[l.substr(i, eq - i)] = value;
        i = j + 1;
        if (i < l.size() && l[i] == ',') ++i;
      }
    }
    out[l.substr(0, l.find_first_of("{ "))].push_back(std::move(labels));
  }
  return out;
}

// True if `value` matches `pattern` whole (Prometheus anchors =~), POSIX extended syntax.
inline bool full_match(const std::string& pattern, const std::string& value) {
  regex_t re;
  if (regcomp(&re, ("^(" + pattern + ")$").c_str(), REG_EXTENDED | REG_NOSUB) != 0) return false;
  const bool ok = regexec(&re, value.c_str(), 0, nullptr, 0) == 0;
  regfree(&re);
  return ok;
}

// The samples a reference names: a family prefix ("echostore_l1_", "echostore_l1_*") takes every
// name under it; a histogram's base name takes its _bucket, _sum and _count.
inline std::vector<const Labels*> named(const Samples& s, std::string name) {
  std::vector<const Labels*> out;
  const bool prefix = name.ends_with('*') || name.ends_with('_');
  if (name.ends_with('*')) name.pop_back();
  for (const auto& [metric, samples] : s) {
    const bool hit = prefix ? metric.rfind(name, 0) == 0
                            : metric == name || metric == name + "_bucket" ||
                                  metric == name + "_sum" || metric == name + "_count";
    if (!hit) continue;
    for (const Labels& l : samples) out.push_back(&l);
  }
  return out;
}

// A placeholder value in prose ("<n>", "..."): the label must exist, any value.
inline bool placeholder(const std::string& value) {
  return value.find('<') != std::string::npos || value.find("...") != std::string::npos;
}

// What `refs` name that `samples` lacks, one line each; `in_scope` picks the references this
// exposition is expected to cover (another mode's families are checked by its own suite).
inline std::vector<std::string> missing(const Samples& samples, const std::vector<Ref>& refs,
                                        const std::function<bool(const Ref&)>& in_scope) {
  std::vector<std::string> out;
  for (const Ref& r : refs) {
    if (!in_scope(r)) continue;
    const auto hits = named(samples, r.name);
    if (hits.empty()) {
      out.push_back(r.where + ": " + r.name + " is not exported");
      continue;
    }
    if (r.label.empty()) continue;
    bool matched = false;
    for (const Labels* l : hits) {
      const auto it = l->find(r.label);
      if (it == l->end()) continue;
      matched = placeholder(r.value) ||
                (r.regex ? full_match(r.value, it->second) : it->second == r.value);
      if (matched) break;
    }
    if (!matched) {
      out.push_back(r.where + ": no " + r.name + " sample has " + r.label + (r.regex ? "=~" : "=") +
                    '"' + r.value + '"');
    }
  }
  return out;
}

// The rules' `by (...)` labels each of their series lacks.
inline std::vector<std::string> unkept_labels(const Samples& samples,
                                              const std::vector<Rule>& rules,
                                              const std::function<bool(const Ref&)>& in_scope) {
  std::vector<std::string> out;
  for (const Rule& rule : rules) {
    for (const std::string& metric : rule.metrics) {
      Ref r;
      r.name = metric;
      if (!in_scope(r)) continue;
      for (const std::string& label : rule.by_labels) {
        bool seen = false;
        for (const Labels* l : named(samples, metric)) seen = seen || l->contains(label);
        if (!seen) {
          out.push_back(rule.where + ": " + rule.alert + " groups by '" + label + "', which no " +
                        metric + " sample carries");
        }
      }
    }
  }
  return out;
}

// The exported names no reference covers (a name, its histogram base, or a family member).
inline std::vector<std::string> undocumented(const Samples& samples, const std::vector<Ref>& refs) {
  std::set<std::string> exact;
  for (const Ref& r : refs) {
    if (!r.name.ends_with('*') && !r.name.ends_with('_')) exact.insert(r.name);
  }
  std::vector<std::string> out;
  for (const auto& [metric, ignored] : samples) {
    std::string base = metric;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (base.ends_with(suffix) &&
          exact.contains(base.substr(0, base.size() - std::strlen(suffix)))) {
        base.resize(base.size() - std::strlen(suffix));
      }
    }
    if (!exact.contains(base)) out.push_back(metric + " is exported but documented nowhere");
  }
  return out;
}

// missing() and unkept_labels() of one exposition against the docs and the rules, for `in_scope`.
inline std::vector<std::string> problems(const std::string& exposition,
                                         const std::function<bool(const Ref&)>& in_scope) {
  const Samples samples = parse_exposition(exposition);
  const std::vector<Ref> refs = documented();
  if (std::none_of(refs.begin(), refs.end(), in_scope)) return {"no reference is in scope"};
  std::vector<std::string> out = missing(samples, refs, in_scope);
  for (std::string& p : unkept_labels(samples, alert_rules(), in_scope))
    out.push_back(std::move(p));
  return out;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "\n  " + l;
  return out;
}

}  // namespace echo::test::metric_refs
