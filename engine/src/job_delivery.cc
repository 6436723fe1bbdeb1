// SPDX-License-Identifier: MIT
// The job consumer's delivery path (job_consumer.h; its membership and beat: job_consumer.cc):
// park, claim, hand each job to the ring with a ticket, complete or retry it after the
// writer's ack. Everything here but on_acks() runs on the loop thread, once per job or per
// burst of acks: these functions call one another per message and stay in one file.
//
// Parking and hand-offs (the latency path). Whenever the consumer has a free credit it keeps one
// BLPOP on its delivery and wake lists outstanding on its own connection, and it keeps the
// member's `parked` list at its free credits (member_park.lua), so member_enqueue hands a job
// straight to it, claimed, by taking one credit (LPOP). member_park lists credits only while a
// hand-off would be legal and in order (queue and groups unpaused, lanes empty, no ceiling
// passed), so the hand-off itself reads nothing else; while it is barred (-1) the consumer asks
// again when a claim finds its lanes dry, or on its beat. A hand-off
// is published into the ring before anything else happens on the loop thread, and the BLPOP is
// issued again once the writer's next ack has drained (so on a shared core the writer runs
// first; hand-offs made meanwhile wait listed and the next BLPOP takes them all): no refresh of
// the credits, no empty claim around a delivery (the round trips the first version paid per
// job; lanes_bench's BM_JobLane_EnqueueToDrop shows the cut). The credits are refreshed on
// every beat (its PX) and when acks have returned at least half the credits it had consumed, so
// a steady stream costs one completion per job and nothing else.
// Claims: gclaim runs only after a wake token, a BLPOP timeout or a beat, until a claim answers
// empty (a wake that lands while a claim is in flight makes the consumer claim again). Each claim
// first asks HGET meta paused (docs/wire.md, "Scripts"): a paused member queue answers empty
// without the script (counted in empty_claims), and the beat after the resume claims again.
// Credits: the consumer takes a job (claim or hand-off) only with a free credit, except that a
// BLPOP and a claim may both be in flight with the last credit: in flight <= job_credits + 1,
// which the ack ring (twice the ring) and the overflow deque absorb. Hand-offs the server made
// beyond that stay listed, leased; if a lease runs out first the job is reaped and re-claimed
// through the lane, and the listed copy later completes stale. The credits bound the server's
// hand-offs by the credits up to what one BLPOP takes (member_park.lua). A consumer whose parking
// connection is down lists none: writers then use the lane and the wake list.
// The lease of a hand-off is this member's job_lease_ms, the value of its live key (each credit
// carries it).
// On a cluster the parking connection follows its queue's master: every reconnect asks the
// park options' `target` (the router's current owner of the queue's slot), and every beat
// redials when the owner moved while the socket stayed up (a manual failover, a reshard); a
// BLMPOP the server refuses (MOVED) is not re-issued before that beat.

#include <echo/base/clock.h>
#include <echo/base/counter.h>
#include <echo/engine/errc.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/table/coherence_frame.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>

#include "reply_int.h"

