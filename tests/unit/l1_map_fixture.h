// SPDX-License-Identifier: MIT
// Shared by the L1 map's unit tests (l1_map_*_test.cc): the injected monotonic clock, ids by
// number, a map's config on that clock, and a row's value and expiry read back.
#pragma once

#include <echo/table/l1_map.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace echo::table {

// The injected monotonic clock (ms). relaxed: tests set it from the writer thread only.
inline std::atomic<std::int64_t> g_now{1'000'000};
inline std::int64_t fake_now() noexcept { return g_now.load(std::memory_order_relaxed); }
inline void set_now(std::int64_t t) { g_now.store(t, std::memory_order_relaxed); }

inline BrandedId name_id(std::uint64_t n) { return *BrandedId::encode("USR", 1'000'000 + n); }
inline BrandedId ver(std::uint64_t n) { return *BrandedId::encode("TXN", 5'000'000 + n); }

inline L1Config config(std::size_t max_size = 1000, std::int64_t ttl = 5000, double jitter = 0.0,
                       Eviction eviction = Eviction::kS3Fifo) {
  L1Config c;
  c.max_size = max_size;
  c.eviction = eviction;
  c.ttl_ms = ttl;
  c.jitter = jitter;
  c.clock = &fake_now;
  return c;
}

inline std::string read_value(const L1Map& m, const BrandedId& n) {
  std::string v;
  return m.get(n.view(), v) ? v : std::string("<miss>");
}

inline std::int64_t expiry_of(const L1Map& m, const BrandedId& n) {
  ReadGuard g;
  auto row = m.find(g, n.view());
  return row ? row->expires_at : -1;
}

}  // namespace echo::table
