// SPDX-License-Identifier: MIT
// The job lane's consumer: beat, keep a BLPOP and the hand-off credits up while credits remain,
// claim after a wake, complete after the writer's ack. Every method but the constructor, start(),
// on_acks() and stats() runs on the loop thread.
//
// One consumer per job-lane table per node (docs/wire.md, "A consumer", adapted), on the engine's
// io thread. It keeps this node registered in the table's membership set, claims jobs from the
// node's own member queue only while the table's ring has credits, publishes each into the ring
// with a ticket, parks on its own connection (BLPOP on the delivery and wake lists) when idle, and
// completes a job only when the writer's ack says it was applied. Never drops a job: what is not
// acked is reaped back with token + 1.
//
// Member queues (every node applies every message). Each node owns a member queue per job-lane
// table, the bus queue ecc.coh.<t>|<node> (keys emq:{ecc.coh.<t>|<node>}:...): its own hash
// tag, so on a cluster the member queues of a table spread over the shards. The writer keeps the
// table's membership (emq:{ecc.coh.<t>}:members, read with its epoch) and admits each job with one
// member_enqueue per member queue, all sent at once (pipelined per shard), then reads the epoch
// again (member_enqueue.lua, "Membership"). Each beat sets this node's live key (SET ... GET on
// the member queue's slot), then runs member_beat on the table's slot. Failure modes:
//   - this node dies holding a claim: the job stays active; the next incarnation's reap (same
//     node id) returns it with token + 1; a completion with the old token is refused (stale);
//   - this node dies after a hand-off was pushed to its delivery list: the job is active with a
//     lease, reaped like any claim;
//   - this node's heartbeat lapses past the member ttl: its live key expires (admissions skip it)
//     and any node's member_reap takes it out of the set, and member_drop deletes its queue once
//     the live key is gone; the next beat sees either (the SET found no key, or member_beat says
//     it entered anew), re-registers, and drops every L1 row (it may have missed messages) before
//     caching again, the same as a resubscribe;
//   - a joiner caches nothing until its first beat has landed: its live key is set before it
//     enters the set, so every writer that sees the epoch move admits it.
//
// Two processes, one node id. Every concurrent minter must hold a distinct node (docs/wire.md,
// "Branded ids"); two that share one would also share a member queue, and each message would reach
// only one of them, so both L1s would go stale without a sign. So each beat also sets the member
// queue's owner key (<mbase>owner, SET ... PX member ttl GET, just before the live key) to this
// consumer's token (host:pid:random). Another token replacing ours between two of our beats can
// only come from a process beating as this member now (a twin): the beat counts a member conflict,
// writes one line to stderr, and the table caches nothing (every L1 row dropped, as on a lost
// subscription) until no twin's token has been seen for one member ttl plus one beat (a twin that
// beats at all writes at least once per ttl, and our next beat sees it); then every row is dropped
// once more and caching starts again. The consumer goes on taking and completing jobs meanwhile, so
// the queue never backs up. Another token found by our first beat is a predecessor's (a restart
// under the same node id within one ttl) or a twin's: caching waits one member ttl, through which
// every beat must find our own token (a twin writes its own at least once per ttl; its very next
// beat may land after ours, so one beat would not tell). A restart under the same node id within a
// ttl of its predecessor therefore caches one ttl after its first beat (start() waits for it: 3 s
// at job_beat_ms 1000). A predecessor whose last beat was still on the wire when it died can be
// counted once.
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
#include <echo/lua/scripts.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

namespace echo::engine {
namespace {

std::int64_t as_int(const io::Resp3Value& v) {
  if (v.type() == io::Resp3Type::integer) return v.integer();
  std::int64_t n = 0;
  const auto s = v.str();
  std::from_chars(s.data(), s.data() + s.size(), n);
  return n;
}

// "1.000": BLPOP's timeout in seconds with three decimals (docs/wire.md, "A consumer").
std::string seconds_text(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  return buf;
}

}  // namespace

io::Script embedded_script(std::string_view name) {
  const lua::Script* s = lua::find_script(name);
  if (s == nullptr) throw std::logic_error("missing embedded script " + std::string(name));
  return io::Script{std::string(s->sha1), std::string(s->source)};
}

// host:pid:random (job_consumer.h, "Two processes, one node id"; the node leases). The random
// part tells apart two consumers of one process (two engines under the same node id) and a pid
// the system gave again.
std::string owner_token() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s:%ld:%016llx", host, static_cast<long>(::getpid()),
                static_cast<unsigned long long>(r));
  return buf;
}

