// SPDX-License-Identifier: MIT
// The calling threads' own connections to the master (io::BlockingLink), for a broadcast
// publish: the thread writes the call and reads its answer itself instead of waking io thread 0
// and being woken by it, the two cross-thread wakes a publish paid beside its round trip. One per
// (thread, engine), up to EngineOptions::caller_links of them; a thread beyond that, or whose link
// cannot open, calls through io thread 0 as before.
//
// Order: a thread's blocking calls reach the server in the order it makes them whichever way each
// goes, since each is answered before the next leaves. What could overtake is a call the thread
// handed to io thread 0 without waiting (publish_async): while any is unanswered, publish goes
// through io thread 0 behind it (Engine::Impl::run_mine).
//
// Lifetime: a thread keeps its links in a thread_local list, each naming its engine by a serial
// that no later engine reuses. stop() closes every link after the last blocking call has left
// (Engine::Impl::inflight), and a link whose thread ends is closed by that thread on its way out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <echo/io/blocking_link.h>

namespace echo::engine {

class CallerLinks {
 public:
  // The master to dial now (Sentinel's answer moves it); called when a thread opens its link.
  using Target = std::function<io::LinkTarget()>;
  struct Counters {
    std::uint64_t open = 0;       // links open now
    std::uint64_t opens = 0;      // links opened (a reopen after a loss counts again)
    std::uint64_t calls = 0;      // calls answered on a link
    std::uint64_t fallbacks = 0;  // calls sent through io thread 0 after their link failed them
  };

  // `limit` 0: no thread gets a link. `dial_budget`: how long an open may take.
  CallerLinks(std::size_t limit, Target target, std::chrono::milliseconds dial_budget);
  ~CallerLinks();
  CallerLinks(const CallerLinks&) = delete;
  CallerLinks& operator=(const CallerLinks&) = delete;

  // The calling thread's link, open (one the server closed while idle is dialled again here);
  // nullptr when it has none now (the limit is reached, the last open failed under a second
  // ago, the engine stopped). Call only while counted in the
  // engine's inflight, after its running check: close_all() waits for that.
  io::BlockingLink* mine();
  // The thread's link failed a call, which goes through io thread 0 instead; `pause`: the master
  // refused it (READONLY: a demoted master), so no reopen for a second.
  void failed(io::BlockingLink& link, bool pause);
  void answered() noexcept { calls_.fetch_add(1, std::memory_order_relaxed); }

  // stop(): once no blocking call is in flight. Every link closes; none opens again.
  void close_all();
  Counters counters() const;

 private:
  struct Shared;
  struct Held;
  static std::vector<Held>& held();  // the calling thread's holds, one per engine it called on
  std::shared_ptr<Shared> shared_;
  std::atomic<std::uint64_t> calls_{0}, fallbacks_{0};
};

}  // namespace echo::engine
