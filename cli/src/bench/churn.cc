// SPDX-License-Identifier: MIT
// `echostore bench --only churn`: what a quote service sees. Node A publishes random symbols of
// one text-key broadcast table at a fixed rate while node B's one reader thread reads random
// symbols flat out with Table<std::string>::read; the baseline is the same reader over the same
// window with no publishes, in the same round. The same rows with carried values off show what a
// reader pays when every message drops its row instead (a blocking refill from L2 on its next
// read). And carried_visible_vs_floor: A's publish -> B's row holding the new value, against a
// bare PUBLISH -> a bare subscriber of a payload of the same size, message by message.
//
// Placement (Cores): a trading service's hot reader owns an isolated core, and node A and the
// server are other machines. The bench stages both nodes and redis-server in one process on one
// small VM (2 cores), where the unpinned reader lost CPU to A's publishers, both engines and the
// server and was preempted mid-read (0.56-0.89x quiet's reads/s, p99.99 of 28-190 us) while its
// reads per CPU-second stayed at 0.91-0.99x quiet's: the machine's contention, not a slower read.
// So on 2 CPUs or more (unless --placement one-core) B's reader pins itself to the last CPU the
// process may use, and every other thread of the rows (both nodes' io, writer and housekeeping
// threads, A's publishers, the bench thread, the redis-server the bench started) runs on the
// others, quiet and churn windows alike; the reads per CPU-second stay in the row for the
// co-located view.
#include <echo/base/clock.h>
#include <echo/engine/engine.h>
#include <echo/engine/table.h>
#include <echo/harness/open_loop.h>
#include <echo/harness/placement.h>
#include <echo/harness/stage.h>
#include <echo/table/branded_id.h>
#include <echo/table/names.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/pinning.h"
#include "bench/watch.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::Carry;
using engine::Engine;
using Quotes = engine::Table<std::string>;

// B's id below A's: a version carries its node after its millisecond, so within one millisecond
// A's versions are newer than anything B mints (its warm-up fills carry A's versions anyway).
constexpr unsigned kNodeBOn = 941, kNodeBOff = 943, kChurnMinter = 945;  // A: B + 1
constexpr unsigned kNodeBShown = 947;  // the visible row's pair (A: 948)
constexpr std::array<double, 3> kRates{1000, 10000, 50000};
constexpr std::size_t kSymbols = 1000, kValueBytes = 32;
// One read in 64 is timed: two clock reads (25-110 ns each on a VM) on every read would cost more
// than the read itself, and the same share of reads is timed in both windows.
constexpr std::uint64_t kSampleEvery = 64;
// A blocking publish is one round trip and a hop to A's writer (~50-150 us), so one thread keeps
// a few thousand a second; the schedule is dealt round-robin over this many per 4,000/s.
constexpr double kPerPublisher = 4000;
constexpr int kVisibleWarmup = 20;

// 4-letter tickers, scattered over AAAA..ZZZZ (7,919 is prime to 26^4, so no two collide).
std::vector<std::string> symbols() {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kSymbols; ++i) {
    std::size_t x = (i * 7919 + 104729) % (std::size_t{26} * 26 * 26 * 26);
    std::string s(4, 'A');
    for (char& ch : s) {
      ch = static_cast<char>('A' + x % 26);
      x /= 26;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// A quote of exactly kValueBytes, unique per `seq` (the visible row waits for this exact value).
std::string quote_value(std::uint64_t seq) {
  char buf[kValueBytes + 1];
  const double bid = 100 + static_cast<double>(seq % 10000) / 100;
  std::snprintf(buf, sizeof buf, "%09.2f %09.2f %012llu", bid, bid + 0.02,
                static_cast<unsigned long long>(seq % 1000000000000ull));
  return std::string(buf, kValueBytes);
}

// xorshift64*: a pick costs a few instructions, so the reader's loop is the read.
struct Rng {
  std::uint64_t s;
  std::size_t below(std::size_t n) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return static_cast<std::size_t>(((s * 2685821657736338717ull) >> 32) * n >> 32);
  }
};

double publishers_for(double rate) { return std::ceil(rate / kPerPublisher); }

std::string cpus_text(const std::vector<int>& cpus) {
  std::string out = cpus.size() == 1 ? "CPU " : "CPUs ";
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(cpus[i]);
  }
  return out;
}

// One pair's pinning knobs: each node's io thread (EngineOptions::io.cpu) and writer
// (TableSpec::writer_cpu), -1 unpinned, and both nodes' housekeeping threads
// (EngineOptions::housekeeping_cpus; empty: where they start).
struct PairCpus {
  int b_io = -1, b_writer = -1, a_io = -1, a_writer = -1;
  std::vector<int> housekeeping;
};

