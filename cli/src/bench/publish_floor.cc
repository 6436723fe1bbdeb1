// SPDX-License-Identifier: MIT
// The floor under Engine::publish: the verb's round trip on the calling thread beside a plain
// blocking hiredis client that sends the same wire from the same thread, in the same loop. Node P
// publishes into its own tables (a broadcast-lane table and a job-lane table, so P hears its own
// messages as a member would); the baseline writes the same key with the same value size and
// announces on the same channel or to the same member queue, so the server does the same work and
// P's threads hear the same messages either way. What the ratio holds is therefore the engine's own
// path: the broadcast call on the calling thread's own link (EngineOptions::caller_links), the job
// lane's hop to the io thread and back, their buffers, and the L1 put that publish adds for
// read-your-writes (no baseline has an L1). Beside the broadcast row, node Q (caller_links 0)
// publishes into the same table through io thread 0: the hop the link removed, in the same run.
//
// The contenders take turns in blocks of kBlock calls, the first block alternating by round, and
// before every call (either side's, untimed) P has finished with the previous one: its own push
// routed (broadcast) or its consumer done with the job and parked again (job), so every call starts
// from the same idle node. Each sample is one call: the verb's call -> its return, or the first
// argument built -> the last reply read.
//
// publish_async_caller_vs_publish: what publish_async costs its caller, in the calling thread's
// own CPU time (CLOCK_THREAD_CPUTIME_ID: the version minted, the call built and handed to the io
// thread), beside the blocking publish's CPU time on its caller (its share of the round trip:
// building, handing off, being woken), each call from an idle node (the previous call's done and
// push in first). CPU time, not wall time: on a shared core the woken io thread may preempt the
// caller, and that wait is the scheduler's, not the call's. Its `also` holds both calls' wall
// times and the async call's completion (call -> done: the round trip plus the hand-offs).
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/l2_frame.h>
#include <echo/harness/lane.h>
#include <echo/harness/stage.h>
#include <echo/lua/scripts.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>
#include <hiredis/hiredis.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench.h"
#include "drill/floors.h"

namespace echo::cli::bench {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using floors::Clock;
using table::BrandedId;

constexpr unsigned kPublisher = 941, kPublishMinter = 942, kThroughIo = 947;
constexpr int kWarmup = 50;              // calls of each contender before the first round
constexpr int kBlock = 10;               // one contender's calls before the other's
constexpr std::size_t kValueBytes = 32;  // the published value (a small struct's bytes)
constexpr std::string_view kBcScript = "publish_l2", kJobScript = "member_enqueue";

std::string sha_of(std::string_view script) {
  const lua::Script* s = lua::find_script(script);
  if (s == nullptr) throw std::runtime_error("the build embeds no script " + std::string(script));
  return std::string(s->sha1);
}

// One command of binary-safe arguments appended to `c`'s output buffer (sent by the next
// redisGetReply).
template <std::size_t N>
void append(redisContext* c, const std::array<std::string_view, N>& args) {
  std::array<const char*, N> parts{};
  std::array<std::size_t, N> lens{};
  for (std::size_t i = 0; i < N; ++i) {
    parts[i] = args[i].data();
    lens[i] = args[i].size();
  }
  if (redisAppendCommandArgv(c, static_cast<int>(N), parts.data(), lens.data()) != REDIS_OK) {
    throw std::runtime_error("hiredis could not format a command");
  }
}

floors::Reply next_reply(redisContext* c) {
  void* raw = nullptr;
  if (redisGetReply(c, &raw) != REDIS_OK) return nullptr;
  return floors::Reply(static_cast<redisReply*>(raw));
}

bool integer_at_least(const floors::Reply& r, long long v) {
  return r && r->type == REDIS_REPLY_INTEGER && r->integer >= v;
}

// The broadcast baseline: EVALSHA publish_l2 with the arguments Engine::publish gives it (the
// framed value, the table's ttl, its channel, the 29-byte message, PUBLISH), built per call.
class EvalPublish {
 public:
  EvalPublish(floors::Redis& r, const std::string& table, const BrandedId& name,
              std::int64_t ttl_ms)
      : r_(r),
        name_(name),
        sha_(sha_of(kBcScript)),
        key_(table::l2_key(table, name.view()).value()),
        channel_(table::coherence_channel(table).value()),
        ttl_(std::to_string(ttl_ms)) {}

  bool operator()(const BrandedId& v, std::string_view value) {
    const std::string framed = engine::frame_l2_value(v, value);
    const auto message = table::make_frame(name_, v);
    append<9>(r_.raw(), {"EVALSHA", sha_, "1", key_, framed, ttl_, channel_, table::view(message),
                         "PUBLISH"});
    return integer_at_least(next_reply(r_.raw()), 1);  // P's subscriber heard it
  }

