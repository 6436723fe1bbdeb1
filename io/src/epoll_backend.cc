// SPDX-License-Identifier: MIT
// The epoll backend of UringLoop, for kernels (or containers) that refuse io_uring: each verb tries
// its syscall at once without waiting, and what would block waits for readiness in one epoll set;
// timers are a min-heap that bounds epoll_wait's timeout. Results are queued and run on the next
// wait cycle, never inside the verb, so completions arrive as the io_uring backend delivers them.
#include "loop_backends.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <vector>

#include <echo/io/unique_fd.h>

namespace echo::io::detail {

namespace {

using Clock = std::chrono::steady_clock;

enum class Kind : std::uint8_t { kRecv, kSend, kConnect, kTimer, kAccept };

// Which of an fd's waiter lists an op joins: a pending accept waits for EPOLLIN as a receive does.
constexpr bool reads(Kind k) noexcept { return k == Kind::kRecv || k == Kind::kAccept; }
enum class Stage : std::uint8_t {
  kFree,     // on the free list
  kWaiting,  // on an fd's reader/writer list and/or in the timer heap
  kReady,    // its result is known; on the ready list, to run at the next dispatch
};

constexpr std::uint32_t kNone = UINT32_MAX;
constexpr std::uint64_t kWakeTag = UINT64_MAX;  // epoll data of the wake eventfd (fds are >= 0)

// One armed operation. Records live in one vector that only grows (the working set is reached
// after a few cycles, then arming allocates nothing); the op keeps its record's index in
// IoOp::timespec[0], checked against `op` before use, so a stale index is harmless.
struct Record {
  IoOp* op = nullptr;
  Kind kind = Kind::kTimer;
  Stage stage = Stage::kFree;
  int fd = -1;
  int res = 0;
  char* buf = nullptr;
  std::size_t len = 0;
  Clock::time_point deadline{};   // timer, connect
  std::uint64_t seq = 0;          // arming order: equal deadlines fire in it
  std::uint32_t heap_at = kNone;  // position in the timer heap
  std::uint32_t next_free = kNone;
};

// The waiters on one fd, each list in arming order (a second send queues behind the first, so
// bytes leave in the order they were handed over).
struct FdWatch {
  std::vector<std::uint32_t> readers, writers;
  // The events of this fd's EPOLLONESHOT registration while it is armed; 0 when it fired, was
  // never made, or its waiters left by cancellation (the fd may since have been closed and its
  // number reused: the next arm's MOD then answers ENOENT and the registration is made afresh).
  std::uint32_t armed = 0;
};

}  // namespace

// Why EPOLLONESHOT and not edge-triggered: the loop never learns when its caller closes an fd
// (Connection shuts down and closes its socket, then cancels). A registration made once and kept
// (EPOLLET) would stay on the old file while a new socket under the same number waits forever; a
// one-shot re-armed with EPOLL_CTL_MOD each time an op must wait answers ENOENT for a new file and
// is added again. The price is one epoll_ctl per op that had to wait; an op whose syscall
// succeeds at once costs none.
struct EpollBackend::State {
  UniqueFd epfd;
  std::vector<epoll_event> events;
  std::vector<Record> records;
  std::uint32_t free_head = kNone;
  std::vector<std::uint32_t> timers;  // binary min-heap of record indices by (deadline, seq)
  std::vector<FdWatch> fds;           // indexed by fd number
  std::vector<std::uint32_t> ready, running;  // swapped at each dispatch; capacity is kept
  std::uint64_t seq = 0;
  int wake_fd = -1;
  std::uint64_t* wake_value = nullptr;
  IoOp* wake_op = nullptr;

  bool earlier(std::uint32_t a, std::uint32_t b) const noexcept {
    const Record& x = records[a];
    const Record& y = records[b];
    return x.deadline < y.deadline || (x.deadline == y.deadline && x.seq < y.seq);
  }
  void heap_place(std::size_t at, std::uint32_t index) noexcept {
    timers[at] = index;
    records[index].heap_at = static_cast<std::uint32_t>(at);
  }
  void sift_up(std::size_t at) noexcept {
    const std::uint32_t moving = timers[at];
    while (at > 0) {
      const std::size_t parent = (at - 1) / 2;
      if (!earlier(moving, timers[parent])) break;
      heap_place(at, timers[parent]);
      at = parent;
    }
    heap_place(at, moving);
  }
  void sift_down(std::size_t at) noexcept {
    const std::uint32_t moving = timers[at];
    const std::size_t n = timers.size();
    for (;;) {
      std::size_t child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && earlier(timers[child + 1], timers[child])) ++child;
      if (!earlier(timers[child], moving)) break;
      heap_place(at, timers[child]);
      at = child;
    }
    heap_place(at, moving);
  }
  void heap_push(std::uint32_t index) {
    timers.push_back(index);
    sift_up(timers.size() - 1);
  }
  void heap_remove(std::uint32_t index) noexcept {
    const std::size_t at = records[index].heap_at;
    records[index].heap_at = kNone;
    const std::uint32_t last = timers.back();
    timers.pop_back();
    if (last == index) return;
    heap_place(at, last);
    sift_up(at);
    sift_down(records[last].heap_at);
  }