// A pair where --placement puts the bench's threads (the engines' io and writer threads on its
// CPU, every other thread inheriting the bench thread's set), as every bench part stages them.
PairCpus as_placed(const BenchConfig& c) {
  return {c.process_cpu, c.process_cpu, c.process_cpu, c.process_cpu, {}};
}

// Where the churn rows' threads run (the file's comment says why). Owned: B's reader alone on the
// last CPU the process may use, every other thread of the rows on one of the others, dealt in
// turn in the order of Slot (on 2 CPUs: all on CPU 0). Not owned (one CPU, or --placement
// one-core): where --placement puts the bench, as every part stages it.
class Cores {
 public:
  enum Slot : std::size_t { kBench, kServer, kBIo, kBWriter, kAIo, kAWriter, kPublishers };

  Cores(const BenchConfig& c, pid_t server_pid) : server_(server_pid) {
    if (c.placement != "unpinned" && c.placement != "spread") return;
    const std::vector<int> cpus = allowed_cpus(c);
    if (cpus.size() < 2) return;
    reader_ = cpus.back();
    others_.assign(cpus.begin(), cpus.end() - 1);
  }

  bool owned() const { return reader_ >= 0; }
  int reader() const { return reader_; }    // -1: not owned
  pid_t server() const { return server_; }  // 0: a given server (--server), never pinned
  int at(std::size_t slot) const {          // owned only
    return others_[slot % others_.size()];
  }
  int publisher(int k) const {  // -1: inherits the bench thread's set
    return owned() ? at(kPublishers + static_cast<std::size_t>(k)) : -1;
  }
  PairCpus pair(const BenchConfig& c) const {
    if (!owned()) return as_placed(c);
    return {at(kBIo), at(kBWriter), at(kAIo), at(kAWriter), others_};
  }
  std::string placement(const BenchConfig& c) const;
  // For a row's text (the table shows no placement): where the reader ran, when it owned a core.
  std::string reader_text() const {
    if (!owned()) return "";
    return ", alone on " + cpus_text({reader_}) + " (every other thread of the row on " +
           cpus_text(others_) + "),";
  }

 private:
  int reader_ = -1;
  std::vector<int> others_;
  pid_t server_ = 0;
};

// The rows' placement text: each thread and the CPU it ran on, grouped by CPU.
std::string Cores::placement(const BenchConfig& c) const {
  if (!owned()) {
    return placement_of(c,
                        "B's reader thread, A's publisher threads, both nodes' io, writer and "
                        "housekeeping threads, the bench thread",
                        true);
  }
  std::vector<std::pair<std::vector<int>, std::string>> groups;  // CPUs, the threads there
  auto put = [&groups](const std::vector<int>& cpus, const std::string& who) {
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == cpus; });
    if (it == groups.end()) {
      groups.emplace_back(cpus, who);
    } else {
      it->second += ", " + who;
    }
  };
  const auto back = [](int cpu) { return cpu < 0 ? "unpinned" : "CPU " + std::to_string(cpu); };
  put({at(kBench)}, "the bench thread (starts the window's threads; " + back(c.process_cpu) +
                        " again after the windows)");
  put({at(kBIo)}, "B's io thread (io.cpu)");
  put({at(kBWriter)}, "B's writer (writer_cpu)");
  put({at(kAIo)}, "A's io thread");
  put({at(kAWriter)}, "A's writer");
  std::vector<int> publishers;
  for (int k = 0; k < static_cast<int>(publishers_for(kRates.back())); ++k) {
    if (std::find(publishers.begin(), publishers.end(), publisher(k)) == publishers.end()) {
      publishers.push_back(publisher(k));
    }
  }
  std::sort(publishers.begin(), publishers.end());
  put(publishers, "A's publisher threads (each pins itself as it starts)");
  put(others_, "both nodes' housekeeping threads (housekeeping_cpus)");
  if (server_ > 0) {
    put({at(kServer)},
        "redis-server (started by the bench; " + back(c.server_cpu) + " again after the windows)");
  }
  std::string out = "B's reader thread alone on " + cpus_text({reader_}) +
                    " (pins itself as each window starts, quiet and churn alike)";
  for (const auto& [cpus, who] : groups) out += "; on " + cpus_text(cpus) + ": " + who;
  if (server_ <= 0) {
    out +=
        "; redis-server given (--server): not pinned by the bench (if on this machine, it may run "
        "on the reader's CPU)";
  }
  return out +
         "; the other pair (carried values on/off) placed alike, idle; the visible row's pair, "
         "watcher and floor subscriber, idle during the windows, where --placement puts them";
}