std::string JobLaneKeys::member_base(std::string_view member) const {
  return "emq:{" + queue + "|" + std::string(member) + "}:";
}

JobLaneKeys JobLaneKeys::for_table(std::string_view table) {
  JobLaneKeys k;
  k.queue = table::coherence_queue(table).value();
  k.qbase = "emq:{" + k.queue + "}:";
  k.members = k.qbase + "members";
  k.epoch = k.qbase + "mepoch";
  k.lead = k.qbase + "lead";
  return k;
}

JobLaneScripts JobLaneScripts::embedded() {
  const auto e = embedded_script;
  return {e("gclaim"),         e("complete"),    e("retry"),       e("promote"),
          e("reap"),           e("member_beat"), e("member_reap"), e("member_drop"),
          e("member_enqueue"), e("member_park")};
}

CommandPort CommandPort::of(io::Connection& c) {
  CommandPort p;
  p.call_fn = [&c](std::span<const std::string_view> args, io::ReplyFn done) {
    return c.call(args, std::move(done));
  };
  p.evalsha_fn = [&c](const io::Script& s, std::span<const std::string_view> keys,
                      std::span<const std::string_view> argv,
                      io::ReplyFn done) { return c.evalsha(s, keys, argv, std::move(done)); };
  return p;
}

JobConsumer::JobConsumer(io::UringLoop& loop, CommandPort cmd, io::ConnectionOptions park_options,
                         TableWriter& writer, CoherenceRing& ring, std::string member)
    : loop_(loop),
      cmd_(std::move(cmd)),
      writer_(writer),
      ring_(ring),
      spec_(writer.spec()),
      member_(std::move(member)),
      keys_(JobLaneKeys::for_table(spec_.name)),
      mbase_(keys_.member_base(member_)),
      scripts_(JobLaneScripts::embedded()),
      member_ttl_ms_(3 * spec_.job_beat_ms),
      token_(owner_token()),
      acks_(ring::RingConfig{.capacity = std::bit_ceil(spec_.ring_capacity * 2),
                             .full_policy = ring::FullPolicy::kDrop}) {
  // A parked BLPOP holds its reply for up to one beat: the call timeout must outlast it.
  park_options.call_timeout = std::chrono::milliseconds(spec_.job_beat_ms + 5000);
  park_options.heartbeat = std::chrono::milliseconds(0);
  // A park that could not be issued (the connection was still booting, or lost) is retried as
  // soon as the connection is ready, not a whole beat later.
  // A lost parking connection takes the credits down (writers then use the lane and the wake list
  // rather than a delivery list nobody blocks on); a ready one raises it again.
  // A lost one is also a lapse: the server may have restarted, taking our live key with it, and
  // writers skip a member that is not live (member_enqueue answers -1), so L1 may already miss a
  // message; it serves nothing until a beat lands, and the reconnect beats at once.
  park_ = std::make_unique<io::Connection>(
      loop_, std::move(park_options), io::PushFn{}, [this](io::ConnEvent event, std::error_code) {
        if (stopping_) return;
        if (event == io::ConnEvent::kDisconnected) return lapse();  // lapse() arms
        arm();
        if (event == io::ConnEvent::kReady || event == io::ConnEvent::kReconnected) {
          lanes_idle_ = false;
          park_refused_ = false;
          if (event == io::ConnEvent::kReconnected && !registered_) beat();
          pump();
        }
      });
  timer_op_.complete = &JobConsumer::on_timer;
  timer_op_.context = this;
  writer_.set_ack_sink([this](std::span<const JobAck> acks) { on_acks(acks); });
}

