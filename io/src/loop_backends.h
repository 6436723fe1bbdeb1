// SPDX-License-Identifier: MIT
// The two kernel interfaces behind UringLoop's pimpl, private to echostore::io: the io_uring ring
// (uring_backend.cc) and the epoll set (epoll_backend.cc). Both offer the same fixed verb set, so
// UringLoop picks one at construction and forwards each verb with one predictable branch (no
// virtual call on the hot path); posting, deferring and the wait cycle stay in uring_loop.cc.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <echo/io/uring_loop.h>

namespace echo::io::detail {

// How long one wait cycle may sleep when nothing is ready.
enum class Wait : std::uint8_t {
  kPoll,     // not at all (busy-poll)
  kUpTo1ms,  // at most 1 ms (a bounded run_until must not sleep past its deadline)
  kBlock,    // until something completes (or, on epoll, the next timer is due)
};

// Runs one completion: clears `armed` first (the callback may re-arm the op), counts it.
inline void complete_op(IoOp& op, int res, std::uint64_t& completions) noexcept {
  op.armed = false;
  ++completions;
  op.complete(op, res);
}

class UringBackend {
 public:
  // Throws std::system_error carrying io_uring_queue_init's errno.
  UringBackend(unsigned entries, bool single_thread_taskrun);
  ~UringBackend();
  UringBackend(const UringBackend&) = delete;
  UringBackend& operator=(const UringBackend&) = delete;

  // At each run()/run_until() entry: with single_thread_taskrun, enables the ring for this thread
  // the first time and aborts when a second thread runs it.
  void claim_thread();
  // The wake eventfd: one read of 8 bytes into `value`, completing `op` (re-armed by its owner).
  void watch_wake(int fd, std::uint64_t* value, IoOp& op) noexcept;
  void recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept;
  void send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept;
  void connect(int fd, const sockaddr* addr, socklen_t len, std::chrono::milliseconds timeout,
               IoOp& op) noexcept;
  void accept(int listen_fd, IoOp& op) noexcept;
  void after(std::chrono::nanoseconds delay, IoOp& op) noexcept;
  void cancel(IoOp& op) noexcept;
  void cancel_fd(int fd) noexcept;
  // Submits what is queued, waits as `wait` says, and runs every completion that arrived.
  void cycle(Wait wait, std::uint64_t& completions) noexcept;
  // Submits what is queued without waiting (the loop's exit).
  void flush() noexcept;

 private:
  struct Ring;
  std::unique_ptr<Ring> ring_;
  bool single_thread_taskrun_;
  std::thread::id issuer_{};
};

class EpollBackend {
 public:
  // Throws std::system_error carrying epoll_create1's errno.
  explicit EpollBackend(unsigned max_events);
  ~EpollBackend();
  EpollBackend(const EpollBackend&) = delete;
  EpollBackend& operator=(const EpollBackend&) = delete;

  void claim_thread() noexcept {}
  void watch_wake(int fd, std::uint64_t* value, IoOp& op) noexcept;
  void recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept;
  void send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept;
  void connect(int fd, const sockaddr* addr, socklen_t len, std::chrono::milliseconds timeout,
               IoOp& op) noexcept;
  void accept(int listen_fd, IoOp& op) noexcept;
  void after(std::chrono::nanoseconds delay, IoOp& op) noexcept;
  void cancel(IoOp& op) noexcept;
  void cancel_fd(int fd) noexcept;
  void cycle(Wait wait, std::uint64_t& completions) noexcept;
  void flush() noexcept {}

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace echo::io::detail
