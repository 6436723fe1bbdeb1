// SPDX-License-Identifier: MIT
// A read-only view of an L1 map: the members of L1Map that any thread may call, and nothing of
// its writer side. What application code gets (engine::Table<T>::l1()): a `const L1Map&` still
// reaches const writer-thread members (tombstone() racing the fill guard's growth frees what it
// reads; release_writer() unbinds the writer in debug builds; mark(), bytes(), memory_bytes(),
// value_bytes(), index_walks() read the writer's unsynchronised state).
//
// Why a separate class holding a pointer, not a base class of L1Map nor a view nested in
// engine::Table: the map's layout and its inline hit (visit) stay exactly as they are, a handle
// returns the view by value (copy it freely, as the handle), and the list of any-thread members
// lives here beside the map rather than in the engine. Each member forwards inline: a hit
// through the view compiles to the map's own.
#pragma once

#include <echo/table/epoch.h>
#include <echo/table/l1_map.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace echo::table {

class L1Reader {
 public:
  // The map must outlive the view (and every copy of it).
  explicit L1Reader(const L1Map& map) noexcept : map_(&map) {}

  // ---- Reads: any thread, concurrently with the map's writer (L1Map's readers).

  // Any thread: copies a live row's value (and its version when asked); false on a miss.
  bool get(std::string_view name, std::string& value, IdBytes* version = nullptr) const {
    return map_->get(name, value, version);
  }
  // Any thread: copies into `buf`, expiry judged at `now_ms` (on the map's clock).
  ReadResult read_at(std::string_view name, std::span<char> buf,
                     std::int64_t now_ms) const noexcept {
    return map_->read_at(name, buf, now_ms);
  }
  // Any thread: copies into `buf`, expiry judged by the map's read clock.
  ReadResult read(std::string_view name, std::span<char> buf) const noexcept {
    return map_->read(name, buf);
  }
  // Any thread, with a guard of that same thread: the live row, valid while `guard` lives.
  std::optional<RowView> find(const ReadGuard& guard, std::string_view name) const noexcept {
    return map_->find(guard, name);
  }
  // Any thread: runs fn(value, version) on the live row inside this thread's read section
  // (L1Map::visit: fn must not block, keep the views, or call the map's writer side).
  template <class Fn>
  bool visit(std::string_view name, Fn&& fn) const {
    return map_->visit(name, std::forward<Fn>(fn));
  }

  // Any thread: runs fn(RowView) on every live row (L1Map::for_each: chunked read sections;
  // fn must not block, keep the views, or read the map).
  template <class Fn>
  std::size_t for_each(Fn&& fn) const {
    return map_->for_each(std::forward<Fn>(fn));
  }

  // ---- Snapshots and constants: any thread.

  // Any thread: the linked rows (a relaxed snapshot).
  std::size_t size() const noexcept { return map_->size(); }
  // Any thread: the counters (relaxed snapshots, the readers' shards summed).
  L1Stats stats() const noexcept { return map_->stats(); }
  // Any thread: the index's buckets (fixed at construction).
  std::size_t bucket_count() const noexcept { return map_->bucket_count(); }
  // Any thread: what a row of this name and value size is charged against max_bytes.
  std::size_t row_charge(std::size_t name_size, std::size_t value_size) const noexcept {
    return map_->row_charge(name_size, value_size);
  }
  // Any thread: the map's clock now.
  std::int64_t now() const noexcept { return map_->now(); }
  // Any thread: the configured TTL and the jitter's span (fixed at construction).
  std::int64_t ttl_ms() const noexcept { return map_->ttl_ms(); }
  std::int64_t jitter_span_ms() const noexcept { return map_->jitter_span_ms(); }

 private:
  const L1Map* map_;
};

}  // namespace echo::table
