// SPDX-License-Identifier: MIT
// The L1 map's row allocator: size classes of 16 bytes up to 1 KiB carved from chunks that grow
// to 2 MiB (2 MiB-aligned, madvise'd for transparent huge pages), larger rows from operator new.
// Why: a hit touches a bucket and a row; with rows scattered over 4 KiB pages every hit also
// pays a TLB miss (a 2-D page walk under a hypervisor). BM_L1Map_GetHitAt, run with and without
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1, showed a 2x difference that this arena removes.
// Writer-thread only: rows are allocated on insert and freed by reclaim, both on the writer.
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace echo::table {

// Large writer-side arrays (the map's index, the fill guard's slots) on transparent huge pages:
// at least 2 MiB they come 2 MiB-aligned and madvise'd, so a random bucket or tombstone costs no
// TLB miss (a 2-D page walk under a hypervisor). BM_L1Map_ApplyDrops at 1M rows, THP "madvise"
// against "always" before these were advised: 6.2M against 7.2M drops/s. Smaller arrays come
// cache-line aligned. Free with huge_page_free (it is std::free). Throws std::bad_alloc.
void* huge_page_alloc(std::size_t bytes);
void huge_page_free(void* p) noexcept;

// std::vector's allocator over huge_page_alloc.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(huge_page_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { huge_page_free(p); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) = default;
};

class RowArena {
 public:
  static constexpr std::size_t kGranule = 16;
  static constexpr std::size_t kMaxPooled = 1024;
  static constexpr std::size_t kFirstChunk = std::size_t{64} << 10;
  static constexpr std::size_t kHugeChunk = std::size_t{2} << 20;

  RowArena() = default;
  ~RowArena();
  RowArena(const RowArena&) = delete;
  RowArena& operator=(const RowArena&) = delete;

  // A block of at least n bytes, 16-byte aligned. Writer thread. Throws std::bad_alloc.
  void* allocate(std::size_t n);
  // Returns a block from allocate(n) (same n). Writer thread; no reader may still see it.
  void deallocate(void* p, std::size_t n) noexcept;

  // Bytes held from the system: chunks plus live large blocks. Writer thread.
  std::size_t reserved_bytes() const noexcept { return chunk_bytes_ + large_bytes_; }

 private:
  static constexpr std::size_t kClasses = kMaxPooled / kGranule;
  static bool pooled(std::size_t n) noexcept;
  void new_chunk(std::size_t at_least);

  std::array<void*, kClasses> free_{};  // per class, linked through each block's first word
  char* cur_ = nullptr;
  std::size_t left_ = 0;
  std::size_t next_chunk_ = kFirstChunk;
  std::size_t chunk_bytes_ = 0;
  std::size_t large_bytes_ = 0;
  std::vector<std::pair<void*, std::size_t>> chunks_;
};

}  // namespace echo::table
