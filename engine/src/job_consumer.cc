// SPDX-License-Identifier: MIT
// The job lane's consumer: beat, claim within credits, park, complete after the writer's ack.
// Every method but the constructor, start(), on_acks() and stats() runs on the loop thread.
#include <echo/engine/job_consumer.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>

#include <echo/engine/errc.h>
#include <echo/lua/scripts.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

io::Script script(std::string_view name) {
  const lua::Script* s = lua::find_script(name);
  if (s == nullptr) throw std::logic_error("missing embedded script " + std::string(name));
  return io::Script{std::string(s->sha1), std::string(s->source)};
}

std::int64_t as_int(const io::Resp3Value& v) {
  if (v.type() == io::Resp3Type::integer) return v.integer();
  std::int64_t n = 0;
  const auto s = v.str();
  std::from_chars(s.data(), s.data() + s.size(), n);
  return n;
}

// "1.000": BLPOP's timeout in seconds with three decimals (WIRE §5.4).
std::string seconds_text(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  return buf;
}

}  // namespace

std::string JobLaneKeys::member_base(std::string_view member) const {
  return qbase + "m:" + std::string(member) + ":";
}

JobLaneKeys JobLaneKeys::for_table(std::string_view table) {
  JobLaneKeys k;
  k.queue = table::coherence_queue(table).value();
  k.qbase = "emq:{" + k.queue + "}:";
  k.members = k.qbase + "members";
  return k;
}

JobLaneScripts JobLaneScripts::embedded() {
  return {script("gclaim"),      script("complete"),    script("retry"),
          script("promote"),     script("reap"),        script("member_beat"),
          script("member_reap"), script("fanout_enqueue")};
}

JobConsumer::JobConsumer(io::UringLoop& loop, io::Connection& cmd,
                         io::ConnectionOptions park_options, TableWriter& writer,
                         CoherenceRing& ring, std::string member)
    : loop_(loop),
      cmd_(cmd),
      writer_(writer),
      ring_(ring),
      spec_(writer.spec()),
      member_(std::move(member)),
      keys_(JobLaneKeys::for_table(spec_.name)),
      mbase_(keys_.member_base(member_)),
      scripts_(JobLaneScripts::embedded()),
      member_ttl_ms_(3 * spec_.job_beat_ms),
      acks_(ring::RingConfig{.capacity = std::bit_ceil(spec_.ring_capacity * 2),
                             .full_policy = ring::FullPolicy::kDrop}) {
  // A parked BLPOP holds its reply for up to one beat: the call timeout must outlast it.
  park_options.call_timeout = std::chrono::milliseconds(spec_.job_beat_ms + 5000);
  park_options.heartbeat = std::chrono::milliseconds(0);
  // A park that could not be issued (the connection was still booting, or lost) is retried as
  // soon as the connection is ready, not a whole beat later.
  park_ = std::make_unique<io::Connection>(
      loop_, std::move(park_options), io::PushFn{}, [this](io::ConnEvent event, std::error_code) {
        if (event == io::ConnEvent::kReady || event == io::ConnEvent::kReconnected) pump();
      });
  timer_op_.complete = &JobConsumer::on_timer;
  timer_op_.context = this;
  writer_.set_ack_sink([this](std::span<const JobAck> acks) { on_acks(acks); });
}

JobConsumer::~JobConsumer() { park_.reset(); }

void JobConsumer::start() {
  park_->start();
  loop_.post([this] { beat(); });
}

void JobConsumer::stop_on_loop() {
  stopping_ = true;
  if (timer_armed_) loop_.cancel(timer_op_);
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
  const std::string ttl = std::to_string(member_ttl_ms_);
  const std::string_view keys[] = {keys_.members};
  const std::string_view argv[] = {member_, ttl};
  cmd_.evalsha(scripts_.member_beat, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
    if (stopping_) return;
    if (ec || r.type() != io::Resp3Type::integer) {
      // Not registered for now: writers may skip us, so L1 cannot be trusted until a beat lands.
      if (registered_) writer_.subscription_lost();
      registered_ = false;
      return;
    }
    bump(beats_);
    const std::int64_t now = r.integer();
    if (!registered_ || now - last_beat_ms_ >= member_ttl_ms_) {
      // First beat, or a gap long enough that writers may have skipped us (and our queue may
      // have been reclaimed): whatever L1 holds may have missed a message.
      if (last_beat_ms_ != 0) bump(rejoins_);
      writer_.subscription_confirmed();
    }
    registered_ = true;
    last_beat_ms_ = now;
    maintain();
    pump();
  });
}

