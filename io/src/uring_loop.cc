// SPDX-License-Identifier: MIT
// The io_uring loop: ring setup, SQE helpers, the wait cycle (block or busy-poll), CQE dispatch to
// IoOp records, and the cross-thread post queue (moodycamel MPSC + one coalesced eventfd wake).
#include <echo/io/uring_loop.h>

// concurrentqueue.h first: <linux/fs.h> (via liburing) defines a BLOCK_SIZE macro it would trip on.
#include <concurrentqueue/concurrentqueue.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>

#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <system_error>

#include <echo/io/unique_fd.h>

namespace echo::io {

static_assert(sizeof(__kernel_timespec) == sizeof(IoOp::timespec),
              "IoOp::timespec is the storage the kernel reads as __kernel_timespec");

namespace {

// Owns the ring: io_uring_queue_exit exactly once, on destruction. Move-only by construction.
class Ring {
 public:
  Ring(unsigned entries, bool single_thread_taskrun) {
    io_uring_params params{};
    if (single_thread_taskrun) {
      // Disabled until the running thread enables it: that thread becomes the single issuer.
      params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                     IORING_SETUP_R_DISABLED;
    }
    const int rc = io_uring_queue_init_params(entries, &ring_, &params);
    if (rc < 0) throw std::system_error(-rc, std::system_category(), "io_uring_queue_init");
  }
  ~Ring() { io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  io_uring* get() noexcept { return &ring_; }

 private:
  io_uring ring_{};
};

// CQEs whose user_data is this tag belong to no IoOp (link timeouts, cancel requests).
constexpr std::uint64_t kNoOp = 0;

__kernel_timespec to_timespec(std::chrono::nanoseconds d) noexcept {
  if (d.count() < 0) d = std::chrono::nanoseconds(0);
  __kernel_timespec ts{};
  ts.tv_sec = d.count() / 1'000'000'000;
  ts.tv_nsec = d.count() % 1'000'000'000;
  return ts;
}

}  // namespace

struct UringLoop::Impl {
  Impl(unsigned entries, bool single_thread_taskrun)
      : ring(entries, single_thread_taskrun), wake_fd(::eventfd(0, EFD_CLOEXEC)) {
    if (!wake_fd) throw std::system_error(errno, std::system_category(), "eventfd");
  }
  Ring ring;
  UniqueFd wake_fd;
  std::uint64_t wake_value = 0;  // the eventfd read lands here
  IoOp wake_op;
  moodycamel::ConcurrentQueue<std::function<void()>> posted;
  std::thread::id issuer{};  // single_thread_taskrun: the thread that enabled the ring
  std::vector<IoOp*> deferred, running_deferred;  // swapped each pass; capacity is kept

  // A free SQE; when the SQ is full, submits what is queued to make room (never blocks).
  io_uring_sqe* sqe() noexcept {
    io_uring_sqe* s = io_uring_get_sqe(ring.get());
    while (s == nullptr) {
      io_uring_submit(ring.get());
      s = io_uring_get_sqe(ring.get());
    }
    return s;
  }
};

UringLoop::UringLoop(LoopOptions options) : options_(options) {
  if (options_.entries < 8 || options_.entries > 32768) {
    throw std::invalid_argument("LoopOptions::entries must be in 8..32768, got " +
                                std::to_string(options_.entries));
  }
  if (options_.cpu < -1 || options_.cpu >= CPU_SETSIZE) {
    throw std::invalid_argument("LoopOptions::cpu must be -1 (no pinning) or a CPU index, got " +
                                std::to_string(options_.cpu));
  }
  impl_ = std::make_unique<Impl>(options_.entries, options_.single_thread_taskrun);
  impl_->deferred.reserve(64);
  impl_->running_deferred.reserve(64);
  impl_->wake_op.context = this;
  impl_->wake_op.complete = [](IoOp& op, int res) noexcept {
    auto* self = static_cast<UringLoop*>(op.context);
    if (res >= 0) ++self->stats_.wakes;
    // Pairs with the producers' exchange in post(): every item enqueued before their exchange
    // saw `false` is visible to the drain that follows this store.
    self->wake_pending_.store(false, std::memory_order_seq_cst);
    self->arm_wake();
  };
}

UringLoop::~UringLoop() {
  assert(!running() && "UringLoop destroyed while a thread is inside run()");
}

void UringLoop::arm_wake() {
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_read(s, impl_->wake_fd.get(), &impl_->wake_value, sizeof impl_->wake_value, 0);
  impl_->wake_op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&impl_->wake_op));
}

