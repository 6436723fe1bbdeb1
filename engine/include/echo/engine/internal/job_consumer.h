// SPDX-License-Identifier: MIT
// The job lane's consumer: one per job-lane table per node, run by the engine's io loop. It keeps
// this node a member of the table (a beat every job_beat_ms), takes jobs from the node's own member
// queue (claims, and hand-offs to its parked BLPOP) only while the table's ring has free credits,
// publishes each into the ring with a ticket, and completes a job only once the writer's ack says
// it was applied. It never drops a job: one not acked is reaped back with token + 1. Threads: the
// constructor and start() on the owner thread, on_acks() on the table's writer, stats() and
// member() on any thread; everything else on the loop thread. Nothing blocks but the destructor,
// which waits until the loop holds no reference to this object. How it works: the top of
// engine/src/job_consumer.cc (member queues, two processes under one node id) and of
// engine/src/job_delivery.cc (parking and hand-offs, claims, credits, clusters); the keys and
// scripts: docs/wire.md, "The job lane's member queues".
#pragma once

#include <echo/engine/internal/table_writer.h>
#include <echo/engine/stats.h>
#include <echo/engine/table_spec.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace echo::engine {

// The queue names of one job-lane table. The shared queue and the membership share the table's
// hash tag; each member's queue is a bus queue of its own, ecc.coh.<t>|<m>, with its own
// hash tag, so on a cluster a table's member queues spread over the shards.
struct JobLaneKeys {
  std::string queue;    // ecc.coh.<t>
  std::string qbase;    // emq:{ecc.coh.<t>}:
  std::string members;  // emq:{ecc.coh.<t>}:members
  std::string epoch;    // emq:{ecc.coh.<t>}:mepoch
  std::string lead;     // emq:{ecc.coh.<t>}:lead, a channel (TableSpec::job_lead)
  // The member queue prefix of `member`: emq:{ecc.coh.<t>|<member>}:
  std::string member_base(std::string_view member) const;
  static JobLaneKeys for_table(std::string_view table);
};

// An owner token, host:pid:random, new at every call: tells this consumer's (or lease's) writes
// from another process's, or another engine's in this process.
std::string owner_token();
// The embedded script `name` (lua/scripts/<name>.lua) in EVALSHA form; std::logic_error when the
// build embedded none of that name.
io::Script embedded_script(std::string_view name);

// The embedded scripts the lane calls (the io connection's EVALSHA form).
struct JobLaneScripts {
  io::Script gclaim, complete, retry, promote, reap, member_beat, member_reap, member_drop,
      member_enqueue, member_park;
  static JobLaneScripts embedded();
};

// The consumer's command path (loop thread): the engine's one connection, or on a cluster its
// slot router (every key of a queue shares one hash tag, so each call lands on the queue's shard).
// Each verb returns an immediate error, or {} and answers through `done`.
struct CommandPort {
  std::function<std::error_code(std::span<const std::string_view>, io::ReplyFn)> call_fn;
  std::function<std::error_code(const io::Script&, std::span<const std::string_view>,
                                std::span<const std::string_view>, io::ReplyFn)>
      evalsha_fn;

  // The connection's EVALSHA with nothing copied (Connection::evalsha_lent); empty on a cluster,
  // whose router copies.
  std::function<std::error_code(io::LentEval&)> evalsha_lent_fn;

  static CommandPort of(io::Connection& c);
  std::error_code call(std::initializer_list<std::string_view> args, io::ReplyFn done) const {
    return call_fn(std::span<const std::string_view>(args.begin(), args.size()), std::move(done));
  }
  std::error_code evalsha(const io::Script& s, std::span<const std::string_view> keys,
                          std::span<const std::string_view> argv, io::ReplyFn done) const {
    return evalsha_fn(s, keys, argv, std::move(done));
  }
  // `req` (its script, its whole EVALSHA of `keys` keys, its done) is the caller's until done ran.
  std::error_code evalsha_lent(io::LentEval& req, std::size_t keys) const {
    if (evalsha_lent_fn) return evalsha_lent_fn(req);
    return evalsha_fn(*req.script, req.command.subspan(3, keys), req.command.subspan(3 + keys),
                      req.done);
  }
};

class JobConsumer {
 public:
  // Loop-thread objects: `cmd` is the engine's command path; the consumer opens its own
  // parking connection with `park_options` (on a cluster: to its queue's master). Owner thread;
  // starts nothing.
  JobConsumer(io::UringLoop& loop, CommandPort cmd, io::ConnectionOptions park_options,
              TableWriter& writer, CoherenceRing& ring, std::string member);
  JobConsumer(io::UringLoop& loop, io::Connection& cmd, io::ConnectionOptions park_options,
              TableWriter& writer, CoherenceRing& ring, std::string member)
      : JobConsumer(loop, CommandPort::of(cmd), std::move(park_options), writer, ring,
                    std::move(member)) {}
  ~JobConsumer();
  JobConsumer(const JobConsumer&) = delete;
  JobConsumer& operator=(const JobConsumer&) = delete;

  // Posts the first beat; the loop thread runs everything after. Owner thread.
  void start();
  // Loop thread: stops beating, claiming and parking (posted by the engine before teardown).
  void stop_on_loop();

