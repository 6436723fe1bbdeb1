// SPDX-License-Identifier: MIT
// The process-wide epoch domain behind ReadGuard: the slot array, the global epoch, slot claim
// and release, and the writer's scan for the oldest announced epoch.
#include <echo/table/epoch.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace echo::table::epoch {
namespace {

// Constant-initialised (atomics' constexpr constructors), never destroyed before a reader thread
// that outlives main() releases its slot.
constinit ReaderSlot g_slots[kMaxReaderThreads];
alignas(kCacheLine) constinit std::atomic<std::uint32_t> g_high_water{0};

// Releases a thread's slot at thread exit: a pthread key's destructor, not a thread_local's.
// glibc runs every C++ thread_local destructor first and the key destructors after them, so a
// thread_local whose destructor still reads L1 (an application's per-thread cache, say) reads
// under the slot it has; a thread_local releaser, built at the first read and so destroyed before
// any thread_local built earlier, let such a read claim a slot whose release had already run: a
// slot leaked per thread exit, and the 513th exit aborted. A read in a later key destructor
// claims a slot again and sets the key again, which makes glibc run this once more. The main
// thread runs no key destructors: its slot stays claimed until the process ends.
void release_slot(void* slot) noexcept {
  ReaderState& t = t_reader;
  auto* s = static_cast<ReaderSlot*>(slot);
  // A thread exiting inside a guard would be a caller bug; make the slot idle regardless, so a
  // leaked guard cannot hold reclamation back forever.
  s->announced.store(kEpochIdle, std::memory_order_release);
  // release pairs with register_reader()'s acquire CAS: the next owner of this index sees every
  // counter store this thread made to its per-map shards.
  s->in_use.store(false, std::memory_order_release);
  if (t.slot == s) t.slot = nullptr;
}

pthread_key_t release_key() noexcept {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    if (pthread_key_create(&k, [](void* slot) { release_slot(slot); }) != 0) {
      std::fputs("echo::table::epoch: pthread_key_create failed\n", stderr);
      std::abort();
    }
    return k;
  }();
  return key;
}

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
    // Pairs with reader_high_water()'s acquire: a scan that covers index i also sees the slot's
    // claim.
    // seq_cst (once per thread): the writer's scan bound must sit in the same single order as
    // min_active()'s fence and enter()'s exchange, or a scan could read the old bound after this
    // reader's first section had already read a bucket it then unlinked (a formal use-after-free
    // that x86's locked CAS and ARMv8's release-then-acquire happen to rule out).
    while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1, std::memory_order_seq_cst,
                                                             std::memory_order_relaxed)) {
    }
    t.slot = &g_slots[i];
    t.index = i;
    // The key's value is the slot its destructor releases (no allocation: glibc keeps the first
    // 32 keys' values in the thread descriptor).
    pthread_setspecific(release_key(), t.slot);
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
