// SPDX-License-Identifier: MIT
// Counted allocations for the L1 map's tests that count them: replaces the global operator
// new/delete, so include it in exactly one source file of a test binary, before anything else.
// The replacements forward to malloc/free; g++ 12 then flags every inlined new/delete pair of the
// TU as mismatched, although the pair is ours.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <atomic>
#include <cstdlib>
#include <new>

// Counted allocations: every operator new/delete of this binary moves `g_live`, so a scope that
// builds and destroys a map must leave it where it found it (a leak shows; ASan catches the
// double free).
// `g_news` counts every allocation, for scopes that must make none.
namespace {
std::atomic<long> g_live{0};
std::atomic<long> g_news{0};
}  // namespace
void* operator new(std::size_t n) {
  // relaxed: counters read after the scope's threads are joined.
  g_live.fetch_add(1, std::memory_order_relaxed);
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void* operator new(std::size_t n, std::align_val_t a) {
  g_live.fetch_add(1, std::memory_order_relaxed);
  g_news.fetch_add(1, std::memory_order_relaxed);
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete[](void* p, std::align_val_t) noexcept { operator delete(p); }