 private:
  floors::Redis& r_;
  BrandedId name_;
  std::string sha_, key_, channel_, ttl_;
};

// The job-lane baseline: the wire of Engine::publish on a job-lane table whose membership it
// knows, from one thread. With the table's lead: SET and the lead's PUBLISH in one pipeline, then,
// once both answered, member_enqueue to every member and the membership epoch's read in a second;
// without it, all of them in one.
class EnqueuePublish {
 public:
  EnqueuePublish(floors::Redis& r, const engine::TableSpec& spec, const BrandedId& name,
                 const BrandedId& group)
      : r_(r),
        name_(name),
        lead_(spec.job_lead),
        sha_(sha_of(kJobScript)),
        key_(table::l2_key(spec.name, name.view()).value()),
        ttl_(std::to_string(spec.ttl_ms)),
        lease_(std::to_string(spec.job_lease_ms)),
        group_(group.str()),
        keys_(engine::JobLaneKeys::for_table(spec.name)) {
    floors::Reply list = r_.command("ZRANGE %s 0 -1", keys_.members.c_str());
    if (!list || list->type != REDIS_REPLY_ARRAY || list->elements == 0) {
      throw std::runtime_error("the job lane of " + spec.name + " has no member");
    }
    for (std::size_t i = 0; i < list->elements; ++i) {
      const std::string base = keys_.member_base({list->element[i]->str, list->element[i]->len});
      members_.push_back({base, base + "live"});
    }
  }

  bool operator()(const BrandedId& v, std::string_view value, const BrandedId& job) {
    const std::string framed = engine::frame_l2_value(v, value);
    const auto frame = table::make_frame(name_, v);
    const std::string_view payload = table::view(frame);
    redisContext* c = r_.raw();
    append<5>(c, {"SET", key_, framed, "PX", ttl_});
    if (lead_) {
      append<3>(c, {"PUBLISH", keys_.lead, payload});
      if (!set_ok(next_reply(c)) || !integer_at_least(next_reply(c), 0)) return false;
    }
    for (const Member& m : members_) {
      append<9>(c, {"EVALSHA", sha_, "1", m.live, m.base, job.view(), payload, group_, lease_});
    }
    append<2>(c, {"GET", keys_.epoch});
    if (!lead_ && !set_ok(next_reply(c))) return false;
    bool admitted = true;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      admitted = integer_at_least(next_reply(c), 1) && admitted;  // enqueued or handed off
    }
    const floors::Reply epoch = next_reply(c);
    return admitted && epoch &&
           (epoch->type == REDIS_REPLY_STRING || epoch->type == REDIS_REPLY_NIL);
  }

 private:
  struct Member {
    std::string base, live;
  };
  static bool set_ok(const floors::Reply& r) {
    return r && r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
  }

  floors::Redis& r_;
  BrandedId name_;
  bool lead_;
  std::string sha_, key_, ttl_, lease_, group_;
  engine::JobLaneKeys keys_;
  std::vector<Member> members_;
};

// The pushes P's io thread routed to `table` so far (its own messages, whoever sent them).
std::uint64_t pushes_of(const Engine& p, const std::string& table) {
  for (const auto& t : p.stats().tables) {
    if (t.name == table) return t.pushes;
  }
  return 0;
}

// This thread's CPU time so far, in microseconds.
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double keep(const std::vector<double>& v, std::vector<double>& samples) {
  samples.insert(samples.end(), v.begin(), v.end());
  return median_of(v);
}

double p99_of(std::vector<double> v) {
  floors::Samples s{std::move(v)};
  s.sort();
  return s.pct(0.99);
}

}  // namespace

