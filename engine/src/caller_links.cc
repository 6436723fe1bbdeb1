// SPDX-License-Identifier: MIT
// CallerLinks: each calling thread's own connection to the master (caller_links.h).
#include "caller_links.h"

#include <algorithm>
#include <utility>

#include "thread_owned.h"

namespace echo::engine {

namespace {

using Clock = std::chrono::steady_clock;

// A link that failed to open, or that the master refused, is not dialled again for this long:
// meanwhile its thread's calls go through io thread 0, which has its own redials.
constexpr auto kRetryPause = std::chrono::seconds(1);

std::atomic<std::uint64_t> g_serial{1};

}  // namespace

// One thread's link to one engine's master. The thread owns it; the engine closes it at stop().
struct Entry {
  io::BlockingLink link;
  Clock::time_point retry_after{};
  std::atomic<bool> dead{false};  // the engine stopped: never used again
};

struct CallerLinks::Shared {
  std::uint64_t serial = g_serial.fetch_add(1, std::memory_order_relaxed);
  std::size_t limit = 0;
  Target target;
  std::chrono::milliseconds budget{};
  std::mutex mu;
  bool closed = false;       // guarded by mu
  std::vector<Entry*> live;  // guarded by mu: the links threads hold
  std::atomic<std::uint64_t> opens{0};
};

// A thread's hold on one engine's link (or on none: refused until retry_after).
struct CallerLinks::Held {
  std::uint64_t serial = 0;
  std::weak_ptr<Shared> owner;
  std::unique_ptr<Entry> entry;
  Clock::time_point retry_after{};

  Held(std::uint64_t s, std::weak_ptr<Shared> o) : serial(s), owner(std::move(o)) {}
  Held(Held&&) noexcept = default;
  Held& operator=(Held&&) noexcept = default;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  // The thread ends (or its engine is gone): the link leaves the engine's list and closes.
  ~Held() {
    if (!entry) return;
    if (const std::shared_ptr<Shared> s = owner.lock()) {
      const std::lock_guard lock(s->mu);
      std::erase(s->live, entry.get());
      return;  // ~Entry closes it: close_all() (under mu) can no longer reach it
    }
    // The engine is gone, so its close_all() ran and closed the link. A failed lock() orders
    // nothing, so this acquire (of close_all's release) is what makes its close visible here:
    // ~Entry then finds the socket closed and never closes a number the process reused since.
    (void)entry->dead.load(std::memory_order_acquire);
  }
};

std::vector<CallerLinks::Held>& CallerLinks::held() {
  // Outlives the thread's thread_local destructors (thread_owned.h): an application thread_local
  // whose destructor publishes still finds its links.
  return ThreadOwned<std::vector<Held>>::get();
}

CallerLinks::CallerLinks(std::size_t limit, Target target, std::chrono::milliseconds dial_budget)
    : shared_(std::make_shared<Shared>()) {
  shared_->limit = limit;
  shared_->target = std::move(target);
  shared_->budget = dial_budget;
}

CallerLinks::~CallerLinks() { close_all(); }

io::BlockingLink* CallerLinks::mine() {
  Shared& s = *shared_;
  if (s.limit == 0) return nullptr;
  std::vector<Held>& t_held = held();
  auto it = std::find_if(t_held.begin(), t_held.end(),
                         [&](const Held& h) { return h.serial == s.serial; });
  if (it == t_held.end()) {
    // A thread's first call on this engine: holds of engines that are gone go first.
    std::erase_if(t_held, [](const Held& h) { return h.owner.expired(); });
    it = t_held.insert(t_held.end(), Held(s.serial, shared_));
  }
  Held& h = *it;
  if (h.entry && h.entry->link.usable()) return &h.entry->link;  // the fast path
  if (h.entry && h.entry->dead.load(std::memory_order_acquire)) return nullptr;
  const Clock::time_point now = Clock::now();
  if (now < (h.entry ? h.entry->retry_after : h.retry_after)) return nullptr;
  if (!h.entry) {
    const std::lock_guard lock(s.mu);
    if (s.closed || s.live.size() >= s.limit) {
      h.retry_after = now + kRetryPause;
      return nullptr;
    }
    h.entry = std::make_unique<Entry>();
    s.live.push_back(h.entry.get());
  }
  Entry& e = *h.entry;
  if (e.link.open(s.target(), now + s.budget)) {
    e.retry_after = now + kRetryPause;
    return nullptr;
  }
  s.opens.fetch_add(1, std::memory_order_relaxed);
  return &e.link;
}

void CallerLinks::failed(io::BlockingLink& link, bool pause) {
  fallbacks_.fetch_add(1, std::memory_order_relaxed);
  if (!pause) return;
  link.close();
  for (Held& h : held()) {
    if (h.entry && &h.entry->link == &link) h.entry->retry_after = Clock::now() + kRetryPause;
  }
}

void CallerLinks::close_all() {
  Shared& s = *shared_;
  const std::lock_guard lock(s.mu);
  s.closed = true;
  for (Entry* e : s.live) {
    e->link.close();
    e->dead.store(true, std::memory_order_release);
  }
  s.live.clear();
}

CallerLinks::Counters CallerLinks::counters() const {
  Counters c;
  {
    const std::lock_guard lock(shared_->mu);
    c.open = shared_->live.size();
  }
  c.opens = shared_->opens.load(std::memory_order_relaxed);
  c.calls = calls_.load(std::memory_order_relaxed);
  c.fallbacks = fallbacks_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace echo::engine
