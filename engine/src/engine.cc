// SPDX-License-Identifier: MIT
// The engine's verbs (get, put, publish, invalidate, ...) and its tables' wiring: each declared
// table's writer, its rings and the push routes into them. The other steps of the data flow
// live in their own files (engine_impl.h lists them).
#include "engine_impl.h"

#include <echo/engine/journal.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <future>
#include <thread>
#include <typeinfo>
#include <utility>

namespace echo::engine {

using table::BrandedId;

Engine::Engine(EngineOptions options, std::vector<TableSpec> tables)
    : impl_(std::make_unique<Impl>(*this, std::move(options))) {
  auto& d = *impl_;
  check_engine_options(d.options);
  // Built now, taken in start(): the writers ask it for their node from their own threads.
  d.lease = std::make_unique<NodeLease>(
      [&d](const io::Script& s, const std::vector<std::string>& keys,
           const std::vector<std::string>& argv) { return d.script(s, keys, argv); },
      d.options.node_id == EngineOptions::kAutoNode ? -1 : static_cast<int>(d.options.node_id),
      d.options.node_lease, d.options.log);
  d.housekeeping = std::make_unique<Housekeeping>(d.options.housekeeping_cpus);
  d.chores = std::make_unique<Chores>(*d.housekeeping);
  d.lease->set_chores(*d.chores);
  d.job_sends.set_housekeeping(*d.housekeeping);
  int broadcast_tables = 0;  // dealt round-robin from the last io thread down
  for (auto& spec : tables) d.add_table(std::move(spec), broadcast_tables);
}

Engine::~Engine() {
  // First: a handle used from now on answers stopped without entering the engine.
  for (const auto& slot : impl_->slots) slot->life->engine_alive.store(false);
  stop();
}

const table::L1Map& detail::empty_map() {
  static const table::L1Map map([] {
    table::L1Config c;
    c.max_size = 1;
    return c;
  }());
  return map;
}

bool Engine::running() const noexcept { return impl_->running.load(std::memory_order_acquire); }

// One declared table: its writer, its rings (one per producer) and the routes into them.
void Engine::Impl::add_table(TableSpec spec, int& broadcast_tables) {
  if (spec.kind.empty() && spec.keys == KeyKind::kText) spec.kind = std::string(kTextKind);
  validate(spec);
  auto slot = std::make_unique<Slot>();
  slot->spec = std::move(spec);
  // 0: the engine's get_timeout, the longest a get waits anyway.
  if (slot->spec.loader_timeout.count() == 0) slot->spec.loader_timeout = options.get_timeout;
  if (by_name.count(slot->spec.name) != 0) {
    throw ConfigError("table '" + slot->spec.name + "' is declared twice");
  }
  slot->channel = table::coherence_channel(slot->spec.name).value();
  slot->writer = std::make_unique<TableWriter>(slot->spec, ports_for(*slot), options.node_id);
  slot->life = std::make_shared<Engine::TableLife>();
  slot->life->map = slot->writer->shared_map();
  slot->life->name = slot->spec.name;
  PushRouter::Target route{slot->writer.get(), nullptr, slot->spec.keys, &slot->pushes, 0};
  route.kind = slot->spec.kind;
  const bool carried = carry_of(slot->spec) != Carry::kOff;
  switch (slot->spec.coherence) {
    case CoherenceMode::kBroadcast:
      slot->ring = route.ring = &slot->writer->add_ring(slot->spec.full_policy, carried);
      route.arena = slot->writer->arena_of(*route.ring);
      slot->io_index = route.io_thread =
          options.io_threads - 1 - broadcast_tables++ % options.io_threads;
      router.add_broadcast(slot->channel, route);
      router.add_ask(table::ask_channel(slot->spec.name).value(), route);
      break;
    case CoherenceMode::kTracking:
      // Each master tracks only its own keys: a cluster would need a tracking connection per
      // master (and a flush when any of them is lost). Not built; refused rather than half-done.
      if (options.mode == ServerMode::kCluster) {
        throw ConfigError("table '" + slot->spec.name +
                          "': coherence tracking needs mode single (a cluster is not supported)");
      }
      slot->ring = route.ring = &slot->writer->add_ring(slot->spec.full_policy);
      router.add_tracking(table::tracking_prefix(slot->spec.name).value(), route);
      // On the tracking connection: an ask follows the invalidations of the write it names.
      router.add_ask(table::ask_channel(slot->spec.name).value(), route);
      break;
    case CoherenceMode::kJob:
      // Never refuses: the consumer publishes only into free slots (credits).
      slot->job_ring = &slot->writer->add_ring(ring::FullPolicy::kDrop);
      if (slot->spec.job_lead) {
        slot->lead_ring = route.ring = &slot->writer->add_ring(ring::FullPolicy::kDrop, carried);
        route.arena = slot->writer->arena_of(*route.ring);
        router.add_lead(JobLaneKeys::for_table(slot->spec.name).lead, route);
      }
      break;
    case CoherenceMode::kNone:
      break;
  }
  by_name.emplace(slot->spec.name, slot.get());
  slots.push_back(std::move(slot));
}

Result<std::string_view> Engine::Impl::gate(const Slot& slot, std::string_view id) {
  if (slot.spec.keys == KeyKind::kText) {
    if (!table::check_text_key(id)) return table::Unexpected{make_error_code(Errc::kBadKey)};
    return id;
  }
  auto parsed = BrandedId::parse(id);
  if (slot.spec.keys != KeyKind::kBranded || !parsed || parsed->ns() != slot.spec.kind) {
    return table::Unexpected{make_error_code(Errc::kKind)};
  }
  return id;
}

Result<BrandedId> Engine::Impl::mint(std::string_view ns) const {
  const int node = current_node();
  if (node < 0) return table::Unexpected{make_error_code(Errc::kNoNodeLease)};
  auto id = table::process_minter().mint(ns, static_cast<unsigned>(node));
  if (!id) return table::Unexpected{make_error_code(Errc::kKind)};
  return *id;
}

Result<BrandedId> Engine::Impl::version_for(const Slot& slot,
                                            std::optional<BrandedId> version) const {
  if (version) return *version;
  return mint(slot.spec.kind);
}

Engine::Impl::ReadHere Engine::Impl::read_here(std::string_view table, std::string_view id) const {
  ReadHere r;
  r.slot = find(table);
  if (r.slot == nullptr) {
    r.answer.emplace(table::Unexpected{make_error_code(Errc::kNoSuchCache)});
    return r;
  }
  return read_here(*r.slot, id);
}

Engine::Impl::ReadHere Engine::Impl::read_here(Slot& slot, std::string_view id) const {
  ReadHere r;
  r.slot = &slot;
  auto name = gate(*r.slot, id);
  if (!name) {
    r.answer.emplace(table::Unexpected{name.error()});
    return r;
  }
  Got hit;
  table::IdBytes version;
  // A typed table's rows hold objects: its bytes come through the miss path (an L2 read).
  if (r.slot->writer->map().layout().bytes() &&
      r.slot->writer->map().get(*name, hit.value, &version)) {
    hit.version = BrandedId::parse(table::view(version)).value();
    r.answer.emplace(std::move(hit));
    return r;
  }
  if (!running.load(std::memory_order_acquire)) {
    r.answer.emplace(table::Unexpected{make_error_code(Errc::kStopped)});
    return r;
  }
  r.name = *name;
  return r;
}

void Engine::Impl::send_miss(Slot& slot, std::string_view name,
                             std::function<void(Result<Got>)> done) {
  slot.writer->miss(name, [done = std::move(done)](GetOutcome&& o) {
    if (o.ec) return done(table::Unexpected{std::move(o.ec)});
    done(Got{std::move(o.value), o.version, o.source});
  });
}

Result<Got> Engine::get(std::string_view table, std::string_view id) {
  return impl_->on_table(table, [&](TableRef& ref) {
    const bool timed = detail::sample_get();  // as Table<T>::get's
    const std::int64_t t0 = timed ? base::steady_ns() : 0;
    auto r = get(ref, id);
    if (timed) note_get(ref, r && r->source == Source::kL1, t0);
    return r;
  });
}

void Engine::note_get(TableRef& ref, bool hit, std::int64_t t0_ns) noexcept {
  (hit ? ref.get_hit : ref.get_miss).record(base::steady_ns() - t0_ns);
}

Result<Got> Engine::get(TableRef& ref, std::string_view key) {
  // A hit or a refusal answers here, without the promise: its shared state cost ~13x the map
  // read itself (3.7 us vs 0.27 us per hit, broadcast_lane_test's E4), and a hit must not
  // leave this thread's fast path.
  auto local = impl_->read_here(ref, key);
  if (local.answer) return std::move(*local.answer);
  if (ref.spec.on_miss == OnMiss::kRefill) {
    refill(ref, local.name);
    return table::Unexpected{make_error_code(Errc::kMiss)};
  }
  auto promise = std::make_shared<std::promise<Result<Got>>>();
  auto future = promise->get_future();
  impl_->send_miss(*local.slot, local.name,
                   [promise](Result<Got> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(impl_->options.get_timeout) != std::future_status::ready) {
    return table::Unexpected{make_error_code(Errc::kTimeout)};
  }
  return future.get();
}

std::vector<Result<Got>> Engine::get_many(std::string_view table,
                                          std::span<const std::string_view> ids) {
  auto& d = *impl_;
  Impl::Slot* slot = d.find(table);
  if (slot == nullptr) {
    return std::vector<Result<Got>>(ids.size(),
                                    table::Unexpected{make_error_code(Errc::kNoSuchCache)});
  }
  return get_many(*slot, ids);
}

std::vector<Result<Got>> Engine::get_many(TableRef& ref, std::span<const std::string_view> keys) {
  // The answers as they come (the caller's thread for hits and refusals, the writer's for the
  // misses), counted down to zero.
  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left;
    std::vector<std::optional<Result<Got>>> out;
  };
  auto batch = std::make_shared<Batch>();
  batch->left = keys.size();
  batch->out.resize(keys.size());
  const auto settle = [](Batch& b, std::size_t i, Result<Got> r) {
    std::lock_guard lock(b.mu);
    b.out[i] = std::move(r);
    if (--b.left == 0) b.cv.notify_all();
  };
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto local = impl_->read_here(ref, keys[i]);
    if (local.answer) {
      settle(*batch, i, std::move(*local.answer));
    } else if (ref.spec.on_miss == OnMiss::kRefill) {
      refill(ref, local.name);
      settle(*batch, i, table::Unexpected{make_error_code(Errc::kMiss)});
    } else {
      impl_->send_miss(*local.slot, local.name,
                       [batch, i, settle](Result<Got> r) { settle(*batch, i, std::move(r)); });
    }
  }
  std::vector<Result<Got>> out;
  out.reserve(keys.size());
  std::unique_lock lock(batch->mu);
  batch->cv.wait_for(lock, impl_->options.get_timeout, [&] { return batch->left == 0; });
  for (auto& r : batch->out) {
    out.push_back(r ? std::move(*r) : table::Unexpected{make_error_code(Errc::kTimeout)});
    r.reset();  // an answer after the timeout lands in an empty slot
  }
  return out;
}

