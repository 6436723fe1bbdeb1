// SPDX-License-Identifier: MIT
// The oracle's bookkeeping (oracle.h) and its judgement after the run: stale reads and their
// longest window, and write -> row gone per node.
#include "referee/oracle.h"

#include <algorithm>
#include <cstring>

#include "drill/floors.h"

namespace echo::cli::referee {
namespace {

// Raises `cell` to at least `v`. Release: pairs with Oracle::covered()'s acquire.
void raise(std::atomic<std::uint32_t>& cell, std::uint32_t v) noexcept {
  std::uint32_t cur = cell.load(std::memory_order_relaxed);
  while (cur < v && !cell.compare_exchange_weak(cur, v, std::memory_order_release,
                                                std::memory_order_relaxed)) {
  }
}

}  // namespace

Oracle::Oracle(std::size_t names, int nodes)
    : names_count_(names),
      names_(std::make_unique<NameLog[]>(names)),
      covered_(
          std::make_unique<std::atomic<std::uint32_t>[]>(names * static_cast<std::size_t>(nodes))) {
  for (std::size_t i = 0; i < names * static_cast<std::size_t>(nodes); ++i) {
    covered_[i].store(0, std::memory_order_relaxed);
  }
  for (int n = 0; n < nodes; ++n) {
    nodes_.push_back(std::make_unique<NodeLog>());
    nodes_.back()->events.reserve(1u << 16);
  }
}

void Oracle::begin_write(std::size_t name, std::uint32_t seq, const table::IdBytes* version,
                         bool mailed) {
  NameLog& log = names_[name];
  Write w;
  if (version != nullptr) w.version = *version;
  w.start_ns = now_ns();
  w.mailed = mailed;
  {
    const std::lock_guard lock(log.mu);
    if (log.writes.size() <= seq) log.writes.resize(seq + 1);
    log.writes[seq] = w;
  }
  log.started.store(seq, std::memory_order_release);  // pairs with started()
}

void Oracle::acked(std::size_t name, std::uint32_t seq) {
  NameLog& log = names_[name];
  {
    const std::lock_guard lock(log.mu);
    std::int64_t& at = log.writes[seq].ack_ns;
    if (at != 0) return;  // told already (a writer that knows its L2 ack before it returns)
    at = now_ns();
  }
  // Release: pairs with the acquire in reached_unversioned / reached_all, which then cover it.
  log.acked.store(seq, std::memory_order_release);
}

void Oracle::record(int node, const Event& e) {
  NodeLog& log = *nodes_[static_cast<std::size_t>(node)];
  {
    const std::lock_guard lock(log.mu);
    log.events.push_back(e);
  }
  // After the event is logged, so a read that sees the raise finds its event in judge().
  raise(covered_[static_cast<std::size_t>(node) * names_count_ + e.name], e.covered);
}

void Oracle::reached_version(int node, std::size_t name, std::string_view version, bool dropped) {
  const std::int64_t at = now_ns();
  if (version.size() != table::kIdSize) return;  // not a version: covers nothing
  NameLog& log = names_[name];
  std::uint32_t covered = 0, cause = 0;
  {
    const std::lock_guard lock(log.mu);
    // The writes of a name carry increasing versions: the last one <= `version` is the newest
    // write the message covers, and the message announces it when the versions are equal.
    const auto it = std::upper_bound(
        log.writes.begin(), log.writes.end(), version,
        [](std::string_view v, const Write& w) { return v < table::view(w.version); });
    if (it == log.writes.begin()) return;  // older than the seed: covers nothing
    covered = static_cast<std::uint32_t>(it - log.writes.begin() - 1);
    if (table::view(log.writes[covered].version) == version) cause = covered;
  }
  record(node, {at, static_cast<std::uint32_t>(name), covered, cause, Kind::kVersion, dropped});
}

void Oracle::reached_unversioned(int node, std::size_t name, std::uint32_t cause, bool dropped) {
  const std::int64_t at = now_ns();
  // Acquire: pairs with acked()'s release; every write acknowledged before now is covered.
  const std::uint32_t covered = names_[name].acked.load(std::memory_order_acquire);
  record(node, {at, static_cast<std::uint32_t>(name), covered, cause, Kind::kUnversioned, dropped});
}

void Oracle::reached_all(int node) {
  const std::int64_t at = now_ns();
  for (std::size_t i = 0; i < names_count_; ++i) {
    const std::uint32_t covered = names_[i].acked.load(std::memory_order_acquire);
    record(node, {at, static_cast<std::uint32_t>(i), covered, 0, Kind::kAll, false});
  }
}

Judgement Oracle::judge(const std::vector<ReadTally>& tallies) const {
  Judgement j;
  // Each node's messages per name, in the order they reached it (one thread appended them).
  std::vector<std::vector<std::vector<const Event*>>> by_name(nodes_.size());
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    by_name[n].resize(names_count_);
    for (const Event& e : nodes_[n]->events) by_name[n][e.name].push_back(&e);
  }

  // The window of a stale read: from the first message at its node that covered a newer write
  // than the one it returned, to the read's start.
  for (const ReadTally& t : tallies) {
    j.stale_reads += t.stale;
    for (const auto& [key, tb] : t.stale_latest) {
      const auto name = static_cast<std::size_t>(key >> 32);
      const auto returned = static_cast<std::uint32_t>(key & 0xFFFFFFFFu);
      for (const Event* e : by_name[static_cast<std::size_t>(t.node)][name]) {
        if (e->covered > returned) {
          j.max_stale_ms = std::max(j.max_stale_ms, static_cast<double>(tb - e->at_ns) / 1e6);
          break;
        }
      }
    }
  }

  // Write start -> row gone at each node.
  floors::Samples latency;
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    for (std::size_t name = 0; name < names_count_; ++name) {
      const NameLog& log = names_[name];
      std::uint32_t in_order = 0;  // unversioned, untagged messages of this name so far
      for (const Event* e : by_name[n][name]) {
        std::uint32_t cause = e->cause;
        if (e->kind == Kind::kUnversioned && cause == 0) cause = ++in_order;
        if (!e->dropped || cause == 0 || cause >= log.writes.size()) continue;
        const Write& w = log.writes[cause];
        if (w.mailed) continue;
        if (e->at_ns < w.start_ns) {
          ++j.unmatched;
          continue;
        }
        latency.us.push_back(static_cast<double>(e->at_ns - w.start_ns) / 1e3);
      }
    }
  }
  latency.sort();
  j.latency_samples = latency.us.size();
  j.p50_us = latency.pct(0.50);
  j.p99_us = latency.pct(0.99);
  return j;
}

}  // namespace echo::cli::referee
