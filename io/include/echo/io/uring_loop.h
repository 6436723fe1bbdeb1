// SPDX-License-Identifier: MIT
// The io thread's engine: one io_uring (or, where the kernel refuses io_uring, one epoll set)
// driving many sockets and timers on one thread. Operations are caller-owned IoOp records (no
// allocation per operation); their completions run on the loop thread. Other threads hand work
// over with post(), which is lock-free and wakes a blocked loop through one coalesced eventfd
// write. Waiting is either blocking or busy-polling. Both backends keep one contract: the verbs
// below and their completion results, so nothing above the loop knows which one runs.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <echo/io/loop_options.h>

namespace echo::io {

// One operation in flight. The owner keeps it alive until its completion has run (or until the
// loop is destroyed); `complete` runs on the loop thread with the result (>= 0 or -errno) and
// must not block.
struct IoOp {
  using Complete = void (*)(IoOp& op, int res) noexcept;
  Complete complete = nullptr;
  void* context = nullptr;  // the owner, for `complete` to find its object
  bool armed = false;       // set by the loop at submission, cleared before `complete` runs
  // Backend-private storage: the io_uring backend's timer / link-timeout duration (the kernel
  // reads it as __kernel_timespec), the epoll backend's record of the operation.
  std::int64_t timespec[2] = {0, 0};
};

class UringLoop {
 public:
  // Creates the ring (or the epoll set) and the wake eventfd. Throws std::invalid_argument naming
  // a bad knob, or std::system_error when the kernel refuses the backend (kUring: io_uring with
  // any error; kAuto: io_uring with an error other than EPERM/ENOSYS, or epoll). A kAuto loop that
  // falls back says so once per process on stderr ("echostore: io_uring refused (<reason>); using
  // epoll") and keeps the reason in fallback_reason(). Any thread.
  explicit UringLoop(LoopOptions options = {});
  // The loop must not be running; operations still in flight are abandoned with the ring.
  ~UringLoop();
  UringLoop(const UringLoop&) = delete;
  UringLoop& operator=(const UringLoop&) = delete;

  // Runs completions, posted work and timers on the calling thread until stop(). Pins the thread
  // first when options.cpu >= 0 (throws std::system_error if the CPU is refused).
  void run();
  // Runs the loop on the calling thread until `done()` is true or `timeout` passes; for callers
  // that own a loop no thread is running (tests, teardown). Returns done().
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);
  // Teardown of a loop-thread object from another thread: runs `begin(done)` on the loop thread
  // (posted when some thread runs the loop, else right here inside run_until()) and waits until
  // the loop thread calls `done` once or `timeout` passes. True iff `done` was called. Never on
  // the loop thread (it would wait on itself).
  bool close_on_loop(std::function<void(std::function<void()> done)> begin,
                     std::chrono::milliseconds timeout);
  // Asks run() to return. Any thread; never blocks.
  void stop() noexcept;

  // Hands `fn` to the loop thread; it runs there in posting order per producer thread, and in no
  // promised order between threads, even when one post happens-before another's (the MPSC
  // queue's contract): work that must follow another thread's posts is posted by that thread, or
  // checks state the earlier work left (as stop()'s markers and every closure's flag check do).
  // Any thread; lock-free (an MPSC queue), allocates the closure; wakes a blocked loop with at
  // most one eventfd write per drain.
  void post(std::function<void()> fn);
  // True on the thread currently inside run()/run_until().
  bool in_loop_thread() const noexcept;
  // True while some thread is inside run()/run_until(). Any thread; acquire.
  bool running() const noexcept;

  // --- Loop thread only. Each queues one operation and never blocks; its completion never runs
  // inside the verb. io_uring: one SQE, submitted at the next wait. epoll: the syscall is tried
  // at once without waiting (MSG_DONTWAIT, a non-blocking connect: the epoll backend sets
  // O_NONBLOCK on a socket handed to connect()), else the fd is watched until it is ready. ---
  // poll_first: the caller knows the socket is drained (it just consumed everything), so the
  // loop waits for readiness at once instead of trying a receive that must fail first.
  void recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first = false) noexcept;
  void send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept;
  // connect(2) with a deadline: completes with -ECANCELED when the timeout fires first.
  void connect(int fd, const sockaddr* addr, socklen_t len, std::chrono::milliseconds timeout,
               IoOp& op) noexcept;
  // accept4(2) on a listening socket: completes with the new connection's fd (>= 0, already
  // SOCK_NONBLOCK | SOCK_CLOEXEC; the completion owns it) or -errno; one connection per arming.
  // io_uring: one accept SQE. epoll: the epoll backend sets O_NONBLOCK on `listen_fd` (as it does
  // on a socket handed to connect()), tries accept4 at once, else waits for EPOLLIN.
  void accept(int listen_fd, IoOp& op) noexcept;
  // A one-shot timer; completes with -ETIME when it fires, -ECANCELED when cancelled.
  void after(std::chrono::nanoseconds delay, IoOp& op) noexcept;
  // Cancels `op` if it is armed (its completion still runs, usually with -ECANCELED).
  void cancel(IoOp& op) noexcept;
  // Cancels every operation on `fd`.
  void cancel_fd(int fd) noexcept;
  // Runs op.complete(op, 0) on this thread just before the loop next submits and waits, so work
  // gathered during one pass (say, many commands) leaves in one syscall. Allocation-free once
  // the deferred list has grown to its working size.
  void defer(IoOp& op) noexcept;

  // Counters (loop thread; read them after run() returns or from a posted closure).
  struct Stats {
    std::uint64_t iterations = 0;   // wait cycles
    std::uint64_t completions = 0;  // results dispatched to an IoOp (CQEs, or epoll's)
    std::uint64_t posted = 0;       // closures run from post()
    std::uint64_t wakes = 0;        // eventfd wakes consumed
  };
  const Stats& stats() const noexcept { return stats_; }
  const LoopOptions& options() const noexcept { return options_; }
  // The backend that runs: kUring or kEpoll, never kAuto. Any thread; fixed at construction.
  Backend backend() const noexcept { return backend_; }
  // Why a kAuto loop runs on epoll ("io_uring refused (Operation not permitted)"); empty when it
  // did not fall back. Any thread; fixed at construction.
  std::string_view fallback_reason() const noexcept { return fallback_reason_; }

 private:
  struct Impl;
  void loop_until(const std::function<bool()>* done, std::chrono::steady_clock::time_point end);
  void drain_posted();
  void run_deferred();
  void arm_wake();

  LoopOptions options_;
  Backend backend_ = Backend::kUring;
  std::string fallback_reason_;
  std::unique_ptr<Impl> impl_;
  Stats stats_;
  // Set by run() on entry / cleared on exit (release); read by running()/in_loop_thread().
  std::atomic<std::thread::id> owner_{};
  // stop(): release store; the loop reads it with acquire each iteration.
  std::atomic<bool> stop_{false};
  // Producers exchange(true) after enqueueing and write the eventfd only on a false→true edge;
  // the loop stores false (seq_cst) before draining, so an item enqueued after the drain began
  // always produces a fresh wake. Busy-poll mode keeps it true: the loop drains every spin.
  std::atomic<bool> wake_pending_{false};
};

// A loop with its own thread (the usual shape). Starts the thread in the constructor and stops
// and joins it in the destructor.
class LoopThread {
 public:
  explicit LoopThread(LoopOptions options = {});
  ~LoopThread();
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  UringLoop& loop() noexcept { return loop_; }
  // Stops the loop and joins the thread. Idempotent; not from the loop thread.
  void join();

 private:
  UringLoop loop_;
  std::thread thread_;
};

}  // namespace echo::io
