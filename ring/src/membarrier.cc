// SPDX-License-Identifier: MIT
// The heavy half of an asymmetric barrier (Linux membarrier, as folly's asymmetricHeavyBarrier
// and liburcu use it): the consumer pays one syscall when it is about to park, so producers
// pay only a compiler barrier on every publish instead of a full fence. Opt-in
// (WaitConfig::asymmetric_barrier): it saves ~0.75 ns per publish (BM_SpscRing_PublishDrain),
// and each park's IPI lands on every CPU running a thread of the process, a busy-polling
// thread's p99.9 4.4x (bench/busy_poll_bench.cc).
#include <echo/ring/doorbell.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace echo::ring::detail {

bool asymmetric_barrier_available() noexcept {
  // Registration is per process; probed once. A kernel or seccomp policy without it leaves the
  // ring on the symmetric (seq_cst) handshake. A later refusal is the consumer's to find
  // (Doorbell's fallback).
  static const bool available = [] {
    const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  return available;
}

bool register_asymmetric_barrier() noexcept {
  // Idempotent (0 when the process is already registered); made by the consumer thread because a
  // seccomp filter is per thread: the probe above ran wherever the first Doorbell was built.
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool heavy_barrier() noexcept {
  // On 0, every running thread of the process passed a full memory barrier before this returned.
  // On -1 (EPERM from a seccomp filter, ENOMEM, ...) nothing happened: the caller must not count
  // on it (Doorbell falls back to the symmetric handshake).
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

}  // namespace echo::ring::detail
