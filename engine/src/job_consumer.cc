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
// Parking and hand-offs, claims, credits, and the parking connection on a cluster: the top of
// job_delivery.cc, with the code that takes, delivers and completes the jobs.

#include <echo/base/counter.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/lua/scripts.h>
#include <echo/table/names.h>

#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

#include "reply_int.h"

namespace echo::engine {

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
  p.evalsha_lent_fn = [&c](io::LentEval& req) { return c.evalsha_lent(req); };
  return p;
}

JobConsumer::MemberKeys::MemberKeys(const std::string& base)
    : active(base + "active"),
      dead(base + "dead"),
      deliver(base + "deliver"),
      live(base + "live"),
      meta(base + "meta"),
      owner(base + "owner"),
      parked(base + "parked"),
      pending(base + "pending"),
      ring(base + "ring"),
      schedule(base + "schedule"),
      wake(base + "wake") {}

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
      mk_(mbase_),
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
  const std::string& parked = mk_.parked;
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
  const std::string &live = mk_.live, &owner = mk_.owner;
  const std::string lease = std::to_string(spec_.job_lease_ms),
                    ttl = std::to_string(member_ttl_ms_);
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
  const std::string &active = mk_.active, &pending = mk_.pending, &schedule = mk_.schedule;
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
