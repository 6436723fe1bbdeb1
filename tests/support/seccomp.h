// SPDX-License-Identifier: MIT
// A kernel refusal staged in a test: a seccomp filter on the calling thread (and on the threads
// it starts from then on, nothing else) that answers one syscall with an errno, as a container's
// profile or a privilege drop between construction and start would. Used for membarrier (the
// doorbell's fallback) and sched_setaffinity (a writer pin the cpuset refuses).
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace echo::test {

// The audit arch of this build, which the filter checks before it reads a syscall number.
#if defined(__x86_64__)
inline constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "tests/support/seccomp.h: name this architecture's AUDIT_ARCH_* value"
#endif

// From now on, syscall `nr` fails with `err` on this thread and the threads it starts; every other
// syscall, and every syscall of another arch, is allowed. False if the kernel refused the filter.
inline bool refuse_syscall_on_this_thread(std::uint32_t nr, std::uint32_t err) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

}  // namespace echo::test
