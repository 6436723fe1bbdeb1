// SPDX-License-Identifier: MIT
// A typed table handle: a declared table resolved once (Engine::table<T>), with the data verbs
// on it, so no call looks its table up by name.
//
//   struct Quote { double bid, ask; };
//   Engine node(options, {typed<Quote>(TableSpec{.name = "quotes", .kind = "QTE", ...})});
//   node.start();
//   Table<Quote> quotes = node.table<Quote>("quotes");
//   quotes.publish("AAPL", Quote{189.10, 189.12});            // L2 row + message, one call
//   quotes.read("AAPL", [](const Quote& q, std::string_view version) { ... });  // in place
//
// A handle is three pointers and a shared one: copy it freely, use it from any thread. A
// default-constructed handle is empty (false): every read misses and every verb answers
// no_such_cache, so a handle can be a member set later. Once its Engine stopped, reads miss and
// answer `stopped`; a handle that outlives its Engine keeps the table's (empty) map and name, and
// every read and verb answers `stopped` without touching the engine. (Destroying an Engine while
// another thread is inside one of its calls is a race like any object's.) Every verb answers
// Result<T> (no data verb throws).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <echo/base/clock.h>
#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/engine/errc.h>
#include <echo/table/l1_map.h>
#include <echo/table/l1_reader.h>

namespace echo::engine {

namespace detail {
// What an empty handle reads: a map that holds nothing (every read misses).
const table::L1Map& empty_map();
}  // namespace detail

template <class T>
class Table {
 public:
  // An empty handle (see above); Engine::table<T>() gives a real one.
  Table() noexcept : l1_(&detail::empty_map()) {}
  // True for a handle on a declared table (Engine::table<T>()).
  explicit operator bool() const noexcept { return engine_ != nullptr; }

  // The table's name (empty for an empty handle).
  std::string_view name() const noexcept;

  // Zero-copy read. On an L1 hit, runs fn(ValueView<T>, version), or fn(ValueView<T>), on this
  // thread inside its read section: the row's own object (for std::string tables a
  // std::string_view of its bytes) and its 14-byte version, valid only during the call. A hit
  // copies nothing, allocates nothing, takes no lock and makes no syscall. fn must not block and
  // must not call this engine: while it runs, the process's L1 reclamation waits for it. On a miss,
  // loads like get() (blocking up to get_timeout), then runs fn on the row it filled (or on the
  // loaded value when L1 could not keep it). Answers where the value came from.
  template <class Fn>
  Result<Source> read(std::string_view key, Fn&& fn) const;

  // A copy of the value (a hit copies the row's object; a miss loads: L2, else the loader).
  Result<T> get(std::string_view key) const;
  // get for many keys: the hits from L1 on this thread, then every miss at once (Engine::get_many:
  // their L2 reads pipelined, one round trip). One answer per key, in order.
  std::vector<Result<T>> get_many(std::span<const std::string_view> keys) const;

  // L1 only, never waits: on a hit runs fn as read() does and answers true; on a miss answers
  // false at once and, when the table's try_refill is set (the default), starts one asynchronous
  // refill of the key (one per key however many threads miss it) whose row a later read sees.
  // No lock, no allocation on a hit; the miss's post may allocate. fn as read()'s.
  template <class Fn>
  bool try_read(std::string_view key, Fn&& fn) const noexcept;
  // A copy of the row's object on a hit, nullopt on a miss (then as try_read). Never waits; a
  // copy that throws (std::bad_alloc copying a string) leaves through this call, the read section
  // closed (noexcept when T's copy is).
  std::optional<T> try_get(std::string_view key) const
      noexcept(std::is_nothrow_copy_constructible_v<T>);

  // Runs fn(key, ValueView<T>, version) on every row this node's L1 holds (live, this thread;
  // L1Map::for_each: chunked read sections, safe beside the writer's applies: a row changed while
  // the walk passes may be missed or seen at its value before the change, none twice). fn as
  // read()'s: it must not block and must not call this engine. Answers how many rows it saw.
  template <class Fn>
  std::size_t for_each(Fn&& fn) const {
    return l1_->for_each(
        [&fn](const table::RowView& row) { fn(row.name, view_of<T>(row.value), row.version); });
  }