namespace echo::engine {
namespace {

// "1.000": BLPOP's timeout in seconds with three decimals (docs/wire.md, "A consumer").
std::string seconds_text(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  return buf;
}

}  // namespace

std::size_t JobConsumer::free_credits() const noexcept {
  return in_flight_.size() >= spec_.job_credits ? 0 : spec_.job_credits - in_flight_.size();
}

void JobConsumer::pump() {
  if (stopping_ || !registered_ || free_credits() == 0) return;  // no credit: the next ack pumps
  block();
  // Idle lanes: anything new since the empty claim is handed off or wakes the BLPOP, so a claim
  // now would be an empty round trip.
  if (claiming_ || lanes_idle_) return;
  claiming_ = true;
  const std::uint64_t gen = wake_gen_;
  // The host asks HGET meta paused first; a paused queue is empty without the script
  // (docs/wire.md, "Scripts").
  // A resume (HDEL meta paused) sends no wake: the next beat claims again.
  const std::string& meta = mk_.meta;
  const auto ec =
      cmd_.call({"HGET", meta, "paused"}, [this, gen](std::error_code e, const io::Resp3Value& r) {
        if (stopping_ || e) {
          claiming_ = false;
          return;  // the next beat pumps again
        }
        if (!r.is_null()) {
          claiming_ = false;
          base::solo_add(empty_claims_);
          lanes_idle_ = gen == wake_gen_;
          return;
        }
        claim(gen);
      });
  if (ec) claiming_ = false;
}

void JobConsumer::claim(std::uint64_t gen) {
  const std::string &ring = mk_.ring, &active = mk_.active;
  const std::string lease = std::to_string(spec_.job_lease_ms);
  const std::string_view keys[] = {ring, active};
  const std::string_view argv[] = {mbase_, lease};
  const auto ec = cmd_.evalsha(scripts_.gclaim, keys, argv,
                               [this, gen](std::error_code e, const io::Resp3Value& r) {
                                 claiming_ = false;
                                 if (stopping_) return;
                                 if (e || r.type() != io::Resp3Type::array)
                                   return;  // the next beat pumps again
                                 if (r.size() < 4) {
                                   base::solo_add(empty_claims_);
                                   // A wake taken while this claim was in flight may announce work
                                   // the claim did not see.
                                   lanes_idle_ = gen == wake_gen_;
                                   if (!lanes_idle_) return pump();
                                   if (handoffs_barred_) arm();  // the lanes ran dry
                                   return;
                                 }
                                 base::solo_add(claimed_);
                                 deliver(Job{std::string(r[0].str()), std::string(r[1].str()),
                                             std::string(r[3].str()), as_int(r[2])});
                                 pump();
                               });
  if (ec) claiming_ = false;
}

void JobConsumer::block() {
  if (stopping_ || blocked_ || hold_block_ || park_refused_) return;
  const std::string &deliver = mk_.deliver, &wake = mk_.wake;
  const std::string timeout = seconds_text(spec_.job_beat_ms),
                    count = std::to_string(free_credits());
  // BLMPOP: every hand-off listed, up to our credits, in one reply (or the wake tokens).
  const auto ec =
      park_->call({"BLMPOP", timeout, "2", deliver, wake, "LEFT", "COUNT", count},
                  [this](std::error_code e, const io::Resp3Value& r) { on_park_reply(e, r); });
  if (ec) return;  // not ready: the connection's ready event blocks again
  blocked_ = true;
  base::solo_add(parks_);
}

void JobConsumer::follow_park() {
  // The queue's owner moved while the parking socket stayed up: dial the new one. A refused
  // BLMPOP may be tried again once per beat (the router refreshes its map on the MOVED it meets).
  park_refused_ = false;
  const auto& o = park_->options();
  if (!o.target || park_->status() != io::ConnStatus::kReady) return;
  const io::DialTarget t = o.target();
  if (!t.host.empty() && (t.host != o.host || t.port != o.port)) park_->redial();
}

void JobConsumer::arm() {
  // The hand-off credits: our free credits less what the delivery list holds, or none while we
  // cannot block (unregistered, or the parking connection is down) or while the queue's state
  // bars a hand-off (member_park.lua answers -1: then we ask again once a claim finds the lanes
  // dry, or on the next beat). One call in flight at most.
  if (stopping_) return;
  if (arming_) {
    rearm_ = true;  // counted from state that has changed since: send again on its reply
    return;
  }
  const bool can_block = registered_ && !park_refused_ && park_->status() == io::ConnStatus::kReady;
  const std::string &parked = mk_.parked, &deliver = mk_.deliver;
  const std::string free = std::to_string(can_block ? free_credits() : 0);
  const std::string px = std::to_string(spec_.job_beat_ms * 2 + 1000);
  const std::string_view keys[] = {parked, deliver};
  const std::string_view argv[] = {free, px, mbase_};
  // In flight before the send: a refused send answers inline (the reply below runs first).
  arming_ = true;
  const auto ec = cmd_.evalsha(
      scripts_.member_park, keys, argv, [this](std::error_code e, const io::Resp3Value& r) {
        arming_ = false;
        if (stopping_) return;
        const std::int64_t n = !e && r.type() == io::Resp3Type::integer ? r.integer() : 0;
        credits_listed_ = std::max<std::int64_t>(0, n);
        handoffs_barred_ = n < 0;
        if (rearm_) {
          rearm_ = false;
          arm();
        }
      });
  if (ec) arming_ = false;
}

void JobConsumer::on_park_reply(std::error_code ec, const io::Resp3Value& reply) {
  blocked_ = false;
  if (stopping_) return;
  // A server refusal (MOVED: this node no longer owns the queue) would come back at once: no
  // BLMPOP until the next beat has followed the owner; claims go on through the router.
  if (ec == make_error_code(io::IoErrc::kServerError)) {
    park_refused_ = true;
    arm();  // no BLMPOP until the beat: take the listed credits down (nobody takes hand-offs)
  }
  if (ec || reply.is_null() || reply.size() < 2 || reply[1].type() != io::Resp3Type::array) {
    lanes_idle_ = false;  // timeout or a lost connection: claim again (the beat keeps maintenance)
    pump();
    return;
  }
  base::solo_add(wakes_);
  if (reply[0].str() == mk_.deliver) {
    // Into the ring first: the writer's wake-up is the latency. The next BLMPOP waits for an
    // ack: sent now, its loopback send (and the server it wakes) would run before the writer
    // on a shared core; hand-offs made meanwhile wait listed, and the next BLMPOP takes them all.
    const std::size_t before = in_flight_.size();
    for (const auto& item : reply[1]) take_hand_off(item.str());
    hold_block_ = in_flight_.size() > before;
  } else {
    ++wake_gen_;
    lanes_idle_ = false;
  }
  pump();
}

void JobConsumer::take_hand_off(std::string_view text) {
  // Claimed for us by member_enqueue; four lines: id, attempts, group, payload (the payload,
  // last, may itself hold newlines).
  const auto a = text.find('\n');
  const auto b = a == std::string_view::npos ? a : text.find('\n', a + 1);
  const auto c = b == std::string_view::npos ? b : text.find('\n', b + 1);
  if (c == std::string_view::npos) {
    base::solo_add(handed_off_);  // received, and refused: in_flight stays balanced
    // Unparseable: the job stays active and is reaped back with token + 1
    base::solo_add(malformed_);
    return;
  }
  if (credits_listed_ > 0) --credits_listed_;
  Job job;
  job.id = std::string(text.substr(0, a));
  std::from_chars(text.data() + a + 1, text.data() + b, job.token);
  job.group = std::string(text.substr(b + 1, c - b - 1));
  job.payload = std::string(text.substr(c + 1));
  base::solo_add(handed_off_);
  deliver(std::move(job));
}

void JobConsumer::deliver(Job job) {
  const std::int64_t decoded_ns = base::steady_ns();
  if (table::is_carried(job.payload)) return deliver_carried(std::move(job), decoded_ns);
  if (spec_.keys == KeyKind::kText) {
    // key:version, parsed from the right (docs/wire.md, "Text keys"). The item carries the key's
    // bytes where they lie in the job's payload, in in_flight_ until the writer's ack drains (a
    // node's address survives the map's rehashing; the key is the payload's first bytes).
    auto text = table::parse_text_frame(job.payload);
    if (!text) {
      base::solo_add(malformed_);
      retry(job,
            "malformed coherence payload: " + std::string(table::to_string(text.error().error)));
      return;
    }
    const std::size_t key_size = text->key.size();
    const table::BrandedId version = text->version;
    const std::uint64_t ticket = next_ticket_++;
    const Job& held = in_flight_.emplace(ticket, std::move(job)).first->second;
    CoherenceItem item{table::CoherenceMessage{version, version}, decoded_ns, ticket};
    item.key = held.payload.data();
    item.key_size = static_cast<std::uint8_t>(key_size);
    item.kind = ItemKind::kTextKey;
    overflow_.push_back(item);
    publish_overflow();
    return;
  }
  auto message = table::parse_frame(job.payload);
  if (!message) {
    base::solo_add(malformed_);
    retry(job,
          "malformed coherence payload: " + std::string(table::to_string(message.error().error)));
    return;
  }
  if (message->name.ns() != spec_.kind) {
    base::solo_add(malformed_);
    retry(job, "kind: " + std::string(message->name.ns()) + " is not " + spec_.kind);
    return;
  }
  const std::uint64_t ticket = next_ticket_++;
  in_flight_.emplace(ticket, std::move(job));
  overflow_.push_back(CoherenceItem{*message, decoded_ns, ticket});
  publish_overflow();
}

// "{" key "}" version value (docs/wire.md, "Carried values"): the item points at the key and the
// value where they lie in the job's payload, held in in_flight_ as a text key's is. A table that
// does not carry values applies it as the drop it also is.
void JobConsumer::deliver_carried(Job&& job, std::int64_t decoded_ns) {
  auto carried = table::parse_carried_frame(job.payload);
  if (!carried) {
    base::solo_add(malformed_);
    retry(job,
          "malformed coherence payload: " + std::string(table::to_string(carried.error().error)));
    return;
  }
  std::optional<table::BrandedId> id;
  if (spec_.keys == KeyKind::kBranded) {
    auto parsed = table::BrandedId::parse(carried->key);
    if (!parsed || parsed->ns() != spec_.kind) {
      base::solo_add(malformed_);
      retry(job, "kind: " + std::string(carried->key) + " is not a " + spec_.kind + " id");
      return;
    }
    id = *parsed;
  }
  const table::BrandedId version = carried->version;
  const std::size_t key_size = carried->key.size(), value_size = carried->value.size();
  const std::uint64_t ticket = next_ticket_++;
  const Job& held = in_flight_.emplace(ticket, std::move(job)).first->second;
  CoherenceItem item{table::CoherenceMessage{id.value_or(version), version}, decoded_ns, ticket};
  if (id && carry_of(spec_) == Carry::kOff) {
    item.kind = ItemKind::kBranded;
  } else {
    item.key = held.payload.data() + 1;  // past "{"
    item.key_size = static_cast<std::uint8_t>(key_size);
    item.value_size = static_cast<std::uint32_t>(value_size);
    item.kind = carry_of(spec_) == Carry::kOff ? ItemKind::kTextKey : ItemKind::kCarried;
  }
  overflow_.push_back(item);
  publish_overflow();
}

void JobConsumer::publish_overflow() {
  // Credits: publish only into free slots, so the ring never refuses a job.
  while (!overflow_.empty() && ring_.free_slots() != 0) {
    ring_.try_publish(CoherenceItem(overflow_.front()));  // trivially copyable: a copy
    overflow_.pop_front();
  }
}

// The ack hand-over is a store-buffering pair: the writer stores an ack (the ring's tail_) then
// reads the post flag (its exchange); the loop stores the flag (false) then reads tail_ (its first
// emptiness check). No ack may be left with no drain to see it, so at least one side must see the
// other's store. Release/acquire alone does not promise that (POWER may let both reads miss; x86
// and ARMv8 forbid it in hardware, so no test here can show it), hence a seq_cst fence on the
// writer's side and seq_cst accesses on the loop's:
//   writer:  T: tail_ = t+1 (release, try_publish) ; F: fence(seq_cst) ; E: exchange(flag, true)
//   loop:    B: flag = false (seq_cst) ; R: has_work(), a seq_cst load of tail_
// Suppose E read true from before B (E precedes B in the flag's modification order: it posted
// nothing) and R missed T. E is coherence-ordered before B, F happens before E and B is seq_cst,
// so F precedes B in S ([atomics.order] p4.3). R is coherence-ordered before T (it read a value
// older than T), R is seq_cst and T happens before F, so R precedes F in S (p4.2). B is sequenced
// before R, both seq_cst: B precedes R in S. F < B < R < F: no such S, so one of the two holds:
// E read false or a later writer's true (a drain was posted after B, and it will look again), or
// R saw T and the drain below takes the ack (its loads of tail_ come after R: they see T too).
void JobConsumer::on_acks(std::span<const JobAck> acks) {
  // Writer thread. The ack ring holds twice the table ring's capacity, and at most
  // ring_capacity + job_credits jobs are ever in flight, so this never refuses.
  for (const JobAck& ack : acks) acks_.try_publish(JobAck(ack));
  // F: between the acks' tail_ store (T) and the flag's exchange (E); see above. One fence per
  // batch of acks the writer drained, not per ack.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!ack_drain_posted_.exchange(true, std::memory_order_acq_rel)) {
    loop_.post([this] { drain_acks(); });
  }
}

