// SPDX-License-Identifier: MIT
// The node lease (docs/wire.md, "Node leases"): two live processes never mint under one
// node id. At start the engine leases {ecc}:node:<n> (SET NX PX, by its owner token): the node_id
// it was given, or with node_id auto the first free one in 0..1023 (node_lease.lua). A chore on the
// engine's chores thread (chores.h) renews it every third of the lease (node_renew.lua:
// compare-and-extend, or take it again when it lapsed and is still free), and every 100 ms after a
// renewal that got no answer. The lease counts as held until `send time + lease - lease/10` of the
// last renewal the server confirmed: the server's own expiry runs from when it ran the renewal,
// later than we sent it, and the tenth absorbs a clock running fast by up to 10%. Past that moment,
// or once a renewal finds the key taken by another token, current() answers -1 and the engine mints
// nothing (no_node_lease) until a renewal holds the lease again. The node never changes within a
// run: a lease another process took stays lost until it frees the key (said once on stderr).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <echo/engine/error.h>
#include <echo/engine/log.h>
#include <echo/io/connection.h>
#include <echo/io/resp3_value.h>

#include "chores.h"

namespace echo::engine {

struct NodeLeaseCounters {
  std::uint64_t renewals = 0;  // renewals the server confirmed (extended or taken again)
  std::uint64_t lapses = 0;    // times the lease stopped counting as held (minting stopped)
  std::uint64_t taken = 0;     // renewals that found another token on the key
};

class NodeLease {
 public:
  // A script on the command path, blocking (the engine's Impl::script).
  using ScriptFn = std::function<Result<io::Resp3Owned>(
      const io::Script&, std::vector<std::string> keys, std::vector<std::string> argv)>;

  // `wanted`: 0..1023, or -1 for the first free node.
  // `log`: where its two lines (a lapse healed, the node taken by another process) go.
  NodeLease(ScriptFn script, int wanted, std::chrono::milliseconds lease, LogSink log = {});
  ~NodeLease();  // stop()
  // The thread that renews the lease (the engine's chores, which must outlive the lease's
  // renewal: release() removes it). Before acquire().
  void set_chores(Chores& c) noexcept { chores_ = &c; }
  NodeLease(const NodeLease&) = delete;
  NodeLease& operator=(const NodeLease&) = delete;

  // Takes the lease (owner thread, at start): {} and the renewal scheduled, or kNoFreeNode,
  // kNodeTaken, or the call's error. An explicit node another token holds is asked for again
  // until `deadline`: a crashed predecessor's lease lapses within one lease, and its successor
  // under the same node_id then starts (within start()'s timeout).
  Error acquire(std::chrono::steady_clock::time_point deadline);
  // Stops the renewal and gives the lease back while still held. Idempotent.
  void release();

  // The node this process may mint under now, or -1 (before acquire, after release, or while
  // lapsed). Any thread; two relaxed loads and a clock read.
  int current() const noexcept;
  // The node leased at start (fixed for the run), -1 before.
  int node() const noexcept { return node_.load(std::memory_order_relaxed); }
  NodeLeaseCounters stats() const;

 private:
  std::chrono::milliseconds keep();  // the chore: one renewal, then the delay to the next
  bool renew();  // true when the server answered (extended, taken again, or held by another)

  ScriptFn script_;
  LogSink log_;
  const int wanted_;
  const std::chrono::milliseconds lease_;
  const std::string token_;
  const io::Script lease_script_, renew_script_, release_script_;
  std::atomic<int> node_{-1};  // written once by acquire(), before valid_until_
  std::string key_;
  // Held until this steady-clock time (ns); 0: not held. Written by the renewal (and acquire).
  std::atomic<std::int64_t> valid_until_{0};
  std::atomic<bool> lost_{false};  // another token holds the key
  std::atomic<std::uint64_t> renewals_{0}, lapses_{0}, taken_{0};
  Chores* chores_ = nullptr;
  std::uint64_t chore_ = 0;  // the renewal's id in chores_, 0 when none is scheduled
};

}  // namespace echo::engine