void JobConsumer::maintain() {
  // Reap our own expired leases (a previous incarnation's claims, lost hand-offs), promote due
  // retries, and reclaim members whose heartbeat lapsed.
  const std::string active = mbase_ + "active", pending = mbase_ + "pending",
                    schedule = mbase_ + "schedule";
  {
    const std::string_view keys[] = {active, pending};
    const std::string_view argv[] = {mbase_};
    cmd_.evalsha(scripts_.reap, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
      if (!ec && r.type() == io::Resp3Type::integer) bump(reaped_, static_cast<std::uint64_t>(r.integer()));
    });
  }
  {
    const std::string_view keys[] = {schedule, pending};
    const std::string_view argv[] = {mbase_, "100"};
    cmd_.evalsha(scripts_.promote, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
      if (!ec && r.type() == io::Resp3Type::integer) bump(promoted_, static_cast<std::uint64_t>(r.integer()));
    });
  }
  {
    const std::string_view keys[] = {keys_.members};
    const std::string_view argv[] = {keys_.qbase, "16"};
    cmd_.evalsha(scripts_.member_reap, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
      if (!ec && r.type() == io::Resp3Type::integer) bump(members_reaped_, static_cast<std::uint64_t>(r.integer()));
    });
  }
}

void JobConsumer::pump() {
  // Parked means the last claim found every lane empty; anything new since then is handed off
  // or wakes the BLPOP, so a claim now would be an empty round trip (lanes_bench counted one per
  // job before this check).
  if (stopping_ || claiming_ || !registered_ || parked_) return;
  if (!overflow_.empty() || ring_.free_slots() == 0 || in_flight_.size() >= spec_.job_credits) {
    return;  // no credit: the next ack pumps again
  }
  claiming_ = true;
  if (deliver_backlog_) {
    // Hand-offs wait on the delivery list, already claimed for us: take them first, but only as
    // many as the credits allow (the rest stay listed until acks free credits).
    const std::size_t n = std::min(spec_.job_credits - in_flight_.size(), ring_.free_slots());
    const std::string deliver_key = mbase_ + "deliver", count = std::to_string(n);
    const auto ec = cmd_.call({"LPOP", deliver_key, count}, [this, n](std::error_code e, const io::Resp3Value& r) {
      claiming_ = false;
      if (stopping_) return;
      std::size_t got = 0;
      if (!e && r.type() == io::Resp3Type::array) {
        got = r.size();
        for (const auto& item : r) take_hand_off(item.str());
      }
      deliver_backlog_ = !e && got == n;  // a full batch: more may be listed
      pump();
    });
    if (ec) claiming_ = false;
    return;
  }
  const std::string ring = mbase_ + "ring", active = mbase_ + "active";
  const std::string lease = std::to_string(spec_.job_lease_ms);
  const std::string_view keys[] = {ring, active};
  const std::string_view argv[] = {mbase_, lease};
  const auto ec = cmd_.evalsha(scripts_.gclaim, keys, argv, [this](std::error_code e, const io::Resp3Value& r) {
    claiming_ = false;
    if (stopping_) return;
    if (e || r.type() != io::Resp3Type::array) return;  // the next beat pumps again
    if (r.size() < 4) {
      bump(empty_claims_);
      park();
      return;
    }
    bump(claimed_);
    deliver(Job{std::string(r[0].str()), std::string(r[1].str()), std::string(r[3].str()), as_int(r[2])});
    pump();
  });
  if (ec) claiming_ = false;
}

void JobConsumer::park() {
  if (stopping_ || parked_) return;
  const std::string parked = mbase_ + "parked", deliver = mbase_ + "deliver", wake = mbase_ + "wake";
  const std::string timeout = seconds_text(spec_.job_beat_ms);
  const auto ec = park_->call({"BLPOP", deliver, wake, timeout},
                              [this](std::error_code e, const io::Resp3Value& r) { on_park_reply(e, r); });
  // Not blocked, so not parked: the flag must not be set, or writers would hand jobs to a
  // delivery list nobody reads until the next beat. The connection's ready event parks again.
  if (ec) return;
  parked_ = true;
  bump(parks_);
  // The flag lets fanout_enqueue hand a job straight to us (claimed, on the delivery list); set
  // after the BLPOP is issued, and either order is safe (a hand-off listed before the BLPOP
  // lands answers it at once). It outlives one park by a margin and dies with us if we crash.
  // Its value is the credits left, the most hand-offs we can take (the script only tests that
  // the key exists; see the header on bounding hand-offs by it).
  const std::string px = std::to_string(spec_.job_beat_ms * 2 + 1000);
  const std::string budget = std::to_string(spec_.job_credits - in_flight_.size());
  cmd_.call({"SET", parked, budget, "PX", px}, [](std::error_code, const io::Resp3Value&) {});
}

void JobConsumer::unpark() {
  parked_ = false;
  const std::string parked = mbase_ + "parked";
  cmd_.call({"DEL", parked}, [](std::error_code, const io::Resp3Value&) {});
}

void JobConsumer::on_park_reply(std::error_code ec, const io::Resp3Value& reply) {
  if (stopping_) return;
  unpark();
  if (ec || reply.is_null() || reply.size() < 2) {
    pump();  // timeout or a lost connection: claim again (the beat timer keeps maintenance going)
    return;
  }
  bump(wakes_);
  if (reply[0].str() != mbase_ + "deliver") {
    pump();
    return;
  }
  // One hand-off fits: we parked only with a credit to spare (pump claims before it parks).
  take_hand_off(reply[1].str());
  // More may be listed: pump takes them, within the credits, before claiming from the lanes.
  deliver_backlog_ = true;
  pump();
}

