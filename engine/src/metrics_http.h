// SPDX-License-Identifier: MIT
// The metrics endpoint (EngineOptions::metrics_port): a tiny HTTP/1.x server on the engine's io
// thread that answers GET /metrics with the Prometheus text of the engine's snapshot. Every
// socket operation is a loop verb (accept, recv, send, after), so a slow or silent client costs
// the loop nothing but its ops: each client has a 2 s deadline from its accept, a request larger
// than 8 KiB is refused, and at most 16 clients are served at once (the next ones get a 503).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <echo/engine/engine.h>
#include <echo/engine/error.h>
#include <echo/io/unique_fd.h>
#include <echo/io/uring_loop.h>

namespace echo::engine {

class MetricsEndpoint {
 public:
  static constexpr std::size_t kMaxRequestBytes = 8192;       // a request's head, all of it
  static constexpr std::size_t kMaxClients = 16;              // served at once; more get a 503
  static constexpr auto kDeadline = std::chrono::seconds(2);  // accept → the answer sent
  static constexpr std::size_t kSendBuffer = std::size_t{64} * 1024;  // each client's SO_SNDBUF

  // The exposition's text; runs on the loop thread for each GET /metrics, so it must not block
  // and must not wait for the loop (Engine::stats() reads relaxed counters and takes short locks
  // no thread holds while it waits for the loop).
  using Render = std::function<std::string()>;

  // The engine's constructor: ConfigError naming the knob when metrics_port is outside 0..65535
  // or metrics_bind is not an IPv4 literal ("127.0.0.1", "0.0.0.0", ...).
  static void check_options(const EngineOptions& options);

  MetricsEndpoint(io::UringLoop& loop, Render render);
  // close() must have run (or open() never succeeded): no op of this object is in flight.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Owner thread, before start(): socket, SO_REUSEADDR, bind to bind:port (an IPv4 literal,
  // checked by the engine's constructor), listen. Errc::kMetricsListen with "metrics endpoint
  // 127.0.0.1:9100: Address already in use" when the kernel refuses.
  Error open(const std::string& bind, int port);
  // The port the listener is bound to (0 before open()). Any thread.
  int port() const noexcept { return port_.load(std::memory_order_relaxed); }
  // Owner thread, after open(): arms the first accept on the loop thread (posted).
  void start();
  // Any thread but the loop's: cancels the accept and every client's ops, closes every socket
  // on the loop thread, and waits for their completions (up to 5 s). Idempotent.
  void close();

  // Any thread; relaxed.
  MetricsCounters counters() const noexcept;

 private:
  struct Client;
  static void on_accept(io::IoOp& op, int res) noexcept;
  static void on_retry(io::IoOp& op, int res) noexcept;
  static void on_recv(io::IoOp& op, int res) noexcept;
  static void on_send(io::IoOp& op, int res) noexcept;
  static void on_deadline(io::IoOp& op, int res) noexcept;

  void arm_accept();
  void admit(int fd);
  void read_more(Client& c);
  void answer(Client& c, int status, std::string_view body = {});
  void respond_to_request(Client& c);
  void send_rest(Client& c);
  void finish(Client& c, bool answered);  // begins closing; freed when no op is armed
  void reap(Client& c);                   // frees it once none of its ops is armed
  void check_closed();                    // close(): done once nothing is armed

  io::UringLoop& loop_;
  Render render_;
  io::UniqueFd listen_fd_;
  std::atomic<int> port_{0};
  io::IoOp accept_op_, retry_op_;
  std::vector<std::unique_ptr<Client>> clients_;  // loop thread only
  std::size_t serving_ = 0;                       // clients not refused with 503 (loop thread)
  bool closing_ = false;                          // loop thread only
  bool started_ = false, closed_ = false;         // owner thread
  std::function<void()> closed_done_;             // close_on_loop's `done` (loop thread)

  std::atomic<std::uint64_t> requests_{0}, ok_{0}, client_errors_{0}, server_errors_{0},
      dropped_{0}, connected_{0};
};

}  // namespace echo::engine