bool Engine::try_refills(const TableRef& ref) noexcept { return ref.spec.try_refill; }

void Engine::refill(TableRef& ref, std::string_view key) noexcept {
  if (!Impl::gate(ref, key) || !ref.writer->running()) return;
  // A key the writer knows has no value: the miss is the answer, nothing is posted.
  if (ref.writer->known_absent(table::hash_key(key), table::steady_clock_ms())) return;
  const std::uint64_t hash = table::hash_key(key) | 1;  // 0 marks a free slot
  auto& slot = ref.refills[hash % TableRef::kRefillSlots];
  std::uint64_t free = 0;
  // relaxed: the slot orders nothing; it only keeps a second post of the same key from leaving.
  if (!slot.compare_exchange_strong(free, hash, std::memory_order_relaxed)) return;
  try {
    // The writer's flight fills L1 (or finds the row live) and answers on the writer thread.
    ref.writer->miss(key, [&slot, hash](GetOutcome&&) {
      std::uint64_t mine = hash;
      slot.compare_exchange_strong(mine, 0, std::memory_order_relaxed);
    });
  } catch (...) {  // no memory for the command: nothing posted, the next miss asks again
    slot.store(0, std::memory_order_relaxed);
  }
}

Engine::TableRef& Engine::resolve(std::string_view name, const std::type_info& type) {
  Impl::Slot* slot = impl_->find(name);
  if (slot == nullptr) throw ConfigError("table '" + std::string(name) + "' is not declared");
  const std::type_info& declared =
      slot->spec.value.type != nullptr ? *slot->spec.value.type : typeid(std::string);
  if (declared != type) {
    throw ConfigError("table '" + std::string(name) + "' holds " + type_name(declared) +
                      " values, not " + type_name(type) + " (declare it with typed<T>())");
  }
  return *slot;
}