// While a round's churn windows run (owned cores only): the bench thread, and the redis-server the
// bench started, on their CPUs of `cores`, so that neither lands on the reader's; both go back
// where --placement put them when the scope ends, so the visible row (run between rounds) and
// the parts after this one keep their placement. Throws naming the CPU when the kernel refuses.
class OthersScope {
 public:
  OthersScope(const BenchConfig& c, const Cores& cores)
      : server_back_(cores.owned() ? cores.server() : 0, c.server_cpu) {
    if (!cores.owned()) return;
    pin_to(cores.at(Cores::kBench), "the bench thread");
    const int cpu = cores.at(Cores::kServer);
    if (cores.server() > 0 && !harness::pin_process(cores.server(), cpu)) {
      throw std::runtime_error("cannot pin redis-server to CPU " + std::to_string(cpu));
    }
  }

 private:
  ThreadMaskGuard bench_back_;
  ServerPinGuard server_back_;
};

engine::TableSpec quote_spec(const BenchConfig& c, const std::string& name, Carry carry,
                             int writer_cpu) {
  engine::TableSpec s = lane_spec(name, engine::CoherenceMode::kBroadcast, c);
  s.writer_cpu = writer_cpu;
  s.kind = "QTE";
  s.keys = engine::KeyKind::kText;
  s.loader = [](const engine::Key&) -> engine::LoadResult {
    return engine::Loaded{quote_value(0), std::nullopt};
  };
  s.ttl_ms = 600000;  // no row expires during a run
  s.jitter = 0;
  s.carry = carry;
  return s;
}

engine::EngineOptions node_options(const DrillTarget& target, unsigned id, int io_cpu,
                                   const std::vector<int>& housekeeping) {
  engine::EngineOptions o = harness::quiet_node_options(target.host, target.port, id, io_cpu);
  o.housekeeping_cpus = housekeeping;
  return o;
}

// Node A (publishes) and node B (reads) of one table. `published` counts A's answered publishes,
// so settle() knows when B has heard them all.
class QuoteNodes {
  std::string name_;
  Engine b_, a_;

 public:
  QuoteNodes(const BenchConfig& c, const DrillTarget& target, const std::string& t, Carry carry,
             unsigned b_id, const PairCpus& cpus)
      : name_(t),
        b_(node_options(target, b_id, cpus.b_io, cpus.housekeeping),
           {quote_spec(c, t, carry, cpus.b_writer)}),
        a_(node_options(target, b_id + 1, cpus.a_io, cpus.housekeeping),
           {quote_spec(c, t, carry, cpus.a_writer)}),
        tb(b_.table<std::string>(t)),
        ta(a_.table<std::string>(t)) {
    if (auto ec = b_.start()) throw std::runtime_error("node B did not start: " + ec.message());
    if (auto ec = a_.start()) throw std::runtime_error("node A did not start: " + ec.message());
  }

  // Throws when the kernel refused a writer or a housekeeping thread its CPU: the engine counts
  // it and lets the thread run unpinned, where the rows' placement says it did not run.
  void check_pinned() const {
    for (const Engine* node : {&b_, &a_}) {
      const engine::EngineStats s = node->stats();
      std::uint64_t refused = s.housekeeping_pin_failures;
      for (const auto& t : s.tables) refused += t.writer.pin_failures;
      if (refused > 0) {
        throw std::runtime_error(std::string(node == &b_ ? "node B" : "node A") + ": " +
                                 std::to_string(refused) +
                                 " thread(s) refused their CPU (writer_cpu, housekeeping_cpus)");
      }
    }
  }