JobConsumer::~JobConsumer() {
  park_.reset();  // returns once the ring holds no reference to the parking connection
  // The beat timer (stop_on_loop cancels it, nothing waited for its completion) and a drain the
  // writer posted (ack_drain_posted_) still name this object: wait on the loop until neither
  // does, so no completion or closure reaches a freed consumer.
  const auto quiet = [this] {
    return !timer_op_.armed && !ack_drain_posted_.load(std::memory_order_acquire);
  };
  const auto quiesce = [this] {
    stopping_ = true;  // the timer's completion does not beat again
    if (timer_op_.armed) loop_.cancel(timer_op_);
  };
  if (!loop_.running()) {
    quiesce();
    if (!loop_.run_until(quiet, std::chrono::milliseconds(10000))) {
      std::fprintf(stderr, "echo::engine::JobConsumer: timer or drain pending 10 s after close\n");
      std::abort();
    }
    return;
  }
  // Polled from this thread: a closure that re-posted itself would keep the loop inside its drain
  // of posted work, away from the completion it waits for.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (bool first = true;; first = false) {
    auto answer = std::make_shared<std::promise<bool>>();  // shared: see ~Connection
    auto is_quiet = answer->get_future();
    loop_.post([&, first, answer] {
      if (first) quiesce();
      answer->set_value(quiet());
    });
    if (is_quiet.get()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "echo::engine::JobConsumer: timer or drain pending 10 s after close\n");
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void JobConsumer::start() {
  park_->start();
  loop_.post([this] { beat(); });
}

void JobConsumer::stop_on_loop() {
  stopping_ = true;
  if (timer_armed_) loop_.cancel(timer_op_);
  // No more hand-offs to a consumer that is going away (best effort: the credits' PX ends them
  // too).
  const std::string parked = mbase_ + "parked";
  cmd_.call({"DEL", parked}, [](std::error_code, const io::Resp3Value&) {});
}

void JobConsumer::on_timer(io::IoOp& op, int res) noexcept {
  auto* self = static_cast<JobConsumer*>(op.context);
  self->timer_armed_ = false;
  if (self->stopping_ || res == -ECANCELED) return;
  self->beat();
}

void JobConsumer::beat() {
  if (stopping_) return;
  if (!timer_armed_) {
    timer_armed_ = true;
    loop_.after(std::chrono::milliseconds(spec_.job_beat_ms), timer_op_);
  }
  follow_park();
  // First our queue's live key, on its own slot: its value is our lease, which member_enqueue
  // gives the jobs it hands us. Only on its reply the membership: a writer that sees the epoch
  // move must find us live (member_enqueue.lua, "Membership").
  const std::string live = mbase_ + "live", lease = std::to_string(spec_.job_lease_ms),
                    ttl = std::to_string(member_ttl_ms_), owner = mbase_ + "owner";
  // Just before it, our token into the owner key: its old value says whether another process
  // beats as this member (job_consumer.h, "Two processes, one node id"). Same slot and
  // connection, so this reply is in before the live key's. A failure here fails the live key's
  // SET too (or the beat reads no owner: nothing counted).
  owner_seen_.clear();
  (void)cmd_.call({"SET", owner, token_, "PX", ttl, "GET"},
                  [this](std::error_code e, const io::Resp3Value& r) {
                    if (!e && r.type() == io::Resp3Type::bulk_string) owner_seen_ = r.str();
                  });
  const auto ec = cmd_.call({"SET", live, lease, "PX", ttl, "GET"},
                            [this](std::error_code e, const io::Resp3Value& r) {
                              if (stopping_) return;
                              if (e || (!r.is_null() && r.type() != io::Resp3Type::bulk_string)) {
                                return lapse();
                              }
                              enter(!r.is_null());
                            });
  if (ec) lapse();
}

void JobConsumer::lapse() {
  // Not registered for now: writers may skip us, so L1 cannot be trusted until a beat lands.
  if (registered_) writer_.subscription_lost();
  registered_ = false;
  arm();  // unregistered: take the hand-off credits down (writers may skip us anyway)
}

void JobConsumer::enter(bool was_live) {
  const std::string ttl = std::to_string(member_ttl_ms_);
  const std::string_view keys[] = {keys_.members, keys_.epoch};
  const std::string_view argv[] = {member_, ttl};
  const auto ec = cmd_.evalsha(
      scripts_.member_beat, keys, argv,
      [this, was_live](std::error_code e, const io::Resp3Value& r) {
        if (stopping_) return;
        if (e || r.type() != io::Resp3Type::array || r.size() < 2 ||
            r[1].type() != io::Resp3Type::integer) {
          return lapse();
        }
        base::solo_add(beats_);
        const std::int64_t now_ms = as_int(r[0]);
        // Another process's token replaced ours since our last beat: it beats as this member
        // (job_consumer.h, "Two processes, one node id"). A token found by our first beat is a
        // predecessor's, or a twin's that a later beat shows: no caching for one member ttl,
        // within which a twin that beats at all replaces our token (its next beat alone may land
        // after ours: equal periods, or a twin late under load; a soak saw a twin's start pass).
        const bool foreign = !owner_seen_.empty() && owner_seen_ != token_;
        const bool twin = foreign && owner_written_;
        if (foreign && !owner_written_) suspect_until_ms_ = now_ms + member_ttl_ms_;
        owner_written_ = true;
        if (twin) {
          base::solo_add(member_conflicts_);
          twin_seen_ms_ = now_ms;
          if (!conflicted_) {
            conflicted_ = true;
            if (registered_) writer_.subscription_lost();
            confirm_owed_ = true;
            writer_.log(LogLevel::kError, "job",
                        "member " + member_ + ": another process (" + owner_seen_ +
                            ") beats as this member too (a node id used twice); this node "
                            "caches nothing of the table until it is alone");
          }
        } else if (conflicted_ && now_ms - twin_seen_ms_ > member_ttl_ms_ + spec_.job_beat_ms) {
          // A twin that still beats writes at least once per member ttl, and our next beat
          // sees it: none for longer than that, and we are alone again.
          conflicted_ = false;
        }
        // First beat, or a beat that shows writers may have skipped us: our live key had expired
        // (admissions answered -1) or member_reap had taken us out of the set (writers stopped
        // sending). Whatever L1 holds may have missed a message: drop it all and cache again,
        // once no twin (or possible twin) beats with us.
        if (!registered_ || !was_live || r[1].integer() == 1) {
          if (last_beat_ms_ != 0) base::solo_add(rejoins_);
          confirm_owed_ = true;
        }
        if (confirm_owed_ && !conflicted_ && now_ms >= suspect_until_ms_) {
          confirm_owed_ = false;
          writer_.subscription_confirmed();
        }
        registered_ = true;
        last_beat_ms_ = as_int(r[0]);
        maintain();
        arm();                // the credits' PX runs two beats: every beat renews them
        lanes_idle_ = false;  // a safety net for a lost wake token: one claim per beat at most
        pump();
      });
  if (ec) lapse();
}

void JobConsumer::maintain() {
  // Reap our own expired leases (a previous incarnation's claims, lost hand-offs), promote due
  // retries, and reclaim members whose heartbeat lapsed.
  const std::string active = mbase_ + "active", pending = mbase_ + "pending",
                    schedule = mbase_ + "schedule";
  // reap's and promote's reply: its count added to `counter`, or a maintenance error.
  const auto adds_to = [this](std::atomic<std::uint64_t>& counter) {
    return [this, &counter](std::error_code ec, const io::Resp3Value& r) {
      if (!ec && r.type() == io::Resp3Type::integer) {
        base::solo_add(counter, static_cast<std::uint64_t>(r.integer()));
      } else if (!stopping_) {
        base::solo_add(maintenance_errors_);
      }
    };
  };
  {
    const std::string_view keys[] = {active, pending};
    const std::string_view argv[] = {mbase_};
    if (cmd_.evalsha(scripts_.reap, keys, argv, adds_to(reaped_))) {
      base::solo_add(maintenance_errors_);
    }
  }
  {
    const std::string_view keys[] = {schedule, pending};
    const std::string_view argv[] = {mbase_, "100"};
    if (cmd_.evalsha(scripts_.promote, keys, argv, adds_to(promoted_))) {
      base::solo_add(maintenance_errors_);
    }
  }
  {
    // Out of the set on the table's slot, then each removed member's queue on its own slot.
    const std::string_view keys[] = {keys_.members, keys_.epoch};
    const std::string_view argv[] = {"16"};
    const auto refused = cmd_.evalsha(
        scripts_.member_reap, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
          if (stopping_) return;
          if (ec || r.type() != io::Resp3Type::array) {
            base::solo_add(maintenance_errors_);
            return;
          }
          base::solo_add(members_reaped_, r.size());
          for (const auto& m : r) {
            const std::string mbase = keys_.member_base(m.str()), live = mbase + "live";
            const std::string_view k[] = {live};
            const std::string_view a[] = {mbase};
            const auto dropped = cmd_.evalsha(scripts_.member_drop, k, a,
                                              [this](std::error_code e, const io::Resp3Value&) {
                                                if (e && !stopping_)
                                                  base::solo_add(maintenance_errors_);
                                              });
            if (dropped) base::solo_add(maintenance_errors_);
          }
        });
    if (refused) base::solo_add(maintenance_errors_);
  }
}

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
  const std::string meta = mbase_ + "meta";
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
  const std::string ring = mbase_ + "ring", active = mbase_ + "active";
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
  const std::string deliver = mbase_ + "deliver", wake = mbase_ + "wake";
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
  const std::string parked = mbase_ + "parked", deliver = mbase_ + "deliver";
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
  if (reply[0].str() == mbase_ + "deliver") {
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
void JobConsumer::deliver_carried(Job job, std::int64_t decoded_ns) {
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
  const std::string active = mbase_ + "active", job_key = mbase_ + "job:" + job.id;
  const std::string token = std::to_string(job.token);
  const std::string_view keys[] = {active, job_key};
  const std::string_view argv[] = {job.id, token, mbase_};
  // A call refused inline (disconnected, overloaded) answers nothing: counted here, like an
  // error reply. Either way the job stays active and the reaper redelivers it with token + 1.
  const auto refused = cmd_.evalsha(
      scripts_.complete, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
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
      });
  if (refused) base::solo_add(complete_errors_);
}

