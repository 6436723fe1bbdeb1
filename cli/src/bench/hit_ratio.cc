// SPDX-License-Identifier: MIT
// The hit-ratio rows of `echostore bench` (ids hit_ratio_*): request traces generated here from
// fixed seeds (Zipf over 1M keys at three skews and two cache sizes, a scan-polluted mix, a
// shifting hot set), each replayed through a real L1Map under every eviction policy in turn:
// a read, and on a miss a put, as a table's writer fills after a miss. S3-FIFO is the row's
// "ours", exact LRU its baseline; CLOCK and the original's skip ride along. A replay is
// deterministic (one thread, seeded traces), so one round is the figure; the first quarter of
// each trace warms the cache and is not counted.
#include <echo/table/branded_id.h>
#include <echo/table/l1_map.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

constexpr std::uint32_t kKeys = 1'000'000;

// Ranks 0..n-1 drawn with P(rank k) proportional to 1 / (k + 1)^alpha: inverse transform over
// the cumulative table (n doubles).
class Zipf {
 public:
  Zipf(std::uint32_t n, double alpha) : cdf_(n) {
    double sum = 0;
    for (std::uint32_t k = 0; k < n; ++k) cdf_[k] = sum += std::pow(k + 1.0, -alpha);
    for (double& c : cdf_) c /= sum;
  }
  std::uint32_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<std::uint32_t>(std::min<std::size_t>(it - cdf_.begin(), cdf_.size() - 1));
  }

 private:
  std::vector<double> cdf_;
};

struct Trace {
  std::string id;    // hit_ratio_...
  std::string what;  // the row's description
  std::size_t cache;
  std::vector<std::uint32_t> keys;  // key numbers, in request order
};