  engine::TableStats b_stats() const {
    for (auto& t : b_.stats().tables) {
      if (t.name == name_) return t;
    }
    return {};
  }
  // Waits until B's io thread has routed every message A published and B's rings are empty, so
  // no message of one window lands in the next (with carried values off it would drop a row).
  void settle() {
    const bool heard = floors::eventually(
        [&] {
          const engine::TableStats t = b_stats();
          if (t.pushes < published) return false;
          return std::all_of(t.rings.begin(), t.rings.end(),
                             [](const auto& r) { return r.occupancy == 0; });
        },
        std::chrono::seconds(5));
    if (!heard) {
      throw std::runtime_error("node B heard " + std::to_string(b_stats().pushes) + " of " +
                               std::to_string(published) + " messages within 5 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a direct apply's last steps
  }
  // B reads every symbol once (a miss fills from L2); answers how many missed.
  std::uint64_t warm(const std::vector<std::string>& syms) const {
    std::uint64_t misses = 0;
    for (const std::string& s : syms) {
      auto r = tb.read(s, [](std::string_view, std::string_view) {});
      if (!r) throw std::runtime_error("node B could not read " + s + ": " + r.error().message());
      misses += *r != engine::Source::kL1 ? 1 : 0;
    }
    return misses;
  }

  Quotes tb, ta;  // B's handle, A's handle (declared after the engines they point into)
  std::uint64_t published = 0;
};

// One window of B's reader. Misses: reads not answered from L1 (an error counts as one).
struct ReadFigures {
  double reads_per_s = 0, p9999_us = 0, cpu_share = 0, reads_per_cpu_s = 0;
  std::uint64_t misses = 0, sink = 0;
};

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000ll + ts.tv_nsec;
}

// The reader's thread: from t0 to `end`, random symbols through Table::read, back to back. Every
// kSampleEvery-th read is timed with the steady clock around the call (so a sample includes one
// clock read's own cost) and checks the time; the samples' array is touched before t0, so no
// page fault lands in the window.
ReadFigures read_flat_out(const Quotes& tb, const std::vector<std::string>& syms, std::int64_t t0,
                          std::int64_t end, std::uint64_t seed) {
  std::vector<double> ns(std::size_t{3} << 20, 0);  // 2 s at 90M reads/s
  std::size_t kept = 0;
  Rng rng{seed | 1};
  std::uint64_t sink = 0, misses = 0, i = 0;
  auto fn = [&sink](std::string_view v, std::string_view) {
    sink += v.empty() ? 0 : static_cast<unsigned char>(v.back());
  };
  if (const std::int64_t ahead = t0 - base::steady_ns(); ahead > 200'000) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(ahead - 100'000));
  }
  while (base::steady_ns() < t0) {
  }
  const std::int64_t cpu0 = thread_cpu_ns(), start = base::steady_ns();
  for (std::int64_t now = start; now < end;) {
    const std::string& key = syms[rng.below(syms.size())];
    const bool timed = (++i & (kSampleEvery - 1)) == 0;
    const std::int64_t a = timed ? base::steady_ns() : 0;
    auto r = tb.read(key, fn);
    misses += r && *r == engine::Source::kL1 ? 0 : 1;
    if (!timed) continue;
    now = base::steady_ns();
    if (kept < ns.size()) ns[kept++] = static_cast<double>(now - a);
  }
  const double cpu_ns = static_cast<double>(std::max<std::int64_t>(thread_cpu_ns() - cpu0, 1));
  const double wall_ns = static_cast<double>(base::steady_ns() - start);
  ns.resize(kept);
  return {.reads_per_s = static_cast<double>(i) * 1e9 / wall_ns,
          .p9999_us = harness::nearest_rank(ns, 0.9999) / 1e3,
          .cpu_share = cpu_ns / wall_ns,
          .reads_per_cpu_s = static_cast<double>(i) * 1e9 / cpu_ns,
          .misses = misses,
          .sink = sink};
}

struct PublishTally {
  std::uint64_t ok = 0, failed = 0;
};

// A's open-loop schedule over [t0, end): message i (of n) due at t0 + i * period, its value
// quote_value(base + i), dealt round-robin over `threads` publishers.
struct Schedule {
  std::int64_t t0 = 0, end = 0;
  double period = 0;
  std::uint64_t n = 0, base = 0;
  int threads = 1;
};

// Publisher k's share of the schedule (messages k, k + threads, ...), each blocking in
// Table::publish; it sleeps to each message's due time, or sends at once while behind, and what
// is not sent by `end` is dropped from the schedule (the achieved rate says so). Each message is
// the next quote of a random symbol of the thread's own share (every threads-th symbol): two
// publishes of one key in flight at once can leave L2 at the older version (publish_l2's SET is
// unconditional, so the script that runs last wins, whatever its version), and B, which heard the
// newer message, then refuses every fill of that key and reads it from L2 on every read until it
// is published again.
PublishTally publish_share(const Quotes& ta, const std::vector<std::string>& syms,
                           const Schedule& s, int k) {
  PublishTally mine;
  Rng rng{(s.base + static_cast<std::uint64_t>(k)) * 0x9e3779b97f4a7c15ull | 1};
  const auto share = static_cast<std::size_t>(k), stride = static_cast<std::size_t>(s.threads);
  const std::size_t owned = (syms.size() - share + stride - 1) / stride;
  for (auto i = static_cast<std::uint64_t>(k); i < s.n; i += stride) {
    const std::int64_t due = s.t0 + std::llround(static_cast<double>(i) * s.period);
    std::int64_t now = base::steady_ns();
    if (due > now) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
      now = base::steady_ns();
    }
    if (now >= s.end) break;
    auto v = ta.publish(syms[share + stride * rng.below(owned)], quote_value(s.base + i));
    ++(v ? mine.ok : mine.failed);
  }
  return mine;
}