void JobConsumer::take_hand_off(std::string_view text) {
  // Claimed for us by fanout_enqueue; four lines: id, attempts, group, payload (the payload,
  // last, may itself hold newlines).
  const auto a = text.find('\n');
  const auto b = a == std::string_view::npos ? a : text.find('\n', a + 1);
  const auto c = b == std::string_view::npos ? b : text.find('\n', b + 1);
  if (c == std::string_view::npos) {
    bump(malformed_);  // unparseable: the job stays active and is reaped back with token + 1
    return;
  }
  Job job;
  job.id = std::string(text.substr(0, a));
  std::from_chars(text.data() + a + 1, text.data() + b, job.token);
  job.group = std::string(text.substr(b + 1, c - b - 1));
  job.payload = std::string(text.substr(c + 1));
  bump(handed_off_);
  deliver(std::move(job));
}

void JobConsumer::deliver(Job job) {
  auto message = table::parse_frame(job.payload);
  if (!message) {
    bump(malformed_);
    retry(job, "malformed coherence payload: " + std::string(table::to_string(message.error().error)));
    return;
  }
  if (message->name.ns() != spec_.kind) {
    bump(malformed_);
    retry(job, "kind: " + std::string(message->name.ns()) + " is not " + spec_.kind);
    return;
  }
  const std::uint64_t ticket = next_ticket_++;
  in_flight_.emplace(ticket, std::move(job));
  overflow_.push_back(CoherenceItem{*message, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::steady_clock::now().time_since_epoch())
                                                  .count(),
                                    ticket});
  publish_overflow();
}

void JobConsumer::publish_overflow() {
  // Credits: publish only into free slots, so the ring never refuses a job.
  while (!overflow_.empty() && ring_.free_slots() != 0) {
    ring_.try_publish(std::move(overflow_.front()));
    overflow_.pop_front();
  }
}

void JobConsumer::on_acks(std::span<const JobAck> acks) {
  // Writer thread. The ack ring holds twice the table ring's capacity, and at most
  // ring_capacity + job_credits jobs are ever in flight, so this never refuses.
  for (const JobAck& ack : acks) acks_.try_publish(JobAck(ack));
  if (!ack_drain_posted_.exchange(true, std::memory_order_acq_rel)) {
    loop_.post([this] { drain_acks(); });
  }
}

void JobConsumer::drain_acks() {
  // Clear before draining: an ack published after this store either is seen below or posts a
  // fresh drain (its exchange reads false).
  ack_drain_posted_.store(false, std::memory_order_seq_cst);
  if (stopping_) return;
  acks_.drain(4096, [this](JobAck& ack) noexcept {
    auto it = in_flight_.find(ack.ticket);
    if (it == in_flight_.end()) return;
    complete(it->second, ack.verdict);
    in_flight_.erase(it);
  });
  publish_overflow();
  pump();
}

void JobConsumer::complete(const Job& job, table::Verdict verdict) {
  bump(verdict == table::Verdict::kApplied ? applied_ : stale_applies_);
  const std::string active = mbase_ + "active", job_key = mbase_ + "job:" + job.id;
  const std::string token = std::to_string(job.token);
  const std::string_view keys[] = {active, job_key};
  const std::string_view argv[] = {job.id, token, mbase_};
  cmd_.evalsha(scripts_.complete, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
    if (ec == make_error_code(io::IoErrc::kServerError) && r.str().starts_with("EMQSTALE")) {
      bump(complete_stale_);  // a superseded token: the script refused it
    } else if (ec || r.type() != io::Resp3Type::integer) {
      bump(complete_errors_);  // unacknowledged: the reaper redelivers, newer-wins absorbs it
    } else if (r.integer() == 1) {
      bump(completed_);
    } else {
      bump(complete_gone_);
    }
  });
}

void JobConsumer::retry(const Job& job, std::string reason) {
  const std::string active = mbase_ + "active", schedule = mbase_ + "schedule",
                    dead = mbase_ + "dead", job_key = mbase_ + "job:" + job.id;
  const std::string token = std::to_string(job.token), delay = std::to_string(spec_.job_retry_delay_ms),
                    max = std::to_string(spec_.job_max_attempts);
  const std::string_view keys[] = {active, schedule, dead, job_key};
  const std::string_view argv[] = {job.id, token, delay, max, reason, mbase_};
  cmd_.evalsha(scripts_.retry, keys, argv, [this](std::error_code ec, const io::Resp3Value& r) {
    if (ec) {
      bump(complete_errors_);
      return;
    }
    bump(r.str() == "dead" ? dead_ : retried_);
  });
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
  s.parks = ld(parks_);
  s.wakes = ld(wakes_);
  s.empty_claims = ld(empty_claims_);
  s.in_flight = ld(claimed_) + ld(handed_off_) - ld(applied_) - ld(stale_applies_) - ld(malformed_);
  return s;
}

}  // namespace echo::engine