void JobConsumer::drain_acks() {
  // B: clear before draining, seq_cst (see on_acks): an ack published after this store is either
  // seen by R below or posts a fresh drain (its exchange reads false).
  ack_drain_posted_.store(false, std::memory_order_seq_cst);
  if (stopping_) return;
  hold_block_ = false;  // the writer has run since the last hand-off: block again
  // To the end, in passes of 4096: an ack published while this drain runs found the post flag
  // set and posted nothing, so a capped single pass would leave it (and its credit) waiting for
  // some later ack, or for its lease and a redelivery.
  const auto one = [this](JobAck& ack) noexcept {
    auto it = in_flight_.find(ack.ticket);
    if (it == in_flight_.end()) return;
    complete(it->second, ack.verdict);
    in_flight_.erase(it);
  };
  // R: the first emptiness check is has_work()'s seq_cst load of tail_ (drain's own is acquire,
  // and may even use the tail it cached on the last pass).
  if (acks_.has_work()) {
    while (acks_.drain(4096, one) != 0) {
    }
  }
  publish_overflow();
  // Credits came back: list them again once the server's have fallen below half of what we could
  // take (one member_park per half-credit's worth of jobs, not one per job); not while hand-offs
  // are barred (lanes with work: the claim that finds them dry asks).
  if (!handoffs_barred_ && 2 * static_cast<std::size_t>(credits_listed_) < free_credits()) arm();
  pump();
}