  std::uint32_t acquire(IoOp& op, Kind kind) {
    std::uint32_t i = free_head;
    if (i == kNone) {
      i = static_cast<std::uint32_t>(records.size());
      records.emplace_back();
    } else {
      free_head = records[i].next_free;
    }
    Record& r = records[i];
    r = Record{};
    r.op = &op;
    r.kind = kind;
    r.stage = Stage::kWaiting;
    r.seq = ++seq;
    op.armed = true;
    op.timespec[0] = i;
    return i;
  }
  void release(std::uint32_t i) noexcept {
    records[i] = Record{};
    records[i].next_free = free_head;
    free_head = i;
  }
  // The record of an armed op, or kNone (not armed through this backend: deferred, or done).
  std::uint32_t record_of(const IoOp& op) const noexcept {
    if (!op.armed || op.timespec[0] < 0 ||
        static_cast<std::uint64_t>(op.timespec[0]) >= records.size()) {
      return kNone;
    }
    const auto i = static_cast<std::uint32_t>(op.timespec[0]);
    return records[i].op == &op && records[i].stage != Stage::kFree ? i : kNone;
  }

  void make_ready(std::uint32_t i, int res) {
    records[i].stage = Stage::kReady;
    records[i].res = res;
    ready.push_back(i);
  }
  FdWatch& watch_of(int fd) {
    if (static_cast<std::size_t>(fd) >= fds.size()) fds.resize(static_cast<std::size_t>(fd) + 1);
    return fds[static_cast<std::size_t>(fd)];
  }

