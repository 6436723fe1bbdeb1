// SPDX-License-Identifier: MIT
// The table writer's single-flight fill protocol and the absent memory it consults and fills
// (the writer thread; its loop is table_writer.cc's).
//
// A flight is one L2 read (and, on nil, one loader run and conditional L2 write) shared by every
// concurrent miss of a name. The fill guard closes the classic race twice over: the map refuses
// a fill older than a remembered drop (tombstone), and a flight that a newer drop overtook
// re-reads L2 instead of answering (its riders may have asked after the drop, so answering them
// with what the flight read before it would be a stale read).
#include <echo/engine/internal/table_writer.h>

#include <echo/base/clock.h>
#include <echo/base/counter.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include <echo/engine/errc.h>
#include <echo/engine/l2_frame.h>

namespace echo::engine {
namespace {

// How often one flight may be overtaken by newer drops before its riders get `contended`.
constexpr int kMaxRestarts = 8;

}  // namespace

void TableWriter::on_miss(MissCmd& cmd) {
  // A typed table's rows hold objects, not the bytes a waiter decodes: the flight reads L2.
  if (!suspended_ && map_->layout().bytes()) {
    GetOutcome hit;
    table::IdBytes version;
    if (map_->get(cmd.name, hit.value, &version)) {
      hit.version = table::BrandedId::parse(table::view(version)).value();
      hit.source = Source::kL1;
      cmd.done(std::move(hit));
      return;
    }
  }
  if (!absent_.empty() && remembered_absent(cmd.name)) {
    base::solo_add(absent_hits_);
    cmd.done(GetOutcome{make_error_code(Errc::kAbsent)});
    return;
  }
  if (auto it = flights_.find(cmd.name); it != flights_.end()) {
    it->second.waiters.push_back(std::move(cmd.done));
    base::solo_add(coalesced_);
    return;
  }
  // A plain loader value takes a table-kind version minted at flight start (docs/wire.md,
  // "Table semantics").
  Flight& flight =
      flights_
          .emplace(cmd.name,
                   Flight{next_flight_++, table::hash_key(cmd.name), mint_version(cmd.name), {}})
          .first->second;
  flight.waiters.push_back(std::move(cmd.done));
  start_fetch(cmd.name, flight);
}

void TableWriter::start_fetch(std::string_view name, Flight& flight) {
  // A read sent from here on follows every drop and invalidation applied so far.
  flight.overtaken = false;
  flight.foreign = false;
  flight.forgotten_at = Flight::kNotForgotten;
  ports_.fetch(name, [this, key = std::string(name), id = flight.id](L2Fetch fetch) {
    post(FetchedCmd{key, id, std::move(fetch)});
  });
}

TableWriter::Flight* TableWriter::find_flight(std::string_view name, std::uint64_t id) {
  auto it = flights_.find(std::string(name));
  return it == flights_.end() || it->second.id != id ? nullptr : &it->second;
}

bool TableWriter::restart_if_overtaken(std::string_view name, Flight& flight) {
  if (!flight.overtaken) return false;
  restart(name, flight);
  return true;
}

void TableWriter::restart(std::string_view name, Flight& flight) {
  if (++flight.restarts > kMaxRestarts) {
    finish(name, GetOutcome{make_error_code(Errc::kContended)});
    return;
  }
  base::solo_add(flight_restarts_);
  // A fresh version for the loader: the one minted at flight start predates whatever drop made
  // the flight restart, so a loader value stored under it would sit in L2 as post-drop data under
  // a pre-drop version, and that drop's tombstone would refuse it here (the name uncached on this
  // node for about a TTL).
  flight.minted = mint_version(name);
  start_fetch(name, flight);
}

std::optional<table::BrandedId> TableWriter::mint_version(std::string_view name) const {
  const int leased = ports_.node ? ports_.node() : static_cast<int>(node_id_);
  if (leased < 0) return std::nullopt;  // no node lease: nothing may be minted now
  const auto node = static_cast<unsigned>(leased);
  // Past the name's own tombstone: a drop minted elsewhere in this same millisecond under a
  // higher node id is newer than a plain mint here, and its tombstone would refuse the loader's
  // value. Not past the guard's floor, which holds the newest version of any name: one node with a
  // fast clock would push every loader row of this node into the future, and L2's newer-only
  // writes would then refuse the correct publishes that follow. Under the floor the loader's value
  // is answered and L2 written, and L1 refuses to cache it (a refill later, never a stale row).
  // (The kind is validated at construction, the node at the engine's: no error.)
  if (const auto own = map_->tombstone(name)) {
    if (const auto parsed = table::BrandedId::parse(table::view(*own))) {
      return table::process_minter().mint_after(spec_.kind, node, *parsed).value();
    }
  }
  return table::process_minter().mint(spec_.kind, node).value();
}

void TableWriter::on_fetched(FetchedCmd& cmd) {
  Flight* flight = find_flight(cmd.name, cmd.flight);
  if (flight == nullptr) return;
  if (spec_.fill_hold.count() > 0 && !cmd.held && cmd.fetch.stored) {
    // Fault injection: the answer waits while messages keep coming (release_held).
    cmd.held = true;
    base::solo_add(held_fills_);
    held_.push_back(HeldFetch{base::steady_ns() + std::chrono::nanoseconds(spec_.fill_hold).count(),
                              std::move(cmd)});
    return;
  }
  if (restart_if_overtaken(cmd.name, *flight)) return;
  if (cmd.fetch.ec) {
    finish(cmd.name, GetOutcome{cmd.fetch.ec});
    return;
  }
  if (!cmd.fetch.stored) return load(cmd.name, *flight, cmd.flight);
  GetOutcome out;
  out.source = Source::kL2;
  if (spec_.l2_format == L2Format::kRaw) {
    // No version in L2: the row carries this node's stamp, minted when the flight began (or
    // now; without a node lease, none: the value is answered and not cached).
    if (!flight->minted) flight->minted = mint_version(cmd.name);
    out.value = std::move(*cmd.fetch.stored);
    out.version = flight->minted;
  } else {
    auto row = split_l2_frame(*cmd.fetch.stored);
    if (!row) {
      base::solo_add(corrupt_frames_);
      finish(cmd.name, GetOutcome{make_error_code(Errc::kCorruptL2Frame)});
      return;
    }
    out.value = std::string(row->value);
    out.version = row->version;
  }
  if (!spec_.value.schema.empty() && !out.value.starts_with(spec_.value.schema)) {
    // Another schema's row (a node of an older or newer release wrote it): this node's loader
    // answers instead, and the row stays in L2 for the nodes that read it.
    base::solo_add(schema_mismatches_);
    flight->foreign = true;
    return load(cmd.name, *flight, cmd.flight);
  }
  base::solo_add(l2_hits_);
  finish(cmd.name, std::move(out));
}

void TableWriter::load(const std::string& name, Flight& flight, std::uint64_t id) {
  // L2 nil (or another schema's row): the loader runs once for the whole flight, within the
  // table's loader_timeout.
  if (!flight.minted) flight.minted = mint_version(name);
  if (!flight.minted) {
    finish(name, GetOutcome{make_error_code(Errc::kNoNodeLease)});
    return;
  }
  std::shared_ptr<LoadClaim> claim;
  if (spec_.loader_timeout.count() > 0) {
    claim = std::make_shared<LoadClaim>();
    flight.load = claim;
    load_timers_.push_back(
        LoadTimer{table::steady_clock_ms() + spec_.loader_timeout.count(), name, id, claim});
  }
  ports_.load(name, *flight.minted, !flight.foreign, std::move(claim),
              [this, name, id](LoadOutcome load) {
                post(LoadedCmd{name, id, std::move(load)});
              });
}

std::int64_t TableWriter::release_held(std::int64_t now_ns) {
  while (!held_.empty() && held_.front().due_ns <= now_ns) {
    FetchedCmd cmd = std::move(held_.front().cmd);
    held_.pop_front();
    on_fetched(cmd);
  }
  return held_.empty() ? -1 : held_.front().due_ns;
}

void TableWriter::on_loaded(LoadedCmd& cmd) {
  Flight* flight = find_flight(cmd.name, cmd.flight);
  // A flight waiting for its loader ends only here or in expire_loads (stop() aside): an answer
  // for a flight that is gone came after its timeout, and the port wrote nothing for it.
  if (flight == nullptr) {
    base::solo_add(loader_late_);
    return;
  }
  flight->load.reset();
  if (restart_if_overtaken(cmd.name, *flight)) return;
  if (cmd.load.ec == make_error_code(Errc::kAbsent)) {
    // No value at the source, as of the flight's version: remembered until a newer write of the
    // name reaches this node, or absent_ttl_ms.
    base::solo_add(absent_loads_);
    if (spec_.absent_ttl_ms > 0 && flight->minted) remember_absent(cmd.name, *flight->minted);
    finish(cmd.name, GetOutcome{cmd.load.ec});
    return;
  }
  if (cmd.load.ec) {
    base::solo_add(load_errors_);
    finish(cmd.name, GetOutcome{cmd.load.ec});
    return;
  }
  if (!cmd.load.stored) {
    // L2 already held a newer row than the loader's: read that instead (bounded like every
    // restart: a row that keeps appearing and vanishing must not spin the flight for ever).
    restart(cmd.name, *flight);
    return;
  }
  GetOutcome out;
  out.value = std::move(cmd.load.value);
  out.version = cmd.load.version;
  out.source = Source::kLoader;
  base::solo_add(fills_);
  finish(cmd.name, std::move(out));
}

std::int64_t TableWriter::expire_loads(std::int64_t now) {
  while (!load_timers_.empty() && load_timers_.front().deadline_ms <= now) {
    LoadTimer t = std::move(load_timers_.front());
    load_timers_.pop_front();
    Flight* flight = find_flight(t.name, t.flight);
    // Skipped: a flight already answered (its loader beat the deadline), or one whose loader
    // claimed the answer first (its L2 write is under way and answers the flight).
    if (flight == nullptr || flight->load != t.claim || !t.claim->claim_timeout()) continue;
    base::solo_add(loader_timeouts_);
    finish(t.name, GetOutcome{Error{Errc::kLoaderTimeout,
                                    "loader_timeout: table '" + spec_.name +
                                        "': the loader did not answer within " +
                                        std::to_string(spec_.loader_timeout.count()) + " ms"}});
  }
  return load_timers_.empty() ? -1 : load_timers_.front().deadline_ms;
}

void TableWriter::finish(std::string_view name, GetOutcome outcome) {
  auto it = flights_.find(std::string(name));
  if (it == flights_.end()) return;
  if (it->second.forgotten_at != Flight::kNotForgotten && !outcome.ec) {
    return serve_forgotten(name, it->second, outcome);
  }
  std::vector<GetCallback> waiters = std::move(it->second.waiters);
  flights_.erase(it);
  if (!outcome.ec && outcome.version) {
    if (suspended_) {
      base::solo_add(suspended_fills_);
    } else {
      const auto inserted = map_->insert_fill(name, outcome.value, *outcome.version);
      if (inserted == table::InsertVerdict::kRefusedDecode) {
        // The table's codec refuses what L2 or the loader gave: every waiter gets the error.
        outcome = GetOutcome{make_error_code(Errc::kBadValue)};
        outcome.value = map_->decode_error();
      } else if (table::stored(inserted)) {
        changed(name);
      }
    }
  }
  for (std::size_t i = 0; i + 1 < waiters.size(); ++i) {
    GetOutcome copy = outcome;
    waiters[i](std::move(copy));
  }
  if (!waiters.empty()) waiters.back()(std::move(outcome));
}

void TableWriter::serve_forgotten(std::string_view name, Flight& flight,
                                  const GetOutcome& outcome) {
  // The read may predate the write the invalidation announced: those who asked before the
  // invalidation reached this node may have it (their read began before), nobody may keep it.
  base::solo_add(forgotten_fills_);
  const std::size_t early = std::min(flight.forgotten_at, flight.waiters.size());
  std::vector<GetCallback> served(
      std::make_move_iterator(flight.waiters.begin()),
      std::make_move_iterator(flight.waiters.begin() + static_cast<std::ptrdiff_t>(early)));
  flight.waiters.erase(flight.waiters.begin(),
                       flight.waiters.begin() + static_cast<std::ptrdiff_t>(early));
  flight.forgotten_at = Flight::kNotForgotten;
  if (flight.waiters.empty()) {
    flights_.erase(std::string(name));
  } else {
    // The rest asked after it: a fresh read (no restart budget: each round answers someone).
    flight.minted = mint_version(name);
    start_fetch(name, flight);
  }
  for (auto& w : served) {
    GetOutcome copy = outcome;
    w(std::move(copy));
  }
}

// The absent memory (negative caching, TableSpec::absent_ttl_ms): on_miss consults it, on_loaded
// fills it; a write of the name forgets it (forget_absent, table_writer.cc).
bool TableWriter::remembered_absent(std::string_view name) {
  const auto it = absent_.find(name);
  if (it == absent_.end()) return false;
  if (table::steady_clock_ms() < it->second.expires_ms) return true;
  unmark_absent(it->second.hash);
  absent_.erase(it);
  return false;
}

void TableWriter::remember_absent(std::string_view name, const table::BrandedId& version) {
  // Full: the one that expires soonest goes (an expired one, if any), found at the front of the
  // order in O(1) amortized, where a scan of every entry per new name made key probing quadratic.
  if (absent_.size() >= spec_.max_size && absent_.find(name) == absent_.end()) evict_absent();
  const std::int64_t expires = table::steady_clock_ms() + spec_.absent_ttl_ms;
  const std::uint64_t hash = table::hash_key(name);
  absent_.insert_or_assign(std::string(name), AbsentKey{version.bytes(), hash, expires});
  absent_order_.push_back(AbsentOrder{std::string(name), expires});
  mark_absent(hash, expires);
  if (absent_order_.size() > 2 * absent_.size() + 64) compact_absent();
}

void TableWriter::evict_absent() {
  while (!absent_order_.empty()) {
    const AbsentOrder& front = absent_order_.front();
    const auto it = absent_.find(front.name);
    // Still the absence this entry recorded (not forgotten, not remembered again since).
    const bool live = it != absent_.end() && it->second.expires_ms == front.expires_ms;
    if (live) {
      unmark_absent(it->second.hash);
      absent_.erase(it);
    }
    absent_order_.pop_front();
    if (live) return;
  }
}

void TableWriter::compact_absent() {
  std::erase_if(absent_order_, [this](const AbsentOrder& o) {
    const auto it = absent_.find(o.name);
    return it == absent_.end() || it->second.expires_ms != o.expires_ms;
  });
}

void TableWriter::forget_all_absent() noexcept {
  absent_.clear();
  absent_order_.clear();
  if (absent_marked_ == 0) return;
  for (std::size_t i = 0; i < kAbsentMarks; ++i) {
    absent_marks_[i].until.store(0, std::memory_order_relaxed);
  }
  absent_marked_ = 0;
}

void TableWriter::mark_absent(std::uint64_t hash, std::int64_t until) noexcept {
  AbsentMark& m = absent_marks_[hash & (kAbsentMarks - 1)];
  // until 0 first: a reader between these stores reads 0 on one side and refuses the mark. The
  // release store of `until` last pairs with known_absent()'s first acquire load.
  m.until.store(0, std::memory_order_relaxed);
  m.hash.store(hash, std::memory_order_relaxed);
  m.until.store(until, std::memory_order_release);
  ++absent_marked_;
}

void TableWriter::unmark_absent(std::uint64_t hash) noexcept {
  AbsentMark& m = absent_marks_[hash & (kAbsentMarks - 1)];
  if (m.hash.load(std::memory_order_relaxed) == hash) m.until.store(0, std::memory_order_relaxed);
}

bool TableWriter::known_absent(std::uint64_t hash, std::int64_t now_ms) const noexcept {
  const AbsentMark& m = absent_marks_[hash & (kAbsentMarks - 1)];
  // acquire: pairs with mark_absent's release of `until`, so the hash it published is read.
  const std::int64_t until = m.until.load(std::memory_order_acquire);
  if (until == 0 || now_ms >= until) return false;
  if (m.hash.load(std::memory_order_relaxed) != hash) return false;
  // The fence orders the hash's load before the second load of `until`: a store of another
  // mark in between (until 0 first) shows there.
  std::atomic_thread_fence(std::memory_order_acquire);
  return m.until.load(std::memory_order_relaxed) == until;
}

}  // namespace echo::engine
