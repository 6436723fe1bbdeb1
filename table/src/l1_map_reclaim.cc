// SPDX-License-Identifier: MIT
// Rows leaving the L1 map for good (l1_map.cc says how the map works): the epoch reclamation
// that frees retired rows once no reader section can see them (paced scans), clear, and the
// expiry sweep. The writer thread only.
#include <echo/table/l1_map.h>

#include <echo/base/counter.h>

#include <algorithm>
#include <limits>
#include <span>

namespace echo::table {

void L1Map::free_row(Row* row) noexcept {
  value_bytes_ -= row->value_size;
  const std::size_t n = row_bytes(row);
  Row::Prefix* prefix = &row->prefix();
  if (layout_.destroy != nullptr) layout_.destroy(row->value());
  row->~Row();
  std::destroy_at(prefix);
  arena_.deallocate(prefix, n);
}

void L1Map::reclaim() noexcept {
  check_writer("reclaim");
  tag_untagged();
  if (batch_count_ == 0) return publish_retired();
  scan_and_free(clock_());
}

std::int64_t L1Map::reclaim_due(std::int64_t now_ms) noexcept {
  check_writer("reclaim_due");
  tag_untagged();
  if (batch_count_ == 0) {
    publish_retired();
    return -1;
  }
  // The scan's membarrier interrupts every CPU the process runs on (a trading process's pinned
  // threads too): paced, not per retire or per idle pass.
  if (now_ms >= last_scan_ms_ + kScanIntervalMs || retired_rows_ >= kForceScanRows) {
    scan_and_free(now_ms);
    if (batch_count_ == 0) return -1;
  } else {
    publish_retired();
  }
  return last_scan_ms_ + kScanIntervalMs;
}

void L1Map::tag_untagged() noexcept {
  if (untagged_.head != nullptr) {
    // Every row on the untagged chain was unlinked before this advance: tag them with it.
    untagged_.epoch = epoch::advance();
    if (batch_count_ == kRetireBatches) {
      // Join the newest batch under the newer tag: its rows then wait for a later epoch than
      // they needed, which only delays their free.
      RetireChain& newest = batches_[(batch_head_ + batch_count_ - 1) % kRetireBatches];
      newest.tail->meta().retired_next = untagged_.head;
      newest.tail = untagged_.tail;
      newest.epoch = untagged_.epoch;
    } else {
      batches_[(batch_head_ + batch_count_) % kRetireBatches] = untagged_;
      ++batch_count_;
    }
    untagged_ = RetireChain{};
    untagged_rows_ = 0;
  }
}

void L1Map::scan_and_free(std::int64_t now_ms) noexcept {
  last_scan_ms_ = now_ms;
  base::solo_add(counters_.reclaim_scans);
  const std::uint64_t oldest = epoch::min_active();
  // Tags never decrease from the oldest batch to the newest, so the freeable batches come first.
  while (batch_count_ != 0 && batches_[batch_head_].epoch < oldest) {
    // The chain is walked once (each step a dependent load), kFreeAtOnce rows at a time into
    // `rows`; relinking and freeing then read the array. Three walks of the chain (prefetch,
    // relink, free) cost ~25% of a 1M-row drop (BM_L1Map_ApplyDrops; perf: relink_left and
    // reclaim).
    for (Row* r = batches_[batch_head_].head; r != nullptr;) {
      Row* rows[kFreeAtOnce];
      std::size_t n = 0;
      for (; r != nullptr && n < kFreeAtOnce; r = r->meta().retired_next) rows[n++] = r;
      relink_left(std::span<Row* const>(rows, n));
      for (std::size_t k = 0; k < n; ++k) {
        --retired_rows_;
        retired_bytes_ -= row_bytes(rows[k]);
        free_row(rows[k]);
      }
    }
    batches_[batch_head_] = RetireChain{};
    batch_head_ = (batch_head_ + 1) % kRetireBatches;
    --batch_count_;
    if (batch_count_ != 0) {
      counters_.retired_since.store(static_cast<std::uint64_t>(batches_[batch_head_].since),
                                    std::memory_order_relaxed);
    }
  }
  publish_retired();
}

void L1Map::clear() noexcept {
  check_writer("clear");
  // Nothing to drop: skip the walk of every bucket (a flush storm clears an empty map each pass).
  if (size() == 0) return;
  ++index_walks_;
  base::solo_add(counters_.invalidated, size());
  for (std::size_t i = 0; i <= mask_; ++i) {
    Row* r = buckets_[i].load(std::memory_order_relaxed);
    if (r == nullptr) continue;
    // release pairs with lookup()'s loads; the detached chain stays intact for readers on it.
    buckets_[i].store(nullptr, std::memory_order_release);
    while (r != nullptr) {
      Row* next = r->next.load(std::memory_order_relaxed);
      retire(r);
      r = next;
    }
  }
  size_.store(0, std::memory_order_relaxed);
  earliest_expiry_ = std::numeric_limits<std::int64_t>::max();
  // Every queue emptied with the index (not told: the caller knows; the engine tells kFlush),
  // and the rows that left them, still threaded through them, no longer are.
  const auto forget = [](Row* r) noexcept {
    for (; r != nullptr; r = r->meta().retired_next) r->meta().queue = kNoQueue;
  };
  forget(untagged_.head);
  for (std::size_t k = 0; k < batch_count_; ++k) {
    forget(batches_[(batch_head_ + k) % kRetireBatches].head);
  }
  small_ = Fifo{};
  main_ = Fifo{};
  heap_.clear();
  bytes_ = 0;
  counters_.bytes.store(0, std::memory_order_relaxed);
}

std::size_t L1Map::drop_expired(std::int64_t now, bool inclusive) noexcept {
  ++index_walks_;
  std::size_t n = 0;
  std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i <= mask_; ++i) {
    std::atomic<Row*>* link = &buckets_[i];
    for (Row* r = link->load(std::memory_order_relaxed); r != nullptr;
         r = link->load(std::memory_order_relaxed)) {
      const bool expired = inclusive ? r->expires_at <= now : r->expires_at < now;
      if (expired) {
        take_out(r);
        unlink(link, r);
        removed(r, {}, RemovalCause::kExpired);
        retire(r);
        ++n;
      } else {
        earliest = std::min(earliest, r->expires_at);
        link = &r->next;
      }
    }
  }
  earliest_expiry_ = earliest;
  return n;
}

std::size_t L1Map::sweep(std::int64_t now_ms) noexcept {
  check_writer("sweep");
  // earliest_expiry_ bounds every row's expires_at from below: at or before it nothing is
  // expired (the test here is expires_at < now), so skip the walk.
  const std::size_t n =
      size() == 0 || now_ms <= earliest_expiry_ ? 0 : drop_expired(now_ms, /*inclusive=*/false);
  base::solo_add(counters_.swept, n);
  base::solo_add(counters_.sweeps);
  // The swept rows wait for the writer's paced reclaim_due() (a scan per sweep would be one
  // more membarrier per sweep_ms per table).
  publish_retired();
  return n;
}

}  // namespace echo::table