  // L2 SET of the encoded value under `version` (minted in the table's kind when not given),
  // then the L1 row (read-your-writes). Announces nothing: other nodes keep their rows until a
  // message (publish, or the engine's broadcast/enqueue) or their TTL.
  Result<table::BrandedId> put(std::string_view key, const T& value,
                               std::optional<table::BrandedId> version = std::nullopt) const;

  // One-call write: the L2 row and its announcement together (Engine::publish): on a broadcast
  // table one script, atomic (no node hears the message before the row exists, and a lost
  // connection never leaves a row unannounced), then the L1 row; on a job-lane table the SET and
  // the job in one pipeline; on a tracking table or one of coherence none, put (the tracking
  // lane's server announces the SET itself). Answers the version.
  Result<table::BrandedId> publish(std::string_view key, const T& value,
                                   std::optional<table::BrandedId> version = std::nullopt) const;

  // publish without waiting (Engine::publish_async): answers the version at once (or a refusal,
  // nothing sent); `done` hears the outcome once the L1 row is in, on the thread
  // Engine::PublishDone names (it must not block).
  Result<table::BrandedId> publish_async(std::string_view key, const T& value,
                                         Engine::PublishDone done,
                                         std::optional<table::BrandedId> version = {}) const {
    Engine* e = live();
    if (e == nullptr) return table::Unexpected{gone()};
    return e->publish_async(*ref_, key, encode(value), std::move(done), version);
  }

  // publish, then wait until every live node applied it (Engine::publish_and_wait: the job,
  // broadcast and tracking lanes). Answers how many nodes applied it.
  Result<std::size_t> publish_and_wait(std::string_view key, const T& value,
                                       std::chrono::milliseconds deadline,
                                       std::optional<table::BrandedId> version = {}) const {
    Engine* e = live();
    if (e == nullptr) return table::Unexpected{gone()};
    return e->publish_and_wait(name(), key, encode(value), deadline, version);
  }

  // A delete every node hears (Engine::remove): a newer-wins tombstone through the table's lane.
  // Answers its version.
  Result<table::BrandedId> remove(std::string_view key,
                                  std::optional<table::BrandedId> version = std::nullopt) const {
    Engine* e = live();
    if (e == nullptr) return table::Unexpected{gone()};
    return e->remove(*ref_, key, version);
  }

  // Admin: deletes the key in L2 and L1, unconditionally (on_removal hears kInvalidate when
  // L1 held a row). True when L2 held the key.
  Result<bool> invalidate(std::string_view key) const;

  // The L1 map behind the handle, read-only (stats, diagnostics, reads in place): only what any
  // thread may call (l1_reader.h). The map's writer side belongs to the engine's writer thread.
  table::L1Reader l1() const noexcept;

 private:
  friend class Engine;
  Table(Engine& engine, Engine::TableRef& ref) noexcept
      : engine_(&engine), ref_(&ref), l1_(&Engine::l1_of(ref)), life_(Engine::life_of(ref)) {}

  // The engine while it exists, else nullptr (an empty handle, or one that outlived its engine).
  Engine* live() const noexcept {
    return life_ != nullptr && life_->engine_alive.load(std::memory_order_acquire) ? engine_
                                                                                   : nullptr;
  }
  // Why live() answered nullptr: no table declared (an empty handle), or the engine is gone.
  Error gone() const {
    return make_error_code(engine_ == nullptr ? Errc::kNoSuchCache : Errc::kStopped);
  }
  // A sampled read's timing, while the engine exists.
  void note(bool hit, std::int64_t t0) const noexcept {
    if (live() != nullptr) Engine::note_get(*ref_, hit, t0);
  }

