// SPDX-License-Identifier: MIT
// The fault proxy's thread (fault_proxy.h): one poll(2) loop over the listener, an eventfd that
// wakes it when a fault changes, and every pair's two sockets. Each direction of a pair reads into
// a queue of chunks stamped with their release time (the delay), and writes the queue's head when
// the faults allow it (no stall, not stopped, the cap's and the trickle's next-write time passed).
#include <echo/harness/fault_proxy.h>

#include "socket_fd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace echo::harness {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Fd;
using std::chrono::milliseconds;

[[noreturn]] void fail(const std::string& call) {
  throw std::runtime_error("fault proxy: " + call + ": " + std::strerror(errno));
}

void non_blocking(int fd) {
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) fail("fcntl(O_NONBLOCK)");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

constexpr std::size_t kReadChunk = 16384;

struct Chunk {
  std::string bytes;
  std::size_t off = 0;
  Clock::time_point release;
};

// One way through a pair: read from `from`, write to `to`.
struct Way {
  std::deque<Chunk> queue;
  std::size_t held = 0;
  Clock::time_point next_write{};  // the cap's and the trickle's pacing
  bool eof = false;                // `from` said FIN: shut `to` once the queue is empty
  bool shut = false;
};

struct Pair {
  Fd client, server;
  bool dialing = true;  // the server socket's connect is in flight
  Way up, down;         // up: client -> server
};

}  // namespace

struct FaultProxy::Impl {
  FaultProxyOptions options;
  sockaddr_in target{};
  Fd listener, wake;
  int port = 0;
  std::thread thread;

  // The faults: written by any thread under mu, copied by the loop under mu once per turn.
  struct Faults {
    milliseconds delay{}, jitter{};
    Clock::time_point stall_until{};
    bool stop_up = false, stop_down = false, trickle = false, refuse = false;
    std::uint64_t cap = 0;
    std::uint64_t release_held = 0;  // heal's generation: held chunks released now
    std::uint64_t close_req = 0, reset_req = 0;
    std::uint64_t gen = 0;  // bumped by every change; the loop's turns say which they took
  };
  mutable std::mutex mu;
  std::condition_variable applied_cv;
  Faults faults;
  std::uint64_t close_done = 0, reset_done = 0, release_done = 0;  // under mu
  std::uint64_t taken_gen = 0;  // under mu: the newest faults a turn of the loop copied
  bool stopping = false;

  // Counters: written by the loop (relaxed), faults by the callers.
  std::atomic<std::uint64_t> accepted{0}, refused{0}, dial_failures{0}, live{0}, to_server{0},
      to_client{0}, fault_calls{0}, closed_by_fault{0}, reset_by_fault{0};

  std::list<Pair> pairs;  // the loop's own
  std::mt19937_64 rng;

  void poke() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake.fd, &one, sizeof one);
  }
  // Applies `f` to the faults and returns once a turn of the loop has taken them (up to 1 s):
  // a turn copies the faults once and runs on its copy, so without the wait bytes the caller
  // sends right after could still be forwarded by a turn that began before the change.
  template <class F>
  void change(F&& f, bool counts = true) {
    std::unique_lock lock(mu);
    f(faults);
    const std::uint64_t gen = ++faults.gen;
    lock.unlock();
    if (counts) fault_calls.fetch_add(1, std::memory_order_relaxed);
    poke();
    lock.lock();
    applied_cv.wait_for(lock, std::chrono::seconds(1),
                        [&] { return taken_gen >= gen || stopping; });
  }

  void accept_all();
  bool pump(Pair& p, Way& w, int from, int to, bool stopped, const Faults& f, Clock::time_point now,
            std::atomic<std::uint64_t>& counter);
  // The loop's turn: take the faults, act on a close, reset or heal asked since the last turn,
  // pump every pair, and poll until something is due.
  bool take_faults(Faults& f, bool& release);
  void end_pairs(const Faults& f);
  void release_held(const Faults& f, Clock::time_point now);
  void pump_pairs(const Faults& f, Clock::time_point now);
  short events(const Pair& p, const Way& in, const Way& out, bool out_stopped, const Faults& f,
               Clock::time_point now, Clock::time_point& next) const;
  void poll_until_due(std::vector<pollfd>& fds, const Faults& f, Clock::time_point now);
  void run();
};

