// SPDX-License-Identifier: MIT
// The rows of `echostore bench` that need a server: node R (the receiver, its tables built with
// the user's ring capacity, max batch and wait) and node S (the sender) on one redis-server.
// Each message is timed from the send to the row gone from R's L1, one at a time, observed by
// the drill's waiter (floors::spin_until) for the floor and for the engine alike. The floor's
// messages and the broadcast lane's take turns, one each, so both meet the same idle gaps (on a
// VM a sleeping vCPU's wake costs tens of microseconds, and how long it slept changes that), and
// nothing else runs between them: the round's rows are put before its first message, each
// message drops its own. (A re-put of the row before each lane message, the other rows' staging,
// made the next message ~10 us slower whoever heard it: the floor's too, when it came right after
// one.) The two subscribers that row compares, R's io thread and the floor's listener, run on one
// CPU (subscriber_cpu): left to the scheduler, each round placed them apart or together by
// chance, and the row's ratio read 1.0x or 1.25x by the round. The other receivers (R's TLS twin,
// the epoll and io_uring nodes) run there too, so each row's contenders share a placement. Every
// other row re-puts its row between messages, untimed, for both contenders. The job row sends with
// Engine::enqueue_async (the sender held through the lead only), the remembered row's baseline
// with the blocking Engine::enqueue. The journal row compares a record+mark pair with a plain
// SQLite WAL commit, as the drill's H6 does. The epoll row runs the broadcast lane into two more
// receivers alike but for their io backend (io_uring, epoll), message by message.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/journal.h>
#include <echo/harness/plain_wal.h>
#include <echo/harness/stage.h>
#include <echo/harness/temp_dir.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/pinning.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::TableSpec;
using floors::Clock;
using table::BrandedId;

constexpr unsigned kReceiver = 901, kSender = 902, kMinter = 903, kJournalNode = 904;
constexpr unsigned kUringReceiver = 907, kEpollReceiver = 908;  // 905: the pair row's journal
constexpr int kWarmup = 20;  // messages per lane before the first round, unmeasured

// R puts its row `name` of table t (untimed staging; fails the run when it cannot).
void put_row(Engine& r, const std::string& t, const BrandedId& name, table::Minter& minter) {
  if (!r.put(t, name.view(), "px=1", minter.mint("TXN").value())) {
    throw std::runtime_error("node R could not put its row of " + t);
  }
}

// One message through a lane, R's row `name` cached at an older version: `send` carries version
// `v`; the time runs from the send to the row gone from R's L1, as the sender sees it (after its
// blocking verb returned). `applied`: also the time to R's writer's drop, on its own clock
// (WriterStats::last_applied_ns), which no blocking verb delays.
template <class Send>
double time_drop(Engine& r, const std::string& t, const BrandedId& name, const BrandedId& v,
                 Send& send, std::vector<double>* applied = nullptr) {
  if (!harness::cached(r, t, name)) {  // else the sample would time no drop at all
    throw std::runtime_error("R's row of " + t + " was gone before its message");
  }
  const auto t0 = Clock::now();
  if (!send(v)) throw std::runtime_error("the send to " + t + " failed");
  const bool gone = floors::spin_until([&] { return !harness::cached(r, t, name); });
  if (!gone) throw std::runtime_error("a message to " + t + " did not drop R's row within 2 s");
  const double us = floors::since_us(t0);
  if (applied != nullptr) {
    const std::int64_t at = engine::internal::writer_of(r, t)->stats().last_applied_ns;
    applied->push_back(
        static_cast<double>(
            at -
            std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
        1e3);
  }
  return us;
}

// One message with its staging: a job lane's consumer settles (Settled below) and R re-puts the
// row at an older version (both untimed), then time_drop with a newer one.
template <class Send>
double one_message(Engine& r, const std::string& t, const BrandedId& name, table::Minter& minter,
                   Send send, std::vector<double>* applied = nullptr) {
  if constexpr (requires { send.lane.settle(); }) send.lane.settle();
  put_row(r, t, name, minter);
  return time_drop(r, t, name, minter.mint("TXN").value(), send, applied);
}

// Where the receivers' subscribers run (the file's comment says why): where --placement put the
// bench; unpinned, on the last CPU the process may use (none on one CPU).
int subscriber_cpu(const BenchConfig& c) {
  if (c.process_cpu >= 0) return c.process_cpu;
  const std::vector<int> cpus = allowed_cpus(c);
  return cpus.size() < 2 ? -1 : cpus.back();
}

// A job-lane table on R: before each message its consumer must have completed every job so far
// and parked again (F6's settle), so every message meets the same parked consumer.
class JobLane {
 public:
  JobLane(Engine& r, std::string table) : table_(std::move(table)), turns_(r, table_) {}
  void settle() {
    if (!turns_.settled()) {
      throw std::runtime_error("the consumer of " + table_ + " did not settle within 2 s");
    }
  }
  void sent() { turns_.sent(); }

 private:
  std::string table_;
  floors::JobLaneTurns turns_;
};

// A job-lane send: one_message settles `lane` before its timed window (the settle polls R's
// stats, which is no part of a message's path), then calls the send.
template <class Send>
struct Settled {
  JobLane& lane;
  Send send;
  bool operator()(const BrandedId& v) { return send(v); }
};
template <class Send>
Settled(JobLane&, Send) -> Settled<Send>;

// The round's median; its samples kept too, for --html's percentile curves.
double keep(const std::vector<double>& v, std::vector<double>& samples) {
  samples.insert(samples.end(), v.begin(), v.end());
  return median_of(v);
}

}  // namespace