void JobConsumer::complete(const Job& job, table::Verdict verdict) {
  base::solo_add(verdict == table::Verdict::kApplied ? applied_ : stale_applies_);
  Completion& c = take_completion();
  c.job_key.assign(mbase_).append("job:").append(job.id);
  c.id.assign(job.id);
  c.token.assign(std::to_string(job.token));
  c.command = {"EVALSHA", scripts_.complete.sha, "2", mk_.active, c.job_key, c.id, c.token, mbase_};
  c.eval.script = &scripts_.complete;
  c.eval.command = c.command;
  // A call refused inline (disconnected, overloaded) answers nothing: counted here, like an
  // error reply. Either way the job stays active and the reaper redelivers it with token + 1.
  if (cmd_.evalsha_lent(c.eval, 2)) {
    base::solo_add(complete_errors_);
    free_completions_.push_back(&c);
  }
}

JobConsumer::Completion& JobConsumer::take_completion() {
  if (!free_completions_.empty()) {
    Completion* c = free_completions_.back();
    free_completions_.pop_back();
    return *c;
  }
  Completion* c = completions_.emplace_back(std::make_unique<Completion>()).get();
  c->eval.done = [this, c](std::error_code ec, const io::Resp3Value& r) {
    on_completed(ec, r);
    free_completions_.push_back(c);  // its last touch: the next completion may take it
  };
  return *c;
}

