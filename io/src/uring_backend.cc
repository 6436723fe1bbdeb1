// SPDX-License-Identifier: MIT
// The io_uring backend of UringLoop: ring setup, SQE helpers, one wait cycle (block, bounded or
// busy-poll) and CQE dispatch to IoOp records. The loop's posting and deferring live in
// uring_loop.cc; the epoll backend with the same verbs in epoll_backend.cc.
#include "loop_backends.h"

// <linux/fs.h> (via liburing) defines a BLOCK_SIZE macro concurrentqueue.h would trip on: that
// header is included only by uring_loop.cc, never after this one.
#include <liburing.h>

#include <cstdio>
#include <cstdlib>
#include <system_error>

namespace echo::io::detail {

static_assert(sizeof(__kernel_timespec) == sizeof(IoOp::timespec),
              "IoOp::timespec is the storage the kernel reads as __kernel_timespec");

namespace {

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

// Owns the ring: io_uring_queue_exit exactly once, on destruction.
struct UringBackend::Ring {
  Ring(unsigned entries, bool single_thread_taskrun) {
    io_uring_params params{};
    if (single_thread_taskrun) {
      // Disabled until the running thread enables it: that thread becomes the single issuer.
      params.flags =
          IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
    }
    const int rc = io_uring_queue_init_params(entries, &ring, &params);
    if (rc < 0) throw std::system_error(-rc, std::system_category(), "io_uring_queue_init");
  }
  ~Ring() { io_uring_queue_exit(&ring); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // A free SQE; when the SQ is full, submits what is queued to make room (never blocks).
  io_uring_sqe* sqe() noexcept {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    while (s == nullptr) {
      io_uring_submit(&ring);
      s = io_uring_get_sqe(&ring);
    }
    return s;
  }

  io_uring ring{};
};

UringBackend::UringBackend(unsigned entries, bool single_thread_taskrun)
    : ring_(std::make_unique<Ring>(entries, single_thread_taskrun)),
      single_thread_taskrun_(single_thread_taskrun) {}

UringBackend::~UringBackend() = default;

void UringBackend::claim_thread() {
  if (!single_thread_taskrun_) return;
  if (issuer_ == std::thread::id{}) {
    // liburing 2.3 declares io_uring_enable_rings() but its .so does not export it: the
    // exported raw register call does the same.
    const int rc = io_uring_register(ring_->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
    if (rc < 0) {
      std::fprintf(stderr, "echo::io::UringLoop: io_uring_enable_rings failed (%d)\n", rc);
      std::abort();
    }
    issuer_ = std::this_thread::get_id();
  } else if (issuer_ != std::this_thread::get_id()) {
    std::fprintf(stderr,
                 "echo::io::UringLoop: single_thread_taskrun loop run by a second "
                 "thread (the kernel would refuse every submission)\n");
    std::abort();
  }
}

void UringBackend::watch_wake(int fd, std::uint64_t* value, IoOp& op) noexcept {
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_read(s, fd, value, sizeof *value, 0);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringBackend::cycle(Wait wait, std::uint64_t& completions) noexcept {
  io_uring* ring = &ring_->ring;
  switch (wait) {
    case Wait::kPoll:
      io_uring_submit(ring);
      // Socket completions finish as task work in this task; a spinner that never enters
      // the kernel only runs it when an IPI lands. Entering with GETEVENTS (no sleep) runs it
      // now: BM_Connection_PingRoundTrip_BusyPoll in bench/io_bench.cc shows the difference.
      if (io_uring_cq_ready(ring) == 0) io_uring_get_events(ring);
      break;
    case Wait::kUpTo1ms: {
      __kernel_timespec ts = to_timespec(std::chrono::milliseconds(1));
      io_uring_cqe* cqe = nullptr;
      io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, nullptr);
      break;
    }
    case Wait::kBlock:
      io_uring_submit_and_wait(ring, 1);
      break;
  }
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(ring, &cqe) == 0 && cqe != nullptr) {
    const std::uint64_t data = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (data == kNoOp) continue;
    // user_data is the op's address, set by the submitter: the cast only gives it back.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    complete_op(*reinterpret_cast<IoOp*>(data), res, completions);
  }
}

void UringBackend::flush() noexcept { io_uring_submit(&ring_->ring); }

void UringBackend::recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept {
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_recv(s, fd, buf, len, 0);
  if (poll_first) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringBackend::send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept {
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_send(s, fd, buf, len, MSG_NOSIGNAL);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringBackend::connect(int fd, const sockaddr* addr, socklen_t len,
                           std::chrono::milliseconds timeout, IoOp& op) noexcept {
  // Two linked SQEs must be adjacent: make room for both before taking the first.
  if (io_uring_sq_space_left(&ring_->ring) < 2) io_uring_submit(&ring_->ring);
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_connect(s, fd, addr, len);
  s->flags |= IOSQE_IO_LINK;
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
  auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec);
  *ts = to_timespec(timeout);
  io_uring_sqe* t = ring_->sqe();
  io_uring_prep_link_timeout(t, ts, 0);
  io_uring_sqe_set_data64(t, kNoOp);
}

void UringBackend::accept(int listen_fd, IoOp& op) noexcept {
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_accept(s, listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringBackend::after(std::chrono::nanoseconds delay, IoOp& op) noexcept {
  auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec);
  *ts = to_timespec(delay);
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_timeout(s, ts, 0, 0);
  op.armed = true;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uint64_t>(&op));
}

void UringBackend::cancel(IoOp& op) noexcept {
  if (!op.armed) return;
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_cancel64(s, reinterpret_cast<std::uint64_t>(&op), 0);
  io_uring_sqe_set_data64(s, kNoOp);
}

void UringBackend::cancel_fd(int fd) noexcept {
  io_uring_sqe* s = ring_->sqe();
  io_uring_prep_cancel_fd(s, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(s, kNoOp);
}

}  // namespace echo::io::detail
