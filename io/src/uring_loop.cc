// SPDX-License-Identifier: MIT
// UringLoop's backend-independent half: picking the backend (with auto's fallback to epoll), the
// cross-thread post queue (moodycamel MPSC + one coalesced eventfd wake), deferred work, and the
// wait cycle that drains them around each backend wait. The kernel side is in uring_backend.cc
// and epoll_backend.cc.
#include <echo/io/uring_loop.h>

#include <concurrentqueue/concurrentqueue.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>

#include <echo/io/unique_fd.h>

#include "loop_backends.h"

namespace echo::io {

std::string_view to_string(Backend b) noexcept {
  switch (b) {
    case Backend::kAuto:
      return "auto";
    case Backend::kUring:
      return "uring";
    case Backend::kEpoll:
      return "epoll";
  }
  return "unknown";
}

struct UringLoop::Impl {
  Impl() : wake_fd(::eventfd(0, EFD_CLOEXEC)) {
    if (!wake_fd) throw std::system_error(errno, std::system_category(), "eventfd");
  }
  // Exactly one of the two is engaged; the verbs branch on `epoll`.
  std::optional<detail::UringBackend> uring;
  std::optional<detail::EpollBackend> epoll;
  // Blocking: io_uring's read waits on it; the epoll backend reads it only once it is readable.
  UniqueFd wake_fd;
  std::uint64_t wake_value = 0;  // the eventfd read lands here
  IoOp wake_op;
  moodycamel::ConcurrentQueue<std::function<void()>> posted;
  std::vector<IoOp*> deferred, running_deferred;  // swapped each pass; capacity is kept
};

namespace {

// Runs `verb` on whichever backend is engaged: one well-predicted branch, no virtual call.
template <class Verb>
void on_backend(std::optional<detail::UringBackend>& uring,
                std::optional<detail::EpollBackend>& epoll, Verb&& verb) {
  if (epoll) {
    verb(*epoll);
  } else {
    verb(*uring);
  }
}

// The one stderr line a kAuto fallback prints, once per process however many loops fall back.
void say_fallback_once(const std::string& reason) {
  static std::once_flag said;
  std::call_once(said,
                 [&] { std::fprintf(stderr, "echostore: %s; using epoll\n", reason.c_str()); });
}

}  // namespace

UringLoop::UringLoop(LoopOptions options) : options_(options) {
  if (options_.entries < 8 || options_.entries > 32768) {
    throw std::invalid_argument("LoopOptions::entries must be in 8..32768, got " +
                                std::to_string(options_.entries));
  }
  if (options_.cpu < -1 || options_.cpu >= CPU_SETSIZE) {
    throw std::invalid_argument("LoopOptions::cpu must be -1 (no pinning) or a CPU index, got " +
                                std::to_string(options_.cpu));
  }
  impl_ = std::make_unique<Impl>();
  if (options_.backend != Backend::kEpoll) {
    try {
      impl_->uring.emplace(options_.entries, options_.single_thread_taskrun);
      backend_ = Backend::kUring;
    } catch (const std::system_error& e) {
      // EPERM: a seccomp profile (Docker's default) or kernel.io_uring_disabled; ENOSYS: a kernel
      // built without io_uring. Anything else (ENOMEM, EINVAL for a flag) is a real failure.
      const int err = e.code().value();
      const bool refused =
          e.code().category() == std::system_category() && (err == EPERM || err == ENOSYS);
      if (options_.backend == Backend::kUring || !refused) throw;
      fallback_reason_ = "io_uring refused (" + e.code().message() + ")";
    }
  }
  if (!impl_->uring) {
    impl_->epoll.emplace(options_.entries);
    backend_ = Backend::kEpoll;
    if (!fallback_reason_.empty()) say_fallback_once(fallback_reason_);
  }
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
  on_backend(impl_->uring, impl_->epoll, [this](auto& b) {
    b.watch_wake(impl_->wake_fd.get(), &impl_->wake_value, impl_->wake_op);
  });
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
  if (in_loop_thread()) return;                  // the loop checks the flag before it next waits
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
      throw std::system_error(
          rc, std::system_category(),
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
  on_backend(impl_->uring, impl_->epoll, [](auto& b) { b.claim_thread(); });
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
    // A bounded run must not sleep past its deadline: it waits at most 1 ms per cycle.
    const detail::Wait wait = busy              ? detail::Wait::kPoll
                              : done != nullptr ? detail::Wait::kUpTo1ms
                                                : detail::Wait::kBlock;
    on_backend(impl_->uring, impl_->epoll,
               [this, wait](auto& b) { b.cycle(wait, stats_.completions); });
  }
  drain_posted();
  run_deferred();
  on_backend(impl_->uring, impl_->epoll, [](auto& b) { b.flush(); });
  stop_.store(false, std::memory_order_relaxed);  // only this thread reads it from here on
  if (busy) wake_pending_.store(false, std::memory_order_seq_cst);
  owner_.store(std::thread::id{}, std::memory_order_release);  // pairs with running()'s acquire
}

void UringLoop::recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.recv(fd, buf, len, op, poll_first); });
}

void UringLoop::send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.send(fd, buf, len, op); });
}

void UringLoop::connect(int fd, const sockaddr* addr, socklen_t len,
                        std::chrono::milliseconds timeout, IoOp& op) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.connect(fd, addr, len, timeout, op); });
}

void UringLoop::accept(int listen_fd, IoOp& op) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.accept(listen_fd, op); });
}

void UringLoop::after(std::chrono::nanoseconds delay, IoOp& op) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.after(delay, op); });
}

void UringLoop::cancel(IoOp& op) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.cancel(op); });
}

void UringLoop::cancel_fd(int fd) noexcept {
  on_backend(impl_->uring, impl_->epoll, [&](auto& b) { b.cancel_fd(fd); });
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