const table::L1Map& Engine::l1_of(const TableRef& ref) noexcept { return ref.writer->map(); }

std::string_view Engine::name_of(const TableRef& ref) noexcept { return ref.spec.name; }

std::shared_ptr<const Engine::TableLife> Engine::life_of(const TableRef& ref) noexcept {
  return ref.life;
}

void Engine::get_async(std::string_view table, std::string_view id,
                       std::function<void(Result<Got>)> done) {
  auto local = impl_->read_here(table, id);
  if (local.answer) return done(std::move(*local.answer));
  impl_->send_miss(*local.slot, local.name, std::move(done));
}

Result<BrandedId> Engine::put(std::string_view table, std::string_view id, std::string_view value,
                              std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) { return put(ref, id, value, version); });
}

Result<BrandedId> Engine::put(TableRef& ref, std::string_view key, std::string_view value,
                              std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = &ref;
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  auto minted = d.version_for(*slot, version);  // no_node_lease without a lease
  if (!minted) return table::Unexpected{minted.error()};
  version = *minted;
  // Tracking: the guard is read before the SET leaves, so any invalidation of a later write
  // (which the server sends after running ours) moves it before the row could be cached.
  const bool tracking = slot->spec.coherence == CoherenceMode::kTracking;
  const std::uint64_t guard = tracking ? slot->writer->forget_token(*name) : TableWriter::kNoGuard;
  auto reply = d.command({"SET", d.key_of(*slot, *name),
                          slot->spec.l2_format == L2Format::kRaw ? std::string(value)
                                                                 : frame_l2_value(*version, value),
                          "PX", std::to_string(slot->spec.ttl_ms)});
  if (!reply) {
    // Lost or overdue, not refused: the SET may still run (its bytes had left; the chaos drill
    // saw one land after a stall, and DEBUG SLEEP shows the same). A put announces nothing, so
    // this node drops its older row itself, as the message of `version` would: its next read
    // goes to L2. A SET that never ran costs one cached row.
    if (reply.error().code != make_error_code(io::IoErrc::kServerError)) {
      slot->writer->apply(*name, *version, [](const WriterAnswer<table::Verdict>&) {});
    }
    return table::Unexpected{reply.error()};
  }
  if (reply->view().str() != "OK") return table::Unexpected{unexpected_reply()};
  return d.put_l1(*slot, *name, value, *version, guard);
}

