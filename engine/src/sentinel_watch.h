// SPDX-License-Identifier: MIT
// ServerMode::kSentinel's watcher: one connection to one sentinel at a time, on the engine's io
// loop. It asks SENTINEL get-master-addr-by-name at every (re)connect, listens on +switch-master,
// and on a change tells the engine, whose connections then dial master() (their
// ConnectionOptions::target). A lost sentinel is replaced by the next one in the list, and the
// question asked again there, so a switch missed while no sentinel was heard is caught.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <echo/engine/error.h>
#include <echo/io/cluster_map.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>

namespace echo::engine {

struct SentinelWatchOptions {
  std::vector<io::NodeAddress> sentinels;        // 1 or more; names resolved by start()
  std::string master_name;                       // the name the sentinels monitor the master under
  std::string password;                          // the sentinels' requirepass; empty: none
  std::chrono::milliseconds call_timeout{5000};  // per SENTINEL call; 1..3,600,000 ms
  std::chrono::milliseconds heartbeat{30000};    // idle PING to the sentinel; 0 = off
};

// EngineStats::sentinel, a relaxed snapshot.
struct SentinelWatchCounters {
  std::string master;               // "host:port" the engine dials now ("" before start)
  std::uint64_t switches = 0;       // master changes followed (+switch-master, or a re-ask)
  std::uint64_t reconnects = 0;     // the watcher's sentinel connection booted again
  std::uint64_t asks = 0;           // get-master-addr-by-name answered with an address
  std::uint64_t role_refusals = 0;  // engine connections that found a non-master (ROLE)
};

class SentinelWatch {
 public:
  // `on_switch` runs on the loop thread after master() changed; it must not block.
  SentinelWatch(io::UringLoop& loop, SentinelWatchOptions options, std::function<void()> on_switch);
  // Not from the loop thread (io::Connection's rule); the loop must still run or be idle.
  ~SentinelWatch();
  SentinelWatch(const SentinelWatch&) = delete;
  SentinelWatch& operator=(const SentinelWatch&) = delete;

  // Owner thread; blocks until the first sentinel that answers gives the master's address, or
  // `deadline`. Errors, each with its cause in words (Error::detail): host_unresolved (a
  // sentinel's host), sentinel_unknown_master (the sentinel answered nil; the detail names the
  // master and the sentinel), no_sentinel (every sentinel was tried and none answered; the last
  // one's cause), the connector's fatal one (auth_refused: a wrong sentinel_password), timeout.
  Error start(std::chrono::steady_clock::time_point deadline);
  // The master to dial: {} before start() found one. Any thread (a mutex; the connections ask it
  // before each reconnect, on the loop thread).
  io::DialTarget master() const;
  // Loop thread: an engine connection found master() answering ROLE as a replica (a demoted
  // master). Counted; the sentinel is asked again, and a different answer is a switch.
  void suspect();
  // Loop thread, before teardown: no more questions, no more switches.
  void stop_on_loop() { closing_ = true; }
  SentinelWatchCounters stats() const;  // any thread
  // The sentinel connection's own stats (label "sentinel"), once start() built it. Any thread.
  std::optional<io::ConnectionStats> connection_stats() const;

 private:
  io::DialTarget next_sentinel();  // the sentinel connection's target (loop thread)
  void on_event(io::ConnEvent event);
  void on_push(const io::Resp3Value& push);
  void ask();
  void adopt(std::string host, int port);

  io::UringLoop& loop_;
  SentinelWatchOptions options_;
  std::function<void()> on_switch_;
  std::unique_ptr<io::Connection> conn_;
  std::size_t at_ = 0;    // loop thread: the sentinel dialled last
  bool closing_ = false;  // loop thread

  mutable std::mutex mu_;  // guards the rest; start() waits on cv_
  std::condition_variable cv_;
  io::DialTarget master_;
  bool unknown_ = false;    // a sentinel answered nil for our name
  std::string unknown_at_;  // which one ("host:port")
  std::error_code fatal_;   // the sentinel connection stopped (auth_refused, ...)
  std::size_t dials_ = 0;   // connects begun, the first included
  SentinelWatchCounters counters_;
};

}  // namespace echo::engine
