// SPDX-License-Identifier: MIT
// What the engine reports about itself: the directory of its tables, stats() (any thread, no
// syscall), and the kernel's thread counts (/proc, on demand).
#include "engine_impl.h"

#include "thread_switches.h"

namespace echo::engine {

std::vector<TableInfo> Engine::directory() const {
  std::vector<TableInfo> out;
  for (const auto& s : impl_->slots) {
    out.push_back(TableInfo{s->spec.name, s->spec.kind, s->spec.coherence, s->spec.ttl_ms,
                            s->ring != nullptr ? s->ring->capacity() : 0});
  }
  return out;
}

namespace {

TableStats table_stats(const Engine::TableRef& s) {
  TableStats t;
  t.name = s.spec.name;
  t.l1 = s.writer->map().stats();
  t.writer = s.writer->stats();
  t.rings = s.writer->ring_stats();
  t.pushes = s.pushes.pushes.load(std::memory_order_relaxed);
  t.garbage = s.pushes.garbage.load(std::memory_order_relaxed);
  t.carry_degraded = s.pushes.carry_degraded.load(std::memory_order_relaxed);
  t.io_thread = s.io_index;
  if (s.consumer) t.consumer = s.consumer->stats();
  t.get_hit_latency = s.get_hit.snapshot();
  t.get_miss_latency = s.get_miss.snapshot();
  t.load_latency = s.load.snapshot();
  return t;
}

// Per io thread: the pushes it routed, its broadcast tables, the wakes it sent their writers
// and the items it applied itself.
void add_io_thread_stats(EngineStats& out,
                         const std::vector<std::unique_ptr<Engine::TableRef>>& slots,
                         int io_threads) {
  out.io_threads.resize(static_cast<std::size_t>(io_threads));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const Engine::TableRef& s = *slots[i];
    auto& t = out.io_threads[static_cast<std::size_t>(s.io_index)];
    t.pushes += s.pushes.pushes.load(std::memory_order_relaxed);
    if (s.spec.coherence == CoherenceMode::kBroadcast) t.tables.push_back(s.spec.name);
    // The broadcast ring's producer is its io thread; a lead ring's is io thread 0 (where a job
    // table's io_index points too). The job ring's producer is the consumer's loop: 0.
    if (s.ring != nullptr) t.signals += s.ring->stats().wakes;
    if (s.lead_ring != nullptr) t.signals += s.lead_ring->stats().wakes;
    if (s.job_ring != nullptr) t.signals += s.job_ring->stats().wakes;
    t.direct_applies += out.tables[i].writer.direct_applies;
  }
}

}  // namespace

EngineStats Engine::stats() const {
  EngineStats out;
  for (const auto& s : impl_->slots) out.tables.push_back(table_stats(*s));
  if (impl_->io) {
    out.io_backend = impl_->io->loop().backend();
    out.io_fallback_reason = std::string(impl_->io->loop().fallback_reason());
    add_io_thread_stats(out, impl_->slots, impl_->options.io_threads);
  }
  if (impl_->cmd) out.connections.push_back(impl_->cmd->stats());
  if (impl_->sub) out.connections.push_back(impl_->sub->stats());
  for (const auto& x : impl_->extra_io) {
    if (x.sub) out.connections.push_back(x.sub->stats());
  }
  if (impl_->cluster) {
    auto cs = impl_->cluster->stats();
    out.connections.insert(out.connections.end(), cs.connections.begin(), cs.connections.end());
    out.cluster = ClusterCounters{
        cs.moved, cs.ask, cs.refreshes, cs.held, cs.held_expired, cs.redirect_limit, cs.masters};
  }
  if (impl_->ssub) {
    auto subs = impl_->ssub->stats();
    out.connections.insert(out.connections.end(), subs.begin(), subs.end());
    if (out.cluster) out.cluster->resubscribes = impl_->ssub->resubscribes();
  }
  if (impl_->sentinel) {
    if (auto c = impl_->sentinel->connection_stats()) out.connections.push_back(std::move(*c));
    const SentinelWatchCounters w = impl_->sentinel->stats();
    out.sentinel = SentinelCounters{w.master, w.switches, w.reconnects, w.asks, w.role_refusals};
  }
  out.unrouted_pushes = impl_->router.unrouted();
  out.tracking_sends = impl_->tracking_sends.load(std::memory_order_relaxed);
  out.tracking_refusals = impl_->tracking_refusals.load(std::memory_order_relaxed);
  if (impl_->lease) {
    out.node_id = impl_->lease->node();
    const NodeLeaseCounters l = impl_->lease->stats();
    out.node_renewals = l.renewals;
    out.node_lapses = l.lapses;
    out.node_taken = l.taken;
  }
  if (impl_->housekeeping) out.housekeeping_pin_failures = impl_->housekeeping->pin_failures();
  if (impl_->links) {
    const CallerLinks::Counters c = impl_->links->counters();
    out.caller_links_held = c.open;
    out.caller_link_opens = c.opens;
    out.caller_link_calls = c.calls;
    out.caller_link_fallbacks = c.fallbacks;
  }
  if (impl_->relay) {
    const RelayCounters r = impl_->relay->stats();
    out.relay_claimed = r.claimed;
    out.relay_relayed = r.relayed;
    out.relay_malformed = r.malformed;
    out.relay_errors = r.errors;
  }
  const auto ld = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  const Impl& d = *impl_;
  if (d.metrics) out.metrics = d.metrics->counters();
  out.fan_out = FanOutCounters{ld(d.fan_enqueues), ld(d.fan_admitted),         ld(d.fan_duplicates),
                               ld(d.fan_not_live), ld(d.fan_membership_reads), ld(d.fan_errors),
                               ld(d.fan_leads),    ld(d.fan_lead_receivers)};
  return out;
}

void Engine::add_thread_counts(EngineStats& stats) const {
  for (std::size_t i = 0; i < stats.tables.size() && i < impl_->slots.size(); ++i) {
    const ThreadSwitches os = thread_switches(impl_->slots[i]->writer->thread_id());
    stats.tables[i].writer.os_wakes = os.voluntary;
    stats.tables[i].writer.os_preemptions = os.involuntary;
  }
  for (std::size_t k = 0; k < stats.io_threads.size() && k < impl_->io_tids.size(); ++k) {
    const ThreadSwitches os = thread_switches(impl_->io_tids[k].load(std::memory_order_relaxed));
    stats.io_threads[k].os_wakes = os.voluntary;
    stats.io_threads[k].os_preemptions = os.involuntary;
  }
}
}  // namespace echo::engine