Result<BrandedId> Engine::publish(std::string_view table, std::string_view id,
                                  std::string_view value, std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) { return publish(ref, id, value, version); });
}

Result<BrandedId> Engine::publish(TableRef& ref, std::string_view key, std::string_view value,
                                  std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = &ref;
  switch (slot->spec.coherence) {
    case CoherenceMode::kNone:
    case CoherenceMode::kTracking:  // the SET is the announcement: the server invalidates
      return put(ref, key, value, version);
    case CoherenceMode::kJob:
      return publish(slot->spec.name, *slot->publish_group, key, value, version);
    case CoherenceMode::kBroadcast:
      break;
  }
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  auto minted = d.version_for(*slot, version);  // no_node_lease without a lease
  if (!minted) return table::Unexpected{minted.error()};
  version = *minted;
  // The call's words are this thread's, kept from its last publish: none allocates once warm.
  LentCall& call = LentCall::mine();
  call.script(d.publish_l2, 2);
  table::append_l2_key(call.word(), slot->spec.name, *name);
  table::append_removal_key(call.word(), slot->spec.name, *name);
  if (Error e = d.publish_args(call, *slot, *name, *version, value)) return table::Unexpected{e};
  auto reply = d.run_mine(call);  // on this thread's own link when it has one
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
  return d.put_l1(*slot, *name, value, *version);
}

