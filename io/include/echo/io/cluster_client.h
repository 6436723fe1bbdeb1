// SPDX-License-Identifier: MIT
// A slot-aware client for Valkey/Redis Cluster over one UringLoop: one Connection per master,
// the slot map from CLUSTER SHARDS (CLUSTER SLOTS on servers without it), each command and
// script routed by its first key's slot. MOVED updates the slot, resends and refreshes the whole
// map in the background; ASK sends ASKING then the command to the named node and changes
// nothing; redirects per call are bounded (too_many_redirects). A call whose master is down is
// held (never sent twice) and retried as the map is refreshed after the loss, until a replica
// has taken over or route_timeout passes (cluster_down). A call that was sent and lost is failed
// with `disconnected`, like on a single connection: it may have run.
#pragma once

#include <echo/io/cluster_map.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace echo::io {

struct ClusterOptions {
  std::vector<NodeAddress> seeds;  // >= 1; any nodes of the cluster (parse_seeds)
  // The template of every node connection (host and port are replaced per node; db must be 0).
  // Its fence ({emq}:version) is checked once per boot through the router, on the slot's owner.
  ConnectionOptions connection;
  int max_redirects = 5;                                // MOVED/ASK/TRYAGAIN per call, 0..16
  std::chrono::milliseconds route_timeout{10000};       // a held call's wait for a master; >= 1 ms
  std::chrono::milliseconds refresh_min_interval{100};  // between two map refreshes; >= 1 ms
};

// Counters (single writer: the loop thread; read relaxed).
struct ClusterStats {
  std::uint64_t moved = 0;             // MOVED redirects followed
  std::uint64_t ask = 0;               // ASK redirects followed
  std::uint64_t tryagain = 0;          // TRYAGAIN / CLUSTERDOWN answers retried
  std::uint64_t refreshes = 0;         // slot maps applied
  std::uint64_t refresh_failures = 0;  // refresh answers refused or unusable
  std::uint64_t redirect_limit = 0;    // calls failed with too_many_redirects
  std::uint64_t held = 0;              // calls held because their master was unreachable
  std::uint64_t held_expired = 0;      // held calls failed with cluster_down
  std::uint64_t masters = 0;           // masters in the current map
  std::uint64_t nodes = 0;             // node connections (masters, past masters, seeds)
  std::uint64_t unresolved = 0;        // map or redirect addresses that did not resolve
  std::vector<ConnectionStats> connections;
};

enum class ClusterEvent : std::uint8_t {
  kReady,            // the first map is applied and the fence passed
  kTopologyChanged,  // a refresh moved at least one slot to another master
  kNodeLost,         // a node connection lost its socket (the map is being refreshed)
  kNodeReady,        // a node connection (re)booted
  kStopped,          // fatal: fence refused, or every seed refused the topology
};
using ClusterEventFn =
    std::function<void(ClusterEvent event, const NodeAddress& node, std::error_code cause)>;
using ClusterPushFn = std::function<void(const NodeAddress& from, const Resp3Value& push)>;

class ClusterClient {
 public:
  // Checks the options (std::invalid_argument naming the knob). Connects nothing. Any thread.
  ClusterClient(UringLoop& loop, ClusterOptions options, ClusterPushFn on_push = {},
                ClusterEventFn on_event = {});
  // Fails held calls with `closed` and closes every node connection. Not from the loop thread.
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  // Connects to the seeds and asks for the map. Any thread; never blocks.
  void start();
  // Blocks until ready (→ {}), stopped (→ its cause) or timeout. Not the loop thread. A node
  // connection refused by TLS before the first map (tls_verify, tls_handshake: one CA and one
  // client certificate serve every node) stops the client with that cause.
  std::error_code wait_ready(std::chrono::milliseconds timeout);
  // The stopping node connection's Connection::cause() (TLS's reason), else empty. Any
  // thread; takes a mutex.
  std::string cause() const;