void JobConsumer::retry(const Job& job, const std::string& reason) {
  const std::string active = mbase_ + "active", schedule = mbase_ + "schedule",
                    dead = mbase_ + "dead", job_key = mbase_ + "job:" + job.id;
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

JobConsumerStats JobConsumer::stats() const {
  auto ld = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  JobConsumerStats s;
  s.claimed = ld(claimed_);
  s.handed_off = ld(handed_off_);
  s.applied = ld(applied_);
  s.stale_applies = ld(stale_applies_);
  s.completed = ld(completed_);
  s.complete_gone = ld(complete_gone_);
  s.complete_stale = ld(complete_stale_);
  s.complete_errors = ld(complete_errors_);
  s.malformed = ld(malformed_);
  s.retried = ld(retried_);
  s.dead = ld(dead_);
  s.beats = ld(beats_);
  s.rejoins = ld(rejoins_);
  s.reaped = ld(reaped_);
  s.promoted = ld(promoted_);
  s.members_reaped = ld(members_reaped_);
  s.maintenance_errors = ld(maintenance_errors_);
  s.parks = ld(parks_);
  s.wakes = ld(wakes_);
  s.empty_claims = ld(empty_claims_);
  s.member_conflicts = ld(member_conflicts_);
  // Settled before taken: a job is taken before it is settled, so reading in this order can only
  // miss settlements (a larger figure), and in_flight_of clamps what the relaxed loads may mix.
  const std::uint64_t settled = ld(applied_) + ld(stale_applies_) + ld(malformed_);
  s.in_flight = in_flight_of(ld(claimed_) + ld(handed_off_), settled);
  return s;
}

}  // namespace echo::engine