// A's publishes over [t0, end) at `rate`, on publishers_for(rate) threads, each pinned as it
// starts to its CPU of `cores`; what one throws (a refused pin) is rethrown here once all are done.
PublishTally publish_paced(const Quotes& ta, const std::vector<std::string>& syms, double rate,
                           std::int64_t t0, std::int64_t end, std::uint64_t& seq,
                           const Cores& cores) {
  Schedule s{.t0 = t0, .end = end, .period = 1e9 / rate, .base = seq};
  s.n = static_cast<std::uint64_t>(static_cast<double>(end - t0) / s.period);
  s.threads = static_cast<int>(publishers_for(rate));
  seq += s.n;
  std::vector<PublishTally> per(static_cast<std::size_t>(s.threads));
  std::vector<std::exception_ptr> thrown(per.size());
  {
    std::vector<std::jthread> pool;
    pool.reserve(per.size());
    for (int k = 0; k < s.threads; ++k) {
      pool.emplace_back([&, k] {
        const auto at = static_cast<std::size_t>(k);
        try {
          pin_to(cores.publisher(k), "A's publisher thread " + std::to_string(k));
          per[at] = publish_share(ta, syms, s, k);
        } catch (...) {
          thrown[at] = std::current_exception();
        }
      });
    }
  }
  PublishTally sum;
  for (std::size_t k = 0; k < per.size(); ++k) {
    if (thrown[k]) std::rethrow_exception(thrown[k]);
    sum.ok += per[k].ok;
    sum.failed += per[k].failed;
  }
  return sum;
}

// One window's figures: the reader's, A's publishes (none when quiet) and B's table meanwhile.
struct WindowFigures {
  ReadFigures read;
  PublishTally sent;
  engine::TableStats before, after;
};

// One window: B's reader on its own thread, pinned as it starts to its CPU of `cores` (the same
// in the quiet and the churn window, so their ratio is the publishes'), A's publishers beside it.
WindowFigures run_window(QuoteNodes& q, const std::vector<std::string>& syms, double rate,
                         std::int64_t window_ns, std::uint64_t& seq, const Cores& cores) {
  q.settle();
  (void)q.warm(syms);  // rows a previous window dropped come back before this one starts
  WindowFigures w;
  w.before = q.b_stats();
  const std::int64_t t0 = base::steady_ns() + 2'000'000, end = t0 + window_ns;
  const std::uint64_t seed = seq * 31 + 7;  // before publish_paced moves seq on this thread
  std::exception_ptr thrown;
  {
    std::jthread reader([&] {
      try {
        pin_to(cores.reader(), "B's reader thread");
        w.read = read_flat_out(q.tb, syms, t0, end, seed);
      } catch (...) {
        thrown = std::current_exception();
      }
    });
    if (rate > 0) w.sent = publish_paced(q.ta, syms, rate, t0, end, seq, cores);
  }
  if (thrown) std::rethrow_exception(thrown);
  q.published += w.sent.ok;
  w.after = q.b_stats();
  return w;
}

// What one (rate, carry) cell gathers over the rounds: each side's per-round figures, and the
// churn windows' counts summed.
struct Side {
  std::vector<double> reads_per_s, p9999, cpu_share, reads_per_cpu_s;
  std::uint64_t misses = 0;
  void add(const ReadFigures& r) {
    reads_per_s.push_back(r.reads_per_s);
    p9999.push_back(r.p9999_us);
    cpu_share.push_back(r.cpu_share);
    reads_per_cpu_s.push_back(r.reads_per_cpu_s);
    misses += r.misses;
  }
};
struct Cell {
  Side quiet, churn;
  std::vector<double> achieved;
  std::uint64_t failed = 0, membarriers = 0, carried_updates = 0, flushes = 0, degraded = 0;
  std::uint64_t quiet_membarriers = 0;
  double churn_seconds = 0, quiet_seconds = 0;
  void add_quiet(const WindowFigures& w, double seconds) {
    quiet.add(w.read);
    quiet_membarriers += w.after.writer.membarriers - w.before.writer.membarriers;
    quiet_seconds += seconds;
  }
  void add_churn(const WindowFigures& w, double seconds) {
    churn.add(w.read);
    achieved.push_back(static_cast<double>(w.sent.ok) / seconds);
    failed += w.sent.failed;
    const engine::WriterStats &a = w.after.writer, &b = w.before.writer;
    membarriers += a.membarriers - b.membarriers;
    carried_updates += a.carried_updates - b.carried_updates;
    flushes += a.ring_flushes + a.disconnect_flushes - b.ring_flushes - b.disconnect_flushes;
    degraded += w.after.carry_degraded - w.before.carry_degraded;
    churn_seconds += seconds;
  }
};