  // --- Loop thread only; never block. `done` runs once, on the loop thread. ---
  // Routed by command_slot(args); a keyless command goes to any ready master.
  void call(std::span<const std::string_view> args, ReplyFn done);
  void call(std::initializer_list<std::string_view> args, ReplyFn done) {
    call(std::span<const std::string_view>(args.begin(), args.size()), std::move(done));
  }
  // Routed by `slot` whatever the arguments say (pub/sub channels, keyless scripts).
  void call_slot(std::uint16_t slot, std::span<const std::string_view> args, ReplyFn done);
  // EVALSHA (NOSCRIPT → SCRIPT LOAD on that node) routed by keys[0]'s slot.
  void evalsha(const Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> argv, ReplyFn done);
  // Asks for a fresh map now (coalesced; at most one in flight, refresh_min_interval apart).
  void refresh();
  // The connection to the master serving `slot` in the current map, or nullptr.
  Connection* master_of(std::uint16_t slot) noexcept;

  // The address of the master serving `slot` (empty host when it has none). Any thread.
  NodeAddress address_of(std::uint16_t slot) const;

  // --- Any thread but the loop's: post the call and wait. ---
  OwnedResult call_blocking(std::vector<std::string> args);

  // Any thread; relaxed snapshot.
  ClusterStats stats() const;
  UringLoop& loop() noexcept { return loop_; }
  const ClusterOptions& options() const noexcept { return options_; }

 private:
  struct Node;
  struct Request;
  using RequestPtr = std::shared_ptr<Request>;

  static void on_tick(IoOp& op, int res) noexcept;
  // The node at `addr`, its connection made on first sight; std::invalid_argument when `addr`
  // does not resolve (the constructor's seeds). reach() is the loop thread's: null then, counted.
  Node& node_for(const NodeAddress& addr);
  Node* reach(const NodeAddress& addr);
  void send(const RequestPtr& req, Node* node, bool asking);
  void route(const RequestPtr& req);
  void hold(const RequestPtr& req);
  void retry_held();
  void answered(const RequestPtr& req, Node* node, std::error_code ec, const Resp3Value& v);
  void finish(const RequestPtr& req, std::error_code ec, const Resp3Value& v);
  void ask_topology();
  // Marks the map wanted and wakes a tick that sleeps its idle second.
  void want_refresh();
  // The next tick: kTickPeriod while a call or the map waits, else the idle period.
  void arm_tick();
  void topology_answer(Node* from, bool shards, std::error_code ec, const Resp3Value& v);
  void apply(const std::vector<SlotRange>& ranges);
  void fence(bool after_set);
  void become_ready();
  void stop_fatal(std::error_code cause, std::string detail = {});  // the first cause stays
  Node* any_ready() noexcept;

  UringLoop& loop_;
  ClusterOptions options_;
  ClusterPushFn on_push_;
  ClusterEventFn on_event_;

  // Loop thread.
  std::vector<std::unique_ptr<Node>> nodes_;
  std::array<Node*, kClusterSlots> owner_{};
  std::vector<Node*> masters_list_;  // the masters of the current map
  std::deque<RequestPtr> held_;
  IoOp tick_op_;
  bool started_ = false, closing_ = false, ready_sent_ = false, fenced_ = false;
  bool refresh_wanted_ = false, refresh_in_flight_ = false;
  bool tick_long_ = false;  // the armed tick is the idle one
  std::size_t next_probe_ = 0;
  std::chrono::steady_clock::time_point last_refresh_{};

  // Node addresses for address_of() from other threads: guarded by map_mu_.
  mutable std::mutex map_mu_;
  std::array<std::int16_t, kClusterSlots> owner_index_{};
  std::vector<NodeAddress> addresses_;

  // Readiness for other threads.
  mutable std::mutex status_mu_;
  std::condition_variable status_cv_;
  bool ready_ = false;
  std::error_code fatal_;
  std::string cause_;  // guarded by status_mu_
  std::function<void()> closed_;

  std::atomic<std::uint64_t> moved_{0}, ask_{0}, tryagain_{0}, refreshes_{0}, refresh_failures_{0},
      unresolved_{0}, redirect_limit_{0}, held_count_{0}, held_expired_{0}, masters_{0};
};

}  // namespace echo::io