// Which key a rank is: a fixed shuffle, so popularity has nothing to do with the key's bytes.
std::vector<std::uint32_t> shuffled_keys(std::uint64_t seed) {
  std::vector<std::uint32_t> keys(kKeys);
  std::iota(keys.begin(), keys.end(), 0u);
  std::mt19937_64 rng(seed);
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

Trace zipf_trace(double alpha, std::size_t cache_pct, std::size_t requests, const Zipf& zipf,
                 const std::vector<std::uint32_t>& key_of) {
  Trace t;
  const std::string a = floors::fmt("%.2f", alpha);
  t.id = "hit_ratio_zipf" + a.substr(0, a.find_last_not_of('0') + 1) + "_" +
         std::to_string(cache_pct) + "pct";
  t.what = "hit ratio, Zipf " + floors::fmt("%.2g", alpha) + " over 1M keys, cache " +
           std::to_string(cache_pct) + "%";
  t.cache = kKeys / 100 * cache_pct;
  std::mt19937_64 rng(0x5A1F + static_cast<std::uint64_t>(alpha * 100) + cache_pct);
  t.keys.reserve(requests);
  for (std::size_t i = 0; i < requests; ++i) t.keys.push_back(key_of[zipf(rng)]);
  return t;
}

// Zipf 0.99 at a 10% cache, polluted by a scan running beside it, as a batch job reads the
// key space while users read their hot names: one request in five is the scan's next key, a
// key nothing reads before or after.
Trace scan_trace(std::size_t requests, const Zipf& zipf, const std::vector<std::uint32_t>& key_of) {
  Trace t;
  t.id = "hit_ratio_scan_mix";
  t.what = "hit ratio, Zipf 0.99 over 1M keys, cache 10%, 1 request in 5 a sequential scan's";
  t.cache = kKeys / 10;
  std::mt19937_64 rng(0x5CA7);
  std::uint32_t next_cold = kKeys;  // scanned keys: never read before or after
  t.keys.reserve(requests);
  for (std::size_t i = 0; i < requests; ++i) {
    t.keys.push_back(rng() % 5 == 0 ? next_cold++ : key_of[zipf(rng)]);
  }
  return t;
}

// Zipf 0.99 at a 1% cache whose popular keys change every 1M requests (100 times the cache):
// each phase maps the ranks onto another stretch of the shuffled keys. S3-FIFO admits by
// frequency, so it relearns a moved hot set more slowly than LRU: on this trace it leads LRU by
// ~6 points at 1M requests a phase, ~2 at 250k, and trails it (~1.5) at 100k (10 caches).
Trace shifting_trace(std::size_t requests, const Zipf& zipf,
                     const std::vector<std::uint32_t>& key_of) {
  Trace t;
  t.id = "hit_ratio_shifting_hot_set";
  t.what = "hit ratio, Zipf 0.99 over 1M keys, cache 1%, the hot set moves every 1M requests";
  t.cache = kKeys / 100;
  std::mt19937_64 rng(0x5717);
  t.keys.reserve(requests);
  std::uint32_t shift = 0;
  for (std::size_t i = 0; i < requests; ++i) {
    if (i % 1'000'000 == 0) shift = static_cast<std::uint32_t>(rng() % kKeys);
    t.keys.push_back(key_of[(zipf(rng) + shift) % kKeys]);
  }
  return t;
}

// The trace through a map of `policy`: a read, and a put on a miss. The hit ratio in percent
// over the requests past the first quarter.
double replay(const Trace& t, table::Eviction policy) {
  table::L1Config c;
  c.max_size = t.cache;
  c.eviction = policy;
  c.ttl_ms = std::int64_t{1} << 40;  // nothing expires: the policy alone decides
  c.jitter = 0;
  c.clock = &table::coarse_monotonic_ms;
  c.read_clock = table::ReadClock::kNone;
  table::L1Map map(c);
  const std::size_t warm = t.keys.size() / 4;
  char name[8] = {'k'};
  char buf[16];
  const std::string value(16, 'v');
  std::uint64_t version = 0;
  std::uint64_t hits = 0;
  for (std::size_t i = 0; i < t.keys.size(); ++i) {
    std::uint32_t k = t.keys[i];
    for (int d = 7; d >= 1; --d, k >>= 5) name[d] = "0123456789abcdefghijklmnopqrstuv"[k & 31];
    const std::string_view n(name, sizeof name);
    if (map.read(n, buf).status == table::ReadStatus::kHit) {
      hits += i >= warm;
    } else {
      map.put(n, value, *table::BrandedId::encode("TXN", ++version));
    }
  }
  return 100.0 * static_cast<double>(hits) / static_cast<double>(t.keys.size() - warm);
}

}  // namespace

void run_hit_ratio(const BenchConfig& c, Progress& progress, std::vector<Row>& rows) {
  const std::size_t requests = c.quick ? 1'000'000 : 4'000'000;
  const std::vector<std::uint32_t> key_of = shuffled_keys(0xC0FFEE);
  std::vector<Trace> traces;
  for (const double alpha : {0.7, 0.99, 1.2}) {
    const Zipf zipf(kKeys, alpha);
    for (const std::size_t pct : {1, 10}) {
      traces.push_back(zipf_trace(alpha, pct, requests, zipf, key_of));
    }
    if (alpha == 0.99) {
      traces.push_back(scan_trace(requests, zipf, key_of));
      traces.push_back(shifting_trace(requests, zipf, key_of));
    }
  }
  const std::string one =
      placement_of(c, "the bench thread (reads, and the put after a miss)", false);
  for (const Trace& t : traces) {
    progress.step(t.what, 0, 1);
    Row r;
    r.id = t.id;
    r.what = t.what;
    r.ours = "S3-FIFO";
    r.baseline = "exact LRU";
    r.unit = "% hits";
    r.higher_better = true;
    r.placement = one;
    r.ours_rounds.push_back(replay(t, table::Eviction::kS3Fifo));
    r.base_rounds.push_back(replay(t, table::Eviction::kLru));
    r.also.emplace_back("CLOCK", replay(t, table::Eviction::kClock));
    r.also.emplace_back("skip", replay(t, table::Eviction::kSkip));
    rows.push_back(std::move(r));
  }
}

}  // namespace echo::cli::bench