double num(std::uint64_t v) { return static_cast<double>(v); }
std::string per_s(double v) { return floors::grouped(v) + "/s"; }

// Reads per second of the reader's own CPU time, churn / quiet: how much slower each read got,
// apart from the CPU the reader lost to other threads.
double cpu_ratio(const Cell& cell) {
  return median_of(cell.churn.reads_per_cpu_s) / median_of(cell.quiet.reads_per_cpu_s);
}

// A churn row's text: the figures its JSON `beside` holds, in words.
std::string churn_what(const Cell& cell, double rate, bool carried, const Cores& cores) {
  const double secs = std::max(cell.churn_seconds, 1e-9);
  return "B's reads while A publishes " + per_s(rate) + " (achieved " +
         per_s(median_of(cell.achieved)) + ", " + floors::grouped(publishers_for(rate)) +
         " blocking publisher thread(s), " + std::to_string(cell.failed) +
         " failed) random symbols of 1,000, carried values " + (carried ? "on" : "off") +
         "; B's one reader" + cores.reader_text() +
         " calls Table<std::string>::read flat out. p99.99 (every 64th read, "
         "steady clock around the call) churn " +
         floors::fmt("%.3f us, quiet %.3f us", median_of(cell.churn.p9999),
                     median_of(cell.quiet.p9999)) +
         "; misses (reads not answered from L1) churn " + floors::grouped(num(cell.churn.misses)) +
         ", quiet " + floors::grouped(num(cell.quiet.misses)) + "; the reader's CPU share " +
         floors::fmt("%.0f%% / %.0f%% quiet, reads per its CPU-second %.2fx quiet's",
                     100 * median_of(cell.churn.cpu_share), 100 * median_of(cell.quiet.cpu_share),
                     cpu_ratio(cell)) +
         "; B's writer " + per_s(num(cell.carried_updates) / secs) + " carried updates, " +
         per_s(num(cell.membarriers) / secs) + " membarriers (quiet " +
         per_s(num(cell.quiet_membarriers) / std::max(cell.quiet_seconds, 1e-9)) + "), " +
         std::to_string(cell.flushes) + " flushes, " + std::to_string(cell.degraded) +
         " degraded (goals >= 0.90x, p99.99 <= 1 us, 0 misses with carried values)";
}

Row churn_row(const Cell& cell, double rate, bool carried, const Cores& cores,
              const std::string& placement) {
  Row x;
  x.id = "churn_reads_vs_quiet_" + std::to_string(static_cast<int>(rate / 1000)) + "k" +
         (carried ? "" : "_off");
  x.what = churn_what(cell, rate, carried, cores);
  x.ours = "reads/s under churn";
  x.baseline = "reads/s quiet (same reader and window, no publishes)";
  x.unit = "reads/s";
  x.placement = placement;
  x.ours_rounds = cell.churn.reads_per_s;
  x.base_rounds = cell.quiet.reads_per_s;
  const double secs = std::max(cell.churn_seconds, 1e-9);
  x.beside = {{"achieved_publishes_per_s", median_of(cell.achieved)},
              {"publisher_threads", publishers_for(rate)},
              {"publishes_failed", num(cell.failed)},
              {"churn_p9999_us", median_of(cell.churn.p9999)},
              {"quiet_p9999_us", median_of(cell.quiet.p9999)},
              {"churn_misses", num(cell.churn.misses)},
              {"quiet_misses", num(cell.quiet.misses)},
              {"churn_reader_cpu_share", median_of(cell.churn.cpu_share)},
              {"quiet_reader_cpu_share", median_of(cell.quiet.cpu_share)},
              {"reads_per_reader_cpu_s_ratio", cpu_ratio(cell)},
              {"b_carried_updates_per_s", num(cell.carried_updates) / secs},
              {"b_membarriers_per_s", num(cell.membarriers) / secs},
              {"b_quiet_membarriers_per_s",
               num(cell.quiet_membarriers) / std::max(cell.quiet_seconds, 1e-9)},
              {"b_flushes", num(cell.flushes)},
              {"b_carry_degraded", num(cell.degraded)}};
  return x;
}