void run_publish_floor(const BenchConfig& c, const DrillTarget& target, Progress& progress,
                       std::vector<Row>& rows) {
  table::Minter minter(kPublishMinter);
  const std::string run_id = minter.mint("BEN").value().str();  // fresh keys on a given server
  const std::string bc = "bench_pub_" + run_id, job = "bench_pubj_" + run_id;
  const engine::TableSpec bc_spec = lane_spec(bc, CoherenceMode::kBroadcast, c),
                          job_spec = lane_spec(job, CoherenceMode::kJob, c);
  Engine p(harness::node_options(target.host, target.port, kPublisher, c.process_cpu),
           {bc_spec, job_spec});
  if (auto ec = p.start()) throw std::runtime_error("node P did not start: " + ec.message());
  // Node Q: P's broadcast table with caller_links 0, so its publishes take io thread 0 (what
  // every publish did before the callers' own links): the row's `also`, the hop's cost.
  engine::EngineOptions qo =
      harness::node_options(target.host, target.port, kThroughIo, c.process_cpu);
  qo.caller_links = 0;
  Engine q(qo, {bc_spec});
  if (auto ec = q.start()) throw std::runtime_error("node Q did not start: " + ec.message());
  floors::Redis plain(target);
  const auto member = [&] {
    floors::Reply z =
        plain.command("ZSCORE %s %s", engine::JobLaneKeys::for_table(job).members.c_str(),
                      std::to_string(kPublisher).c_str());
    return z && z->type == REDIS_REPLY_STRING;
  };
  if (!floors::eventually(member, std::chrono::seconds(5))) {
    throw std::runtime_error("node P did not join its job lane within 5 s");
  }
  for (std::string_view s : {kBcScript, kJobScript}) {
    const lua::Script* script = lua::find_script(s);
    floors::Reply loaded =
        plain.command("SCRIPT LOAD %b", script->source.data(), script->source.size());
    if (!loaded || loaded->type != REDIS_REPLY_STRING) {
      throw std::runtime_error("the server did not load " + std::string(s));
    }
  }

  const BrandedId name = minter.mint("AST").value(), group = minter.mint("PRT").value();
  const std::string value(kValueBytes, 'v');
  EvalPublish eval_publish(plain, bc, name, bc_spec.ttl_ms);

  // Each call: the settle (untimed), then the call timed on this thread.
  std::uint64_t bc_sent = 0;
  auto bc_settle = [&] {
    if (!floors::spin_until([&] { return pushes_of(p, bc) >= bc_sent; })) {
      throw std::runtime_error("node P did not hear its own message on " + bc + " within 2 s");
    }
  };
  auto timed = [](auto call, const char* what) {
    const auto t0 = Clock::now();
    if (!call()) throw std::runtime_error(std::string(what) + " failed");
    return floors::since_us(t0);
  };
  // A blocking publish by node `e` (P: on its own link; Q: through io thread 0).
  auto bc_publish_by = [&](Engine& e, const char* what) {
    bc_settle();
    const double us =
        timed([&] { return static_cast<bool>(e.publish(bc, name.view(), value)); }, what);
    ++bc_sent;
    return us;
  };
  auto bc_engine = [&] { return bc_publish_by(p, "Engine::publish on the broadcast lane"); };
  auto bc_through_io = [&] { return bc_publish_by(q, "Engine::publish through io thread 0"); };
  auto bc_hiredis = [&] {
    bc_settle();
    const double us = timed([&] { return eval_publish(minter.mint("TXN").value(), value); },
                            "the hiredis EVALSHA of publish_l2");
    ++bc_sent;
    return us;
  };

  floors::JobLaneTurns turns(p, job);
  auto job_settle = [&] {
    if (!turns.settled()) {
      throw std::runtime_error("the consumer of " + job + " did not settle within 2 s");
    }
  };
  auto job_engine = [&] {
    job_settle();
    const double us = timed([&] { return static_cast<bool>(p.publish(job, name.view(), value)); },
                            "Engine::publish on the job lane");
    turns.sent();
    return us;
  };
  // Built after P's first publish read the membership, as P's own view is.
  (void)job_engine();
  EnqueuePublish enqueue_publish(plain, job_spec, name, group);
  auto job_hiredis = [&] {
    job_settle();
    const double us = timed(
        [&] {
          return enqueue_publish(minter.mint("TXN").value(), value, minter.mint("JOB").value());
        },
        "the hiredis pipelines of the job-lane publish");
    turns.sent();
    return us;
  };
  // publish_async: the caller's share, and (untimed by the row, kept for `also`) the completion.
  std::atomic<bool> async_done{true};
  std::atomic<std::int64_t> async_done_ns{0};
  std::vector<double> completions, async_wall, publish_wall;
  auto bc_async = [&] {
    if (!floors::spin_until([&] { return async_done.load(std::memory_order_acquire); })) {
      throw std::runtime_error("Engine::publish_async's done did not run within 2 s");
    }
    bc_settle();
    async_done.store(false, std::memory_order_relaxed);
    const double cpu0 = thread_cpu_us();
    const auto t0 = Clock::now();
    auto v = p.publish_async(bc, name.view(), value,
                             [&async_done, &async_done_ns, t0](const engine::Result<BrandedId>& r) {
                               async_done_ns.store(r ? (Clock::now() - t0).count() : -1,
                                                   std::memory_order_relaxed);
                               async_done.store(true, std::memory_order_release);
                             });
    const double cpu = thread_cpu_us() - cpu0;
    async_wall.push_back(floors::since_us(t0));
    if (!v) throw std::runtime_error("Engine::publish_async refused: " + v.error().message());
    ++bc_sent;
    return cpu;
  };
  // The blocking publish, in its caller's CPU time (its wall time kept beside).
  auto bc_engine_cpu = [&] {
    bc_settle();
    const double cpu0 = thread_cpu_us();
    const auto t0 = Clock::now();
    if (!p.publish(bc, name.view(), value)) {
      throw std::runtime_error("Engine::publish on the broadcast lane failed");
    }
    const double cpu = thread_cpu_us() - cpu0;
    publish_wall.push_back(floors::since_us(t0));
    ++bc_sent;
    return cpu;
  };
  auto bc_async_settle = [&] {
    if (!floors::spin_until([&] { return async_done.load(std::memory_order_acquire); })) {
      throw std::runtime_error("Engine::publish_async's done did not run within 2 s");
    }
    const std::int64_t ns = async_done_ns.load(std::memory_order_relaxed);
    if (ns < 0) throw std::runtime_error("Engine::publish_async's done answered an error");
    completions.push_back(static_cast<double>(ns) / 1000.0);
  };
  auto async_caller = [&] {
    const double us = bc_async();
    bc_async_settle();
    return us;
  };
  for (int i = 0; i < kWarmup; ++i) {
    (void)bc_engine();
    (void)bc_through_io();
    (void)bc_hiredis();
    (void)job_engine();
    (void)job_hiredis();
    (void)async_caller();
    (void)bc_engine_cpu();
  }
  completions.clear();
  async_wall.clear();
  publish_wall.clear();

  const std::string placement = placement_of(
      c,
      "the bench thread (both contenders' calls, blocking; the settles between them), P's io "
      "thread (command and subscriber connections, the job consumer) and P's two writers",
      true);
  auto row = [&](std::string id, std::string what, std::string ours, std::string base) {
    return latency_row(std::move(id), std::move(what), std::move(ours), std::move(base), placement);
  };
  const std::string size = std::to_string(kValueBytes) + " B value";
  Row bc_row = row("publish_vs_hiredis_eval",
                   "publish round trip, broadcast lane (publish_l2.lua: SET PX + PUBLISH, " + size +
                       ", one subscriber)",
                   "Engine::publish (script on the calling thread's own link, then the L1 put)",
                   "hiredis EVALSHA of the same script from the calling thread");
  Row job_row = row("publish_vs_hiredis_eval_job",
                    "publish round trip, job lane (SET + lead PUBLISH, then member_enqueue.lua + "
                    "the epoch's GET: two round trips, " +
                        size + ", one member)",
                    "Engine::publish (via the io thread, then the L1 put via the writer)",
                    "hiredis, the same two pipelines from the calling thread");
  Row async_row = row("publish_async_caller_vs_publish",
                      "the caller's CPU time of a publish, broadcast lane (" + size + ")",
                      "Engine::publish_async (the call built and handed to the io thread)",
                      "Engine::publish (its caller's share of the round trip)");

  const int n = c.messages;
  std::vector<double> through_io;  // per round: node Q's publishes through io thread 0
  for (int round = 0; round < c.rounds; ++round) {
    // Blocks of kBlock, the first contender alternating by round.
    auto blocks = [&](auto ours, auto base, Row& x) {
      std::vector<double> o, b;
      for (int at = 0; at < n; at += kBlock) {
        const int k = std::min(kBlock, n - at);
        for (int side = 0; side < 2; ++side) {
          const bool engine_side = (side == 0) == (round % 2 == 0);
          for (int i = 0; i < k; ++i)
            (engine_side ? o : b).push_back(engine_side ? ours() : base());
        }
      }
      x.ours_rounds.push_back(keep(o, x.ours_samples));
      x.base_rounds.push_back(keep(b, x.base_samples));
    };
    progress.step("Engine::publish vs hiredis EVALSHA, broadcast lane", round, c.rounds);
    blocks(bc_engine, bc_hiredis, bc_row);
    std::vector<double> via_io;
    for (int i = 0; i < n; ++i) via_io.push_back(bc_through_io());
    through_io.push_back(median_of(via_io));
    progress.step("Engine::publish vs hiredis pipelines, job lane", round, c.rounds);
    blocks(job_engine, job_hiredis, job_row);
    progress.step("Engine::publish_async's caller vs Engine::publish", round, c.rounds);
    blocks(async_caller, bc_engine_cpu, async_row);
  }
  for (Row* x : {&bc_row, &job_row, &async_row}) {
    x->also = {{"p99 ours", p99_of(x->ours_samples)}, {"p99 baseline", p99_of(x->base_samples)}};
  }
  bc_row.also.emplace_back("through io thread 0 (caller_links 0), after each round's blocks",
                           median_of(through_io));
  async_row.also.emplace_back("wall call -> return ours (us)", median_of(async_wall));
  async_row.also.emplace_back("wall call -> return baseline (us)", median_of(publish_wall));
  async_row.also.emplace_back("wall call -> done ours (us)", median_of(completions));
  rows.push_back(std::move(bc_row));
  rows.push_back(std::move(job_row));
  rows.push_back(std::move(async_row));
}

}  // namespace echo::cli::bench
