// SPDX-License-Identifier: MIT
// Relaxed event counters (std::atomic, read anywhere with relaxed loads), and the two ways to add
// to one, named by who writes it. A counter orders nothing: neither add is synchronisation.
// Both are always inlined, as the hand-written load + store and fetch_add they replaced were:
// without it g++ 12 left calls to an out-of-line solo_add in the writer's ring delivery and
// doorbell wait.
#pragma once

#include <atomic>
#include <concepts>
#include <type_traits>

namespace echo::base {

// Only one thread ever writes c; readers anywhere: a plain load + store, no read-modify-write
// (no locked instruction). Exact only because no other thread stores c; a second writer would
// lose increments — use shared_add then.
template <std::unsigned_integral T>
[[gnu::always_inline]] inline void solo_add(std::atomic<T>& c,
                                            std::type_identity_t<T> n = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Any thread: fetch_add, relaxed.
template <std::unsigned_integral T>
[[gnu::always_inline]] inline void shared_add(std::atomic<T>& c,
                                              std::type_identity_t<T> n = 1) noexcept {
  c.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace echo::base
