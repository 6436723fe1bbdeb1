// SPDX-License-Identifier: MIT
// The process-wide epoch domain behind ReadGuard: the slot array, the global epoch, slot claim
// and release, and the writer's scan for the oldest announced epoch.
#include <echo/table/epoch.h>

#include <echo/base/cache_line.h>
#include <echo/base/counter.h>

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace echo::table::epoch {
namespace {

// Constant-initialised (atomics' constexpr constructors), never destroyed before a reader thread
// that outlives main() releases its slot.
constinit ReaderSlot g_slots[kMaxReaderThreads];
alignas(base::kCacheLine) constinit std::atomic<std::uint32_t> g_high_water{0};

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

// The key whose destructor releases a thread's slot, created once (a magic static: thread-safe,
// allocation-free in glibc). nullptr if the process is out of keys (EAGAIN): then every reader is
// refused (register_reader), since no slot it claimed would ever be released.
const pthread_key_t* release_key() noexcept {
  struct Key {
    pthread_key_t key;
    bool ok;
  };
  static const Key k = [] {
    Key r{};
    r.ok = pthread_key_create(&r.key, [](void* slot) { release_slot(slot); }) == 0;
    return r;
  }();
  return k.ok ? &k.key : nullptr;
}

}  // namespace

constinit thread_local ReaderState t_reader;
alignas(base::kCacheLine) constinit std::atomic<std::uint64_t> g_epoch{1};
// Read by every enter(), written once: on the epoch's read-mostly line would be fine too, but its
// own line keeps g_epoch's advances from invalidating it.
alignas(base::kCacheLine) constinit std::atomic<bool> g_asymmetric{false};
namespace {
alignas(base::kCacheLine) constinit std::atomic<std::uint64_t> g_barrier_failures{0};

bool symmetric_forced() noexcept {
#if defined(__SANITIZE_THREAD__)
  return true;  // TSan models no membarrier: the asymmetric handshake would read as a race
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  // Read once, at the domain's first use; the library never writes the environment.
  const char* env = std::getenv("ECHO_EPOCH_SYMMETRIC");  // NOLINT(concurrency-mt-unsafe)
  return env != nullptr && env[0] == '1';
}
}  // namespace

bool asymmetric() noexcept {
  static const bool on = [] {
    bool ok = false;
    if (!symmetric_forced()) {
      // Registration is per process and idempotent (the ring's doorbell may have made it too).
      const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
      ok = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
           ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    }
    // relaxed: the magic static's own synchronisation publishes it to every thread that calls
    // asymmetric(); a reader calls it in register_reader() before its first section, so a
    // reader never runs a section under a mode its writers did not choose.
    g_asymmetric.store(ok, std::memory_order_relaxed);
    return ok;
  }();
  return on;
}

std::uint64_t barrier_failures() noexcept {
  return g_barrier_failures.load(std::memory_order_relaxed);
}

bool register_reader() noexcept {
  ReaderState& t = t_reader;
  if (t.slot != nullptr) return true;
  (void)asymmetric();  // the handshake's mode is fixed before this thread's first section
  for (std::uint32_t i = 0; i < kMaxReaderThreads; ++i) {
    bool expected = false;
    if (g_slots[i].in_use.load(std::memory_order_relaxed)) continue;
    // acquire pairs with release_slot()'s release store of in_use (the previous owner's shard
    // writes).
    if (!g_slots[i].in_use.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                                   std::memory_order_relaxed)) {
      continue;
    }
    // The key's value is the slot its destructor releases (no allocation: glibc keeps the first
    // 32 keys' values in the thread descriptor). Checked: a key that cannot be set (EINVAL,
    // ENOMEM elsewhere) would leave nothing to release the slot at thread exit, one slot leaked
    // per such thread; give it back and refuse this thread instead.
    const pthread_key_t* key = release_key();
    if (key == nullptr || pthread_setspecific(*key, &g_slots[i]) != 0) {
      // release pairs with the acquire CAS above (of the next claimant): nothing was written.
      g_slots[i].in_use.store(false, std::memory_order_release);
      return false;
    }
    std::uint32_t hw = g_high_water.load(std::memory_order_relaxed);
    // The claimed slot must be inside every later min_active() scan before this thread's first
    // section reads a bucket. seq_cst (once per thread): the writer's scan bound must sit in the
    // same single total order as min_active()'s fence and enter()'s exchange, or a scan could
    // read the old bound after this reader's first section had already read a bucket it then
    // unlinked (a formal use-after-free that x86's locked CAS and ARMv8's release-then-acquire
    // happen to rule out). Also the release that reader_high_water()'s acquire pairs with.
    while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1, std::memory_order_seq_cst,
                                                             std::memory_order_relaxed)) {
    }
    t.slot = &g_slots[i];
    t.index = i;
    return true;
  }
  return false;
}

std::uint32_t reader_high_water() noexcept {
  // acquire pairs with register_reader()'s seq_cst CAS (a release): a scan covering index i sees
  // that slot's claim.
  return g_high_water.load(std::memory_order_acquire);
}

std::uint64_t min_active() noexcept {
  // The argument that no reader the scan misses can reach a row the caller frees is this fence,
  // not an acquire/release pairing: the fence and every reader's seq_cst exchange in enter() (and
  // its seq_cst pointer loads in L1Map::lookup) lie in one total order S. If a reader's exchange
  // precedes the fence in S, the loads below see its announcement (or a later store of that
  // slot). If the fence precedes it, every pointer load of that section follows the fence in S,
  // so it sees each unlink the writer made before calling min_active(), and the section cannot
  // reach a row retired before this call, however old the epoch it announces.
  //
  // Asymmetric mode (asymmetric()): readers announce with a plain store, so the fence above
  // orders only this thread; membarrier(PRIVATE_EXPEDITED) puts every running thread of the
  // process through a full barrier before it returns (a thread not running passed one when it
  // was switched out). Then, as above: either a reader's announcement reached memory before its
  // barrier and the loads below see it, or its pointer loads come after its barrier and see
  // every unlink made before this call. When the kernel refuses (a seccomp filter installed on
  // this thread after the probe, ENOMEM), nothing is proven: answer 0, under which no tag (the
  // epoch starts at 1) is freeable. The rows wait (L1Stats::retired_bytes shows them); counted.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (asymmetric() && ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
    base::shared_add(g_barrier_failures);  // a counter: orders nothing
    return 0;
  }
  std::uint64_t m = kEpochIdle;
  const std::uint32_t n = reader_high_water();
  for (std::uint32_t i = 0; i < n; ++i) {
    // acquire pairs with exit()'s release store of kEpochIdle: the row reads of a section that
    // has closed happen before whatever the caller frees next.
    m = std::min(m, g_slots[i].announced.load(std::memory_order_acquire));
  }
  return m;
}

}  // namespace echo::table::epoch

namespace echo::table {

void ReadGuard::wrong_thread(const char* what) noexcept {
  std::fprintf(stderr,
               "echo::table::ReadGuard %s on a thread that did not build it: a guard protects "
               "only its own thread's reads (its section is that thread's reader slot)\n",
               what);
  std::abort();
}

}  // namespace echo::table