  // The miss paths, out of line: a hit inlines only the map's visit (lanes_bench:
  // BM_Table_ReadL1Hit against BM_Table_MapVisitL1Hit).
  template <class Fn>
  [[gnu::noinline]] Result<Source> read_miss(std::string_view key, Fn& fn) const;
  [[gnu::noinline]] Result<T> get_miss(std::string_view key) const;

  // A read callback takes the value, or the value and the row's version.
  template <class Fn>
  static void give(Fn& fn, ValueView<T> value, std::string_view version) {
    if constexpr (std::is_invocable_v<Fn&, ValueView<T>, std::string_view>) {
      fn(value, version);
    } else {
      static_assert(std::is_invocable_v<Fn&, ValueView<T>>,
                    "a read callback takes (const T& value) or (const T& value, std::string_view "
                    "version) (std::string_view value for a std::string table)");
      fn(value);
    }
  }
  template <class Fn>
  static void call(Fn& fn, std::string_view value, std::string_view version) {
    give(fn, view_of<T>(value), version);
  }

  Engine* engine_ = nullptr;
  Engine::TableRef* ref_ = nullptr;
  const table::L1Map* l1_;  // the table's map, kept alive by life_ (empty once stopped)
  std::shared_ptr<const Engine::TableLife> life_;  // null for an empty handle
};

template <class T>
Table<T> Engine::table(std::string_view name) {
  return Table<T>(*this, resolve(name, typeid(T)));
}

template <class T>
std::string_view Table<T>::name() const noexcept {
  if (life_ == nullptr) return {};
  return life_->name;
}

template <class T>
table::L1Reader Table<T>::l1() const noexcept {
  return table::L1Reader(*l1_);
}

template <class T>
template <class Fn>
Result<Source> Table<T>::read(std::string_view key, Fn&& fn) const {
  // 1 in kGetSampleEvery reads per thread is timed (TableStats::get_hit_latency): a branch on a
  // thread-local counter here, the clock reads only on the sample.
  const bool timed = detail::sample_get();
  const std::int64_t t0 = timed ? base::steady_ns() : 0;
  // The hit needs no key gate: only gated keys ever enter L1, so a bad key simply misses here
  // and the miss path refuses it.
  if (l1_->visit(key, [&fn](std::string_view value, std::string_view version) {
        call(fn, value, version);
      })) {
    if (timed) [[unlikely]]
      note(true, t0);
    return Source::kL1;
  }
  auto r = read_miss(key, fn);
  if (timed) [[unlikely]]
    note(false, t0);
  return r;
}

template <class T>
template <class Fn>
Result<Source> Table<T>::read_miss(std::string_view key, Fn& fn) const {
  Engine* e = live();
  if (e == nullptr) return table::Unexpected{gone()};
  if (!table::epoch::has_reader_slot()) [[unlikely]]
    return table::Unexpected{make_error_code(Errc::kNoReaderSlot)};
  auto got = e->get(*ref_, key);
  if (!got) return table::Unexpected{got.error()};
  const std::string_view version = got->version ? got->version->view() : std::string_view();
  if (l1_->visit(key, [&fn](std::string_view value, std::string_view v) { call(fn, value, v); })) {
    return got->source;
  }
  // L1 did not keep it (full, refused by a newer drop, or already replaced): the loaded value.
  if constexpr (std::is_same_v<T, std::string>) {
    give(fn, std::string_view(got->value), version);
  } else {
    T value{};
    std::string why;
    if (!detail::decode_into(got->value, value, why)) {
      return table::Unexpected{make_error_code(Errc::kBadValue)};
    }
    give(fn, value, version);
  }
  return got->source;
}

template <class T>
Result<T> Table<T>::get(std::string_view key) const {
  const bool timed = detail::sample_get();  // as read()'s
  const std::int64_t t0 = timed ? base::steady_ns() : 0;
  std::optional<T> hit;
  if (l1_->visit(key, [&hit](std::string_view value, std::string_view) {
        hit.emplace(view_of<T>(value));
      })) {
    if (timed) [[unlikely]]
      note(true, t0);
    return std::move(*hit);
  }
  auto r = get_miss(key);
  if (timed) [[unlikely]]
    note(false, t0);
  return r;
}

template <class T>
template <class Fn>
bool Table<T>::try_read(std::string_view key, Fn&& fn) const noexcept {
  if (l1_->visit(key, [&fn](std::string_view value, std::string_view version) {
        call(fn, value, version);
      })) {
    return true;
  }
  if (live() != nullptr && Engine::try_refills(*ref_)) Engine::refill(*ref_, key);
  return false;
}

template <class T>
std::optional<T> Table<T>::try_get(std::string_view key) const
    noexcept(std::is_nothrow_copy_constructible_v<T>) {
  // Not through try_read, which is noexcept: a throwing copy there would end the process. The
  // map's visit closes its read section on the way out (a ReadGuard).
  std::optional<T> hit;
  auto copy = [&hit](const auto& v) { hit.emplace(v); };
  if (l1_->visit(key, [&copy](std::string_view value, std::string_view version) {
        call(copy, value, version);
      })) {
    return hit;
  }
  if (live() != nullptr && Engine::try_refills(*ref_)) Engine::refill(*ref_, key);
  return hit;
}

template <class T>
std::vector<Result<T>> Table<T>::get_many(std::span<const std::string_view> keys) const {
  std::vector<Result<T>> out;
  out.reserve(keys.size());
  std::vector<std::string_view> missed;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::optional<T> hit;
    if (l1_->visit(keys[i], [&hit](std::string_view value, std::string_view) {
          hit.emplace(view_of<T>(value));
        })) {
      out.emplace_back(std::move(*hit));
    } else {
      out.emplace_back(table::Unexpected{make_error_code(Errc::kMiss)});
      missed.push_back(keys[i]);
      at.push_back(i);
    }
  }
  if (missed.empty()) return out;
  Engine* e = live();
  if (e == nullptr) {
    for (const std::size_t i : at) out[i] = table::Unexpected{gone()};
    return out;
  }
  auto got = e->get_many(*ref_, missed);
  for (std::size_t j = 0; j < got.size(); ++j) {
    Result<T>& slot = out[at[j]];
    if (!got[j]) {
      slot = table::Unexpected{got[j].error()};
    } else if constexpr (std::is_same_v<T, std::string>) {
      slot = std::move(got[j]->value);
    } else {
      T value{};
      std::string why;
      if (detail::decode_into(got[j]->value, value, why)) {
        slot = std::move(value);
      } else {
        slot = table::Unexpected{make_error_code(Errc::kBadValue)};
      }
    }
  }
  return out;
}