  // The op's syscall, never waiting: true with records[i].res set when it finished (done or
  // failed), false when it would block.
  bool attempt(std::uint32_t i) noexcept {
    Record& r = records[i];
    for (;;) {
      ssize_t n = 0;
      switch (r.kind) {
        case Kind::kRecv:
          n = ::recv(r.fd, r.buf, r.len, MSG_DONTWAIT);
          break;
        case Kind::kSend:
          n = ::send(r.fd, r.buf, r.len, MSG_DONTWAIT | MSG_NOSIGNAL);
          break;
        case Kind::kConnect: {
          // Readiness of a connecting socket: SO_ERROR names a failure; a peer name means it
          // connected; ENOTCONN means this wake was not its (a stale registration's event).
          int err = 0;
          socklen_t len = sizeof err;
          if (::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
          if (err != 0) {
            r.res = -err;
            return true;
          }
          sockaddr_storage peer{};
          socklen_t peer_len = sizeof peer;
          if (::getpeername(r.fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0) {
            r.res = 0;
            return true;
          }
          if (errno == ENOTCONN) return false;
          r.res = -errno;
          return true;
        }
        case Kind::kAccept:
          n = ::accept4(r.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          // A connection reset before it was taken: the next one may be ready (io_uring, too,
          // retries it internally rather than failing the op).
          if (n < 0 && errno == ECONNABORTED) continue;
          break;
        case Kind::kTimer:
          return false;
      }
      if (n >= 0) {
        r.res = static_cast<int>(n);
        return true;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      r.res = -errno;
      return true;
    }
  }

  // Arms fd's one-shot registration for what its waiters need; when the kernel refuses the fd
  // (closed: EBADF; a regular file: EPERM), every waiter on it completes with that error.
  void arm(int fd) {
    FdWatch& w = watch_of(fd);
    std::uint32_t want = 0;
    if (!w.readers.empty()) want |= EPOLLIN | EPOLLRDHUP;
    if (!w.writers.empty()) want |= EPOLLOUT;
    if (want == 0 || (w.armed & want) == want) return;
    epoll_event ev{};
    ev.events = want | EPOLLONESHOT;
    ev.data.u64 = static_cast<std::uint64_t>(fd);
    int rc = ::epoll_ctl(epfd.get(), EPOLL_CTL_MOD, fd, &ev);
    if (rc < 0 && errno == ENOENT) rc = ::epoll_ctl(epfd.get(), EPOLL_CTL_ADD, fd, &ev);
    if (rc == 0) {
      w.armed = want;
      return;
    }
    const int err = errno;
    for (auto* list : {&w.readers, &w.writers}) {
      for (std::uint32_t i : *list) {
        if (records[i].heap_at != kNone) heap_remove(i);
        make_ready(i, -err);
      }
      list->clear();
    }
    w.armed = 0;
  }

  // Queues record i behind fd's earlier waiters in its direction, or finishes it at once when it
  // is first in line and its syscall does not block.
  void start(std::uint32_t i, bool try_first) {
    const int fd = records[i].fd;
    if (fd < 0) return make_ready(i, -EBADF);
    FdWatch& w = watch_of(fd);
    auto& line = reads(records[i].kind) ? w.readers : w.writers;
    if (line.empty() && try_first && attempt(i)) return make_ready(i, records[i].res);
    line.push_back(i);
    if (records[i].kind == Kind::kConnect) heap_push(i);
    arm(fd);
  }

  // Removes a waiting record from its fd's list and the heap, before it completes elsewhere.
  void unlink(std::uint32_t i) noexcept {
    Record& r = records[i];
    if (r.heap_at != kNone) heap_remove(i);
    if (r.kind == Kind::kTimer || r.fd < 0) return;
    FdWatch& w = fds[static_cast<std::size_t>(r.fd)];
    auto& line = reads(r.kind) ? w.readers : w.writers;
    std::erase(line, i);
    if (w.readers.empty() && w.writers.empty()) w.armed = 0;
  }

  // Runs fd's waiters in `line` in order until one would block.
  void serve(std::vector<std::uint32_t>& line) {
    std::size_t done = 0;
    while (done < line.size() && attempt(line[done])) {
      const std::uint32_t i = line[done++];
      if (records[i].heap_at != kNone) heap_remove(i);
      make_ready(i, records[i].res);
    }
    line.erase(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(done));
  }

  void on_event(const epoll_event& ev, std::uint64_t& completions) {
    if (ev.data.u64 == kWakeTag) {
      // Never blocks: only this thread reads the eventfd, and only once it reported readable.
      const ssize_t n = ::read(wake_fd, wake_value, sizeof *wake_value);
      if (wake_op != nullptr && wake_op->armed) {
        complete_op(*wake_op, n < 0 ? -errno : static_cast<int>(n), completions);
      }
      return;
    }
    const auto fd = static_cast<std::size_t>(ev.data.u64);
    if (fd >= fds.size()) return;
    FdWatch& w = fds[fd];
    w.armed = 0;  // a one-shot registration is disarmed once it reports
    if ((ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0) serve(w.readers);
    if ((ev.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) serve(fds[fd].writers);
    arm(static_cast<int>(fd));
  }

  void expire(Clock::time_point now) {
    while (!timers.empty() && records[timers.front()].deadline <= now) {
      const std::uint32_t i = timers.front();
      unlink(i);
      // A connect whose deadline came first answers -ECANCELED, as io_uring's link timeout does.
      make_ready(i, records[i].kind == Kind::kTimer ? -ETIME : -ECANCELED);
    }
  }

  // epoll_wait's timeout: 0 with results waiting or when polling, else up to the next timer.
  int timeout_ms(Wait wait, Clock::time_point now) const noexcept {
    if (wait == Wait::kPoll || !ready.empty()) return 0;
    long long ms = wait == Wait::kUpTo1ms ? 1 : -1;
    if (!timers.empty()) {
      const auto left = records[timers.front()].deadline - now;
      // Rounded up: a timer never fires early.
      const long long left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      const long long due = left_ns <= 0 ? 0 : (left_ns + 999'999) / 1'000'000;
      ms = ms < 0 ? due : std::min(ms, due);
    }
    return static_cast<int>(std::min<long long>(ms, INT_MAX));
  }
};

EpollBackend::EpollBackend(unsigned max_events) : state_(std::make_unique<State>()) {
  state_->epfd.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!state_->epfd) throw std::system_error(errno, std::system_category(), "epoll_create1");
  state_->events.resize(max_events);
  state_->records.reserve(64);
  state_->ready.reserve(64);
  state_->running.reserve(64);
}

EpollBackend::~EpollBackend() = default;

void EpollBackend::watch_wake(int fd, std::uint64_t* value, IoOp& op) noexcept {
  State& s = *state_;
  op.armed = true;
  if (s.wake_fd == fd) return;  // level-triggered and kept: re-arming costs nothing
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (::epoll_ctl(s.epfd.get(), EPOLL_CTL_ADD, fd, &ev) < 0) {
    std::fprintf(stderr, "echo::io::UringLoop: epoll cannot watch the wake eventfd (%d)\n", errno);
    std::abort();
  }
  s.wake_fd = fd;
  s.wake_value = value;
  s.wake_op = &op;
}

void EpollBackend::recv(int fd, void* buf, std::size_t len, IoOp& op, bool poll_first) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.acquire(op, Kind::kRecv);
  s.records[i].fd = fd;
  s.records[i].buf = static_cast<char*>(buf);
  s.records[i].len = len;
  s.start(i, /*try_first=*/!poll_first);
}

void EpollBackend::send(int fd, const void* buf, std::size_t len, IoOp& op) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.acquire(op, Kind::kSend);
  s.records[i].fd = fd;
  // send(2) only reads it; the record keeps one pointer type for both directions.
  s.records[i].buf = static_cast<char*>(const_cast<void*>(buf));
  s.records[i].len = len;
  s.start(i, /*try_first=*/true);
}

void EpollBackend::connect(int fd, const sockaddr* addr, socklen_t len,
                           std::chrono::milliseconds timeout, IoOp& op) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.acquire(op, Kind::kConnect);
  Record& r = s.records[i];
  r.fd = fd;
  r.deadline = Clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return s.make_ready(i, -errno);
  if (::connect(fd, addr, len) == 0) return s.make_ready(i, 0);
  // EINTR on a non-blocking connect: it goes on in the background, as EINPROGRESS says.
  if (errno != EINPROGRESS && errno != EINTR) return s.make_ready(i, -errno);
  s.start(i, /*try_first=*/false);
}

void EpollBackend::accept(int listen_fd, IoOp& op) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.acquire(op, Kind::kAccept);
  s.records[i].fd = listen_fd;
  // accept4 has no per-call MSG_DONTWAIT: a blocking listener would block the loop in attempt().
  const int flags = listen_fd < 0 ? -1 : ::fcntl(listen_fd, F_GETFL);
  if (listen_fd >= 0 && (flags < 0 || ((flags & O_NONBLOCK) == 0 &&
                                       ::fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0))) {
    return s.make_ready(i, -errno);
  }
  s.start(i, /*try_first=*/true);
}

void EpollBackend::after(std::chrono::nanoseconds delay, IoOp& op) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.acquire(op, Kind::kTimer);
  s.records[i].deadline = Clock::now() + std::max(delay, std::chrono::nanoseconds(0));
  s.heap_push(i);
}

void EpollBackend::cancel(IoOp& op) noexcept {
  State& s = *state_;
  const std::uint32_t i = s.record_of(op);
  // Not waiting: its result is already queued (io_uring, too, lets a finished op keep its result).
  if (i == kNone || s.records[i].stage != Stage::kWaiting) return;
  s.unlink(i);
  s.make_ready(i, -ECANCELED);
}

void EpollBackend::cancel_fd(int fd) noexcept {
  State& s = *state_;
  if (fd < 0 || static_cast<std::size_t>(fd) >= s.fds.size()) return;
  FdWatch& w = s.fds[static_cast<std::size_t>(fd)];
  for (auto* list : {&w.readers, &w.writers}) {
    for (std::uint32_t i : *list) {
      if (s.records[i].heap_at != kNone) s.heap_remove(i);
      s.make_ready(i, -ECANCELED);
    }
    list->clear();
  }
  w.armed = 0;
}

void EpollBackend::cycle(Wait wait, std::uint64_t& completions) noexcept {
  State& s = *state_;
  const int timeout = s.timeout_ms(wait, Clock::now());
  const int n =
      ::epoll_wait(s.epfd.get(), s.events.data(), static_cast<int>(s.events.size()), timeout);
  for (int k = 0; k < n; ++k) s.on_event(s.events[static_cast<std::size_t>(k)], completions);
  if (!s.timers.empty()) s.expire(Clock::now());
  // Results found from here on (an op a completion arms that finishes at once) run next cycle.
  s.running.swap(s.ready);
  for (std::uint32_t i : s.running) {
    IoOp* op = s.records[i].op;
    const int res = s.records[i].res;
    s.release(i);  // before the callback, which may arm the op again
    complete_op(*op, res, completions);
  }
  s.running.clear();
}

}  // namespace echo::io::detail
