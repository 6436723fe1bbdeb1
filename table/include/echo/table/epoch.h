// SPDX-License-Identifier: MIT
// Epoch-based reclamation for the L1 map: readers announce the global epoch in a per-thread slot
// (their own cache line) for the length of a read; a writer frees a retired row only once every
// announced epoch has moved past the epoch it was retired in. One process-wide domain, so a thread
// needs one slot however many maps it reads; each map keeps its own retire list (l1_map.h).
#pragma once

#include <echo/base/cache_line.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <thread>

namespace echo::table {

// Concurrent reader threads the domain can hold. Slots are reused when a thread exits. A thread
// that finds none free is refused, not aborted: its ReadGuard is not protecting(), and the map's
// reads answer it a miss (counted in L1Stats::reader_slot_refusals) until a slot frees up.
inline constexpr std::size_t kMaxReaderThreads = 512;
// An idle slot announces "no epoch": larger than any epoch, so it never holds a row back.
inline constexpr std::uint64_t kEpochIdle = std::numeric_limits<std::uint64_t>::max();

namespace epoch {

struct alignas(base::kCacheLine) ReaderSlot {
  // kEpochIdle, or the epoch this thread read before its current critical section. Written only
  // by the owning thread; read by writers in min_active().
  std::atomic<std::uint64_t> announced{kEpochIdle};
  // Claimed by a thread on its first read, released by its thread_local destructor.
  std::atomic<bool> in_use{false};
};
static_assert(
    sizeof(ReaderSlot) == base::kCacheLine,
    "one slot per cache line: an announcement must never invalidate another reader's line");

// The reader's thread-local state. constinit + trivially destructible, so the hot path reads it
// with a plain TLS access (no init guard); the slot is released by a separate thread_local.
struct ReaderState {
  ReaderSlot* slot = nullptr;
  std::uint32_t index = 0;  // slot index, also the shard index for per-map reader counters
  std::uint32_t nest = 0;   // critical sections open on this thread (guards nest)
};

extern constinit thread_local ReaderState t_reader;
// The global epoch. Advanced only by fetch_add (writers' reclaim), read by every reader on entry.
extern std::atomic<std::uint64_t> g_epoch;
// True when readers announce with a plain store and writers pay a membarrier(2) per scan
// (asymmetric()); set once, before any reader section opens, never cleared.
extern std::atomic<bool> g_asymmetric;

// Whether this process runs the asymmetric handshake: membarrier(PRIVATE_EXPEDITED) is offered
// and registered (probed once; ECHO_EPOCH_SYMMETRIC=1 in the environment, or a TSan build, which
// cannot see a membarrier's ordering, keeps the symmetric seq_cst handshake). Why: a hit's
// seq_cst exchange on entry was the largest share of a hit that was not the lookup itself
// (BM_L1Map_GetHitAt, bench/l1_map_bench.cc); a map's scan runs at most once per
// L1Map::kScanIntervalMs (L1Map::reclaim_due) and can afford a syscall. Its price is paid by
// the process's other threads too: each scan interrupts every CPU one of them runs on. Any thread;
// thread-safe (a magic static).
bool asymmetric() noexcept;

// Slow path of enter(): claims a free slot (lock-free CAS scan) and registers its release at
// thread exit (a pthread key's destructor, which runs after every C++ thread_local destructor:
// epoch.cc). False, with no slot held, if all kMaxReaderThreads slots are live or the key cannot
// be set (then nothing would release the slot at thread exit); the next enter() tries again.
// Runs once per thread (again if a key destructor reads after the release); allocates nothing.
bool register_reader() noexcept;

// Opens a read-side critical section (nests) and returns true; false if this thread holds no slot
// and cannot get one (register_reader): then no section is open, nothing may be read, and exit()
// must not be called. Reader thread; lock-free, no allocation, no syscall; writes only this
// thread's slot.
inline bool enter() noexcept {
  ReaderState& t = t_reader;
  if (t.nest != 0) {
    ++t.nest;
    return true;
  }
  if (t.slot == nullptr) [[unlikely]] {
    if (!register_reader()) return false;
  }
  t.nest = 1;
  // acquire pairs with advance()'s release: every row unlinked before that advance is invisible to
  // this section, which is what lets a writer free rows retired before the epoch we announce.
  const std::uint64_t e = g_epoch.load(std::memory_order_acquire);
  // The StoreLoad edge between this announcement and the section's pointer loads, paid on the
  // side that runs rarely when the kernel allows it (asymmetric(), decided once per process
  // before any section opens: register_reader). relaxed: never switches after that.
  if (g_asymmetric.load(std::memory_order_relaxed)) [[likely]] {
    // relaxed store + compiler-only fence: the writer's membarrier(PRIVATE_EXPEDITED) in
    // min_active() puts this thread through a full barrier (or it was not running, and a context
    // switch is one), so either the writer's scan sees this announcement or this section's
    // pointer loads see every unlink made before that barrier. The signal fence keeps the
    // compiler from sinking the store below the loads (folly's asymmetricLightBarrier).
    t.slot->announced.store(e, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    // seq_cst RMW: the StoreLoad edge. Pairs with the seq_cst fence in min_active(): either the
    // writer's scan sees this announcement, or this section's seq_cst pointer loads see every
    // unlink the writer made before its fence (so an unseen reader can never reach a freed row).
    t.slot->announced.exchange(e, std::memory_order_seq_cst);
  }
  return true;
}

// Closes the section opened by the matching enter() that returned true. Reader thread; no
// allocation.
inline void exit() noexcept {
  ReaderState& t = t_reader;
  if (--t.nest != 0) return;
  // release pairs with min_active()'s acquire load: every read of a row in this section happens
  // before the writer that sees the slot idle frees that row.
  t.slot->announced.store(kEpochIdle, std::memory_order_release);
}

// True when this thread holds a reader slot (it read before, and was not refused one). Any
// thread; one thread-local load.
inline bool has_reader_slot() noexcept { return t_reader.slot != nullptr; }

// This thread's slot index, also its per-map counter shard. Reader thread, inside a section
// (enter() returned true), so the thread holds a slot.
inline std::uint32_t reader_index() noexcept { return t_reader.index; }

// Number of slot indices ever claimed (an upper bound for per-thread shard scans). Any thread.
std::uint32_t reader_high_water() noexcept;

// Writer: closes the current epoch and returns it. Every row a writer unlinked before this call
// may be tagged with the returned value. acq_rel fetch_add: its release half pairs with enter()'s
// acquire load (the RMW chain keeps the release sequence unbroken across several writers).
inline std::uint64_t advance() noexcept { return g_epoch.fetch_add(1, std::memory_order_acq_rel); }

// Writer: the smallest epoch announced by a reader inside a section, or kEpochIdle if none. A row
// tagged t (by advance()) may be freed once t < min_active(). Scans reader_high_water() slots.
// Asymmetric mode: 0 when the kernel refused this scan's membarrier (nothing may be freed then;
// counted in barrier_failures()).
std::uint64_t min_active() noexcept;

// Scans whose membarrier the kernel refused (min_active() answered 0). Any thread.
std::uint64_t barrier_failures() noexcept;

}  // namespace epoch

// RAII read-side critical section. Reader thread (any); nests; no lock, no allocation, no
// syscall. Rows seen through a map while a guard lives stay valid until it is destroyed.
// A guard protects only the thread that built it: the section is that thread's slot. Debug
// builds abort when another thread uses or destroys it (check_thread).
// protecting() is false when the thread could get no reader slot (epoch.h, kMaxReaderThreads):
// such a guard opened no section, and a map read under it answers a miss without looking.
class ReadGuard {
 public:
  ReadGuard() noexcept : protecting_(epoch::enter()) {}
  ~ReadGuard() {
    check_thread("destroyed");
    if (protecting_) epoch::exit();
  }
  ReadGuard(const ReadGuard&) = delete;
  ReadGuard& operator=(const ReadGuard&) = delete;

  bool protecting() const noexcept { return protecting_; }

  // Debug builds: aborts unless the calling thread built this guard. Release builds: nothing.
  void check_thread([[maybe_unused]] const char* what) const noexcept {
#ifndef NDEBUG
    if (owner_ != std::this_thread::get_id()) wrong_thread(what);
#endif
  }

 private:
  // Prints "echo::table::ReadGuard <what> on a thread that did not build it ..." and aborts.
  // Out of line: cold.
  [[noreturn]] static void wrong_thread(const char* what) noexcept;
  // The building thread (debug builds only; a release build leaves it empty and never reads it:
  // the member is there in both so the layout does not depend on NDEBUG).
#ifndef NDEBUG
  std::thread::id owner_ = std::this_thread::get_id();
#else
  std::thread::id owner_{};
#endif
  bool protecting_;
};

}  // namespace echo::table