void UringLoop::post(std::function<void()> fn) {
  impl_->posted.enqueue(std::move(fn));
  // seq_cst: ordered after the enqueue and against the loop's seq_cst store in wake_op.
  if (!wake_pending_.exchange(true, std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    // A full eventfd counter (EAGAIN) still wakes the reader; nothing to do on failure.
    [[maybe_unused]] ssize_t n = ::write(impl_->wake_fd.get(), &one, sizeof one);
  }
}

void UringLoop::stop() noexcept {
  stop_.store(true, std::memory_order_release);  // pairs with the acquire load in loop_until
  if (in_loop_thread()) return;  // the loop checks the flag before it next waits
  if (!wake_pending_.exchange(true, std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(impl_->wake_fd.get(), &one, sizeof one);
  }
}

bool UringLoop::in_loop_thread() const noexcept {
  // acquire pairs with the release store in loop_until.
  return owner_.load(std::memory_order_acquire) == std::this_thread::get_id();
}

bool UringLoop::running() const noexcept {
  return owner_.load(std::memory_order_acquire) != std::thread::id{};
}

void UringLoop::drain_posted() {
  std::function<void()> fn;
  while (impl_->posted.try_dequeue(fn)) {
    ++stats_.posted;
    fn();
    fn = nullptr;
  }
}

void UringLoop::defer(IoOp& op) noexcept {
  op.armed = true;
  impl_->deferred.push_back(&op);
}

void UringLoop::run_deferred() {
  // Deferred work may defer again; it runs in this same pass, before the loop can sleep.
  while (!impl_->deferred.empty()) {
    impl_->running_deferred.swap(impl_->deferred);
    for (IoOp* op : impl_->running_deferred) {
      op->armed = false;
      op->complete(*op, 0);
    }
    impl_->running_deferred.clear();
  }
}

void UringLoop::run() {
  if (options_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options_.cpu, &set);
    const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) {
      throw std::system_error(rc, std::system_category(),
                              "LoopOptions::cpu: cannot pin to CPU " + std::to_string(options_.cpu));
    }
  }
  loop_until(nullptr, std::chrono::steady_clock::time_point::max());
}

bool UringLoop::close_on_loop(std::function<void(std::function<void()> done)> begin,
                              std::chrono::milliseconds timeout) {
  if (running()) {
    // shared: the loop thread may still be inside set_value() when this thread wakes and leaves.
    auto closed = std::make_shared<std::promise<void>>();
    auto done = closed->get_future();
    post([begin = std::move(begin), closed] { begin([closed] { closed->set_value(); }); });
    return done.wait_for(timeout) == std::future_status::ready;
  }
  bool finished = false;
  begin([&finished] { finished = true; });
  return run_until([&] { return finished; }, timeout);
}

bool UringLoop::run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  loop_until(&done, std::chrono::steady_clock::now() + timeout);
  return done();
}

