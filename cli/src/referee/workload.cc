// SPDX-License-Identifier: MIT
// One contestant's run: FLUSHALL, seed, then writers (paced, Zipf-chosen names, one write of a
// name at a time) and readers on every node (Zipf, in bursts) for the configured seconds; the
// late mailer sends what it still holds, the referee waits for quiet, compares every node's rows
// with L2 (permanently stale rows), stops the contestant and lets the oracle judge.
#include <echo/harness/hiredis.h>
#include <echo/table/fill_guard.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <mutex>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include "referee/referee.h"

namespace echo::cli::referee {
namespace {

// Zipf(s) over n ranks (rank 0 the most popular): the cumulative weights, drawn by binary search.
class Zipf {
 public:
  Zipf(std::size_t n, double s) {
    cdf_.reserve(n);
    double sum = 0;
    for (std::size_t i = 1; i <= n; ++i) {
      sum += 1.0 / std::pow(static_cast<double>(i), s);
      cdf_.push_back(sum);
    }
    for (double& c : cdf_) c /= sum;
  }
  std::size_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return std::min(static_cast<std::size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

// What a writer thread did.
struct WriterTally {
  std::uint64_t writes = 0, mailed = 0;
  std::string error;  // the first failed write (the run is then void)
};

// How many rows of `contestant`'s nodes hold an older write than L2 does.
std::uint64_t count_permanently_stale(Contestant& contestant, const Stage& stage) {
  harness::Context redis = harness::connect(stage.target.host, stage.target.port);
  std::uint64_t stale = 0;
  for (std::size_t i = 0; i < stage.names.size(); ++i) {
    const std::string key = contestant.l2_key(i);
    harness::Reply r = harness::command(redis.get(), "GET %b", key.data(), key.size());
    if (!r || r->type != REDIS_REPLY_STRING) {
      throw std::runtime_error("L2 lost the row of name " + std::to_string(i) + " (" + key + ")");
    }
    std::string_view value(r->str, r->len);
    if (contestant.framed()) {
      if (value.size() < table::kIdSize) {
        throw std::runtime_error("L2 holds a short frame at " + key);
      }
      value.remove_prefix(table::kIdSize);
    }
    const auto in_l2 = parse_seq(value);
    if (!in_l2) throw std::runtime_error("L2 holds no write's number at " + key);
    for (int n = 0; n < stage.config.nodes; ++n) {
      const auto held = contestant.peek(n, i);
      if (held && *held < *in_l2) ++stale;
    }
  }
  return stale;
}

}  // namespace

std::optional<std::uint32_t> parse_seq(std::string_view value) noexcept {
  std::uint32_t v = 0;
  const char* end = value.data() + value.size();
  const auto [at, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || at != end) return std::nullopt;
  return v;
}

Figures run_contestant(Contestant& contestant, const RefereeConfig& config,
                       const DrillTarget& target, const std::vector<std::string>& names,
                       std::ostream& err) {
  Figures f;
  f.name = std::string(contestant.name());
  f.echostore = f.name.starts_with("echostore_");
  const auto say = [&](const std::string& what) {
    err << "referee " << f.name << ": " << what << '\n' << std::flush;
  };
  // Everything the contestant's threads may still reach lives until it has stopped (below).
  std::unordered_map<std::uint64_t, std::uint32_t> by_hash;
  for (std::size_t i = 0; i < names.size(); ++i) {
    by_hash.emplace(table::hash_key(names[i]), static_cast<std::uint32_t>(i));
  }
  Oracle oracle(names.size(), config.nodes);
  LateMailer mailer(config.late_min, config.late_max);
  const std::string run_id = table::process_minter().mint("RUN").value().str();
  Stage stage{config, target, names, by_hash, oracle, mailer, run_id};
  try {
    if (by_hash.size() != names.size()) throw std::runtime_error("two names share a hash");
    {
      harness::Context redis = harness::connect(target.host, target.port);
      harness::Reply r = harness::command(redis.get(), "FLUSHALL");
      if (!r || r->type == REDIS_REPLY_ERROR) throw std::runtime_error("FLUSHALL was refused");
    }
    say("seeding " + std::to_string(names.size()) + " names, starting " +
        std::to_string(config.nodes) + " nodes");
    contestant.start(stage);

    const Zipf zipf(names.size(), config.zipf);
    std::vector<ReadTally> reads(static_cast<std::size_t>(config.nodes * config.readers_per_node));
    std::vector<std::unique_ptr<NodeReader>> readers;
    for (std::size_t r = 0; r < reads.size(); ++r) {
      reads[r].node = static_cast<int>(r) / config.readers_per_node;
      readers.push_back(contestant.reader(reads[r].node));
    }
    std::vector<WriterTally> writes(static_cast<std::size_t>(config.writers));
    std::vector<std::unique_ptr<Writer>> writers;
    for (int w = 0; w < config.writers; ++w) writers.push_back(contestant.writer());
    // One write of a name at a time, so its writes, numbers and versions share one order.
    const auto write_locks = std::make_unique<std::mutex[]>(names.size());
    std::vector<std::uint32_t> last_seq(names.size(), 0);  // under the name's write lock
    std::atomic<bool> failed{false};

    say("running " + std::to_string(config.seconds) + " s");
    const auto t0 = Clock::now();
    // Each thread runs until its jthread is asked to stop (also when this scope unwinds). Their
    // seeds are fixed: every contestant's writers draw the same names and late choices in the
    // same order, and its readers the same names.
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < reads.size(); ++r) {
      threads.emplace_back([&, r](const std::stop_token& stop) {
        ReadTally& t = reads[r];
        NodeReader& reader = *readers[r];
        std::mt19937_64 rng(0x5EED0000u + r);
        std::string error;
        while (!stop.stop_requested()) {
          for (int b = 0; b < config.read_burst; ++b) {
            const std::size_t i = zipf(rng);
            // The oracle's order (oracle.h): covered, then t_b, then the read.
            const std::uint32_t covered = oracle.covered(t.node, i);
            const std::int64_t tb = now_ns();
            const auto got = reader.read(i, error);
            if (!got) {
              if (t.errors++ == 0) t.first_error = error;
              continue;
            }
            ++t.reads;
            if (*got > oracle.started(i)) {
              ++t.phantom;
            } else if (*got < covered) {
              ++t.stale;
              std::int64_t& latest = t.stale_latest[(std::uint64_t{i} << 32) | *got];
              latest = std::max(latest, tb);
            }
          }
          std::this_thread::sleep_for(config.read_pause);
        }
      });
    }
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config.writers / config.writes_per_s));
    for (int w = 0; w < config.writers; ++w) {
      threads.emplace_back([&, w](const std::stop_token& stop) {
        WriterTally& t = writes[static_cast<std::size_t>(w)];
        Writer& writer = *writers[static_cast<std::size_t>(w)];
        std::mt19937_64 rng(0xB0B0000u + static_cast<unsigned>(w));
        std::bernoulli_distribution late(contestant.mails_late() ? config.late_fraction : 0.0);
        auto next = Clock::now();
        while (!stop.stop_requested()) {
          const std::size_t i = zipf(rng);
          {
            const std::lock_guard lock(write_locks[i]);
            const std::uint32_t seq = ++last_seq[i];
            const std::optional<table::BrandedId> version = writer.mint();
            const bool mailed = late(rng);
            std::optional<table::IdBytes> bytes;
            if (version) bytes = table::id_bytes(*version);
            oracle.begin_write(i, seq, bytes ? &*bytes : nullptr, mailed);
            if (!writer.write(i, seq, version, mailed, t.error)) {
              if (t.error.empty()) t.error = "a write failed";
              failed.store(true, std::memory_order_relaxed);
              return;
            }
            oracle.acked(i, seq);
            ++t.writes;
            if (mailed) ++t.mailed;
          }
          // Paced on an absolute schedule; a writer that fell far behind starts afresh rather
          // than bursting to catch up.
          next += interval;
          const auto now = Clock::now();
          if (next < now - std::chrono::milliseconds(100)) next = now;
          std::this_thread::sleep_until(next);
        }
      });
    }
    const auto deadline = t0 + std::chrono::seconds(config.seconds);
    while (Clock::now() < deadline && !failed.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (std::jthread& t : threads) t.request_stop();  // all at once, then join each
    threads.clear();
    f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    readers.clear();
    writers.clear();
    for (const WriterTally& t : writes) {
      f.writes += t.writes;
      f.mailed += t.mailed;
      if (!t.error.empty()) throw std::runtime_error("a write failed: " + t.error);
    }
    std::uint64_t phantom = 0;
    for (const ReadTally& t : reads) {
      f.reads += t.reads;
      f.read_errors += t.errors;
      phantom += t.phantom;
      if (f.first_read_error.empty()) f.first_read_error = t.first_error;
    }

    say(std::string(contestant.mails_late() ? "sending the late messages, then " : "") +
        std::to_string(config.quiet.count()) + " ms of quiet; comparing every node's rows with L2");
    mailer.drain();
    if (mailer.failed() > 0) {
      throw std::runtime_error(std::to_string(mailer.failed()) +
                               " late messages failed: " + mailer.first_error());
    }
    std::this_thread::sleep_for(config.quiet);
    f.permanently_stale = count_permanently_stale(contestant, stage);
    const std::string trouble = contestant.trouble();
    contestant.stop();
    if (!trouble.empty()) throw std::runtime_error(trouble);
    if (phantom > 0) {
      throw std::runtime_error(std::to_string(phantom) +
                               " reads returned a write that never began: the oracle cannot "
                               "judge this run");
    }
    if (f.writes == 0 || f.reads == 0) {
      throw std::runtime_error("the workload did not run (" + std::to_string(f.writes) +
                               " writes, " + std::to_string(f.reads) + " reads)");
    }
    f.judged = oracle.judge(reads);
  } catch (const std::exception& e) {
    f.failure = e.what();
  }
  // The late messages still held name the contestant's connections: out before it stops.
  mailer.drain();
  contestant.stop();
  return f;
}

}  // namespace echo::cli::referee
