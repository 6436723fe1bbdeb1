// SPDX-License-Identifier: MIT
// The hot operations, each in its own extern "C" function so callgrind can collect exactly one
// of them (--toggle-collect=echo_perf_<op>): ring publish+drain of one item, an L1 hit, the apply
// of one coherence drop, the decode of one push. callgrind_ops.sh divides each function's
// instructions by N. Each op checks its own answer (what was consumed equals what was produced);
// a wrong answer exits 1.
#include <echo/io/resp3_decoder.h>
#include <echo/ring/spsc_ring.h>
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace {

using echo::table::BrandedId;

int fails = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ops: %s gave a wrong answer\n", what);
    ++fails;
  }
}

std::string push_frame() {
  return ">3\r\n$7\r\nmessage\r\n$11\r\necc:{t}:coh\r\n$29\r\nUSR0KHTOWnGLuC:USR0NgWEfAEJfs\r\n";
}

}  // namespace

extern "C" {

__attribute__((noinline)) std::uint64_t echo_perf_ring(echo::ring::SpscRing<std::uint64_t>& ring,
                                                       std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ring.try_publish(std::uint64_t{i});
    ring.drain(1, [&sum](std::uint64_t& v) noexcept { sum += v; });
  }
  return sum;
}

__attribute__((noinline)) std::size_t echo_perf_l1_hit(const echo::table::L1Map& map,
                                                       std::string_view name, std::size_t n) {
  char buf[64];
  std::size_t hits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    hits += map.read(name, std::span<char>(buf)).status == echo::table::ReadStatus::kHit;
  }
  return hits;
}

__attribute__((noinline)) std::size_t echo_perf_apply_drop(echo::table::L1Map& map,
                                                           const std::vector<BrandedId>& names,
                                                           const std::vector<BrandedId>& versions) {
  std::size_t applied = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    applied += map.apply_coherence(names[i], versions[i]) == echo::table::Verdict::kApplied;
  }
  return applied;
}

__attribute__((noinline)) std::size_t echo_perf_decode_push(echo::io::Resp3Decoder& dec,
                                                            const std::string& bytes) {
  dec.feed(bytes);
  std::size_t pushes = 0;
  for (auto r = dec.next(); r.status == echo::io::Resp3Status::value; r = dec.next()) ++pushes;
  return pushes;
}

}  // extern "C"

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000;
  if (n == 0 || n > 1000000) {
    std::fprintf(stderr, "usage: ops [N in 1..1000000]\n");
    return 2;
  }
  {
    echo::ring::SpscRing<std::uint64_t> ring(echo::ring::RingConfig{.capacity = 1024});
    check(echo_perf_ring(ring, n) == n * (n - 1) / 2, "ring publish+drain");
  }
  echo::table::L1Map map(echo::table::L1Config{.ttl_ms = 3600000, .max_size = 2 * n + 16});
  auto& minter = echo::table::process_minter();
  std::vector<BrandedId> names, versions;
  for (std::size_t i = 0; i < n; ++i) {
    names.push_back(minter.mint("AST", 1).value());
    map.put(names.back(), "px=10000", minter.mint("AST", 1).value());
  }
  for (std::size_t i = 0; i < n; ++i) versions.push_back(minter.mint("AST", 1).value());
  check(echo_perf_l1_hit(map, names[0].view(), n) == n, "L1 hit");
  check(echo_perf_apply_drop(map, names, versions) == n, "apply drop");
  std::string bytes;
  for (std::size_t i = 0; i < n; ++i) bytes += push_frame();
  echo::io::Resp3Decoder dec;
  check(echo_perf_decode_push(dec, bytes) == n, "decode push");
  if (fails == 0) std::printf("ops: %zu of each op, every answer right\n", n);
  return fails == 0 ? 0 : 1;
}