// carried_visible_vs_floor, one round at a time. Four contenders take turns message by message
// (the order rotating), each seen by the one watcher: A's Table::publish -> B's row holds the
// value; the floor, a bare PUBLISH of the carried message's size -> a bare subscriber counted it;
// and beside them, to split the gap, the publish_l2 script A runs sent on a bare hiredis
// connection -> B's row (A's send path is the lane less this), and the carried message alone
// PUBLISHed on that connection -> B's row (the script's server time is the script less this; B's
// receive and apply, and A's own subscription, are this less the floor).
class VisibleRow {
 public:
  VisibleRow(const DrillTarget& target, const std::string& table, const std::string& run_id)
      : floor_(target, "echostore:bench:churn-floor:" + run_id, kPayload),
        plain_(target),
        table_(table),
        minter_(kChurnMinter + 1) {}

  // `n` messages of each (after kVisibleWarmup unmeasured); A's symbols are the even ones and the
  // bare connection's the odd ones, so versions minted on A and on this row's minter never meet
  // on one symbol within a millisecond, where the higher node would win.
  void round(QuoteNodes& q, const std::vector<std::string>& syms, int n, std::uint64_t& seq) {
    Rng rng{seq * 0x9e3779b97f4a7c15ull | 1};
    std::vector<double> lane, bare, script, carried;
    for (int i = 0; i < kVisibleWarmup + n; ++i) {
      std::array<double, 4> us{};
      for (int j = 0; j < 4; ++j) {
        const int who = (i + j) % 4;
        const std::string& key = syms[2 * rng.below(syms.size() / 2) + (who == 0 ? 0 : 1)];
        us[static_cast<std::size_t>(who)] = who == 1 ? one_floor() : one_row(q, key, who, seq++);
      }
      if (i < kVisibleWarmup) continue;
      lane.push_back(us[0]);
      bare.push_back(us[1]);
      script.push_back(us[2]);
      carried.push_back(us[3]);
    }
    lane_rounds_.push_back(median_of(lane));
    bare_rounds_.push_back(median_of(bare));
    script_rounds_.push_back(median_of(script));
    carried_rounds_.push_back(median_of(carried));
    lane_.insert(lane_.end(), lane.begin(), lane.end());
    bare_.insert(bare_.end(), bare.begin(), bare.end());
  }

  Row row(const BenchConfig& c) {
    Row x;
    x.id = "carried_visible_vs_floor";
    x.what =
        "carried value, publish -> the other node's L1 row holds it (goal <= 1.20x; on a "
        "bare hiredis connection -> B's row: the publish_l2 script " +
        floors::fmt("%.1f us", median_of(script_rounds_)) + ", the carried message alone " +
        floors::fmt("%.1f us", median_of(carried_rounds_)) + ")";
    x.ours = "Table<std::string>::publish on A -> B's try_read sees the new value";
    x.baseline = "hiredis PUBLISH of " + std::to_string(kPayload) +
                 " B (the carried message's size) -> a bare hiredis subscriber counted it";
    x.unit = "us";
    x.higher_better = false;
    x.placement = placement_of(c,
                               "the bench thread (sends), a watcher thread (polls B's row or the "
                               "floor's count, stamps), A's io and writer threads, B's io thread "
                               "(applies the message itself), the floor's subscriber thread",
                               true);
    std::vector<double> l = lane_, b = bare_;
    x.also = {{"lane p99", harness::nearest_rank(l, 0.99)},
              {"floor p99", harness::nearest_rank(b, 0.99)}};
    x.beside = {{"script_via_hiredis_us", median_of(script_rounds_)},
                {"carried_publish_via_hiredis_us", median_of(carried_rounds_)}};
    x.ours_rounds = lane_rounds_;
    x.base_rounds = bare_rounds_;
    x.ours_samples = lane_;
    x.base_samples = bare_;
    return x;
  }

 private:
  static constexpr std::size_t kPayload = 2 + 4 + 14 + kValueBytes;  // "{" key "}" version value

  // who 0: A's publish; 2: the script, 3: the carried message, on the bare connection. Each ends
  // when B's row holds the value.
  double one_row(QuoteNodes& q, const std::string& key, int who, std::uint64_t seq) {
    const std::string value = quote_value(seq);
    const std::string framed = minter_.mint("QTE").value().str() + value;
    const std::string channel = table::coherence_channel(table_).value(), head = "{" + key + "}";
    const std::string message = head + framed;
    const std::vector<std::string> keys{table::text_l2_key(table_, key).value()};
    const std::vector<std::string> argv{framed, "600000", channel, head, "PUBLISH", "carry"};
    // By value: on a throw below the watcher may poll once more after this frame is gone.
    const std::uint64_t id = watcher_.arm([tb = q.tb, &key, value] {
      bool same = false;
      tb.try_read(key, [&](std::string_view v, std::string_view) { same = v == value; });
      return same;
    });
    const std::int64_t t0 = base::steady_ns();
    auto heard = [](const floors::Reply& r) { return r && r->type == REDIS_REPLY_INTEGER; };
    const bool sent = who == 0 ? q.ta.publish(key, value).has_value()
                      : who == 2
                          ? heard(plain_.evalsha("publish_l2", keys, argv))
                          : heard(plain_.command("PUBLISH %b %b", channel.data(), channel.size(),
                                                 message.data(), message.size()));
    if (!sent) throw std::runtime_error("a visible-row publish failed");
    ++q.published;
    return static_cast<double>(watcher_.await(id) - t0) / 1e3;
  }
  double one_floor() {
    const std::uint64_t want = floor_.heard() + 1;
    const std::uint64_t id = watcher_.arm([this, want] { return floor_.heard() >= want; });
    const std::int64_t t0 = base::steady_ns();
    if (!floor_.publish()) throw std::runtime_error("the floor's PUBLISH reached no subscriber");
    return static_cast<double>(watcher_.await(id) - t0) / 1e3;
  }