Result<std::int64_t> Engine::broadcast(std::string_view table, std::string_view id,
                                       const BrandedId& version) {
  auto channel = table::coherence_channel(table);
  if (!channel) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  // A declared text-key table's message is key:version; anything else the 29 bytes.
  // (A branded id of another kind is sent as given: this verb is the interop tool's.)
  const Impl::Slot* slot = impl_->find(table);
  auto payload = Impl::message_of(
      slot != nullptr && slot->spec.keys == KeyKind::kText ? slot : nullptr, id, version);
  if (!payload) return table::Unexpected{payload.error()};
  // On a cluster the channel is sharded: SPUBLISH reaches the SSUBSCRIBErs on its slot's shard.
  const char* verb = impl_->publish_verb();
  auto reply = impl_->command({verb, *channel, *payload});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
  return reply->view().integer();
}

Result<std::size_t> Engine::Impl::await_receipts(const Slot& slot, std::string_view name,
                                                 const BrandedId& version, const BrandedId& receipt,
                                                 Clock::time_point until) {
  // receipt ":" the write's message (its 29 bytes, or key:version): the same shard as the
  // message, so each node hears it on the connection that carried the message, after it.
  auto message = Impl::message_of(&slot, name, version);
  if (!message) return table::Unexpected{message.error()};
  const char* verb = publish_verb();
  const std::string key = table::receipt_key(slot.spec.name, receipt.view()).value();
  // The ask and the count of the channel's own subscribers in one script (receipt_ask.lua): a
  // pattern subscriber (PSUBSCRIBE ecc:*) hears it but never counts itself, so it is not counted.
  auto heard = script(receipt_ask, {key},
                      {table::ask_channel(slot.spec.name).value(),
                       std::string(receipt.view()) + ":" + *message, verb});
  if (!heard) return table::Unexpected{heard.error()};
  if (heard->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
  // Every node of this version that subscribes the table (this one too); an original's node
  // never subscribes the ask channel, so it is not counted.
  const auto nodes = static_cast<std::size_t>(std::max<std::int64_t>(heard->view().integer(), 0));
  std::size_t applied = 0;
  auto pause = std::chrono::microseconds(200);
  while (applied < nodes) {
    auto count = command({"GET", key});
    if (!count) return table::Unexpected{count.error()};
    const io::Resp3Value v = count->view();
    if (v.type() == io::Resp3Type::bulk_string) {
      const std::string_view text = v.str();
      if (std::from_chars(text.data(), text.data() + text.size(), applied).ec != std::errc{}) {
        return table::Unexpected{unexpected_reply()};
      }
    } else if (!v.is_null()) {
      return table::Unexpected{unexpected_reply()};
    }
    if (applied >= nodes) break;
    if (Clock::now() >= until) {
      return table::Unexpected{Error(Errc::kTimeout, std::to_string(applied) + " of " +
                                                         std::to_string(nodes) +
                                                         " nodes applied it by the deadline "
                                                         "(the write stands)")};
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  return nodes;
}

void Engine::use_journal(std::string_view table, Journal& journal) {
  Impl::Slot* slot = impl_->find(table);
  if (slot == nullptr || slot->spec.coherence != CoherenceMode::kJob) {
    throw ConfigError("use_journal: '" + std::string(table) + "' is not a declared job-lane table");
  }
  MemoryHooks hooks;
  hooks.stale = [&journal](std::string_view n, const BrandedId& v) {
    return journal.remembered_stale(n, v);
  };
  hooks.remember = [&journal](std::string_view n, const BrandedId& v) { journal.remember(n, v); };
  slot->writer->set_memory(std::move(hooks));
  if (std::find(impl_->journals.begin(), impl_->journals.end(), &journal) ==
      impl_->journals.end()) {
    impl_->journals.push_back(&journal);
  }
}

std::vector<JournalStats> Engine::journal_stats() const {
  const std::lock_guard lock(impl_->journal_mu);
  return impl_->journal_stats;
}

Result<Applied> Engine::apply_and_remember(std::string_view table, std::string_view id,
                                           const BrandedId& version) {
  return impl_->ask_writer<Applied>(
      table, id, version,
      [](TableWriter& w, std::string_view name, const BrandedId& v, auto answer) {
        w.apply_and_remember(name, v, std::move(answer));
      });
}

Result<bool> Engine::drop_l2(std::string_view table, std::string_view id,
                             const BrandedId& version) {
  auto& d = *impl_;
  Impl::Slot* slot = d.find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  auto name = Impl::gate(*slot, id);
  if (!name) return table::Unexpected{name.error()};
  if (slot->spec.l2_format == L2Format::kRaw) {
    return table::Unexpected{make_error_code(Errc::kNotVersioned)};
  }
  auto reply = d.script(d.drop_l2, {d.key_of(*slot, *name)}, {std::string(version.view())});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
  return reply->view().integer() == 1;
}

Result<BrandedId> Engine::remove(std::string_view table, std::string_view id,
                                 std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) { return remove(ref, id, version); });
}

Result<BrandedId> Engine::remove(TableRef& ref, std::string_view key,
                                 std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = &ref;
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  if (slot->spec.l2_format == L2Format::kRaw) {
    return table::Unexpected{make_error_code(Errc::kNotVersioned)};
  }
  auto minted = d.version_for(*slot, version);  // no_node_lease without a lease
  if (!minted) return table::Unexpected{minted.error()};
  if (slot->spec.coherence == CoherenceMode::kBroadcast) {
    auto message = Impl::message_of(slot, *name, *minted);  // the name passed the gate
    if (!message) return table::Unexpected{message.error()};
    const char* verb = d.publish_verb();
    auto reply =
        d.script(d.publish_l2, {d.key_of(*slot, *name), Impl::removal_key_of(*slot, *name)},
                 {std::string(minted->view()), std::to_string(slot->spec.ttl_ms), slot->channel,
                  *message, verb, "remove"});
    if (!reply) return table::Unexpected{reply.error()};
    if (reply->view().type() != io::Resp3Type::integer) {
      return table::Unexpected{unexpected_reply()};
    }
  } else {
    // The conditional DEL, and the removal's tombstone kept one TTL (docs/wire.md, "Removals").
    auto dropped = d.script(d.drop_l2, {d.key_of(*slot, *name), Impl::removal_key_of(*slot, *name)},
                            {std::string(minted->view()), std::to_string(slot->spec.ttl_ms)});
    if (!dropped) return table::Unexpected{dropped.error()};
    if (dropped->view().type() != io::Resp3Type::integer) {
      return table::Unexpected{unexpected_reply()};
    }
    if (slot->spec.coherence == CoherenceMode::kJob) {
      auto admitted = enqueue(slot->spec.name, *slot->publish_group, *name, *minted);
      if (!admitted && admitted.error() != Errc::kNoLiveMember) {
        return table::Unexpected{admitted.error()};
      }
    }
  }
  // This node's row goes now (its own message arrives later, stale then).
  const Error waited = d.await_writer([&](auto done) {
    slot->writer->apply(*name, *minted,
                        [done = std::move(done)](const WriterAnswer<table::Verdict>&) { done(); });
  });
  if (waited) return table::Unexpected{waited};
  return *minted;
}

Result<bool> Engine::invalidate(std::string_view table, std::string_view id) {
  return impl_->on_table(table, [&](TableRef& ref) { return invalidate(ref, id); });
}

Result<bool> Engine::invalidate(TableRef& ref, std::string_view key) {
  auto& d = *impl_;
  auto name = Impl::gate(ref, key);
  if (!name) return table::Unexpected{name.error()};
  auto reply = d.command({"DEL", d.key_of(ref, *name)});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
  const bool existed = reply->view().integer() > 0;
  // The erase leaves a tombstone minted now, newer than every version this process minted before
  // (an async publish's row that reaches the writer after the erase is refused); without a node
  // lease, none: the erase alone.
  std::optional<BrandedId> tombstone;
  if (auto minted = d.version_for(ref, std::nullopt)) tombstone = *minted;
  const Error waited =
      d.await_writer([&](auto done) { ref.writer->erase(*name, std::move(done), tombstone); });
  if (waited) return table::Unexpected{waited};
  return existed;
}

Result<table::Verdict> Engine::apply_coherence(std::string_view table, std::string_view id,
                                               const BrandedId& version) {
  return impl_->ask_writer<table::Verdict>(
      table, id, version,
      [](TableWriter& w, std::string_view name, const BrandedId& v, auto answer) {
        w.apply(name, v, std::move(answer));
      });
}

Result<BrandedId> Engine::mint(std::string_view ns) { return impl_->mint(ns); }

int Engine::node_id() const noexcept { return impl_->lease ? impl_->lease->node() : -1; }

const TableWriter* internal::writer_of(const Engine& engine, std::string_view table) {
  Engine::Impl::Slot* slot = engine.impl_->find(table);
  return slot == nullptr ? nullptr : slot->writer.get();
}

}  // namespace echo::engine
