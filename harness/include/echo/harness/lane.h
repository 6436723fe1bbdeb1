// SPDX-License-Identifier: MIT
// A lane measured one message at a time: the job lane's turn-taking (its consumer settled and
// parked again before each send) and one message's send -> row gone, as the drill's price gates
// and the lane benches take them.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/harness/samples.h>
#include <echo/harness/stage.h>
#include <echo/table/branded_id.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace echo::harness {

// The job-lane consumer's stats of `table` on `node` (empty when the table has none).
inline engine::JobConsumerStats consumer_of(const engine::Engine& node, std::string_view table) {
  for (const auto& t : node.stats().tables) {
    if (t.name == table && t.consumer) return *t.consumer;
  }
  return {};
}

// A job lane taken one message at a time: before each send the consumer of `table` on `node` has
// let go of every job sent so far and parked again since the previous send, so the send finds it
// parked (and the hand-off path is what is measured). settled() waits for that (false after 2 s)
// and notes the parks so far, outside any timed window; call sent() once a send went out. A
// second settled() with no send between waits for nothing new: the consumer, parked, parks
// again only on its beat.
class JobLaneTurns {
 public:
  JobLaneTurns(const engine::Engine& node, std::string table)
      : node_(node), table_(std::move(table)) {}
  bool settled() {
    const bool due = sent_ != sent_at_note_;  // a send since the parks were noted (or none noted)
    engine::JobConsumerStats c;
    const bool ok = spin_until([&] {
      c = consumer_of(node_, table_);
      return c.completed + c.complete_gone + c.complete_stale >= sent_ &&
             (!due || c.parks > parks_at_note_);
    });
    if (ok && due) {
      parks_at_note_ = c.parks;
      sent_at_note_ = sent_;
    }
    return ok;
  }
  void sent() { ++sent_; }
  std::uint64_t count() const { return sent_; }

 private:
  const engine::Engine& node_;
  std::string table_;
  std::uint64_t sent_ = 0, parks_at_note_ = 0;
  std::uint64_t sent_at_note_ = ~std::uint64_t{0};  // no parks noted yet: the first call waits
};

// One message through one lane: `settle` runs first (untimed; false: the lane did not settle),
// the row is re-put, then `send` -> the row gone from `node`'s L1 as the sending thread sees it
// (it spins once its send returned) into `seen`, and send -> the writer's apply of that drop on
// the writer's own clock (WriterStats::last_applied_ns; a blocking send may return after the row
// is already gone) into `applied`; neither while warming up (`keep` false).
template <class Settle, class Send>
bool lane_message(const engine::Engine& node, const std::string& table,
                  const table::BrandedId& name, engine::Engine& refill, table::Minter& minter,
                  Settle settle, Send send, bool keep, Samples& seen, Samples& applied) {
  if (!settle()) return false;
  if (!refill.put(table, name.view(), "px=105.00", minter.mint("TXN").value())) return false;
  const table::BrandedId v = minter.mint("TXN").value();
  const auto t0 = Clock::now();
  if (!send(v) || !spin_until([&] { return !cached(node, table, name); })) return false;
  if (!keep) return true;
  seen.us.push_back(since_us(t0));
  const std::int64_t at = engine::internal::writer_of(node, table)->stats().last_applied_ns;
  const std::int64_t from =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  applied.us.push_back(static_cast<double>(at - from) / 1e3);
  return true;
}

}  // namespace echo::harness