void JobConsumer::on_completed(std::error_code ec, const io::Resp3Value& r) {
  if (ec == make_error_code(io::IoErrc::kServerError) && r.str().starts_with("EMQSTALE")) {
    base::solo_add(complete_stale_);  // a superseded token: the script refused it
  } else if (ec || r.type() != io::Resp3Type::integer) {
    // Unacknowledged: the reaper redelivers, newer-wins absorbs it
    base::solo_add(complete_errors_);
  } else if (r.integer() == 1) {
    base::solo_add(completed_);
  } else {
    base::solo_add(complete_gone_);
  }
}

void JobConsumer::retry(const Job& job, const std::string& reason) {
  const std::string &active = mk_.active, &schedule = mk_.schedule, &dead = mk_.dead;
  const std::string job_key = mbase_ + "job:" + job.id;
  const std::string token = std::to_string(job.token),
                    delay = std::to_string(spec_.job_retry_delay_ms),
                    max = std::to_string(spec_.job_max_attempts);
  const std::string_view keys[] = {active, schedule, dead, job_key};
  const std::string_view argv[] = {job.id, token, delay, max, reason, mbase_};
  const auto refused =
      cmd_.evalsha(scripts_.retry, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
        if (ec) {
          base::solo_add(complete_errors_);
          return;
        }
        base::solo_add(r.str() == "dead" ? dead_ : retried_);
      });
  // Refused inline: nothing answers (see complete())
  if (refused) base::solo_add(complete_errors_);
}

}  // namespace echo::engine
