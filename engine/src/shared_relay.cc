// SPDX-License-Identifier: MIT
// The shared-queue relay's loop (shared_relay.h).
#include "shared_relay.h"

#include <echo/base/counter.h>
#include <echo/engine/errc.h>
#include <echo/table/coherence_frame.h>

#include "thread_name.h"

namespace echo::engine {

SharedQueueRelay::SharedQueueRelay(std::vector<Table> tables, Ports ports,
                                   std::chrono::milliseconds beat)
    : tables_(std::move(tables)), ports_(std::move(ports)), beat_(beat) {
  for (const auto& t : tables_) wake_lists_.push_back(t.keys.qbase + "wake");
}

SharedQueueRelay::~SharedQueueRelay() { stop(); }

void SharedQueueRelay::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
}

void SharedQueueRelay::stop(const std::function<void()>& unpark) {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  if (unpark) unpark();
  thread_.join();
}

RelayCounters SharedQueueRelay::stats() const {
  auto ld = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return {ld(claimed_), ld(relayed_), ld(malformed_), ld(errors_), ld(maintenance_)};
}

void SharedQueueRelay::run(const std::stop_token& stop) {
  if (housekeeping_ != nullptr) {
    housekeeping_->enter("echo-relay");
  } else {
    name_this_thread("echo-relay");
  }
  auto next_maintenance = std::chrono::steady_clock::time_point{};
  while (!stop.stop_requested()) {
    // A consumer's reap and promote (docs/wire.md, "A consumer"), once a beat: return lapsed leases
    // (a relay or consumer that died holding a claim), promote due retries.
    if (std::chrono::steady_clock::now() >= next_maintenance) {
      for (const auto& t : tables_) maintain(t);
      next_maintenance = std::chrono::steady_clock::now() + beat_;
    }
    for (const auto& t : tables_) drain(t, stop);
    if (stop.stop_requested()) break;
    // Step 4: park until a wake token (genqueue pushes one when a group enters the ring) or the
    // beat. A token another consumer took first costs one empty claim, as for theirs.
    ports_.park(wake_lists_, beat_);
  }
}

void SharedQueueRelay::maintain(const Table& t) {
  const std::string& q = t.keys.qbase;
  for (auto [script, keys, argv] :
       {std::tuple{&scripts_.reap, std::vector<std::string>{q + "active", q + "pending"},
                   std::vector<std::string>{q}},
        std::tuple{&scripts_.promote, std::vector<std::string>{q + "schedule", q + "pending"},
                   std::vector<std::string>{q, "100"}}}) {
    auto r = ports_.script(*script, std::move(keys), std::move(argv));
    if (r && r->view().type() == io::Resp3Type::integer) {
      base::shared_add(maintenance_, static_cast<std::uint64_t>(r->view().integer()));
    } else {
      base::shared_add(errors_);
    }
  }
}

void SharedQueueRelay::drain(const Table& t, const std::stop_token& stop) {
  const std::string& q = t.keys.qbase;
  const std::string lease = std::to_string(t.spec->job_lease_ms);
  while (!stop.stop_requested()) {
    // A paused queue answers empty without the script (docs/wire.md, "Scripts").
    auto paused = ports_.command({"HGET", q + "meta", "paused"});
    if (!paused || !paused->view().is_null()) {
      if (!paused) base::shared_add(errors_);
      return;
    }
    auto r = ports_.script(scripts_.gclaim, {q + "ring", q + "active"}, {q, lease});
    if (!r) {
      base::shared_add(errors_);
      return;
    }
    const io::Resp3Value v = r->view();
    if (v.type() != io::Resp3Type::array || v.size() < 4) return;  // empty
    base::shared_add(claimed_);
    std::vector<std::string> job;
    for (std::size_t i = 0; i < 4; ++i)
      job.emplace_back(v[i].type() == io::Resp3Type::integer ? std::to_string(v[i].integer())
                                                             : std::string(v[i].str()));
    settle(t, job);
  }
}

void SharedQueueRelay::settle(const Table& t, const std::vector<std::string>& job) {
  const std::string& id = job[0];
  const std::string& payload = job[1];
  const std::string& token = job[2];
  const auto job_id = table::BrandedId::parse(id);
  const auto group = table::BrandedId::parse(job[3]);
  // The handler's parse (the job mode of docs/wire.md, "Table semantics"): a message of this table,
  // else a retry.
  std::string name;
  std::optional<table::BrandedId> version;
  if (t.spec->keys == KeyKind::kText) {
    if (auto m = table::parse_text_frame(payload)) {
      name = std::string(m->key);
      version = m->version;
    }
  } else if (auto m = table::parse_frame(payload); m && m->name.ns() == t.spec->kind) {
    name = m->name.str();
    version = m->version;
  }
  if (!version || !job_id || !group) {
    base::shared_add(malformed_);
    return retry(t, id, token, "relay: not a coherence message of table " + t.spec->name);
  }
  if (auto ec = ports_.fan_out(*t.spec, *group, *job_id, name, *version);
      ec && ec != make_error_code(Errc::kNoLiveMember)) {
    // Left active: its lease lapses and a reap returns it for another fan-out
    base::shared_add(errors_);
    return;
  }
  const std::string& q = t.keys.qbase;
  auto done = ports_.script(scripts_.complete, {q + "active", q + "job:" + id}, {id, token, q});
  if (!done || done->view().type() != io::Resp3Type::integer) {
    // Stale token (reaped meanwhile) or a lost reply: the fan-out repeats, harmless
    base::shared_add(errors_);
    return;
  }
  base::shared_add(relayed_);
}

void SharedQueueRelay::retry(const Table& t, std::string_view id, std::string_view token,
                             std::string reason) {
  const std::string& q = t.keys.qbase;
  const std::string job_key = q + "job:" + std::string(id);
  auto r = ports_.script(
      scripts_.retry, {q + "active", q + "schedule", q + "dead", job_key},
      {std::string(id), std::string(token), std::to_string(t.spec->job_retry_delay_ms),
       std::to_string(t.spec->job_max_attempts), std::move(reason), q});
  if (!r) base::shared_add(errors_);
}

}  // namespace echo::engine