void FaultProxy::Impl::accept_all() {
  // Read now, not from the turn's copy: a refuse(true) that woke this very poll must hold for
  // the connection that arrived with it.
  bool refusing = false;
  {
    const std::lock_guard lock(mu);
    refusing = faults.refuse;
  }
  for (;;) {
    const int c = ::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) return;  // EAGAIN, or a connection that died in the backlog
    Fd client(c);
    if (refusing) {
      // Counted before the RST leaves: a caller that saw the reset then sees the count.
      refused.fetch_add(1, std::memory_order_relaxed);
      client.abort();
      continue;
    }
    Fd server(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (server.fd < 0) {
      dial_failures.fetch_add(1, std::memory_order_relaxed);
      client.abort();
      continue;
    }
    const int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(server.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const int rc = ::connect(server.fd, reinterpret_cast<const sockaddr*>(&target), sizeof target);
    if (rc != 0 && errno != EINPROGRESS) {
      dial_failures.fetch_add(1, std::memory_order_relaxed);
      client.abort();
      continue;
    }
    Pair& p = pairs.emplace_back();
    p.client = std::move(client);
    p.server = std::move(server);
    p.dialing = rc != 0;
    accepted.fetch_add(1, std::memory_order_relaxed);
    live.fetch_add(1, std::memory_order_relaxed);
  }
}

// Reads what `from` has (while the way holds less than max_held) and writes what the faults let
// through to `to`. False when the pair must end (an error or reset on either side).
bool FaultProxy::Impl::pump(Pair& p, Way& w, int from, int to, bool stopped, const Faults& f,
                            Clock::time_point now, std::atomic<std::uint64_t>& counter) {
  while (!w.eof && w.held < options.max_held) {
    Chunk c;
    c.bytes.resize(kReadChunk);
    const ssize_t n = ::recv(from, c.bytes.data(), c.bytes.size(), 0);
    if (n == 0) {
      w.eof = true;
      break;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    c.bytes.resize(static_cast<std::size_t>(n));
    c.release = now;
    if (f.delay.count() > 0 || f.jitter.count() > 0) {
      const auto jitter = f.jitter.count() > 0 ? std::uniform_int_distribution<std::int64_t>(
                                                     0, f.jitter.count())(rng)
                                               : 0;
      c.release = now + f.delay + milliseconds(jitter);
    }
    if (!w.queue.empty()) c.release = std::max(c.release, w.queue.back().release);  // order kept
    w.held += c.bytes.size();
    w.queue.push_back(std::move(c));
  }
  const bool blocked = p.dialing || stopped || now < f.stall_until;
  while (!blocked && !w.queue.empty() && w.queue.front().release <= now && w.next_write <= now) {
    Chunk& c = w.queue.front();
    std::size_t want = c.bytes.size() - c.off;
    if (f.trickle) want = 1;
    if (f.cap > 0) want = std::min<std::size_t>(want, std::max<std::uint64_t>(1, f.cap / 100));
    const ssize_t n = ::send(to, c.bytes.data() + c.off, want, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    const auto sent = static_cast<std::size_t>(n);
    counter.fetch_add(sent, std::memory_order_relaxed);
    c.off += sent;
    w.held -= sent;
    if (c.off == c.bytes.size()) w.queue.pop_front();
    auto pace = Clock::duration::zero();
    if (f.cap > 0) pace += std::chrono::nanoseconds(sent * 1'000'000'000ull / f.cap);
    if (f.trickle) pace += options.trickle_pause;
    if (pace > Clock::duration::zero()) w.next_write = now + pace;
  }
  if (w.eof && w.queue.empty() && !w.shut && !p.dialing) {
    ::shutdown(to, SHUT_WR);
    w.shut = true;
  }
  return true;
}

// Copies the faults for this turn (and tells change() the turn took them); false once stopping.
bool FaultProxy::Impl::take_faults(Faults& f, bool& release) {
  const std::lock_guard lock(mu);
  if (stopping) return false;
  f = faults;
  release = f.release_held != release_done;
  if (taken_gen != f.gen) {
    taken_gen = f.gen;
    applied_cv.notify_all();  // change() waits for this turn
  }
  return true;
}

// close_all() or reset_all(): every pair ends, FIN or RST.
void FaultProxy::Impl::end_pairs(const Faults& f) {
  const bool reset = f.reset_req != reset_done;
  for (Pair& p : pairs) {
    if (reset) {
      p.client.abort();
      p.server.abort();
    }
  }
  (reset ? reset_by_fault : closed_by_fault).fetch_add(pairs.size(), std::memory_order_relaxed);
  live.fetch_sub(pairs.size(), std::memory_order_relaxed);
  // FIN on both sockets (the ones reset above are closed already); a socket whose receive
  // queue still holds unread bytes is answered with an RST by the kernel, as any close is.
  pairs.clear();
  {
    const std::lock_guard lock(mu);
    close_done = f.close_req;
    reset_done = f.reset_req;
  }
  applied_cv.notify_all();
}

// heal(): every held chunk is due now, and no pacing holds a way back.
void FaultProxy::Impl::release_held(const Faults& f, Clock::time_point now) {
  for (Pair& p : pairs) {
    for (Way* w : {&p.up, &p.down}) {
      for (Chunk& c : w->queue) c.release = now;
      w->next_write = now;
    }
  }
  const std::lock_guard lock(mu);
  release_done = f.release_held;
}

// Both ways of every pair; a pair that failed or finished is dropped.
void FaultProxy::Impl::pump_pairs(const Faults& f, Clock::time_point now) {
  for (auto it = pairs.begin(); it != pairs.end();) {
    bool ok = true;
    // Dialing sockets: connected, or failed (the client then gets an RST).
    if (it->dialing) {
      pollfd d{it->server.fd, POLLOUT, 0};
      if (::poll(&d, 1, 0) > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(it->server.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          ok = false;
          dial_failures.fetch_add(1, std::memory_order_relaxed);
        } else {
          it->dialing = false;
        }
      }
    }
    ok = ok && pump(*it, it->up, it->client.fd, it->server.fd, f.stop_up, f, now, to_server);
    // A socket still dialing has nothing to read (recv would answer ENOTCONN).
    ok = ok && (it->dialing ||
                pump(*it, it->down, it->server.fd, it->client.fd, f.stop_down, f, now, to_client));
    const bool done = it->up.shut && it->down.shut;
    if (!ok || done) {
      if (!ok) {  // one side failed or reset: the other hears an RST too
        it->client.abort();
        it->server.abort();
      }
      live.fetch_sub(1, std::memory_order_relaxed);
      it = pairs.erase(it);
    } else {
      ++it;
    }
  }
}

// What a pair's socket waits for: reading `in` while it has room, writing `out` when its head is
// due (else `next` moves to when it will be).
short FaultProxy::Impl::events(const Pair& p, const Way& in, const Way& out, bool out_stopped,
                               const Faults& f, Clock::time_point now,
                               Clock::time_point& next) const {
  short e = 0;
  if (!in.eof && in.held < options.max_held) e |= POLLIN;
  const bool writable = !p.dialing && !out_stopped && now >= f.stall_until;
  if (writable && !out.queue.empty()) {
    const auto due = std::max(out.queue.front().release, out.next_write);
    if (due <= now) {
      e |= POLLOUT;
    } else {
      next = std::min(next, due);
    }
  }
  return e;
}

// Wait for a readable socket, a writable one we have bytes for, a due chunk, or a wake.
void FaultProxy::Impl::poll_until_due(std::vector<pollfd>& fds, const Faults& f,
                                      Clock::time_point now) {
  fds.clear();
  fds.push_back({wake.fd, POLLIN, 0});
  fds.push_back({listener.fd, POLLIN, 0});
  auto next = now + milliseconds(100);
  for (Pair& p : pairs) {
    // client: reads the up way, writes the down way; server: the reverse. A socket with nothing
    // to wait for is left out (fd -1): a peer's FIN or hang-up would otherwise wake poll at once
    // for as long as a stall holds the pair open.
    const auto entry = [](int fd, short e) { return pollfd{e != 0 ? fd : -1, e, 0}; };
    fds.push_back(entry(p.client.fd, events(p, p.up, p.down, f.stop_down, f, now, next)));
    fds.push_back(entry(p.server.fd, p.dialing ? short{POLLOUT}
                                               : events(p, p.down, p.up, f.stop_up, f, now, next)));
  }
  if (f.stall_until > now) next = std::min(next, f.stall_until);
  const auto wait = std::chrono::duration_cast<milliseconds>(next - now).count() + 1;
  ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<std::int64_t>(wait, 0, 100)));
  if (fds[0].revents & POLLIN) {
    std::uint64_t v;
    [[maybe_unused]] const auto n = ::read(wake.fd, &v, sizeof v);
  }
  if (fds[1].revents & POLLIN) accept_all();
}

void FaultProxy::Impl::run() {
  std::vector<pollfd> fds;
  for (;;) {
    Faults f;
    bool release = false;
    if (!take_faults(f, release)) break;
    const auto now = Clock::now();
    if (f.close_req != close_done || f.reset_req != reset_done) end_pairs(f);
    if (release) release_held(f, now);
    pump_pairs(f, now);
    poll_until_due(fds, f, now);
  }
  for (Pair& p : pairs) {
    p.client.abort();
    p.server.abort();
  }
  live.fetch_sub(pairs.size(), std::memory_order_relaxed);
  pairs.clear();
}

FaultProxy::FaultProxy(FaultProxyOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  in_addr addr{};
  if (::inet_pton(AF_INET, options.target_host.c_str(), &addr) != 1 ||
      (ntohl(addr.s_addr) >> 24) != 127) {
    throw std::invalid_argument(
        "fault proxy: target_host must be a numeric IPv4 address in "
        "127.0.0.0/8, got '" +
        options.target_host + "'");
  }
  if (options.target_port < 1 || options.target_port > 65535) {
    throw std::invalid_argument("fault proxy: target_port must be 1..65535, got " +
                                std::to_string(options.target_port));
  }
  if (options.max_held < 4096 || options.max_held > (1u << 30)) {
    throw std::invalid_argument("fault proxy: max_held must be 4 KiB .. 1 GiB");
  }
  if (options.trickle_pause < std::chrono::microseconds(0) ||
      options.trickle_pause > std::chrono::seconds(1)) {
    throw std::invalid_argument("fault proxy: trickle_pause must be 0 .. 1 s");
  }
  d.target.sin_family = AF_INET;
  d.target.sin_addr = addr;
  d.target.sin_port = htons(static_cast<std::uint16_t>(options.target_port));
  d.rng.seed(options.seed != 0 ? options.seed : std::random_device{}());
  d.options = std::move(options);

  d.listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (d.listener.fd < 0) fail("socket");
  sockaddr_in self{};
  self.sin_family = AF_INET;
  self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  self.sin_port = 0;
  if (::bind(d.listener.fd, reinterpret_cast<const sockaddr*>(&self), sizeof self) != 0) {
    fail("bind(127.0.0.1:0)");
  }
  if (::listen(d.listener.fd, 128) != 0) fail("listen");
  socklen_t len = sizeof self;
  if (::getsockname(d.listener.fd, reinterpret_cast<sockaddr*>(&self), &len) != 0) {
    fail("getsockname");
  }
  d.port = ntohs(self.sin_port);
  non_blocking(d.listener.fd);
  d.wake = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (d.wake.fd < 0) fail("eventfd");
  d.thread = std::thread([&d] { d.run(); });
}

FaultProxy::~FaultProxy() { stop(); }

int FaultProxy::port() const noexcept { return impl_->port; }

namespace {
void check_range(const char* knob, std::chrono::milliseconds v, std::chrono::milliseconds max) {
  if (v.count() < 0 || v > max) {
    throw std::invalid_argument(std::string("fault proxy: ") + knob + " must be 0.." +
                                std::to_string(max.count()) + " ms, got " +
                                std::to_string(v.count()));
  }
}
}  // namespace

void FaultProxy::delay(milliseconds delay, milliseconds jitter) {
  check_range("delay", delay, std::chrono::seconds(60));
  check_range("jitter", jitter, std::chrono::seconds(60));
  impl_->change([&](Impl::Faults& f) {
    f.delay = delay;
    f.jitter = jitter;
  });
}

void FaultProxy::stall(milliseconds duration) {
  check_range("stall", duration, std::chrono::seconds(600));
  impl_->change([&](Impl::Faults& f) { f.stall_until = Clock::now() + duration; });
}

void FaultProxy::half_open(Flow stopped) {
  impl_->change(
      [&](Impl::Faults& f) { (stopped == Flow::kToServer ? f.stop_up : f.stop_down) = true; });
}

void FaultProxy::trickle(bool on) {
  impl_->change([&](Impl::Faults& f) { f.trickle = on; }, on);
}

void FaultProxy::cap_bandwidth(std::uint64_t bytes_per_s) {
  impl_->change([&](Impl::Faults& f) { f.cap = bytes_per_s; }, bytes_per_s > 0);
}

void FaultProxy::refuse(bool on) {
  impl_->change([&](Impl::Faults& f) { f.refuse = on; }, on);
}

void FaultProxy::close_all() {
  Impl& d = *impl_;
  std::uint64_t want = 0;
  d.change([&](Impl::Faults& f) { want = ++f.close_req; });
  std::unique_lock lock(d.mu);
  d.applied_cv.wait_for(lock, std::chrono::seconds(1),
                        [&] { return d.close_done >= want || d.stopping; });
}

void FaultProxy::reset_all() {
  Impl& d = *impl_;
  std::uint64_t want = 0;
  d.change([&](Impl::Faults& f) { want = ++f.reset_req; });
  std::unique_lock lock(d.mu);
  d.applied_cv.wait_for(lock, std::chrono::seconds(1),
                        [&] { return d.reset_done >= want || d.stopping; });
}

void FaultProxy::heal() {
  impl_->change(
      [](Impl::Faults& f) {
        f.delay = f.jitter = milliseconds(0);
        f.stall_until = {};
        f.stop_up = f.stop_down = f.trickle = f.refuse = false;
        f.cap = 0;
        ++f.release_held;
      },
      false);
}

FaultProxyStats FaultProxy::stats() const {
  const Impl& d = *impl_;
  const auto r = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return {r(d.accepted),    r(d.refused),         r(d.dial_failures),
          r(d.live),        r(d.to_server),       r(d.to_client),
          r(d.fault_calls), r(d.closed_by_fault), r(d.reset_by_fault)};
}

void FaultProxy::stop() {
  Impl& d = *impl_;
  {
    const std::lock_guard lock(d.mu);
    d.stopping = true;
  }
  d.applied_cv.notify_all();
  if (d.thread.joinable()) {
    d.poke();
    d.thread.join();
  }
  d.listener.reset();
}

}  // namespace echo::harness
