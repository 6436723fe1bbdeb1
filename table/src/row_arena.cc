// SPDX-License-Identifier: MIT
// RowArena: bump allocation from growing chunks, a LIFO free list per 16-byte size class.
// Under AddressSanitizer every block comes from operator new instead, so a use after free of a
// row stays visible to ASan (a pooled block would be reused silently).
#include <echo/table/row_arena.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define ECHO_ROW_ARENA_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ECHO_ROW_ARENA_BYPASS 1
#endif
#endif

namespace echo::table {

bool RowArena::pooled(std::size_t n) noexcept {
#ifdef ECHO_ROW_ARENA_BYPASS
  static_cast<void>(n);
  return false;
#else
  return n <= kMaxPooled;
#endif
}

void* huge_page_alloc(std::size_t bytes) {
  const std::size_t align = bytes >= RowArena::kHugeChunk ? RowArena::kHugeChunk : 64;
  // aligned_alloc wants a multiple of the alignment.
  void* p = std::aligned_alloc(align, (std::max<std::size_t>(bytes, 1) + align - 1) & ~(align - 1));
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only, as for the arena's chunks.
  if (align == RowArena::kHugeChunk) static_cast<void>(::madvise(p, bytes, MADV_HUGEPAGE));
#endif
  return p;
}

void huge_page_free(void* p) noexcept { std::free(p); }

RowArena::~RowArena() {
  for (const auto& chunk : chunks_) huge_page_free(chunk.first);
}

void RowArena::new_chunk(std::size_t at_least) {
  std::size_t size = next_chunk_;
  while (size < at_least) size *= 2;
  void* p = huge_page_alloc(size);  // 2 MiB-aligned and advised once the chunks reach 2 MiB
  chunks_.emplace_back(p, size);
  chunk_bytes_ += size;
  // The old chunk's tail (less than one block) is abandoned: at most kMaxPooled per chunk.
  cur_ = static_cast<char*>(p);
  left_ = size;
  if (next_chunk_ < kHugeChunk) next_chunk_ *= 2;
}

void* RowArena::allocate(std::size_t n) {
  if (!pooled(n)) {
    void* p = ::operator new(n);
    large_bytes_ += n;
    return p;
  }
  const std::size_t c = (n + kGranule - 1) / kGranule - (n != 0);
  if (void* p = free_[c]) {
    std::memcpy(&free_[c], p, sizeof(void*));
    return p;
  }
  const std::size_t size = (c + 1) * kGranule;
  if (left_ < size) new_chunk(size);
  void* p = cur_;
  cur_ += size;
  left_ -= size;
  return p;
}

void RowArena::deallocate(void* p, std::size_t n) noexcept {
  if (!pooled(n)) {
    large_bytes_ -= n;
    ::operator delete(p);
    return;
  }
  const std::size_t c = (n + kGranule - 1) / kGranule - (n != 0);
  std::memcpy(p, &free_[c], sizeof(void*));
  free_[c] = p;
}

}  // namespace echo::table