TableSpec lane_spec(const std::string& name, CoherenceMode mode, const BenchConfig& c) {
  TableSpec s = harness::ast_table(name, mode, harness::answering("px=1"));
  s.ring_capacity = c.ring_capacity;
  s.max_batch = c.max_batch;
  s.writer_wait = {c.wait, 0};
  s.job_credits = std::min<std::size_t>(s.job_credits, c.ring_capacity);
  s.writer_cpu = c.process_cpu;
  return s;
}

void run_lanes(const BenchConfig& c, const DrillTarget& target, Progress& progress,
               std::vector<Row>& rows) {
  table::Minter minter(kMinter);
  const std::string run_id = minter.mint("BEN").value().str();  // fresh keys on a given server
  const std::string bc = "bench_bc_" + run_id, job = "bench_job_" + run_id,
                    bare = "bench_bare_" + run_id, mem = "bench_mem_" + run_id;
  const BrandedId group = minter.mint("PRT").value();

  const harness::TempDir dir("echostore-bench-");
  engine::Journal lj(harness::journal_options(dir.path() / "lane", group.str(), kJournalNode));

  auto node = [&](unsigned id) {
    return harness::node_options(target.host, target.port, id, c.process_cpu);
  };
  const int sub_cpu = subscriber_cpu(c);
  auto receiver = [&](unsigned id) {  // its io thread, the subscriber, on sub_cpu
    return harness::node_options(target.host, target.port, id, sub_cpu);
  };
  // `bare`: a job lane without its lead (TableSpec::job_lead off on both nodes).
  auto no_lead = [](TableSpec s) {
    s.job_lead = false;
    return s;
  };
  Engine r(
      receiver(kReceiver),
      {lane_spec(bc, CoherenceMode::kBroadcast, c), lane_spec(job, CoherenceMode::kJob, c),
       lane_spec(mem, CoherenceMode::kJob, c), no_lead(lane_spec(bare, CoherenceMode::kJob, c))});
  r.use_journal(mem, lj);
  Engine s(
      node(kSender),
      {lane_spec(bc, CoherenceMode::kNone, c), lane_spec(job, CoherenceMode::kNone, c),
       lane_spec(mem, CoherenceMode::kNone, c), no_lead(lane_spec(bare, CoherenceMode::kNone, c))});
  if (auto ec = r.start()) throw std::runtime_error("node R did not start: " + ec.message());
  if (auto ec = s.start()) throw std::runtime_error("node S did not start: " + ec.message());
  // epoll_vs_uring's receivers, each with its own broadcast table. Where the kernel refuses
  // io_uring the row is left out (and said so), the rest of the run goes on.
  const std::string bcu = "bench_bcu_" + run_id, bce = "bench_bce_" + run_id;
  auto on_backend = [&](unsigned id, io::Backend b) {
    engine::EngineOptions o = receiver(id);
    o.io.backend = b;
    return o;
  };
  Engine ru(on_backend(kUringReceiver, io::Backend::kUring),
            {lane_spec(bcu, CoherenceMode::kBroadcast, c)});
  Engine re(on_backend(kEpollReceiver, io::Backend::kEpoll),
            {lane_spec(bce, CoherenceMode::kBroadcast, c)});
  const std::error_code uring_refused = ru.start();
  if (auto ec = re.start())
    throw std::runtime_error("the epoll node did not start: " + ec.message());
  if (uring_refused) {
    std::cerr << "echostore bench: epoll_vs_uring left out: the io_uring node did not start ("
              << uring_refused.message() << ")\n";
  }
  floors::Redis plain(target);
  auto member = [&](const std::string& t) {
    floors::Reply z =
        plain.command("ZSCORE %s %s", engine::JobLaneKeys::for_table(t).members.c_str(),
                      std::to_string(kReceiver).c_str());
    return z && z->type == REDIS_REPLY_STRING;
  };
  if (!floors::eventually([&] { return member(job) && member(mem) && member(bare); },
                          std::chrono::seconds(5))) {
    throw std::runtime_error("node R did not join the job lanes within 5 s");
  }

  const BrandedId name = minter.mint("AST").value();
  // A plain hiredis PUBLISH of version v of `row` on table t's channel (one subscriber: R's).
  auto publish_on = [&](const std::string& t) {
    return [&, channel = table::coherence_channel(t).value()](const BrandedId& row,
                                                              const BrandedId& v) {
      const auto frame = table::make_frame(row, v);
      const std::string_view bytes = table::view(frame);
      floors::Reply reply = plain.command("PUBLISH %b %b", channel.data(), channel.size(),
                                          bytes.data(), bytes.size());
      return reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
    };
  };
  const auto publish_row = publish_on(bc);
  // The same, always of `name` (the rows that re-put it before each message).
  auto of_name = [&](auto publish_row_of) {
    return [&name, publish_row_of](const BrandedId& v) { return publish_row_of(name, v); };
  };
  const auto publish = of_name(publish_row), publish_uring = of_name(publish_on(bcu)),
             publish_epoll = of_name(publish_on(bce));
  auto broadcast = [&](const BrandedId& v) {
    auto heard = s.broadcast(bc, name.view(), v);
    return heard && *heard == 1;
  };
  JobLane job_lane(r, job), mem_lane(r, mem), bare_lane(r, bare);
  auto enqueue_to = [&](const std::string& t, JobLane& lane) {
    return Settled{lane, [&, t](const BrandedId& v) {
                     auto admitted = s.enqueue(t, group, name.view(), v);
                     if (!admitted || admitted->size() != 1) return false;
                     lane.sent();
                     return true;
                   }};
  };
  // The job lane as its sender sees it: enqueue_async holds the sender through the lead's round
  // trip only; the admissions' answers come on the engine's job-send thread (a failed one fails
  // the run after the rounds: the lane's settle already waits for every job's completion).
  std::atomic<std::uint64_t> async_failed{0};
  auto enqueue = Settled{job_lane, [&](const BrandedId& v) {
                           auto job_id = s.enqueue_async(
                               job, group, name.view(), v,
                               [&](const engine::Result<std::vector<engine::MemberAdmission>>& a) {
                                 if (!a || a->size() != 1) async_failed.fetch_add(1);
                               });
                           if (!job_id) return false;
                           job_lane.sent();
                           return true;
                         }};
  auto enqueue_sync = enqueue_to(job, job_lane);
  auto enqueue_bare = enqueue_to(bare, bare_lane);
  const engine::EnqueueFn to_bus = [&](const BrandedId& id, std::string_view n,
                                       const BrandedId& v) {
    return s.enqueue_job(mem, group, id, n, v);
  };
  auto remembered = Settled{mem_lane, [&](const BrandedId& v) {
                              if (!lj.intend_and_enqueue(name, v, to_bus)) return false;
                              mem_lane.sent();
                              return true;
                            }};
  for (int i = 0; i < kWarmup; ++i) {
    (void)one_message(r, bc, name, minter, publish);
    (void)one_message(r, job, name, minter, enqueue);
    (void)one_message(r, job, name, minter, enqueue_sync);
    (void)one_message(r, bare, name, minter, enqueue_bare);
    (void)one_message(r, mem, name, minter, remembered);
    if (!uring_refused) (void)one_message(ru, bcu, name, minter, publish_uring);
    (void)one_message(re, bce, name, minter, publish_epoll);
  }

  const std::string placement =
      placement_of(c, "the bench thread (sends, observes), R's writer threads, S's io thread",
                   true) +
      "; the subscribers (the receivers' io threads, the floor's listener): " +
      (sub_cpu < 0 ? std::string("unpinned") : "on CPU " + std::to_string(sub_cpu));
  auto row = [&](std::string id, std::string what, std::string ours, std::string base) {
    return latency_row(std::move(id), std::move(what), std::move(ours), std::move(base), placement);
  };
  Row bc_row = row("broadcast_vs_floor", "broadcast lane, PUBLISH -> row gone",
                   "engine broadcast lane", "hiredis PUBLISH -> message (bare subscriber)");
  Row job_row = row("job_vs_broadcast", "job lane, send -> row gone as the sender sees it",
                    "Engine::enqueue_async (held through the lead only)",
                    "Engine::broadcast (broadcast lane)");
  Row job_applied_row =
      row("job_applied_vs_broadcast", "job lane, send -> row gone at R's writer (its own clock)",
          "Engine::enqueue", "Engine::broadcast (broadcast lane)");
  Row bare_applied_row = row("bare_applied_vs_broadcast",
                             "job lane without its lead (job_lead off), send -> row gone at R's "
                             "writer",
                             "Engine::enqueue, no lead", "Engine::broadcast (broadcast lane)");
  Row mem_row =
      row("remembered_vs_job", "remembered lane (journal bound), send -> row gone",
          "Journal::intend_and_enqueue", "Engine::enqueue (job lane, no journal, blocking)");
  Row epoll_row = row("epoll_vs_uring", "broadcast lane, PUBLISH -> row gone, by io backend",
                      "receiver's io loop on epoll", "receiver's io loop on io_uring");
  Row pair_row = row("journal_vs_sqlite", "journal record+mark pair", "Journal record+mark",
                     "plain SQLite WAL commit");
  pair_row.placement = placement_of(
      c,
      "the bench thread (it commits itself when the connection is free) and the journal's flusher",
      false);

  // tls_vs_plain: the same broadcast lane, Engine::broadcast on S -> the row gone from
  // R, with both nodes over TLS (their own pair, on the server's TLS port) against the plain pair
  // above, message by message in the same rounds.
  std::optional<Row> tls_row;
  std::unique_ptr<Engine> rt, st;
  const std::string bct = "bench_bct_" + run_id;
  if (target.tls_port > 0) {
    auto tls_node = [&](unsigned id) {
      engine::EngineOptions o =
          harness::node_options(target.host, target.tls_port, id, c.process_cpu);
      o.tls = target.tls;
      return o;
    };
    engine::EngineOptions rt_options = tls_node(kReceiver + 10);
    rt_options.io.cpu = sub_cpu;
    rt = std::make_unique<Engine>(std::move(rt_options), std::vector<TableSpec>{lane_spec(
                                                             bct, CoherenceMode::kBroadcast, c)});
    st = std::make_unique<Engine>(tls_node(kSender + 10),
                                  std::vector<TableSpec>{lane_spec(bct, CoherenceMode::kNone, c)});
    if (auto ec = rt->start())
      throw std::runtime_error("node R (TLS) did not start: " + ec.message());
    if (auto ec = st->start())
      throw std::runtime_error("node S (TLS) did not start: " + ec.message());
    tls_row = row("tls_vs_plain", "broadcast lane over TLS, Engine::broadcast -> row gone",
                  "both nodes over TLS (OpenSSL, memory BIOs)",
                  "both nodes plain (same lane, server, run)");
  }
  auto broadcast_tls = [&](const BrandedId& v) {
    auto heard = st->broadcast(bct, name.view(), v);
    return heard && *heard == 1;
  };
  for (int i = 0; rt && i < kWarmup; ++i) (void)one_message(*rt, bct, name, minter, broadcast_tls);
  std::optional<floors::PublishFloor> floor;
  {  // its listener inherits this thread's CPU set: sub_cpu, as R's subscriber
    const ThreadMaskGuard back;
    pin_to(sub_cpu, "the floor's listener");
    floor.emplace(target, "echostore:bench:floor:" + run_id);
  }
  for (int i = 0; i < kWarmup; ++i) (void)floor->one();
  engine::Journal jj(harness::journal_options(dir.path() / "pair", minter.mint("PRT").value().str(),
                                              kJournalNode + 1));
  harness::PlainWal wal(dir.path() / "plain.db");
  const int n = c.messages;
  for (int round = 0; round < c.rounds; ++round) {
    progress.step("broadcast lane vs PUBLISH floor", round, c.rounds);
    std::vector<double> bare_sub, lane, via_bc, via_job, via_job_sync, via_mem, at_bc, at_job,
        at_bare, via_tls;
    std::vector<BrandedId> rows_of_round;  // put first: nothing runs between the messages
    for (int i = 0; i < n; ++i) {
      rows_of_round.push_back(minter.mint("AST").value());
      put_row(r, bc, rows_of_round.back(), minter);
    }
    for (const BrandedId& row_i : rows_of_round) {  // interleaved: each follows the other's
      bare_sub.push_back(floor->one());
      auto send = [&](const BrandedId& v) { return publish_row(row_i, v); };
      lane.push_back(time_drop(r, bc, row_i, minter.mint("TXN").value(), send));
    }
    bc_row.base_rounds.push_back(keep(bare_sub, bc_row.base_samples));
    bc_row.ours_rounds.push_back(keep(lane, bc_row.ours_samples));

    progress.step("job lane vs broadcast lane, remembered lane vs job lane", round, c.rounds);
    for (int i = 0; i < n; ++i) {
      via_bc.push_back(one_message(r, bc, name, minter, broadcast, &at_bc));
      via_job.push_back(one_message(r, job, name, minter, enqueue, &at_job));
      via_job_sync.push_back(one_message(r, job, name, minter, enqueue_sync));
      (void)one_message(r, bare, name, minter, enqueue_bare, &at_bare);
      via_mem.push_back(one_message(r, mem, name, minter, remembered));
      if (rt) via_tls.push_back(one_message(*rt, bct, name, minter, broadcast_tls));
    }
    const double job_median = keep(via_job, job_row.ours_samples), at_bc_median = median_of(at_bc);
    job_row.ours_rounds.push_back(job_median);
    job_row.base_rounds.push_back(keep(via_bc, job_row.base_samples));
    job_applied_row.ours_rounds.push_back(median_of(std::move(at_job)));
    job_applied_row.base_rounds.push_back(at_bc_median);
    bare_applied_row.ours_rounds.push_back(median_of(std::move(at_bare)));
    bare_applied_row.base_rounds.push_back(at_bc_median);
    mem_row.ours_rounds.push_back(keep(via_mem, mem_row.ours_samples));
    mem_row.base_rounds.push_back(keep(via_job_sync, mem_row.base_samples));
    if (tls_row) {
      tls_row->ours_rounds.push_back(keep(via_tls, tls_row->ours_samples));
      tls_row->base_rounds.push_back(keep(via_bc, tls_row->base_samples));  // plain
    }

    progress.step("broadcast lane on epoll vs io_uring", round, c.rounds);
    if (!uring_refused) {
      std::vector<double> on_uring, on_epoll;
      for (int i = 0; i < n; ++i) {  // interleaved: a noisy neighbour hits both
        on_uring.push_back(one_message(ru, bcu, name, minter, publish_uring));
        on_epoll.push_back(one_message(re, bce, name, minter, publish_epoll));
      }
      epoll_row.ours_rounds.push_back(keep(on_epoll, epoll_row.ours_samples));
      epoll_row.base_rounds.push_back(keep(on_uring, epoll_row.base_samples));
    }

    progress.step("journal record+mark pair vs plain SQLite WAL commit", round, c.rounds);
    // One block of each, the first of the two alternating by round, so neither always runs
    // right after the lanes above (or right before the next round's).
    double plain_us = 0, pair_us = 0;
    auto plain_block = [&] {
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (!wal.commit(minter.mint("AST").value().str())) {
          throw std::runtime_error("the plain SQLite WAL commit failed");
        }
      }
      plain_us = floors::since_us(t0);
    };
    auto pair_block = [&] {
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        const auto recorded = jj.record(name, minter.mint("TXN").value());
        if (!recorded) {
          throw std::runtime_error("the journal refused a record: " + recorded.error().message());
        }
        jj.mark_enqueued(*recorded);
      }
      if (const auto flushed = jj.flush(); !flushed) {
        throw std::runtime_error("the journal's flush failed: " + flushed.error().message());
      }
      pair_us = floors::since_us(t0);
    };
    if (round % 2 == 0) {
      plain_block();
      pair_block();
    } else {
      pair_block();
      plain_block();
    }
    pair_row.base_rounds.push_back(plain_us / n);
    pair_row.ours_rounds.push_back(pair_us / n);
  }
  if (async_failed.load() != 0) {
    throw std::runtime_error(std::to_string(async_failed.load()) +
                             " enqueue_async admissions failed or reached other than R");
  }
  const auto js = jj.stats();
  if (js.pending_enqueue != 0) throw std::runtime_error("the journal left pairs unmarked");
  rows.push_back(std::move(bc_row));
  rows.push_back(std::move(job_row));
  rows.push_back(std::move(job_applied_row));
  rows.push_back(std::move(bare_applied_row));
  rows.push_back(std::move(mem_row));
  if (!uring_refused) rows.push_back(std::move(epoll_row));
  rows.push_back(std::move(pair_row));
  if (tls_row) rows.push_back(std::move(*tls_row));
}

}  // namespace echo::cli::bench
