// SPDX-License-Identifier: MIT
// Shared by the table writer's unit tests (table_writer_*_test.cc): the L2 side as a map the test
// holds (FakeL2, whose reads park until released), a table's spec, a miss, an apply and a sync
// waited for, and a started writer with one ring (RingWriter).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <echo/engine/errc.h>
#include <echo/engine/internal/table_writer.h>
#include <echo/engine/l2_frame.h>

namespace echo::engine {

using table::BrandedId;
using namespace std::chrono_literals;

inline BrandedId id(std::string_view ns, std::uint64_t s) {
  return BrandedId::encode(ns, s).value();
}

// The L2 side, held by the test: fetches and loads park until the test releases them.
struct FakeL2 {
  std::mutex mu;
  std::unordered_map<std::string, std::string> rows;  // name -> framed value
  std::vector<std::function<void()>> parked;          // released by release_all()
  std::atomic<int> fetches{0}, loads{0};
  bool park = false;

  WriterPorts ports() {
    WriterPorts p;
    p.fetch = [this](std::string_view name, std::function<void(L2Fetch)> done) {
      ++fetches;
      // The GET executes now (the server's view at this instant); a parked answer is a reply
      // still on the wire.
      std::lock_guard lock(mu);
      auto it = rows.find(std::string(name));
      auto answer = [stored =
                         it == rows.end() ? std::nullopt : std::optional<std::string>(it->second),
                     done = std::move(done)] {
        done(L2Fetch{{}, stored});
      };
      if (park) {
        parked.push_back(std::move(answer));
      } else {
        std::thread(std::move(answer)).detach();
      }
    };
    p.load = [this](std::string_view asked, const BrandedId& minted, bool,
                    std::shared_ptr<LoadClaim>, std::function<void(LoadOutcome)> done) {
      ++loads;
      std::thread([this, name = std::string(asked), minted, done = std::move(done)] {
        LoadOutcome out;
        out.value = "loaded";
        out.version = minted;
        {
          std::lock_guard lock(mu);
          auto& row = rows[name];
          // put_l2: store only if newer than what L2 holds.
          if (row.size() >= 14 &&
              !table::newer(minted.view(), std::string_view(row).substr(0, 14))) {
            out.stored = false;
          } else {
            row = frame_l2_value(minted, out.value);
            out.stored = true;
          }
        }
        done(std::move(out));
      }).detach();
    };
    return p;
  }
  void set(const BrandedId& name, const BrandedId& version, std::string_view value) {
    std::lock_guard lock(mu);
    rows[name.str()] = frame_l2_value(version, value);
  }
  void set_park(bool on) {
    std::lock_guard lock(mu);
    park = on;
  }
  // Answers every parked read; from then on reads answer at once, unless `keep_parking`.
  void release_all(bool keep_parking = false) {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard lock(mu);
      now.swap(parked);
      park = keep_parking;
    }
    for (auto& f : now) f();
  }
};

inline TableSpec spec(CoherenceMode mode = CoherenceMode::kNone) {
  TableSpec s;
  s.name = "t";
  s.kind = "AST";
  s.coherence = mode;
  s.loader = [](const BrandedId&) -> LoadResult { return Loaded{"unused", {}}; };
  return s;
}

inline GetOutcome get_via(TableWriter& w, const BrandedId& name) {
  std::promise<GetOutcome> p;
  auto f = p.get_future();
  w.miss(name, [&p](GetOutcome&& o) { p.set_value(std::move(o)); });
  EXPECT_EQ(f.wait_for(5s), std::future_status::ready);
  return f.get();
}

inline void sync(TableWriter& w) {
  std::promise<void> p;
  w.sync([&p] { p.set_value(); });
  ASSERT_EQ(p.get_future().wait_for(5s), std::future_status::ready);
}

inline table::Verdict apply_via(TableWriter& w, const BrandedId& name, const BrandedId& version) {
  std::promise<WriterAnswer<table::Verdict>> p;
  w.apply(table::CoherenceMessage{name, version},
          [&p](WriterAnswer<table::Verdict> v) { p.set_value(std::move(v)); });
  auto answer = p.get_future().get();
  EXPECT_TRUE(answer.has_value()) << answer.error().message();
  return answer ? *answer : table::Verdict::kStale;
}

// A writer of `mode` with one ring (flush policy), started, its lane confirmed: caching.
struct RingWriter {
  explicit RingWriter(CoherenceMode mode)
      : w(spec(mode), l2.ports(), 1), ring(w.add_ring(ring::FullPolicy::kFlush)) {
    w.start();
    w.subscription_confirmed();
    sync(w);
  }
  FakeL2 l2;
  TableWriter w;
  CoherenceRing& ring;
};

// Publishes `item` into the ring and waits until the writer applied it (either verdict).
inline void publish_and_settle(TableWriter& w, CoherenceRing& ring, const CoherenceItem& item) {
  const auto before = w.stats().applied + w.stats().stale;
  ASSERT_TRUE(ring.try_publish(CoherenceItem(item)));
  for (int i = 0; i < 5000 && w.stats().applied + w.stats().stale == before; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(w.stats().applied + w.stats().stale, before);
}

// True once `pred` holds, polled for up to 5 s.
template <class Pred>
inline bool eventually_true(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace echo::engine
