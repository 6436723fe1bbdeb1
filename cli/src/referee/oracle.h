// SPDX-License-Identifier: MIT
// The referee's oracle: what every write was (its sequence number, its version on a versioned
// lane, when it started and when it was acknowledged) and when each node heard of it. Readers
// judge each read against it as they go (two atomic loads a read); the windows, the latencies
// and the totals are worked out once every thread of the run has stopped.
//
// The definition it applies (printed with the results):
//   A read at node n that began at t_b and returned write r of name k is STALE if a write s > r
//   of k had its message reach n before t_b. A message "reaches" n when n's cache has applied it
//   (EchoStore: TableSpec::on_message, after the writer applied it; the classic caches: right
//   after their handler deleted the key). What a message covers:
//   - versioned (broadcast, job): every write of k whose version <= the message's version
//     (14 bytes compared as bytes; one writer of k at a time mints them in order);
//   - unversioned (tracking, classic tracking, deletion-synchronised): every write of k
//     acknowledged before the message reached n. Sound: the invalidation left the server after a
//     write executed, and a fill that begins after it reads a value at least as new as every
//     write acknowledged before it. An `all` message (a flush) covers every name likewise.
//   "Before t_b" is read as happens-before: a reader loads n's covered write for k (release by
//   the node's message thread after it recorded the message, acquire here), then takes t_b,
//   then reads. So a read counted stale began after the message was applied, never during it.
#pragma once

#include <echo/base/clock.h>
#include <echo/table/fill_guard.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace echo::cli::referee {

using Clock = std::chrono::steady_clock;

inline std::int64_t now_ns() noexcept { return base::steady_ns(); }

// One reader thread's account, kept on its own thread and handed to Oracle::judge after the run.
struct ReadTally {
  int node = 0;
  std::uint64_t reads = 0;    // reads that returned a value
  std::uint64_t errors = 0;   // reads the cache answered with an error (first_error says one)
  std::uint64_t stale = 0;    // stale by the definition above
  std::uint64_t phantom = 0;  // returned a write that was never started: the run is void
  std::string first_error;
  // Per (name << 32 | write returned) of its stale reads: the latest t_b (the widest window).
  std::unordered_map<std::uint64_t, std::int64_t> stale_latest;
};

// What the oracle worked out for one contestant.
struct Judgement {
  std::uint64_t stale_reads = 0;
  double max_stale_ms = 0;
  // Write start -> that node's message applied, where a row was there to drop; writes whose
  // message went through the late mailer are left out (their figure would be the injected delay).
  double p50_us = 0, p99_us = 0;
  std::uint64_t latency_samples = 0;
  // Unversioned messages carry no write: they are matched to the writes of their name in order
  // (the server announces each write of a name once, in order). Matches that cannot be causal
  // (the message came before the write began) are left out and counted here.
  std::uint64_t unmatched = 0;
};

class Oracle {
 public:
  Oracle(std::size_t names, int nodes);

  // ---- Writers. The workload writes a name from one thread at a time (its write lock), so each
  // name's writes, sequence numbers and versions are in one order.
  // Write `seq` of `name` is about to leave (seq 0 is the seed). `version`: its version on a
  // versioned lane (null otherwise). `mailed`: its message goes through the late mailer.
  void begin_write(std::size_t name, std::uint32_t seq, const table::IdBytes* version, bool mailed);
  // The write's acknowledgement came back (L2 holds it): its ack time, and from now on an
  // unversioned message covers it. The first call for a write counts (a writer may tell it
  // between its SET and its message; the workload tells it again when the write returns).
  void acked(std::size_t name, std::uint32_t seq);
  // The newest write of `name` begun so far (a read can return no newer one). Any thread.
  std::uint32_t started(std::size_t name) const noexcept {
    return names_[name].started.load(std::memory_order_acquire);  // pairs with begin_write
  }

  // ---- A node's message thread (the contestant's handler, or EchoStore's on_message). Brief:
  // a short lock of the name's log and of the node's log.
  // A versioned message for `name` reached `node`; `dropped`: it removed a row.
  void reached_version(int node, std::size_t name, std::string_view version, bool dropped);
  // An unversioned one. `cause`: the write it announces when the message says so (the
  // deletion-synchronised contestant's stopwatch tag), 0 when it does not (then matched in order).
  void reached_unversioned(int node, std::size_t name, std::uint32_t cause, bool dropped);
  // A flush: every name covered up to its acknowledged writes.
  void reached_all(int node);

  // ---- Readers: the newest write of `name` whose message has reached `node`. Acquire: pairs
  // with the release in the reached_* calls, so a read begun after this load is a read after
  // that message was applied.
  std::uint32_t covered(int node, std::size_t name) const noexcept {
    return covered_[static_cast<std::size_t>(node) * names_count_ + name].load(
        std::memory_order_acquire);
  }

  // ---- After the run, every thread joined.
  Judgement judge(const std::vector<ReadTally>& tallies) const;

 private:
  struct Write {
    table::IdBytes version{};  // zero bytes on an unversioned lane
    std::int64_t start_ns = 0, ack_ns = 0;
    bool mailed = false;
  };
  struct NameLog {
    std::mutex mu;              // guards writes: the writer appends, message threads look up
    std::vector<Write> writes;  // index = seq
    std::atomic<std::uint32_t> started{0};
    std::atomic<std::uint32_t> acked{0};
  };
  enum class Kind : std::uint8_t { kVersion, kUnversioned, kAll };
  struct Event {
    std::int64_t at_ns;
    std::uint32_t name;
    std::uint32_t covered;  // the newest write this message covers
    std::uint32_t cause;    // the write it announces; 0: unknown (matched in order)
    Kind kind;
    bool dropped;
  };
  struct NodeLog {
    std::mutex mu;  // one message thread per node appends; judge() reads after the run
    std::vector<Event> events;
  };

  void record(int node, const Event& e);

  std::size_t names_count_;
  std::unique_ptr<NameLog[]> names_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> covered_;  // node-major
  std::vector<std::unique_ptr<NodeLog>> nodes_;
};

}  // namespace echo::cli::referee
