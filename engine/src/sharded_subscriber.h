// SPDX-License-Identifier: MIT
// The broadcast lane on a cluster: each table's coherence channel is SSUBSCRIBEd on the master
// that owns its hash tag's slot, over one subscriber connection per such master. A channel is
// lost when its connection drops or the server pushes `sunsubscribe` (its slot moved); the
// engine then applies the table's disconnect policy, and a periodic check subscribes it again on
// whichever master the cluster client's refreshed map names, until the server confirms.
#pragma once

#include <echo/io/cluster_client.h>
#include <echo/io/connection.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace echo::engine {

class ShardedSubscriber {
 public:
  struct Handlers {
    std::function<void(std::string_view channel, std::string_view payload)> message;
    std::function<void(std::string_view channel)> confirmed;  // the server said ssubscribe
    std::function<void(std::string_view channel)> lost;       // connection loss / sunsubscribe
    std::function<void()> unrouted;                           // any other push
  };

  // Any thread; connects nothing. `cluster` must outlive this object.
  ShardedSubscriber(io::ClusterClient& cluster, io::ConnectionOptions connection,
                    std::vector<std::string> channels, Handlers handlers);
  // Closes every subscriber connection. Not from the loop thread.
  ~ShardedSubscriber();
  ShardedSubscriber(const ShardedSubscriber&) = delete;
  ShardedSubscriber& operator=(const ShardedSubscriber&) = delete;

  // Begins subscribing. Any thread; never blocks.
  void start();
  // Every subscriber connection's stats. Any thread.
  std::vector<io::ConnectionStats> stats() const;
  // Subscriptions confirmed again after a move or a loss, not the attempts (any thread; relaxed).
  std::uint64_t resubscribes() const noexcept {
    return resubscribes_.load(std::memory_order_relaxed);
  }

 private:
  struct Sub;
  struct Channel {
    std::string name;
    std::uint16_t slot = 0;
    Sub* on = nullptr;  // the connection it was last sent to
    bool confirmed = false, ever_confirmed = false;
    std::chrono::steady_clock::time_point last_attempt{};
  };

  static void on_tick(io::IoOp& op, int res) noexcept;
  Sub& sub_for(const io::NodeAddress& addr);
  void check();
  void on_push(Sub& from, const io::Resp3Value& push);
  void lose(Channel& c);

  io::ClusterClient& cluster_;
  io::UringLoop& loop_;
  io::ConnectionOptions connection_;
  Handlers handlers_;
  std::vector<Channel> channels_;
  std::vector<std::unique_ptr<Sub>> subs_;  // grows on the loop thread; guarded by mu_
  mutable std::mutex mu_;
  io::IoOp tick_op_;
  bool closing_ = false;
  std::function<void()> closed_;
  std::atomic<std::uint64_t> resubscribes_{0};
};

}  // namespace echo::engine