  FloorSub floor_;
  floors::Redis plain_;
  std::string table_;
  table::Minter minter_;
  std::vector<double> lane_rounds_, bare_rounds_, script_rounds_, carried_rounds_, lane_, bare_;
  Watcher watcher_;  // last: stopped before the floor and the rows it polls go
};
}  // namespace

void run_churn(const BenchConfig& c, const DrillTarget& target, pid_t server_pid,
               Progress& progress, std::vector<Row>& rows) {
  table::Minter minter(kChurnMinter);
  const std::string run_id = minter.mint("BEN").value().str();  // fresh keys on a given server
  const std::vector<std::string> syms = symbols();
  const Cores cores(c, server_pid);
  // Two pairs, alive together so each round measures both at the same moment of the machine:
  // each its own table (and so its own channel), carried values on (the text keys' default) and
  // off, their threads placed by `cores`. The visible row has a pair of its own, where
  // --placement puts the bench (as that row is staged), idle while the churn windows run.
  QuoteNodes on(c, target, "quotes_" + run_id, Carry::kAuto, kNodeBOn, cores.pair(c));
  QuoteNodes off(c, target, "quotes_off_" + run_id, Carry::kOff, kNodeBOff, cores.pair(c));
  const std::string shown_table = "quotes_vis_" + run_id;
  QuoteNodes shown(c, target, shown_table, Carry::kAuto, kNodeBShown, as_placed(c));
  std::uint64_t seq = 1;
  for (QuoteNodes* q : {&on, &off, &shown}) {
    for (const std::string& s : syms) {  // L2 holds every symbol before B reads it
      if (!q->ta.publish(s, quote_value(seq++))) throw std::runtime_error("A's publish failed");
      ++q->published;
    }
    q->settle();
    for (int passes = 1; q->warm(syms) != 0; ++passes) {
      if (passes == 3) throw std::runtime_error("node B does not keep its rows after 3 reads");
    }
  }
  VisibleRow visible(target, shown_table, run_id);
  const auto window_ns = static_cast<std::int64_t>((c.quick ? 0.5 : 2.0) * 1e9);
  std::array<Cell, kRates.size()> cells_on, cells_off;
  for (int round = 0; round < c.rounds; ++round) {
    {
      const OthersScope placed(c, cores);
      for (std::size_t k = 0; k < kRates.size(); ++k) {
        for (QuoteNodes* q : {&on, &off}) {
          Cell& cell = q == &on ? cells_on[k] : cells_off[k];
          progress.step("B's reads under " + floors::grouped(kRates[k]) +
                            " publishes/s vs quiet, " +
                            (q == &on ? "carried values on" : "carried values off"),
                        round, c.rounds);
          for (int side = 0; side < 2; ++side) {  // quiet first in even rounds, churn first in odd
            const bool churn = (side == 0) == (round % 2 == 1);
            const WindowFigures w =
                run_window(*q, syms, churn ? kRates[k] : 0, window_ns, seq, cores);
            const double seconds = static_cast<double>(window_ns) / 1e9;
            churn ? cell.add_churn(w, seconds) : cell.add_quiet(w, seconds);
          }
        }
      }
      on.check_pinned();
      off.check_pinned();
    }
    progress.step("carried value visible vs PUBLISH floor", round, c.rounds);
    shown.settle();
    visible.round(shown, syms, c.quick ? 100 : 500, seq);
  }
  const std::string placement = cores.placement(c);
  for (bool carried : {true, false}) {
    for (std::size_t k = 0; k < kRates.size(); ++k) {
      rows.push_back(
          churn_row(carried ? cells_on[k] : cells_off[k], kRates[k], carried, cores, placement));
    }
  }
  rows.push_back(visible.row(c));
}

}  // namespace echo::cli::bench
