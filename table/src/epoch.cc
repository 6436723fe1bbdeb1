// SPDX-License-Identifier: MIT
// The process-wide epoch domain behind ReadGuard: the slot array, the global epoch, slot claim
// and release, and the writer's scan for the oldest announced epoch.
#include <echo/table/epoch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace echo::table::epoch {
namespace {

// Constant-initialised (atomics' constexpr constructors), never destroyed before a reader thread
// that outlives main() releases its slot.
constinit ReaderSlot g_slots[kMaxReaderThreads];
alignas(kCacheLine) constinit std::atomic<std::uint32_t> g_high_water{0};

// Releases the thread's slot at thread exit. Separate from t_reader so that the hot path's TLS
// access needs no init guard.
struct SlotRelease {
  bool armed = false;
  ~SlotRelease() {
    ReaderState& t = t_reader;
    if (t.slot == nullptr) return;
    // A thread exiting inside a guard would be a caller bug; make the slot idle regardless, so a
    // leaked guard cannot hold reclamation back forever.
    t.slot->announced.store(kEpochIdle, std::memory_order_release);
    // release pairs with register_reader()'s acquire CAS: the next owner of this index sees every
    // counter store this thread made to its per-map shards.
    t.slot->in_use.store(false, std::memory_order_release);
    t.slot = nullptr;
  }
};
thread_local SlotRelease t_release;

}  // namespace

constinit thread_local ReaderState t_reader;
alignas(kCacheLine) constinit std::atomic<std::uint64_t> g_epoch{1};

void register_reader() noexcept {
  ReaderState& t = t_reader;
  if (t.slot != nullptr) return;
  for (std::uint32_t i = 0; i < kMaxReaderThreads; ++i) {
    bool expected = false;
    if (g_slots[i].in_use.load(std::memory_order_relaxed)) continue;
    // acquire pairs with SlotRelease's release store (the previous owner's shard writes).
    if (!g_slots[i].in_use.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                                   std::memory_order_relaxed)) {
      continue;
    }
    std::uint32_t hw = g_high_water.load(std::memory_order_relaxed);
    // release pairs with reader_high_water()'s acquire: a scan that covers index i also sees the
    // slot's claim.
    while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1, std::memory_order_release,
                                                             std::memory_order_relaxed)) {
    }
    t.slot = &g_slots[i];
    t.index = i;
    // First use constructs the releaser, which registers its destructor for this thread.
    t_release.armed = true;
    return;
  }
  std::fputs(
      "echo::table::epoch: more than kMaxReaderThreads (512) live reader threads; "
      "raise kMaxReaderThreads in echo/table/epoch.h\n",
      stderr);
  std::abort();
}

std::uint32_t reader_high_water() noexcept {
  // acquire pairs with register_reader()'s release CAS.
  return g_high_water.load(std::memory_order_acquire);
}

std::uint64_t min_active() noexcept {
  // seq_cst fence pairs with enter()'s seq_cst exchange (see there): after it, a slot that still
  // reads idle belongs to a reader whose section cannot reach anything unlinked before this point.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint64_t m = kEpochIdle;
  const std::uint32_t n = reader_high_water();
  for (std::uint32_t i = 0; i < n; ++i) {
    // acquire pairs with exit()'s release store: reads made in a closed section happen before
    // whatever the caller frees next.
    m = std::min(m, g_slots[i].announced.load(std::memory_order_acquire));
  }
  return m;
}

}  // namespace echo::table::epoch