  // Writer thread: the ack sink (installed by the engine on the writer).
  void on_acks(std::span<const JobAck> acks);

  JobConsumerStats stats() const;
  const std::string& member() const noexcept { return member_; }

 private:
  struct Job {
    std::string id, payload, group;
    std::int64_t token = 0;
  };

  void beat();
  void enter(bool was_live);
  void lapse();
  void maintain();
  void pump();
  void claim(std::uint64_t gen);
  void block();
  void follow_park();
  void arm();
  void on_park_reply(std::error_code ec, const io::Resp3Value& reply);
  void take_hand_off(std::string_view text);
  std::size_t free_credits() const noexcept;
  void deliver(Job job);
  void deliver_carried(Job&& job, std::int64_t decoded_ns);
  void publish_overflow();
  void drain_acks();
  void complete(const Job& job, table::Verdict verdict);
  // A completion's call, lent to the command path and kept for the next one: a warm consumer
  // completes a job without copying its words.
  struct Completion {
    std::string job_key, id, token;
    std::array<std::string_view, 8> command;  // EVALSHA sha 2 active job_key id token mbase
    io::LentEval eval;                        // its done set once, at creation
  };
  Completion& take_completion();
  void on_completed(std::error_code ec, const io::Resp3Value& reply);
  void retry(const Job& job, const std::string& reason);
  static void on_timer(io::IoOp& op, int res) noexcept;

  io::UringLoop& loop_;
  CommandPort cmd_;
  std::unique_ptr<io::Connection> park_;
  TableWriter& writer_;
  CoherenceRing& ring_;
  const TableSpec& spec_;
  const std::string member_;
  const JobLaneKeys keys_;
  const std::string mbase_;
  std::vector<std::unique_ptr<Completion>> completions_;  // every one made (loop thread)
  std::vector<Completion*> free_completions_;
  // This member's queue keys, each mbase_ and its suffix, built once (not per call).
  struct MemberKeys {
    std::string active, dead, deliver, live, meta, owner, parked, pending, ring, schedule, wake;
    explicit MemberKeys(const std::string& base);
  };
  const MemberKeys mk_;
  const JobLaneScripts scripts_;
  const std::int64_t member_ttl_ms_;
  const std::string token_;  // this consumer's owner token: host:pid:random

  // Loop-thread state.
  bool stopping_ = false, claiming_ = false, blocked_ = false, registered_ = false;
  bool lanes_idle_ = false;        // the last claim answered empty and no wake came since
  bool arming_ = false;            // a member_park is in flight
  bool rearm_ = false;             // and another was asked for meanwhile
  bool hold_block_ = false;        // hand-offs went into the ring: block again once an ack drains
  bool park_refused_ = false;      // the park's server refused BLMPOP (MOVED): wait for a beat
  bool owner_written_ = false;     // our token has been in the owner key since some beat
  bool conflicted_ = false;        // another process beats as this member: L1 is off
  bool confirm_owed_ = false;      // L1 is off until a beat confirms (no twin, no lapse)
  std::int64_t twin_seen_ms_ = 0;  // server time of the last beat that found a twin's token
  std::int64_t suspect_until_ms_ = 0;  // server time: a first beat's foreign token may be a twin's
  std::string owner_seen_;             // the owner key's value this beat's SET replaced
  std::uint64_t wake_gen_ = 0;         // wake tokens seen: a claim sent before one must run again
  bool handoffs_barred_ = false;       // member_park answered -1: ask again when the lanes run dry
  std::int64_t credits_listed_ = 0;    // the credits listed as of our last member_park, less
                                       // the hand-offs taken since (an underestimate at worst)
  std::int64_t last_beat_ms_ = 0;      // server time of the last beat that landed
  std::uint64_t next_ticket_ = 1;
  // Published, not yet acked. Its nodes come from a pool that keeps freed ones for the next job
  // (a node's address is stable while it is in the map: the items point into its payload).
  std::pmr::unsynchronized_pool_resource in_flight_pool_;
  std::pmr::unordered_map<std::uint64_t, Job> in_flight_{&in_flight_pool_};
  std::deque<CoherenceItem> overflow_;  // hand-offs beyond the credits
  io::IoOp timer_op_{};
  bool timer_armed_ = false;

  // Writer → loop: acks travel through an SPSC ring; the loop drains it on a posted closure,
  // posted only when `ack_drain_posted_` goes false → true (one post per burst, not per ack).
  // The ring's tail_ and this flag form a store-buffering pair: a seq_cst fence in on_acks and
  // seq_cst accesses in drain_acks make one side see the other (the argument is above on_acks).
  ring::SpscRing<JobAck> acks_;
  std::atomic<bool> ack_drain_posted_{false};

  std::atomic<std::uint64_t> claimed_{0}, handed_off_{0}, applied_{0}, stale_applies_{0},
      completed_{0}, complete_gone_{0}, complete_stale_{0}, complete_errors_{0}, malformed_{0},
      retried_{0}, dead_{0}, beats_{0}, rejoins_{0}, reaped_{0}, promoted_{0}, members_reaped_{0},
      maintenance_errors_{0}, parks_{0}, wakes_{0}, empty_claims_{0}, member_conflicts_{0};
};

}  // namespace echo::engine