void UringLoop::loop_until(const std::function<bool()>* done,
                           std::chrono::steady_clock::time_point end) {
  std::thread::id expected{};
  const bool claimed = owner_.compare_exchange_strong(expected, std::this_thread::get_id(),
                                                      std::memory_order_acq_rel);
  if (!claimed) {
    std::fprintf(stderr, "echo::io::UringLoop: run() entered by a second thread\n");
    std::abort();
  }
  io_uring* ring = impl_->ring.get();
  if (options_.single_thread_taskrun) {
    if (impl_->issuer == std::thread::id{}) {
      // liburing 2.3 declares io_uring_enable_rings() but its .so does not export it: the
      // exported raw register call does the same.
      const int rc = io_uring_register(ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
      if (rc < 0) {
        std::fprintf(stderr, "echo::io::UringLoop: io_uring_enable_rings failed (%d)\n", rc);
        std::abort();
      }
      impl_->issuer = std::this_thread::get_id();
    } else if (impl_->issuer != std::this_thread::get_id()) {
      std::fprintf(stderr, "echo::io::UringLoop: single_thread_taskrun loop run by a second "
                           "thread (the kernel would refuse every submission)\n");
      std::abort();
    }
  }
  const bool busy = options_.wait == WaitMode::kBusyPoll;
  if (busy) wake_pending_.store(true, std::memory_order_seq_cst);  // producers never write
  if (!impl_->wake_op.armed) arm_wake();
  const bool bounded = end != std::chrono::steady_clock::time_point::max();

  while (!stop_.load(std::memory_order_acquire)) {  // pairs with the release store in stop()
    if (done != nullptr && (*done)()) break;
    if (bounded && std::chrono::steady_clock::now() >= end) break;
    ++stats_.iterations;
    drain_posted();
    run_deferred();
    if (busy || done != nullptr) {
      // A bounded run must not sleep past its deadline: it waits at most 1 ms per cycle.
      if (busy) {
        io_uring_submit(ring);
        // Socket completions finish as task work in this task; a spinner that never enters
        // the kernel only runs it when an IPI lands. Entering with GETEVENTS (no sleep) runs it
        // now: BM_Connection_PingRoundTrip_BusyPoll in bench/io_bench.cc shows the difference.
        if (io_uring_cq_ready(ring) == 0) io_uring_get_events(ring);
      } else {
        __kernel_timespec ts = to_timespec(std::chrono::milliseconds(1));
        io_uring_cqe* cqe = nullptr;
        io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, nullptr);
      }
    } else {
      io_uring_submit_and_wait(ring, 1);
    }
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(ring, &cqe) == 0 && cqe != nullptr) {
      const std::uint64_t data = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      if (data == kNoOp) continue;
      IoOp* op = reinterpret_cast<IoOp*>(data);
      op->armed = false;
      ++stats_.completions;
      op->complete(*op, res);
    }
  }
  drain_posted();
  run_deferred();
  io_uring_submit(ring);
  stop_.store(false, std::memory_order_relaxed);  // only this thread reads it from here on
  if (busy) wake_pending_.store(false, std::memory_order_seq_cst);
  owner_.store(std::thread::id{}, std::memory_order_release);  // pairs with running()'s acquire
}

void UringLoop::recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept {
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_recv(s, fd, buf, len, 0);
  if (poll_first) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringLoop::send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept {
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_send(s, fd, buf, len, MSG_NOSIGNAL);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringLoop::connect(int fd, const sockaddr* addr, socklen_t len,
                        std::chrono::milliseconds timeout, IoOp& op) noexcept {
  // Two linked SQEs must be adjacent: make room for both before taking the first.
  if (io_uring_sq_space_left(impl_->ring.get()) < 2) io_uring_submit(impl_->ring.get());
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_connect(s, fd, addr, len);
  s->flags |= IOSQE_IO_LINK;
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
  auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec);
  *ts = to_timespec(timeout);
  io_uring_sqe* t = impl_->sqe();
  io_uring_prep_link_timeout(t, ts, 0);
  io_uring_sqe_set_data64(t, kNoOp);
}

void UringLoop::after(std::chrono::nanoseconds delay, IoOp& op) noexcept {
  auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec);
  *ts = to_timespec(delay);
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_timeout(s, ts, 0, 0);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringLoop::cancel(IoOp& op) noexcept {
  if (!op.armed) return;
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_cancel64(s, reinterpret_cast<std::uint64_t>(&op), 0);
  io_uring_sqe_set_data64(s, kNoOp);
}

void UringLoop::cancel_fd(int fd) noexcept {
  io_uring_sqe* s = impl_->sqe();
  io_uring_prep_cancel_fd(s, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(s, kNoOp);
}

LoopThread::LoopThread(LoopOptions options) : loop_(options) {
  std::promise<void> started;
  auto ready = started.get_future();
  loop_.post([&started] { started.set_value(); });
  thread_ = std::thread([this, &started] {
    try {
      loop_.run();
    } catch (...) {
      started.set_exception(std::current_exception());
    }
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

LoopThread::~LoopThread() { join(); }

void LoopThread::join() {
  if (!thread_.joinable()) return;
  loop_.stop();
  thread_.join();
}

}  // namespace echo::io