template <class T>
Result<T> Table<T>::get_miss(std::string_view key) const {
  Engine* e = live();
  if (e == nullptr) return table::Unexpected{gone()};
  if (!table::epoch::has_reader_slot()) [[unlikely]]
    return table::Unexpected{make_error_code(Errc::kNoReaderSlot)};
  auto got = e->get(*ref_, key);
  if (!got) return table::Unexpected{got.error()};
  if constexpr (std::is_same_v<T, std::string>) {
    return std::move(got->value);
  } else {
    T value{};
    std::string why;
    if (!detail::decode_into(got->value, value, why)) {
      return table::Unexpected{make_error_code(Errc::kBadValue)};
    }
    return value;
  }
}

template <class T>
Result<table::BrandedId> Table<T>::put(std::string_view key, const T& value,
                                       std::optional<table::BrandedId> version) const {
  Engine* e = live();
  if (e == nullptr) return table::Unexpected{gone()};
  return e->put(*ref_, key, encode(value), version);
}

template <class T>
Result<table::BrandedId> Table<T>::publish(std::string_view key, const T& value,
                                           std::optional<table::BrandedId> version) const {
  Engine* e = live();
  if (e == nullptr) return table::Unexpected{gone()};
  return e->publish(*ref_, key, encode(value), version);
}

template <class T>
Result<bool> Table<T>::invalidate(std::string_view key) const {
  Engine* e = live();
  if (e == nullptr) return table::Unexpected{gone()};
  return e->invalidate(*ref_, key);
}

}  // namespace echo::engine
