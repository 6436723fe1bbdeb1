// SPDX-License-Identifier: MIT
// The façade's wiring: io threads (command + subscriber connections on io thread 0, one more
// subscriber on each other io thread that feeds a broadcast table), writers, each table's loader
// threads.
// Application threads never touch a socket: blocking verbs post their command to the io thread
// and wait on a promise; the writer's L2 reads and the loader's conditional writes do the same
// without waiting (their answers come back through the writer's inbox).
#include <echo/engine/engine.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <new>
#include <thread>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "job_send_queue.h"
#include "metrics_http.h"
#include "chores.h"
#include "node_lease.h"
#include "sentinel_watch.h"
#include "shared_relay.h"
#include "sharded_subscriber.h"
#include "housekeeping.h"
#include "thread_name.h"
#include "thread_switches.h"

#include <echo/engine/l2_frame.h>
#include <echo/engine/stats_export.h>
#include <echo/io/cluster_client.h>
#include <echo/lua/scripts.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

using table::BrandedId;
using Clock = std::chrono::steady_clock;

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::error_code unexpected() { return make_error_code(Errc::kUnexpectedReply); }

// What every connection of an engine shares: the address, credentials, fence and timeouts.
io::ConnectionOptions base_connection_options(const EngineOptions& options, std::string label) {
  io::ConnectionOptions c;
  c.host = options.host;
  c.port = options.port;
  c.username = options.username;
  c.password = options.password;
  c.label = std::move(label);
  c.client_name = "echostore-" + c.label;
  c.version_value = options.version_value;
  c.version_accept = options.version_accept;
  c.call_timeout = options.call_timeout;
  c.heartbeat = options.heartbeat;
  c.tls = options.tls;
  return c;
}

// One table's loader threads (TableSpec::loader_threads): run its loader (which may block) off
// the writer and io threads, and off every other table's loaders, so a slow loader holds up only
// its own table's misses. The threads start on demand: a job posted while none waits idle starts
// one more, up to `threads`, so a table whose misses never reach the loader has no loader thread.
// The destructor waits for the calls under way (a thread cannot be cancelled) and drops the jobs
// not started: stop() has answered their flights `stopped`.
class LoaderPool {
 public:
  LoaderPool(int threads, const Housekeeping& housekeeping)
      : max_(static_cast<std::size_t>(threads)), housekeeping_(housekeeping) {
    threads_.reserve(max_);
  }
  ~LoaderPool() {
    std::vector<std::jthread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.request_stop();
    cv_.notify_all();
    threads.clear();  // joins
  }
  LoaderPool(const LoaderPool&) = delete;
  LoaderPool& operator=(const LoaderPool&) = delete;
  // Any thread (the table's writer). Never blocks on a loader: a lock around a deque push, and
  // the first misses each start a thread (pthread_create, tens of microseconds, once each).
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
      if (idle_ < jobs_.size() && threads_.size() < max_) {
        threads_.emplace_back([this](std::stop_token stop) {
          housekeeping_.enter("echo-load");
          run(stop);
        });
      }
    }
    cv_.notify_one();
  }

 private:
  void run(std::stop_token stop) {
    std::unique_lock lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, stop, [this] { return !jobs_.empty(); });
      --idle_;
      if (stop.stop_requested()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }
  const std::size_t max_;
  const Housekeeping& housekeeping_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> jobs_;
  std::size_t idle_ = 0;  // threads waiting for a job (under mu_)
  std::vector<std::jthread> threads_;
};

}  // namespace

// One declared table: what a typed handle holds (table.h) and the engine's own slot for it.
struct Engine::TableRef {
  TableSpec spec;
  std::string channel;
  std::unique_ptr<TableWriter> writer;
  CoherenceRing* ring = nullptr;  // broadcast lane: the io thread's ring into this writer
  // The io thread whose subscriber feeds `ring` (EngineOptions::io_threads; 0 for every lane but
  // the broadcast lane). That thread is the ring's one producer.
  int io_index = 0;
  CoherenceRing* job_ring = nullptr;  // job lane: the consumer's ring (credit-limited)
  CoherenceRing* lead_ring = nullptr;  // job lane with job_lead: the lead pushes' ring (drop)
  std::unique_ptr<JobConsumer> consumer;
  std::unique_ptr<LoaderPool> loaders;  // between start() and stop()
  std::optional<table::BrandedId> publish_group;  // job lane: publish's lane group without one given
  std::atomic<std::uint64_t> pushes{0}, garbage{0};
  // TableStats' latencies: sampled reads (Engine::note_get, any reader thread), every loader call
  // (its loader thread).
  io::LatencyRecorder get_hit, get_miss, load;
};

struct Engine::Impl {
  using Slot = Engine::TableRef;

  EngineOptions options;
  bool started = false;  // start() ran once (owner thread): an Engine runs once
  std::vector<std::unique_ptr<Slot>> slots;
  std::unordered_map<std::string_view, Slot*> by_name;
  // Looked up by a push's channel as it lies in the decoder's buffer: no string built per push.
  struct ChannelHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using Channels = std::unordered_map<std::string, Slot*, ChannelHash, std::equal_to<>>;
  Channels by_channel;  // broadcast lanes' channels
  Channels by_lead;     // job lanes' lead channels
  Channels by_prefix;   // tracking lanes' key prefixes, ecc:{t}:
  // The subscriber's CLIENT TRACKING command (every tracking table's prefix): sent at start and
  // after every reconnect; EngineStats::tracking_sends / tracking_refusals.
  std::atomic<std::uint64_t> tracking_sends{0}, tracking_refusals{0};
  // EngineOptions::housekeeping_cpus: built with the engine, before any housekeeping thread.
  std::unique_ptr<Housekeeping> housekeeping;
  // The periodic chores' one thread (chores.h: the lease's renewal, stats publishing); declared
  // before the lease, whose destructor removes its renewal.
  std::unique_ptr<Chores> chores;
  // The node lease (node_lease.h): built with the engine, taken in start(); minting waits for it.
  std::unique_ptr<NodeLease> lease;
  int current_node() const noexcept { return lease ? lease->current() : -1; }
  // Mints through the process's one cell (table::process_minter) under the leased node:
  // no_node_lease without one, kind for a bad namespace.
  Result<BrandedId> mint(std::string_view ns) const {
    const int node = current_node();
    if (node < 0) return table::Unexpected{make_error_code(Errc::kNoNodeLease)};
    auto id = table::process_minter().mint(ns, static_cast<unsigned>(node));
    if (!id) return table::Unexpected{make_error_code(Errc::kKind)};
    return *id;
  }
  // The leased node as the member queues and stats keys name it.
  std::string node_name() const { return std::to_string(lease ? lease->node() : -1); }
  io::Script put_l2 = embedded_script("put_l2");
  io::Script drop_l2 = embedded_script("drop_l2");
  io::Script publish_l2 = embedded_script("publish_l2");
  io::Script member_enqueue = embedded_script("member_enqueue");
  io::Script genqueue = embedded_script("genqueue");

  // fan_out's view of each job-lane table's membership: the epoch it read, then the members it
  // read after it (member_enqueue.lua, "Membership"). Any thread; guarded by members_mu.
  struct Membership {
    std::string epoch;
    std::vector<std::string> members;
  };
  std::mutex members_mu;
  std::unordered_map<std::string, Membership> membership;
  static constexpr std::size_t kMembershipsKept = 1024;

  std::unique_ptr<io::LoopThread> io;  // io thread 0
  // Io threads 1..io_threads-1 (entry k-1 is io thread k): each its own loop and, when broadcast
  // tables were dealt to it, its own subscriber carrying only their channels. Built in start(),
  // gone after stop(); nothing else runs on them.
  struct ExtraIo {
    std::unique_ptr<io::LoopThread> loop;
    std::unique_ptr<io::Connection> sub;
  };
  std::vector<ExtraIo> extra_io;
  // Each io thread's kernel id once it runs (EngineStats::IoThread's os_wakes): a report.
  std::array<std::atomic<int>, 16> io_tids{};
  // ServerMode::kSentinel: the master's address and its changes (sentinel_watch.h). Built in
  // start() before any connection, which all dial its master() (connection_options()).
  std::unique_ptr<SentinelWatch> sentinel;
  // The connections a switch redials (cmd, sub, the relay's park), registered on the loop thread
  // once each exists (follow()), so a switch never reads a pointer the owner thread is writing.
  // Loop thread only; cleared when io_closing is set.
  std::vector<io::Connection*> sentinel_followers;
  std::unique_ptr<io::Connection> cmd, sub;
  // ServerMode::kCluster: the slot router replaces `cmd`, the sharded subscriber `sub`.
  std::unique_ptr<io::ClusterClient> cluster;
  std::unique_ptr<ShardedSubscriber> ssub;
  std::atomic<std::uint64_t> unrouted{0};
  // EngineStats::fan_out, bumped by fan_out on any caller's thread.
  std::atomic<std::uint64_t> fan_enqueues{0}, fan_admitted{0}, fan_duplicates{0}, fan_not_live{0},
      fan_membership_reads{0}, fan_errors{0}, fan_leads{0}, fan_lead_receivers{0};
  static void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  std::atomic<bool> running{false};
  // Blocking calls between their running check and their answer; stop() waits for zero.
  std::atomic<int> inflight{0};
  // Loop thread only: set by stop()'s marker closure; every closure posted to the loop checks
  // it first, so none touches a connection that stop() is about to destroy.
  bool io_closing = false;
  // Set by stop() before it stops the writers, the rings' only consumers; from then on a push is
  // dropped, so none waits in a full ring under the block policy for a writer that is gone (stop()
  // would then wait on the loop for ever). Read relaxed by every io thread's push path: stop()
  // then waits for a closure on each loop, and a loop runs closures between pushes, so once that
  // closure ran (the loop's post queue orders the store before it) no push of that thread enters
  // a ring.
  std::atomic<bool> pushes_closed{false};
  // The chore that publishes the stats snapshot into L2 while running (options.stats_publish
  // > 0), 0 when none.
  std::uint64_t stats_chore = 0;
  // enqueue_async's admissions, in hand-off order (its own thread, started at the first call);
  // stop() drains it first, while the command connection still runs.
  JobSendQueue job_sends;
  // The shared-queue relay (TableSpec::job_relay) and, on a single server, its parking
  // connection and that connection's CLIENT ID (stop() unblocks its BLPOP with CLIENT UNBLOCK).
  std::unique_ptr<SharedQueueRelay> relay;
  std::unique_ptr<io::Connection> relay_park;
  std::string relay_client;
  // EngineOptions::metrics_port: opened in start(), closed in stop(); kept until destruction so
  // stats() may read its counters from any thread.
  std::unique_ptr<MetricsEndpoint> metrics;

  explicit Impl(EngineOptions o) : options(std::move(o)) {}

  Slot* find(std::string_view table) const {
    auto it = by_name.find(table);
    return it == by_name.end() ? nullptr : it->second;
  }
  // The string-keyed verbs' one way to their handle form: `verb(slot)` on the declared table,
  // else no_such_cache in the verb's own Result.
  template <class Verb>
  auto on_table(std::string_view table, Verb verb) const -> decltype(verb(std::declval<Slot&>())) {
    Slot* slot = find(table);
    if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
    return verb(*slot);
  }

  // One coherence message applied by the table's writer while the caller waits (up to
  // get_timeout) for its answer: the kind gate, a running writer, then submit(writer, message,
  // answer), where answer(Result<T>) fulfils the wait.
  template <typename T, typename Submit>
  Result<T> ask_writer(std::string_view table, std::string_view id, const BrandedId& version, Submit submit) {
    Slot* slot = find(table);
    if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
    auto name = gate(*slot, id);  // a branded id of the kind, or a text table's key
    if (!name) return table::Unexpected{name.error()};
    if (!slot->writer->running()) return table::Unexpected{make_error_code(Errc::kStopped)};
    auto promise = std::make_shared<std::promise<Result<T>>>();
    auto future = promise->get_future();
    // The writer answers every command, `stopped` included when stop() overtakes this one.
    submit(*slot->writer, *name, version, [promise](Result<T> v) { promise->set_value(std::move(v)); });
    if (future.wait_for(options.get_timeout) != std::future_status::ready) {
      return table::Unexpected{make_error_code(Errc::kTimeout)};
    }
    return future.get();
  }

  // The key gate, nothing on the wire: a branded table's kind gate (WIRE §4.3: 14 bytes, a
  // valid id, namespace = the table's kind; kKind), a text table's key check (WIRE §2.2;
  // kBadKey). Answers the key, a view of `id`.
  static Result<std::string_view> gate(const Slot& slot, std::string_view id) {
    if (slot.spec.keys == KeyKind::kText) {
      if (!table::check_text_key(id)) return table::Unexpected{make_error_code(Errc::kBadKey)};
      return id;
    }
    auto name = gate_id(slot, id);
    if (!name) return table::Unexpected{name.error()};
    return id;
  }
  // The kind gate alone: a text table answers kKind.
  static Result<BrandedId> gate_id(const Slot& slot, std::string_view id) {
    auto parsed = BrandedId::parse(id);
    if (slot.spec.keys != KeyKind::kBranded || !parsed || parsed->ns() != slot.spec.kind) {
      return table::Unexpected{make_error_code(Errc::kKind)};
    }
    return *parsed;
  }

  // The caller's-thread half of a read, shared by get and get_async: the table, the kind gate
  // (nothing on the wire), then L1. Either an answer (a hit or a refusal), or the slot whose
  // writer takes the miss of `name`.
  struct ReadHere {
    std::optional<Result<Got>> answer;
    Slot* slot = nullptr;
    std::string_view name;  // the gated key (a view of the caller's id)
  };
  ReadHere read_here(std::string_view table, std::string_view id) const {
    ReadHere r;
    r.slot = find(table);
    if (r.slot == nullptr) {
      r.answer.emplace(table::Unexpected{make_error_code(Errc::kNoSuchCache)});
      return r;
    }
    return read_here(*r.slot, id);
  }
  ReadHere read_here(Slot& slot, std::string_view id) const {
    ReadHere r;
    r.slot = &slot;
    auto name = gate(*r.slot, id);
    if (!name) {
      r.answer.emplace(table::Unexpected{name.error()});
      return r;
    }
    Got hit;
    table::IdBytes version;
    // A typed table's rows hold objects: its bytes come through the miss path (an L2 read).
    if (r.slot->writer->map().layout().bytes() &&
        r.slot->writer->map().get(*name, hit.value, &version)) {
      hit.version = BrandedId::parse(table::view(version)).value();
      r.answer.emplace(std::move(hit));
      return r;
    }
    if (!running.load(std::memory_order_acquire)) {
      r.answer.emplace(table::Unexpected{make_error_code(Errc::kStopped)});
      return r;
    }
    r.name = *name;
    return r;
  }

  // A miss goes single-flight through the table's writer; `done` runs on the writer thread.
  static void send_miss(Slot& slot, std::string_view name, std::function<void(Result<Got>)> done) {
    slot.writer->miss(name, [done = std::move(done)](GetOutcome&& o) {
      if (o.ec) return done(table::Unexpected{std::move(o.ec)});
      done(Got{std::move(o.value), o.version, o.source});
    });
  }

  // The L2 key of a gated key (gate()).
  static std::string key_of(const Slot& slot, std::string_view key) {
    return slot.spec.keys == KeyKind::kText ? table::text_l2_key(slot.spec.name, key).value()
                                            : table::l2_key(slot.spec.name, key).value();
  }

  // A blocking call between its running check and its answer: stop() waits for none. The
  // count's increment and the caller's read of `running`, like stop()'s store to `running` and
  // its read of the count, are seq_cst: each side stores, then loads what the other stores, and
  // weaker orders let both loads see the old values (on x86 stop()'s release store may pass its
  // load), so stop() would tear the loop down under a caller that goes on to post to it.
  struct Inflight {
    std::atomic<int>& n;
    explicit Inflight(std::atomic<int>& count) : n(count) {
      n.fetch_add(1, std::memory_order_seq_cst);
    }
    ~Inflight() { n.fetch_sub(1, std::memory_order_acq_rel); }
    Inflight(const Inflight&) = delete;
    Inflight& operator=(const Inflight&) = delete;
  };

  // Posts `issue` to the io thread and waits for its reply (call_timeout). Any thread but the
  // loop's. `issue` runs on the loop thread and returns an immediate error or arms `done`.
  Result<io::Resp3Owned> blocking(std::function<std::error_code(io::ReplyFn)> issue) {
    const Inflight entered(inflight);
    if (!running.load(std::memory_order_seq_cst)) {
      return table::Unexpected{make_error_code(Errc::kStopped)};
    }
    auto promise = std::make_shared<std::promise<io::OwnedResult>>();
    auto future = promise->get_future();
    io->loop().post([this, issue = std::move(issue), promise]() {
      if (io_closing) return promise->set_value(io::OwnedResult{make_error_code(Errc::kStopped), {}});
      auto fired = std::make_shared<bool>(false);
      const std::error_code ec = issue([promise, fired](std::error_code e, const io::Resp3Value& reply) {
        *fired = true;
        promise->set_value(io::OwnedResult{e, io::Resp3Owned(reply)});
      });
      if (ec && !*fired) promise->set_value(io::OwnedResult{ec, {}});
    });
    if (future.wait_for(options.call_timeout + std::chrono::seconds(1)) != std::future_status::ready) {
      return table::Unexpected{make_error_code(io::IoErrc::kTimeout)};
    }
    io::OwnedResult r = future.get();
    if (r.ec == io::IoErrc::kServerError) {
      // The server's words ("NOPERM this user has no permissions to run the 'evalsha' command").
      return table::Unexpected{Error(r.ec, std::string(r.reply.view().str()))};
    }
    if (r.ec) return table::Unexpected{r.ec};
    return std::move(r.reply);
  }

  // The command path (loop thread): the one connection, or the cluster router by slot (which
  // always answers through `done`).
  std::error_code issue(std::span<const std::string_view> args, io::ReplyFn done) {
    if (!cluster) return cmd->call(args, std::move(done));
    cluster->call(args, std::move(done));
    return {};
  }
  std::error_code issue(std::initializer_list<std::string_view> args, io::ReplyFn done) {
    return issue(std::span<const std::string_view>(args.begin(), args.size()), std::move(done));
  }
  std::error_code issue_script(const io::Script& s, std::span<const std::string_view> keys,
                               std::span<const std::string_view> argv, io::ReplyFn done) {
    if (!cluster) return cmd->evalsha(s, keys, argv, std::move(done));
    cluster->evalsha(s, keys, argv, std::move(done));
    return {};
  }

  // One call of a batch: a command (script == nullptr: `args` is the command) or an EVALSHA.
  // `lead`: the batch's leading calls (a prefix) go first, and the rest leave once each of them
  // has answered, so the server runs the rest in a later turn of its event loop: it writes every
  // reply and push of a turn only after the turn's last command, so a PUBLISH pipelined ahead of
  // a script reaches its subscribers only once the script has run.
  struct Call {
    const io::Script* script = nullptr;
    std::vector<std::string> keys, args;
    bool lead = false;
  };
  struct CallsState {
    std::vector<Call> batch;
    std::vector<io::OwnedResult> out;
    std::size_t left = 0;
    std::size_t leads = 0, leads_left = 0;  // the leading prefix; those not yet answered
    std::promise<void> done;
    void settle(std::size_t i, io::OwnedResult r) {
      out[i] = std::move(r);
      if (--left == 0) done.set_value();
    }
  };
  // Loop thread: issues calls [from, to) of a batch. The last leading call's answer issues the
  // rest (after its own settle: the rest may settle the whole batch).
  void issue_calls(const std::shared_ptr<CallsState>& st, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      const bool leading = i < st->leads;
      auto after = [this, st, leading] {
        if (leading && --st->leads_left == 0) issue_calls(st, st->leads, st->batch.size());
      };
      if (io_closing) {
        st->settle(i, io::OwnedResult{make_error_code(Errc::kStopped), {}});
        after();
        continue;
      }
      const Call& c = st->batch[i];
      std::vector<std::string_view> k(c.keys.begin(), c.keys.end()),
          a(c.args.begin(), c.args.end());
      auto fired = std::make_shared<bool>(false);
      io::ReplyFn done = [st, i, fired, after](std::error_code e, const io::Resp3Value& reply) {
        *fired = true;
        st->settle(i, io::OwnedResult{e, io::Resp3Owned(reply)});
        after();
      };
      const std::error_code ec = c.script != nullptr
                                     ? issue_script(*c.script, k, a, std::move(done))
                                     : issue(a, std::move(done));
      if (ec && !*fired) {
        st->settle(i, io::OwnedResult{ec, {}});
        after();
      }
    }
  }
  // Issues every call back to back on the loop thread (the leading calls first, as above), so
  // calls that route to one connection leave in one write (one pipeline per shard), and waits
  // for every reply; each reply keeps its own error. Any thread but the loop's.
  Result<std::vector<io::OwnedResult>> calls(std::vector<Call> batch) {
    const Inflight entered(inflight);
    if (!running.load(std::memory_order_seq_cst)) {
      return table::Unexpected{make_error_code(Errc::kStopped)};
    }
    auto st = std::make_shared<CallsState>();
    st->out.resize(batch.size());
    st->left = batch.size();
    st->batch = std::move(batch);
    while (st->leads < st->batch.size() && st->batch[st->leads].lead) ++st->leads;
    st->leads_left = st->leads;
    auto future = st->done.get_future();
    if (st->batch.empty()) return std::vector<io::OwnedResult>{};
    io->loop().post(
        [this, st]() { issue_calls(st, 0, st->leads != 0 ? st->leads : st->batch.size()); });
    if (future.wait_for(options.call_timeout + std::chrono::seconds(1)) != std::future_status::ready) {
      return table::Unexpected{make_error_code(io::IoErrc::kTimeout)};
    }
    return std::move(st->out);
  }

  // Reads a job-lane table's membership: the epoch, then the members (one pipeline, one shard),
  // and keeps it as fan_out's view. `lead`: a lead push to send in the same pipeline, its reply
  // given to note_lead. `first`: a command sent ahead of both (publish's SET, single server),
  // whose failure is the answer.
  Result<Membership> read_membership(std::string_view table, const JobLaneKeys& keys,
                                     std::optional<Call> lead = std::nullopt,
                                     std::optional<Call> first = std::nullopt) {
    const std::size_t at = first ? 1 : 0;  // the epoch's reply
    std::vector<Call> batch;
    if (first) batch.push_back(std::move(*first));
    batch.push_back(Call{nullptr, {}, {"GET", keys.epoch}});
    batch.push_back(Call{nullptr, {}, {"ZRANGE", keys.members, "0", "-1"}});
    if (lead) batch.push_back(std::move(*lead));
    auto replies = calls(std::move(batch));
    if (!replies) return table::Unexpected{replies.error()};
    if (lead) note_lead(replies->back());
    if (at == 1) {
      if (auto ec = set_failed(replies->front())) return table::Unexpected{ec};
    }
    for (std::size_t i = at; i < at + 2; ++i) {
      if ((*replies)[i].ec) return table::Unexpected{reply_error((*replies)[i])};
    }
    add(fan_membership_reads);
    const io::Resp3Value epoch = (*replies)[at].reply.view(), list = (*replies)[at + 1].reply.view();
    if ((!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string) ||
        list.type() != io::Resp3Type::array) {
      return table::Unexpected{unexpected()};
    }
    Membership m;
    m.epoch = epoch.is_null() ? std::string() : std::string(epoch.str());
    for (const auto& member : list) m.members.emplace_back(member.str());
    std::lock_guard lock(members_mu);
    // A cache, so it is bounded: enqueue takes any valid table name, and a writer that sends to
    // many would otherwise keep every list for good. An evicted table's next enqueue reads again.
    if (membership.size() >= kMembershipsKept && membership.count(std::string(table)) == 0) {
      membership.erase(membership.begin());
    }
    membership[std::string(table)] = m;
    return m;
  }

  // The job lane's lead push of `payload` on `keys.lead` (TableSpec::job_lead), and what its
  // reply says. A lead that failed costs nothing but its speed: the job still comes.
  Call lead_call(const JobLaneKeys& keys, const std::string& payload) const {
    const char* verb = options.mode == ServerMode::kCluster ? "SPUBLISH" : "PUBLISH";
    return Call{nullptr, {}, {verb, keys.lead, payload}, true};
  }
  // A pipelined call's failure as a verb answers it: server_error carries the server's words
  // ("OOM command not allowed when used memory > 'maxmemory'.", "WRONGTYPE ..."), as blocking()'s
  // do; any other code (disconnected, ...) says it all.
  static Error reply_error(const io::OwnedResult& r) {
    if (r.ec == io::IoErrc::kServerError) return Error(r.ec, std::string(r.reply.view().str()));
    return Error(r.ec);
  }
  // A SET's reply: its error, unexpected() for anything but +OK, else none.
  static Error set_failed(const io::OwnedResult& r) {
    if (r.ec) return reply_error(r);
    const io::Resp3Value v = r.reply.view();
    if (v.type() != io::Resp3Type::simple_string || v.str() != "OK") return unexpected();
    return {};
  }
  // The L1 row of a write L2 already holds (put, publish): the writer's put, waited for up to
  // get_timeout. Any application thread.
  // `guard`: a tracking table's forget_token, taken before L2 was written (TableWriter::put).
  Result<BrandedId> put_l1(Slot& slot, std::string_view name, std::string_view value,
                           const BrandedId& version, std::uint64_t guard = TableWriter::kNoGuard) {
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    slot.writer->put(name, std::string(value), version, [promise] { promise->set_value(); }, guard);
    if (future.wait_for(options.get_timeout) != std::future_status::ready) {
      return table::Unexpected{make_error_code(Errc::kTimeout)};
    }
    return version;
  }

  void note_lead(const io::OwnedResult& r) {
    add(fan_leads);
    const io::Resp3Value v = r.reply.view();
    if (!r.ec && v.type() == io::Resp3Type::integer && v.integer() > 0) {
      add(fan_lead_receivers, static_cast<std::uint64_t>(v.integer()));
    }
  }

  Result<io::Resp3Owned> command(std::vector<std::string> args) {
    return blocking([this, args = std::move(args)](io::ReplyFn done) {
      std::vector<std::string_view> views(args.begin(), args.end());
      return issue(views, std::move(done));
    });
  }

  Result<io::Resp3Owned> script(const io::Script& s, std::vector<std::string> keys,
                                std::vector<std::string> argv) {
    return blocking([this, &s, keys = std::move(keys), argv = std::move(argv)](io::ReplyFn done) {
      std::vector<std::string_view> k(keys.begin(), keys.end()), a(argv.begin(), argv.end());
      return issue_script(s, k, a, std::move(done));
    });
  }

  // ---- the writer's ports (called on the writer thread; never block) ----
  WriterPorts ports_for(Slot& slot) {
    WriterPorts p;
    p.node = [this] { return current_node(); };
    p.log = options.log;
    if (options.on_event) {
      p.on_suspend = [this, &slot](bool suspended) {
        options.on_event(Event{suspended ? EventKind::kSuspended : EventKind::kResumed,
                               slot.spec.name, {}});
      };
    }
    p.fetch = [this, &slot](std::string_view name, std::function<void(L2Fetch)> done) {
      std::string key = key_of(slot, name);
      io->loop().post([this, key = std::move(key), done = std::move(done)]() mutable {
        if (io_closing) return done(L2Fetch{make_error_code(Errc::kStopped), std::nullopt});
        auto shared = std::make_shared<std::function<void(L2Fetch)>>(std::move(done));
        const auto ec = issue({"GET", key}, [shared](std::error_code e, const io::Resp3Value& r) {
          if (e) return (*shared)(L2Fetch{e, std::nullopt});
          if (r.is_null()) return (*shared)(L2Fetch{{}, std::nullopt});
          if (r.type() != io::Resp3Type::bulk_string) return (*shared)(L2Fetch{unexpected(), std::nullopt});
          (*shared)(L2Fetch{{}, std::string(r.str())});
        });
        if (ec) (*shared)(L2Fetch{ec, std::nullopt});
      });
    };
    p.load = [this, &slot](std::string_view asked, const BrandedId& minted,
                           std::shared_ptr<LoadClaim> claim, std::function<void(LoadOutcome)> done) {
      slot.loaders->post([this, &slot, name = std::string(asked), minted, claim = std::move(claim),
                          done = std::move(done)]() mutable {
        LoadResult result;
        const std::int64_t t0 = detail::steady_ns();
        try {
          // A branded table's names passed its kind gate: they parse.
          result = slot.spec.keys == KeyKind::kText
                       ? slot.spec.loader(Key(std::string_view(name)))
                       : slot.spec.loader(Key(BrandedId::parse(name).value()));
        } catch (const std::exception& e) {
          result = LoadError{e.what()};
        } catch (...) {
          result = LoadError{"loader threw"};
        }
        slot.load.record(detail::steady_ns() - t0);
        // Too late: the writer answered the flight loader_timeout. Nothing of this answer is
        // kept, in L2 either (the writer counts it loader_late).
        if (claim && !claim->claim_answer()) {
          return done(LoadOutcome{make_error_code(Errc::kLoaderTimeout)});
        }
        if (auto* failed = std::get_if<LoadError>(&result)) {
          return done(LoadOutcome{Error{Errc::kLoaderFailed, failed->reason.empty()
                                                                  ? "loader failed"
                                                                  : "loader failed: " + failed->reason}});
        }
        auto loaded = std::get<Loaded>(std::move(result));
        LoadOutcome out;
        out.version = loaded.version.value_or(minted);
        out.value = std::move(loaded.value);
        // Framed: put_l2 stores it unless L2 holds a newer version. Raw (no version to compare):
        // SET NX, so a value another program wrote meanwhile is never overwritten.
        const bool raw = slot.spec.l2_format == L2Format::kRaw;
        std::string framed = raw ? out.value : frame_l2_value(*out.version, out.value);
        std::string key = key_of(slot, name);
        std::string ttl = std::to_string(slot.spec.ttl_ms);
        io->loop().post([this, raw, key = std::move(key), framed = std::move(framed),
                         ttl = std::move(ttl), out = std::move(out), done = std::move(done)]() mutable {
          if (io_closing) return done(LoadOutcome{make_error_code(Errc::kStopped)});
          auto state = std::make_shared<std::pair<LoadOutcome, std::function<void(LoadOutcome)>>>(
              std::move(out), std::move(done));
          auto answer = [state, raw](std::error_code e, const io::Resp3Value& r) {
            auto& [o, cb] = *state;
            if (e) {
              o.ec = e;
            } else if (raw) {
              if (r.is_null()) {
                o.stored = false;  // NX lost: L2 holds a value now; the flight reads it
              } else if (r.type() == io::Resp3Type::simple_string && r.str() == "OK") {
                o.stored = true;
              } else {
                o.ec = unexpected();
              }
            } else if (r.type() != io::Resp3Type::integer) {
              o.ec = unexpected();
            } else {
              o.stored = r.integer() == 1;
            }
            cb(std::move(o));
          };
          const std::string_view keys[] = {key};
          const std::string_view argv[] = {framed, ttl};
          const auto ec = raw ? issue({"SET", key, framed, "PX", ttl, "NX"}, std::move(answer))
                              : issue_script(put_l2, keys, argv, std::move(answer));
          if (ec) {
            state->first.ec = ec;
            state->second(std::move(state->first));
          }
        });
      });
    };
    return p;
  }

  // ---- the subscriber's push path (loop thread) ----
  // `ring`: the slot's broadcast ring, or its lead ring (a lead refused by a full ring costs
  // nothing but its speed: the job follows, so that ring drops and never flushes).
  // On io thread k, first thing: its name, and its kernel id for stats.
  void note_io_thread(int k) {
    name_this_thread("echo-io:" + std::to_string(k));
    io_tids[static_cast<std::size_t>(k)].store(current_tid(), std::memory_order_relaxed);
  }

  void deliver(Slot& slot, CoherenceRing& ring, std::string_view payload) {
    if (pushes_closed.load(std::memory_order_relaxed)) return;  // stopping: nothing drains them
    // A broadcast ring's items and a lead ring's are applied on this thread when the writer is
    // parked (TableSpec::direct_apply: TableWriter::deliver; counted in its direct_applies),
    // else published into `ring`. A lead carries no ticket, so the drain would apply it just
    // so: no memory, no ack. Refusals are counted by the ring either way.
    slot.pushes.store(slot.pushes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (slot.spec.keys == KeyKind::kText) {
      // WIRE §2.2: the ring carries the key's hash (L1Map::apply_hashed), not its bytes.
      auto text = table::parse_text_frame(payload);
      if (!text) {
        slot.garbage.store(slot.garbage.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return;
      }
      CoherenceItem item{table::CoherenceMessage{text->version, text->version}, steady_ns(), 0};
      item.text_hash = table::hash_key(text->key);
      item.text = true;
      slot.writer->deliver(ring, std::move(item));
      return;
    }
    auto message = table::parse_frame(payload);
    if (!message) {
      slot.garbage.store(slot.garbage.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
    slot.writer->deliver(ring, CoherenceItem{*message, steady_ns(), 0});
  }
  // A tracking invalidation for one tracking table (kKey: the key, its prefix stripped).
  void forget(Slot& slot, Forget what, std::string_view key = {}) {
    if (pushes_closed.load(std::memory_order_relaxed)) return;
    slot.pushes.store(slot.pushes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // The item's message means nothing here (no version travels): any valid id fills it.
    static const BrandedId kUnversioned = BrandedId::parse("AST0KHTOWnGLuC").value();
    CoherenceItem item{table::CoherenceMessage{kUnversioned, kUnversioned}, steady_ns(), 0};
    item.forget = what;
    if (what == Forget::kKey) item.text_hash = table::hash_key(key);
    slot.ring->publish(std::move(item));  // refusals counted by the ring
  }
  // ["invalidate", [keys]] or ["invalidate", nil] (WIRE §4.5). A key under no tracking table's
  // prefix is unrouted (the server sends only the prefixes asked for).
  void on_invalidate(const io::Resp3Value& keys) {
    if (keys.is_null()) {
      for (const auto& [prefix, slot] : by_prefix) forget(*slot, Forget::kAll);
      return;
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::string_view key = keys[i].str();
      // ecc:{t}:key: the prefix ends at the first "}:" (a table name has no brace).
      const std::size_t close = key.find("}:");
      auto it = close == std::string_view::npos ? by_prefix.end()
                                                : by_prefix.find(key.substr(0, close + 2));
      if (it == by_prefix.end() || key.size() == close + 2) {
        unrouted.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      forget(*it->second, Forget::kKey, key.substr(close + 2));
    }
  }
  // CLIENT TRACKING ON BCAST PREFIX ecc:{t}: ... for every tracking table (empty: none).
  std::vector<std::string> tracking_command() const {
    if (by_prefix.empty()) return {};
    std::vector<std::string> args{"CLIENT", "TRACKING", "ON", "BCAST"};
    for (const auto& [prefix, slot] : by_prefix) args.insert(args.end(), {"PREFIX", prefix});
    return args;
  }
  // After a reconnect (loop thread): invalidations were lost while the socket was down, so the
  // tables stay suspended (the disconnect policy) until the command is answered +OK; then each
  // flushes and caches again. A refusal leaves them suspended (counted, said once).
  void resend_tracking() {
    const std::vector<std::string> args = tracking_command();
    if (args.empty() || io_closing) return;
    add(tracking_sends);
    std::vector<std::string_view> views(args.begin(), args.end());
    const auto ec = sub->call(views, [this](std::error_code e, const io::Resp3Value& r) {
      if (e || r.type() != io::Resp3Type::simple_string || r.str() != "OK") {
        if (tracking_refusals.fetch_add(1, std::memory_order_relaxed) == 0) {
          log_line(options.log, LogLevel::kError, "engine",
                   "CLIENT TRACKING refused after a reconnect (" +
                       (e ? e.message() : std::string(r.str())) +
                       "): tracking tables stay suspended");
        }
        return;
      }
      for (const auto& [prefix, slot] : by_prefix) slot->writer->subscription_confirmed();
    });
    if (ec) add(tracking_refusals);  // the socket went again: the next reconnect resends
  }

  // A message on `channel`: a broadcast lane's or a lead. False when no table listens there.
  bool route(std::string_view channel, std::string_view payload) {
    if (auto it = by_channel.find(channel); it != by_channel.end()) {
      deliver(*it->second, *it->second->ring, payload);
    } else if (auto lt = by_lead.find(channel); lt != by_lead.end()) {
      deliver(*lt->second, *lt->second->lead_ring, payload);
    } else {
      return false;
    }
    return true;
  }

  // The broadcast lane's table on `channel` (a lead channel's subscription is not the job lane's
  // delivery: its confirmation and its loss change nothing).
  Slot* by_channel_name(std::string_view channel) const {
    auto it = by_channel.find(channel);
    return it == by_channel.end() ? nullptr : it->second;
  }

  std::vector<io::NodeAddress> seeds() const {
    if (options.cluster_seeds.empty()) return {io::NodeAddress{options.host, options.port}};
    return io::parse_seeds(options.cluster_seeds);
  }

  void on_push(const io::Resp3Value& push) {
    if (push.size() < 2) {
      unrouted.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::string_view kind = push[0].str();
    if (kind == "message" && push.size() == 3) {
      if (!route(push[1].str(), push[2].str())) unrouted.fetch_add(1, std::memory_order_relaxed);
    } else if (kind == "invalidate" && push.size() == 2 && !by_prefix.empty()) {
      on_invalidate(push[1]);
    } else if (kind == "subscribe") {
      if (Slot* slot = by_channel_name(push[1].str())) {
        slot->writer->subscription_confirmed();
      } else if (!by_lead.contains(push[1].str())) {
        unrouted.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      unrouted.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Io thread `index`'s subscriber went or came back (on that io thread): only the tables it
  // feeds suspend. Sentinel ROLE checks and tracking live on io thread 0 alone.
  void on_sub_event(io::ConnEvent event, int index) {
    if (event == io::ConnEvent::kDisconnected || event == io::ConnEvent::kStopped) {
      for (auto& s : slots) {
        if (s->ring != nullptr && s->io_index == index) s->writer->subscription_lost();
      }
    } else if (event == io::ConnEvent::kReconnected) {
      if (index == 0) {
        if (!io_closing) check_role(*sub);
        resend_tracking();  // the channels' SUBSCRIBEs went already; their pushes confirm them
      }
      if (options.on_event) {
        options.on_event(Event{EventKind::kResubscribed, sub_label(index), {}});
      }
    }
  }
  static std::string sub_label(int index) {
    return index == 0 ? std::string("sub") : "sub:" + std::to_string(index);
  }
  // The broadcast channels io thread `index` subscribes (then, on io thread 0, every lead's).
  std::vector<std::string> channels_of(int index) const {
    std::vector<std::string> out;
    for (const auto& [channel, slot] : by_channel) {
      if (slot->io_index == index) out.push_back(channel);
    }
    if (index == 0) {
      for (const auto& [channel, slot] : by_lead) out.push_back(channel);
    }
    return out;
  }

  // ---- ServerMode::kSentinel (loop thread) ----
  // A connection that (re)booted on the master the sentinels named asks it ROLE: a demoted
  // master (back as a replica) must not serve us. Anything but "master" drops the connection as
  // a loss (its reconnect backs off and dials master() again; the subscriber's loss suspends and
  // flushes as any loss does) and asks the sentinels again, so a switch we missed is found.
  // Commands pipelined behind ROLE before its answer may reach that replica: writes fail
  // (READONLY), reads may be old. A sentinel demotes a master with CLIENT KILL TYPE normal and
  // TYPE pubsub, so the subscriber is lost too, and its flush at the next confirmation drops them.
  void check_role(io::Connection& c) {
    if (!sentinel || io_closing) return;
    (void)c.call({"ROLE"}, [this, &c](std::error_code e, const io::Resp3Value& r) {
      // A loss is checked again at the reconnect; a refused ROLE (an ACL) proves nothing.
      if (io_closing || e) return;
      if (r.type() == io::Resp3Type::array && r.size() >= 1 && r[0].str() == "master") return;
      sentinel->suspect();
      c.redial();
    });
  }
  // The watcher heard a new master: every connection that is up redials (the job lane's parking
  // connections follow at their next beat: JobConsumer::follow_park asks their target). The
  // subscriber's redial is a loss: its tables suspend, and flush when the new master confirms
  // the subscriptions (rows written on the old master may be lost in the failover).
  void on_master_switch() {
    if (io_closing) return;
    for (io::Connection* c : sentinel_followers) c->redial();
  }
  // Owner thread, once `c` is built: a switch from now on redials it. A switch before this
  // closure runs is caught by the connection's next reconnect (its target) or ROLE check.
  void follow(io::Connection* c) {
    if (!sentinel) return;
    io->loop().post([this, c] {
      if (!io_closing) sentinel_followers.push_back(c);
    });
  }

  io::ConnectionOptions connection_options(std::string label) const {
    io::ConnectionOptions c = base_connection_options(options, std::move(label));
    if (sentinel) {
      io::DialTarget m = sentinel->master();
      c.host = std::move(m.host);
      c.port = m.port;
      // Loop thread, before each reconnect: the master as the sentinels name it now.
      c.target = [this]() -> io::DialTarget {
        if (io_closing || !sentinel) return {};
        return sentinel->master();
      };
    }
    if (options.on_event) {
      c.observer = [this](io::ConnEvent event, std::string_view who, std::string_view cause) {
        static constexpr EventKind kKinds[] = {EventKind::kConnected, EventKind::kLost,
                                               EventKind::kReconnected, EventKind::kLost};
        options.on_event(Event{kKinds[static_cast<int>(event)], who, cause});
      };
    }
    return c;
  }
};

namespace {

// EngineOptions::tls: the files must be there and readable now (the connections load them in
// start(); a typo should not wait for it).
void check_tls_knobs(const io::TlsOptions& t) {
  if (!t.enabled) return;
  if (t.cert_file.empty() != t.key_file.empty()) {
    throw ConfigError(std::string("tls.") + (t.cert_file.empty() ? "cert_file" : "key_file") +
                      " is empty while tls." + (t.cert_file.empty() ? "key_file" : "cert_file") +
                      " is set: a client certificate needs both (or neither)");
  }
  auto readable = [](const char* knob, const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    const bool file = std::filesystem::is_regular_file(path, ec);
    if (!file || ::access(path.c_str(), R_OK) != 0) {
      throw ConfigError(std::string("tls.") + knob + " '" + path +
                        (file ? "' cannot be read" : "' does not exist or is not a file"));
    }
  };
  readable("ca_file", t.ca_file);
  readable("cert_file", t.cert_file);
  readable("key_file", t.key_file);
  if (t.server_name.size() > 255) {
    throw ConfigError("tls.server_name must be at most 255 bytes, got " +
                      std::to_string(t.server_name.size()));
  }
}

// The knobs the connections and the io loop would otherwise refuse only in start(), and the
// durations the engine adds to a clock (a bound keeps every deadline inside the clock's range).
void check_connection_knobs(const EngineOptions& o, bool by_seeds) {
  constexpr std::int64_t kMaxMs = 3'600'000;
  auto range = [](const char* knob, std::chrono::milliseconds v, std::int64_t lo, std::int64_t hi) {
    if (v.count() < lo || v.count() > hi) {
      throw ConfigError(std::string(knob) + " must lie in " + std::to_string(lo) +
                        "..3,600,000 ms, got " + std::to_string(v.count()));
    }
  };
  range("get_timeout", o.get_timeout, 1, kMaxMs);
  range("call_timeout", o.call_timeout, 1, kMaxMs);
  range("heartbeat", o.heartbeat, 0, kMaxMs);
  // Resolution waits for start() (it may block on DNS); here the text must be a host name or an
  // address at all: 1..255 bytes, no space or control byte.
  const bool host_ok = o.host.size() >= 1 && o.host.size() <= 255 &&
                       std::none_of(o.host.begin(), o.host.end(), [](char c) {
                         const auto b = static_cast<unsigned char>(c);
                         return b <= 0x20 || b == 0x7F;
                       });
  if (!by_seeds && !host_ok) {
    throw ConfigError(
        "host must be a host name or address of 1..255 bytes with no space or control byte, got '" +
        o.host + "'");
  }
  if (o.version_value.empty()) throw ConfigError("version_value must not be empty");
  if (o.username.empty() || o.username.size() > 255 ||
      std::any_of(o.username.begin(), o.username.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20; })) {
    throw ConfigError("username must be 1..255 bytes with no space or control byte, got '" +
                      o.username + "'");
  }
  if (o.io.entries < 8 || o.io.entries > 32768) {
    throw ConfigError("io.entries must lie in 8..32768, got " + std::to_string(o.io.entries));
  }
  check_tls_knobs(o.tls);
  if (o.io.cpu < -1 || o.io.cpu >= CPU_SETSIZE) {
    throw ConfigError("io.cpu must be -1 (unpinned) or a CPU index 0.." +
                      std::to_string(CPU_SETSIZE - 1) + ", got " + std::to_string(o.io.cpu));
  }
}

// ServerMode::kSentinel's knobs, and their absence in the other modes.
void check_sentinel_knobs(const EngineOptions& o) {
  if (o.mode != ServerMode::kSentinel) {
    if (!o.sentinels.empty() || !o.sentinel_master.empty()) {
      throw ConfigError("sentinels / sentinel_master are set but mode is not sentinel (set mode = "
                        "ServerMode::kSentinel)");
    }
    return;
  }
  if (o.sentinels.empty()) {
    throw ConfigError("sentinels must list 1 or more sentinels as host:port,host:port,... when mode "
                      "is sentinel");
  }
  try {
    (void)io::parse_seeds(o.sentinels);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("sentinels: ") + e.what());
  }
  const bool name_ok = o.sentinel_master.size() >= 1 && o.sentinel_master.size() <= 255 &&
                       std::none_of(o.sentinel_master.begin(), o.sentinel_master.end(), [](char c) {
                         const auto b = static_cast<unsigned char>(c);
                         return b <= 0x20 || b == 0x7F;
                       });
  if (!name_ok) {
    throw ConfigError("sentinel_master must be the monitored master's name, 1..255 bytes with no "
                      "space or control byte, got '" + o.sentinel_master + "'");
  }
}

}  // namespace

Engine::Engine(EngineOptions options, std::vector<TableSpec> tables)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  const bool sentinel_mode = impl_->options.mode == ServerMode::kSentinel;
  // Sentinel mode dials what the sentinels name: host and port are not used.
  const bool by_seeds = sentinel_mode || (impl_->options.mode == ServerMode::kCluster &&
                                          !impl_->options.cluster_seeds.empty());
  if (!by_seeds && (impl_->options.port < 1 || impl_->options.port > 65535)) {
    throw ConfigError("port must lie in 1..65535, got " + std::to_string(impl_->options.port));
  }
  if (impl_->options.mode == ServerMode::kCluster) {
    try {
      (void)impl_->seeds();
    } catch (const std::invalid_argument& e) {
      throw ConfigError(std::string("cluster_seeds: ") + e.what());
    }
    if (impl_->options.cluster_max_redirects < 0 || impl_->options.cluster_max_redirects > 16) {
      throw ConfigError("cluster_max_redirects must lie in 0..16, got " +
                        std::to_string(impl_->options.cluster_max_redirects));
    }
  } else if (!impl_->options.cluster_seeds.empty()) {
    throw ConfigError("cluster_seeds is set but mode is not cluster (set mode = ServerMode::kCluster)");
  }
  check_sentinel_knobs(impl_->options);
  check_connection_knobs(impl_->options, by_seeds);
  const int io_threads = impl_->options.io_threads;
  if (io_threads < 1 || io_threads > 16) {
    throw ConfigError("io_threads must lie in 1..16, got " + std::to_string(io_threads));
  }
  if (io_threads > 1 && impl_->options.mode != ServerMode::kSingle) {
    throw ConfigError("io_threads above 1 needs mode single (a cluster's sharded subscriber and a "
                      "sentinel's redials run on io thread 0), got " + std::to_string(io_threads));
  }
  int broadcast_tables = 0;  // dealt round-robin from the last io thread down
  // Built now, taken in start(): the writers ask it for their node from their own threads.
  impl_->lease = std::make_unique<NodeLease>(
      [d = impl_.get()](const io::Script& s, std::vector<std::string> keys,
                        std::vector<std::string> argv) {
        return d->script(s, std::move(keys), std::move(argv));
      },
      impl_->options.node_id == EngineOptions::kAutoNode ? -1
                                                         : static_cast<int>(impl_->options.node_id),
      impl_->options.node_lease, impl_->options.log);
  MetricsEndpoint::check_options(impl_->options);  // ConfigError naming metrics_port / _bind
  if (const auto p = impl_->options.stats_publish.count(); p != 0 && (p < 100 || p > 3600000)) {
    throw ConfigError("stats_publish must be 0 (off) or lie in 100..3,600,000 ms, got " + std::to_string(p));
  }
  if (impl_->options.node_id > table::kMaxNode && impl_->options.node_id != EngineOptions::kAutoNode) {
    throw ConfigError("node_id must be auto (EngineOptions::kAutoNode) or lie in 0..1023, got " +
                      std::to_string(impl_->options.node_id));
  }
  if (const auto l = impl_->options.node_lease.count(); l < 1000 || l > 3'600'000) {
    throw ConfigError("node_lease must lie in 1000..3,600,000 ms, got " + std::to_string(l));
  }
  for (const int cpu : impl_->options.housekeeping_cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      throw ConfigError("housekeeping_cpus: each CPU must lie in 0.." +
                        std::to_string(CPU_SETSIZE - 1) + ", got " + std::to_string(cpu));
    }
  }
  impl_->housekeeping = std::make_unique<Housekeeping>(impl_->options.housekeeping_cpus);
  impl_->chores = std::make_unique<Chores>(*impl_->housekeeping);
  impl_->lease->set_chores(*impl_->chores);
  impl_->job_sends.set_housekeeping(*impl_->housekeeping);
  for (auto& spec : tables) {
    validate(spec);
    auto slot = std::make_unique<Impl::Slot>();
    slot->spec = std::move(spec);
    // 0: the engine's get_timeout, the longest a get waits anyway.
    if (slot->spec.loader_timeout.count() == 0) slot->spec.loader_timeout = impl_->options.get_timeout;
    if (impl_->by_name.count(slot->spec.name) != 0) {
      throw ConfigError("table '" + slot->spec.name + "' is declared twice");
    }
    slot->channel = table::coherence_channel(slot->spec.name).value();
    slot->writer = std::make_unique<TableWriter>(slot->spec, impl_->ports_for(*slot), impl_->options.node_id);
    if (slot->spec.coherence == CoherenceMode::kBroadcast) {
      slot->ring = &slot->writer->add_ring(slot->spec.full_policy);
      slot->io_index = io_threads - 1 - broadcast_tables++ % io_threads;
      impl_->by_channel.emplace(slot->channel, slot.get());
    } else if (slot->spec.coherence == CoherenceMode::kTracking) {
      // Each master tracks only its own keys: a cluster would need a tracking connection per
      // master (and a flush when any of them is lost). Not built; refused rather than half-done.
      if (impl_->options.mode == ServerMode::kCluster) {
        throw ConfigError("table '" + slot->spec.name +
                          "': coherence tracking needs mode single (a cluster is not supported)");
      }
      slot->ring = &slot->writer->add_ring(slot->spec.full_policy);
      impl_->by_prefix.emplace(table::tracking_prefix(slot->spec.name).value(), slot.get());
    } else if (slot->spec.coherence == CoherenceMode::kJob) {
      // Never refuses: the consumer publishes only into free slots (credits).
      slot->job_ring = &slot->writer->add_ring(ring::FullPolicy::kDrop);
      if (slot->spec.job_lead) {
        slot->lead_ring = &slot->writer->add_ring(ring::FullPolicy::kDrop);
        impl_->by_lead.emplace(JobLaneKeys::for_table(slot->spec.name).lead, slot.get());
      }
    }
    impl_->by_name.emplace(slot->spec.name, slot.get());
    impl_->slots.push_back(std::move(slot));
  }
}

Engine::~Engine() { stop(); }

Error Engine::start(std::chrono::milliseconds timeout) {
  // A deadline beyond a day is a day: Clock::now() + milliseconds::max() would overflow.
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24));
  // The constructor checked every knob; what remains can only fail here: the host does not
  // resolve (io::Connection resolves it, and says so with invalid_argument), or the kernel
  // refuses the io_uring or a thread. An error code, as for any other failed start.
  try {
    return start_once(timeout);
  } catch (const std::invalid_argument& e) {
    stop();
    return Error(Errc::kHostUnresolved, e.what());
  } catch (const std::system_error& e) {
    stop();
    return Error(e.code(), e.what());
  }
}

namespace {

// A connection that did not become ready, as start() answers it: the code, and the cause in
// words (the server's refusal, or for a timeout the last attempt's failure).
Error not_ready(std::error_code ec, const io::Connection& c, std::chrono::milliseconds waited) {
  std::string cause = c.cause();
  if (ec == io::IoErrc::kTimeout) {
    cause = "no answer from " + c.options().host + ":" + std::to_string(c.options().port) +
            " made the " + c.options().label + " connection ready within " +
            std::to_string(waited.count()) + " ms" +
            (cause.empty() ? std::string() : "; the last attempt: " + cause);
  }
  return Error(ec, std::move(cause));
}

}  // namespace

Error probe_server(const EngineOptions& options, std::chrono::milliseconds timeout) {
  io::ConnectionOptions c = base_connection_options(options, "probe");
  c.heartbeat = std::chrono::milliseconds(0);
  if (options.mode == ServerMode::kCluster) {
    const auto seeds = options.cluster_seeds.empty()
                           ? std::string(options.host + ":" + std::to_string(options.port))
                           : options.cluster_seeds;
    const auto first = io::parse_address(seeds.substr(0, seeds.find(',')));
    if (!first) return Error(Errc::kHostUnresolved, "cluster_seeds: '" + seeds + "'");
    c.host = first->host;
    c.port = first->port;
    c.fence = false;
  }
  // A step's deadline inside the probe's, so that a silent peer is named before the probe ends.
  const auto step = std::max(std::chrono::milliseconds(1), timeout * 2 / 3);
  c.connect_timeout = std::min(c.connect_timeout, step);
  c.boot_timeout = std::min(c.boot_timeout, step);
  try {
    io::LoopThread lt;
    io::Connection conn(lt.loop(), c);
    conn.start();
    const std::error_code ec = conn.wait_ready(timeout);
    return ec ? not_ready(ec, conn, timeout) : Error{};
  } catch (const std::invalid_argument& e) {
    return Error(Errc::kHostUnresolved, e.what());
  } catch (const std::system_error& e) {
    return Error(e.code(), e.what());
  }
}

Error Engine::start_once(std::chrono::milliseconds timeout) {
  auto& d = *impl_;
  if (d.running.load(std::memory_order_acquire)) return {};
  // One run per Engine. A second would restart the writers on new threads over rings whose
  // consumer side the old ones own, with job items the old consumers published still in them
  // (their tickets would ack into the next consumer's, which start at 1 again).
  if (d.started) return make_error_code(Errc::kStopped);
  d.started = true;
  const auto deadline = Clock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  d.io = std::make_unique<io::LoopThread>(d.options.io);
  d.io->loop().post([&d] { d.note_io_thread(0); });
  if (d.options.metrics_port != 0) {
    // Bound now, so a port in use fails start() before anything dials; it accepts only at the
    // end of start(), once everything stats() reads is in place. It lives on io thread 0.
    d.metrics = std::make_unique<MetricsEndpoint>(d.io->loop(), [this] {
      return to_prometheus(take_snapshot(*this, impl_->node_name()));
    });
    if (auto e = d.metrics->open(d.options.metrics_bind, d.options.metrics_port)) {
      stop();
      return e;
    }
  }
  // Reserved once: stats() on another thread may walk the vector while it grows here.
  d.extra_io.reserve(static_cast<std::size_t>(d.options.io_threads - 1));
  for (int k = 1; k < d.options.io_threads; ++k) {
    io::LoopOptions lo = d.options.io;
    lo.cpu = -1;  // io.cpu pins io thread 0 only
    auto loop = std::make_unique<io::LoopThread>(lo);  // may throw: stop() sees only built ones
    loop->loop().post([&d, k] { d.note_io_thread(k); });
    d.extra_io.push_back(Impl::ExtraIo{std::move(loop), nullptr});
  }
  for (auto& s : d.slots) {
    s->loaders = std::make_unique<LoaderPool>(s->spec.loader_threads, *d.housekeeping);
    s->writer->start();
  }
  if (d.options.mode == ServerMode::kCluster) {
    io::ClusterOptions co;
    co.seeds = d.seeds();
    co.connection = d.connection_options("cmd");
    co.max_redirects = d.options.cluster_max_redirects;
    co.route_timeout = d.options.call_timeout;
    d.cluster = std::make_unique<io::ClusterClient>(d.io->loop(), std::move(co));
    d.cluster->start();
    if (auto ec = d.cluster->wait_ready(left())) {
      std::string why = d.cluster->cause();  // a node's TLS refusal, in words
      stop();
      return Error(ec, std::move(why));
    }
  } else {
    io::EventFn on_cmd_event;
    if (d.options.mode == ServerMode::kSentinel) {
      SentinelWatchOptions so;
      so.sentinels = io::parse_seeds(d.options.sentinels);
      so.master_name = d.options.sentinel_master;
      so.password = d.options.sentinel_password;
      so.call_timeout = d.options.call_timeout;
      so.heartbeat = d.options.heartbeat;
      d.sentinel = std::make_unique<SentinelWatch>(d.io->loop(), std::move(so),
                                                   [&d] { d.on_master_switch(); });
      if (auto ec = d.sentinel->start(deadline)) {
        stop();
        return ec;
      }
      on_cmd_event = [&d](io::ConnEvent event, std::error_code) {
        // io_closing: stop() is destroying d.cmd.
        if (d.io_closing) return;
        if (event == io::ConnEvent::kReady || event == io::ConnEvent::kReconnected) {
          d.check_role(*d.cmd);
        }
      };
    }
    d.cmd = std::make_unique<io::Connection>(d.io->loop(), d.connection_options("cmd"),
                                             io::PushFn{}, std::move(on_cmd_event));
    d.cmd->start();
    d.follow(d.cmd.get());
    const auto waited = left();
    if (auto ec = d.cmd->wait_ready(waited)) {
      Error e = not_ready(ec, *d.cmd, waited);
      stop();
      if (ec == io::IoErrc::kClusterNode) e.code = make_error_code(Errc::kWrongMode);
      return e;
    }
  }
  d.running.store(true, std::memory_order_release);
  if (d.sentinel) {
    // The master the sentinels named must say so before anything is written there (a failover
    // under way names the old master until it ends): ROLE until it does, or start's deadline.
    while (true) {
      auto role = d.command({"ROLE"});
      const bool master = role && role->view().type() == io::Resp3Type::array &&
                          role->view().size() >= 1 && role->view()[0].str() == "master";
      if (master) break;
      if (Clock::now() >= deadline) {
        const std::string at = d.sentinel->stats().master;
        stop();
        return Error(Errc::kNotMaster, "the master the sentinels name, " + at +
                                           ", did not answer ROLE as a master before start's "
                                           "deadline");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (d.options.mode != ServerMode::kCluster) {
    // A cluster node would answer MOVED to most keys: refuse the mismatch at start.
    auto info = d.command({"INFO", "cluster"});
    if (info && info->view().str().find("cluster_enabled:1") != std::string_view::npos) {
      stop();
      return make_error_code(Errc::kWrongMode);
    }
  }
  // The node lease before anything that mints or names this node (member queues, stats keys).
  if (auto ec = d.lease->acquire(deadline)) {
    stop();
    return ec;
  }
  for (auto& s : d.slots) {
    if (s->spec.coherence == CoherenceMode::kJob) s->publish_group = d.mint("PRT").value();
  }
  for (auto& s : d.slots) {
    if (s->job_ring == nullptr) continue;
    io::ConnectionOptions park = d.connection_options("park-" + s->spec.name);
    CommandPort port;
    if (d.cluster) {
      // Every key of this node's member queue shares its hash tag: the router sends each call to
      // that shard, and the consumer parks on a connection to the same master.
      const std::uint16_t slot = io::hash_slot(
          JobLaneKeys::for_table(s->spec.name).member_base(d.node_name()));
      const auto owner = d.cluster->address_of(slot);
      const auto at = owner.host.empty() ? d.seeds().front() : owner;
      park.host = at.host;
      park.port = at.port;
      park.fence = false;  // the router fenced {emq}:version on its own slot's master
      // Each reconnect dials the slot's master in the router's current map (a failover's
      // promoted replica). Loop thread; io_closing: the router is going away.
      park.target = [&d, slot]() -> io::DialTarget {
        if (d.io_closing || !d.cluster) return {};
        auto a = d.cluster->address_of(slot);
        return {std::move(a.host), a.port};
      };
      port.call_fn = [&d](std::span<const std::string_view> args, io::ReplyFn done) {
        d.cluster->call(args, std::move(done));
        return std::error_code{};
      };
      port.evalsha_fn = [&d](const io::Script& script, std::span<const std::string_view> keys,
                             std::span<const std::string_view> argv, io::ReplyFn done) {
        d.cluster->evalsha(script, keys, argv, std::move(done));
        return std::error_code{};
      };
    } else {
      port = CommandPort::of(*d.cmd);
    }
    s->consumer = std::make_unique<JobConsumer>(d.io->loop(), std::move(port), std::move(park),
                                                *s->writer, *s->job_ring, d.node_name());
    s->consumer->start();
  }
  // Io thread 0's: its broadcast lanes', then every lead's (all of them, io_threads 1).
  std::vector<std::string> channels = d.channels_of(0);
  if (!channels.empty() && d.cluster) {
    ShardedSubscriber::Handlers h;
    h.message = [&d](std::string_view channel, std::string_view payload) {
      if (!d.route(channel, payload)) d.unrouted.fetch_add(1, std::memory_order_relaxed);
    };
    h.confirmed = [&d](std::string_view channel) {
      if (Impl::Slot* slot = d.by_channel_name(channel)) slot->writer->subscription_confirmed();
    };
    h.lost = [&d](std::string_view channel) {
      if (Impl::Slot* slot = d.by_channel_name(channel)) slot->writer->subscription_lost();
    };
    h.unrouted = [&d] { d.unrouted.fetch_add(1, std::memory_order_relaxed); };
    d.ssub = std::make_unique<ShardedSubscriber>(*d.cluster, d.connection_options("ssub"),
                                                 std::move(channels), std::move(h));
    d.ssub->start();
  } else if (!channels.empty() || !d.by_prefix.empty()) {
    d.sub = std::make_unique<io::Connection>(
        d.io->loop(), d.connection_options("sub"),
        [&d](const io::Resp3Value& push) { d.on_push(push); },
        [&d](io::ConnEvent event, std::error_code) { d.on_sub_event(event, 0); });
    d.sub->start();
    d.follow(d.sub.get());
    const auto waited = left();
    if (auto ec = d.sub->wait_ready(waited)) {
      Error e = not_ready(ec, *d.sub, waited);
      stop();
      return e;
    }
    for (const auto& channel : channels) {
      if (auto ec = d.sub->subscribe_blocking(channel)) {
        stop();
        return ec;
      }
    }
    if (auto args = d.tracking_command(); !args.empty()) {
      // WIRE §4.5: anything but +OK fails the start. Pushes go to this (RESP3) connection itself.
      d.add(d.tracking_sends);
      auto r = d.sub->call_blocking(std::move(args));
      const io::Resp3Value v = r.reply.view();
      if (r.ec || v.type() != io::Resp3Type::simple_string || v.str() != "OK") {
        std::string why = "CLIENT TRACKING ON BCAST was answered " +
                          (r.ec && r.ec != io::IoErrc::kServerError ? r.ec.message()
                                                                    : std::string(v.str()));
        d.add(d.tracking_refusals);
        stop();
        return Error(Errc::kTrackingRefused, std::move(why));
      }
      for (const auto& [prefix, slot] : d.by_prefix) slot->writer->subscription_confirmed();
    }
  }
  // The other io threads' subscribers, each with the broadcast tables dealt to it (mode single).
  for (int k = 1; k < d.options.io_threads; ++k) {
    const std::vector<std::string> mine = d.channels_of(k);
    if (mine.empty()) continue;
    auto& x = d.extra_io[static_cast<std::size_t>(k - 1)];
    x.sub = std::make_unique<io::Connection>(
        x.loop->loop(), d.connection_options(Impl::sub_label(k)),
        [&d](const io::Resp3Value& push) { d.on_push(push); },
        [&d, k](io::ConnEvent event, std::error_code) { d.on_sub_event(event, k); });
    x.sub->start();
    const auto waited = left();
    if (auto ec = x.sub->wait_ready(waited)) {
      Error e = not_ready(ec, *x.sub, waited);
      stop();
      return e;
    }
    for (const auto& channel : mine) {
      if (auto ec = x.sub->subscribe_blocking(channel)) {
        stop();
        return ec;
      }
    }
  }
  // Caching starts only once each lane confirmed delivery: the server's subscription
  // confirmation (broadcast) or this node's first membership beat (job). A job-lane table whose
  // membership shows another process beating as this node never confirms: start refuses.
  for (auto& slot : d.slots) {
    if (slot->spec.coherence == CoherenceMode::kNone) continue;
    while (slot->writer->stats().suspended) {
      if (slot->consumer && slot->consumer->stats().member_conflicts > 0) {
        stop();
        return make_error_code(Errc::kMemberConflict);
      }
      if (Clock::now() >= deadline) {
        stop();
        return make_error_code(io::IoErrc::kTimeout);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (auto ec = start_relay()) {
    stop();
    return ec;
  }
  if (d.options.stats_publish.count() > 0) {
    // One SET per table per period, best effort: a missed one only lets the key age (PX 3 periods).
    d.stats_chore = d.chores->add(std::chrono::milliseconds(0), [this] {
      const auto period = impl_->options.stats_publish;
      const std::string node = impl_->node_name();
      const StatsSnapshot snap = take_snapshot(*this, node);
      for (const auto& s : impl_->slots) {
        (void)impl_->command({"SET", stats_key(s->spec.name, node),
                              to_json(only_table(snap, s->spec.name)), "PX",
                              std::to_string(3 * period.count())});
      }
      return period;
    });
  }
  if (d.metrics) d.metrics->start();
  return {};
}

void Engine::stop() {
  auto& d = *impl_;
  if (d.stats_chore != 0) {
    d.chores->remove(d.stats_chore);  // waits out a round under way
    d.stats_chore = 0;
  }
  if (d.metrics) d.metrics->close();   // on the still-running io thread
  // Every job enqueue_async handed off gets its admissions and its callback while the engine
  // still runs; a call after this answers kStopped.
  d.job_sends.close_and_drain();
  if (d.lease) d.lease->release();  // while the command connection still runs
  if (d.chores) d.chores->stop();    // no chore is left: its thread ends
  if (d.relay) {
    // Its BLPOP parks up to a beat: CLIENT UNBLOCK ends it (a park that begins just after costs
    // at most that beat). The relay's calls run while the io thread still does.
    d.relay->stop([&d] {
      if (!d.relay_client.empty() && d.cmd) (void)d.command({"CLIENT", "UNBLOCK", d.relay_client});
    });
    d.relay.reset();
  }
  d.running.store(false, std::memory_order_seq_cst);  // seq_cst: see Impl::Inflight
  // Blocking calls already posted finish on the still-running io thread.
  while (d.inflight.load(std::memory_order_seq_cst) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (d.io) {
    // No push into a ring after each loop ran this closure: one waiting for space in a full ring
    // returns first, as the writers still drain.
    d.pushes_closed.store(true, std::memory_order_relaxed);
    std::vector<io::UringLoop*> loops{&d.io->loop()};
    for (auto& x : d.extra_io) loops.push_back(&x.loop->loop());
    for (io::UringLoop* loop : loops) {
      std::promise<void> closed;
      loop->post([&closed] { closed.set_value(); });
      closed.get_future().wait();
    }
  }
  for (auto& s : d.slots) s->writer->stop();
  for (auto& s : d.slots) s->loaders.reset();  // joins: no loader job posts to the loop after this
  if (d.io) {
    // From here on, closures still queued on the loop answer `stopped` without touching a
    // connection; then the connections can go (their destructors drive the loop as needed).
    std::promise<void> marked;
    d.io->loop().post([&d, &marked] {
      d.io_closing = true;
      d.sentinel_followers.clear();
      if (d.sentinel) d.sentinel->stop_on_loop();
      for (auto& s : d.slots) {
        if (s->consumer) s->consumer->stop_on_loop();
      }
      marked.set_value();
    });
    marked.get_future().wait();
  }
  d.ssub.reset();
  d.sub.reset();
  for (auto& x : d.extra_io) x.sub.reset();  // while its loop runs, as d.sub
  for (auto& x : d.extra_io) x.loop->join();
  d.extra_io.clear();
  d.relay_park.reset();
  d.cluster.reset();
  d.cmd.reset();  // fails the consumers' calls in flight (their callbacks name the consumers)
  // The consumers (their parking connections) go while the io thread still runs the loop, like
  // every other connection: it is the thread that submitted their operations. After the join the
  // destructor would drive the ring from this thread while the kernel hands those operations'
  // completions to its fallback worker, and a link timeout can no longer cancel its connect.
  for (auto& s : d.slots) s->consumer.reset();
  // The writers are stopped for good (start() refuses a second run), but their ack sinks named
  // the consumers just destroyed.
  for (auto& s : d.slots) s->writer->set_ack_sink(nullptr);
  d.sentinel.reset();  // last of the connections: the others' targets asked it
  if (d.io) d.io->join();
  d.io.reset();
  d.io_closing = false;
  d.pushes_closed.store(false, std::memory_order_relaxed);
}

bool Engine::running() const noexcept { return impl_->running.load(std::memory_order_acquire); }

Error Engine::start_relay() {
  auto& d = *impl_;
  std::vector<SharedQueueRelay::Table> relayed;
  std::int64_t beat_ms = 60'000;
  for (auto& s : d.slots) {
    if (s->spec.coherence != CoherenceMode::kJob || !s->spec.job_relay) continue;
    relayed.push_back({&s->spec, JobLaneKeys::for_table(s->spec.name)});
    beat_ms = std::min(beat_ms, s->spec.job_beat_ms);
  }
  if (relayed.empty()) return {};
  const std::chrono::milliseconds beat(beat_ms);
  SharedQueueRelay::Ports ports;
  ports.command = [&d](std::vector<std::string> args) { return d.command(std::move(args)); };
  ports.script = [&d](const io::Script& s, std::vector<std::string> keys, std::vector<std::string> argv) {
    return d.script(s, std::move(keys), std::move(argv));
  };
  ports.fan_out = [this](const TableSpec& spec, const BrandedId& group, const BrandedId& job,
                         std::string_view name, const BrandedId& version) -> std::error_code {
    auto r = fan_out(spec.name, group, job, name, version, {}, /*to_shared=*/false);
    return r ? std::error_code{} : static_cast<std::error_code>(r.error());
  };
  if (d.cluster) {
    // The wake lists hash to several slots (no one BLPOP takes them all): poll every beat.
    ports.park = [](const std::vector<std::string>&, std::chrono::milliseconds t) {
      std::this_thread::sleep_for(t);
    };
  } else {
    io::ConnectionOptions park = d.connection_options("relay");
    park.call_timeout = beat + std::chrono::seconds(2);  // WIRE §5.4: the park's call timeout
    d.relay_park = std::make_unique<io::Connection>(d.io->loop(), std::move(park));
    d.relay_park->start();
    d.follow(d.relay_park.get());
    if (auto ec = d.relay_park->wait_ready(d.options.call_timeout)) {
      return not_ready(ec, *d.relay_park, d.options.call_timeout);
    }
    auto id = d.relay_park->call_blocking({"CLIENT", "ID"});
    if (id.ec) return id.ec;
    if (id.reply.view().type() == io::Resp3Type::integer) {
      d.relay_client = std::to_string(id.reply.view().integer());
    }
    ports.park = [&d](const std::vector<std::string>& lists, std::chrono::milliseconds t) {
      std::vector<std::string> args{"BLPOP"};
      args.insert(args.end(), lists.begin(), lists.end());
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.3f", static_cast<double>(t.count()) / 1000.0);
      args.emplace_back(seconds);
      // A lost connection answers at once: wait out the beat rather than spin on the errors.
      if (d.relay_park->call_blocking(std::move(args)).ec) std::this_thread::sleep_for(t);
    };
  }
  d.relay = std::make_unique<SharedQueueRelay>(std::move(relayed), std::move(ports), beat);
  d.relay->set_housekeeping(*d.housekeeping);
  d.relay->start();
  return {};
}

Result<Got> Engine::get(std::string_view table, std::string_view id) {
  return impl_->on_table(table, [&](TableRef& ref) {
    const bool timed = detail::sample_get();  // as Table<T>::get's
    const std::int64_t t0 = timed ? detail::steady_ns() : 0;
    auto r = get(ref, id);
    if (timed) note_get(ref, r && r->source == Source::kL1, t0);
    return r;
  });
}

void Engine::note_get(TableRef& ref, bool hit, std::int64_t t0_ns) noexcept {
  (hit ? ref.get_hit : ref.get_miss).record(detail::steady_ns() - t0_ns);
}

Result<Got> Engine::get(TableRef& ref, std::string_view key) {
  // A hit or a refusal answers here, without the promise: its shared state cost ~13x the map
  // read itself (3.7 us vs 0.27 us per hit, broadcast_lane_test's E4), and a hit must not
  // leave this thread's fast path.
  auto local = impl_->read_here(ref, key);
  if (local.answer) return std::move(*local.answer);
  auto promise = std::make_shared<std::promise<Result<Got>>>();
  auto future = promise->get_future();
  impl_->send_miss(*local.slot, local.name,
                   [promise](Result<Got> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(impl_->options.get_timeout) != std::future_status::ready) {
    return table::Unexpected{make_error_code(Errc::kTimeout)};
  }
  return future.get();
}

Engine::TableRef& Engine::resolve(std::string_view name, const std::type_info& type) {
  Impl::Slot* slot = impl_->find(name);
  if (slot == nullptr) throw ConfigError("table '" + std::string(name) + "' is not declared");
  const std::type_info& declared =
      slot->spec.value.type != nullptr ? *slot->spec.value.type : typeid(std::string);
  if (declared != type) {
    throw ConfigError("table '" + std::string(name) + "' holds " + declared.name() +
                      " values, not " + type.name() + " (declare it with typed<T>())");
  }
  return *slot;
}

const table::L1Map& Engine::l1_of(const TableRef& ref) noexcept { return ref.writer->map(); }

std::string_view Engine::name_of(const TableRef& ref) noexcept { return ref.spec.name; }

void Engine::get_async(std::string_view table, std::string_view id,
                       std::function<void(Result<Got>)> done) {
  auto local = impl_->read_here(table, id);
  if (local.answer) return done(std::move(*local.answer));
  impl_->send_miss(*local.slot, local.name, std::move(done));
}

Result<BrandedId> Engine::put(std::string_view table, std::string_view id, std::string_view value,
                              std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) { return put(ref, id, value, version); });
}

Result<BrandedId> Engine::put(TableRef& ref, std::string_view key, std::string_view value,
                              std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = &ref;
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  if (!version) {
    auto minted = d.mint(slot->spec.kind);  // no_node_lease without a lease
    if (!minted) return table::Unexpected{minted.error()};
    version = *minted;
  }
  // Tracking: the guard is read before the SET leaves, so any invalidation of a later write
  // (which the server sends after running ours) moves it before the row could be cached.
  const bool tracking = slot->spec.coherence == CoherenceMode::kTracking;
  const std::uint64_t guard = tracking ? slot->writer->forget_token(*name) : TableWriter::kNoGuard;
  auto reply = d.command({"SET", d.key_of(*slot, *name),
                          slot->spec.l2_format == L2Format::kRaw ? std::string(value)
                                                                 : frame_l2_value(*version, value),
                          "PX", std::to_string(slot->spec.ttl_ms)});
  if (!reply) {
    // Lost or overdue, not refused: the SET may still run (its bytes had left; the chaos drill
    // saw one land after a stall, and DEBUG SLEEP shows the same). A put announces nothing, so
    // this node drops its older row itself, as the message of `version` would: its next read
    // goes to L2. A SET that never ran costs one cached row.
    if (reply.error().code != make_error_code(io::IoErrc::kServerError)) {
      slot->writer->apply(*name, *version, [](WriterAnswer<table::Verdict>) {});
    }
    return table::Unexpected{reply.error()};
  }
  if (reply->view().str() != "OK") return table::Unexpected{unexpected()};
  return d.put_l1(*slot, *name, value, *version, guard);
}

Result<BrandedId> Engine::publish(std::string_view table, std::string_view id,
                                  std::string_view value, std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) { return publish(ref, id, value, version); });
}

Result<BrandedId> Engine::publish(TableRef& ref, std::string_view key, std::string_view value,
                                  std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = &ref;
  switch (slot->spec.coherence) {
    case CoherenceMode::kNone:
    case CoherenceMode::kTracking:  // the SET is the announcement: the server invalidates
      return put(ref, key, value, version);
    case CoherenceMode::kJob:
      return publish(slot->spec.name, *slot->publish_group, key, value, version);
    case CoherenceMode::kBroadcast:
      break;
  }
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  if (!version) {
    auto minted = d.mint(slot->spec.kind);  // no_node_lease without a lease
    if (!minted) return table::Unexpected{minted.error()};
    version = *minted;
  }
  // The message: name:version, 29 bytes (WIRE §2.1), or key:version for a text key (§2.2).
  std::string message;
  if (slot->spec.keys == KeyKind::kText) {
    message = std::string(table::view(table::make_text_frame(*name, *version).value()));
  } else {
    message = std::string(table::view(table::make_frame(*name, version->view()).value()));
  }
  // The channel shares the key's hash tag (table::coherence_channel): the script's slot, so on a
  // cluster the router sends it to the shard whose SSUBSCRIBErs hear the SPUBLISH.
  const char* verb = d.options.mode == ServerMode::kCluster ? "SPUBLISH" : "PUBLISH";
  auto reply = d.script(d.publish_l2, {d.key_of(*slot, *name)},
                        {frame_l2_value(*version, value), std::to_string(slot->spec.ttl_ms),
                         slot->channel, message, verb});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
  return d.put_l1(*slot, *name, value, *version);
}

Result<BrandedId> Engine::publish(std::string_view table, const BrandedId& group,
                                  std::string_view id, std::string_view value,
                                  std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = d.find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  auto name = Impl::gate(*slot, id);  // a branded id of the table's kind, or a text key
  if (!name) return table::Unexpected{name.error()};
  if (!version) {
    auto minted = d.mint(slot->spec.kind);  // no_node_lease without a lease
    if (!minted) return table::Unexpected{minted.error()};
    version = *minted;
  }
  std::vector<std::string> set{"SET", d.key_of(*slot, *name), frame_l2_value(*version, value),
                               "PX", std::to_string(slot->spec.ttl_ms)};
  if (d.options.mode == ServerMode::kCluster) {
    // The member queues hash to their own slots, on any shard: one pipeline cannot order the SET
    // before them, so the fan-out leaves only once the SET has answered.
    auto reply = d.command(std::exchange(set, {}));
    if (!reply) return table::Unexpected{reply.error()};
    if (reply->view().str() != "OK") return table::Unexpected{unexpected()};
  }
  auto job = d.mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  auto admitted = fan_out(table, group, *job, *name, *version, std::move(set));
  // No live member: the row is in L2 and no L1 holds it (a member not live drops its rows when it
  // beats again), so the write is complete.
  if (!admitted && admitted.error() != make_error_code(Errc::kNoLiveMember)) {
    Impl::add(d.fan_errors);
    return table::Unexpected{admitted.error()};
  }
  return d.put_l1(*slot, *name, value, *version);
}

Result<std::int64_t> Engine::broadcast(std::string_view table, std::string_view id,
                                       const BrandedId& version) {
  auto channel = table::coherence_channel(table);
  if (!channel) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  // A declared text-key table's message is key:version (WIRE §2.2); anything else the 29 bytes.
  std::string payload;
  if (const Impl::Slot* slot = impl_->find(table); slot != nullptr && slot->spec.keys == KeyKind::kText) {
    auto frame = table::make_text_frame(id, version);
    if (!frame) return table::Unexpected{make_error_code(Errc::kBadKey)};
    payload = std::string(table::view(*frame));
  } else {
    auto name = BrandedId::parse(id);
    if (!name) return table::Unexpected{make_error_code(Errc::kKind)};
    payload = std::string(table::view(table::make_frame(*name, version)));
  }
  // On a cluster the channel is sharded: SPUBLISH reaches the SSUBSCRIBErs on its slot's shard.
  const char* verb = impl_->options.mode == ServerMode::kCluster ? "SPUBLISH" : "PUBLISH";
  auto reply = impl_->command({verb, *channel, payload});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
  return reply->view().integer();
}

Result<std::vector<MemberAdmission>> Engine::enqueue(std::string_view table, const BrandedId& group,
                                                     std::string_view id, const BrandedId& version) {
  auto job = impl_->mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  auto admitted = fan_out(table, group, *job, id, version);
  if (!admitted) Impl::add(impl_->fan_errors);
  return admitted;
}

Result<BrandedId> Engine::enqueue_async(std::string_view table, const BrandedId& group,
                                        std::string_view id, const BrandedId& version,
                                        EnqueueDone done) {
  auto& d = *impl_;
  if (!running()) return table::Unexpected{make_error_code(Errc::kStopped)};
  if (!table::check_table_name(table)) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  const Impl::Slot* slot = d.find(table);
  // The lead's payload, checked as fan_out checks it (its refusals are this call's, not done's).
  std::string payload;
  if (slot != nullptr && slot->spec.keys == KeyKind::kText) {
    auto frame = table::make_text_frame(id, version);
    if (!frame) return table::Unexpected{make_error_code(Errc::kBadKey)};
    payload = std::string(table::view(*frame));
  } else {
    auto name = BrandedId::parse(id);
    if (!name || (slot != nullptr && name->ns() != slot->spec.kind)) {
      return table::Unexpected{make_error_code(Errc::kKind)};
    }
    payload = std::string(table::view(table::make_frame(*name, version)));
  }
  auto job = d.mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  const bool lead = slot != nullptr ? slot->spec.job_lead : TableSpec{}.job_lead;
  if (lead) {
    // The lead alone, answered before any admission leaves (enqueue's order on the wire). A lead
    // that failed costs only its speed (the job still comes), as in fan_out; kStopped is final.
    auto replies = d.calls({d.lead_call(JobLaneKeys::for_table(table), payload)});
    if (!replies && replies.error() == make_error_code(Errc::kStopped)) {
      return table::Unexpected{replies.error()};
    }
    if (replies) d.note_lead(replies->front());
  }
  const bool queued = d.job_sends.push(
      [this, t = std::string(table), group, j = *job, n = std::string(id), version,
       done = std::move(done)] {
        auto admit = [&]() -> Result<std::vector<MemberAdmission>> {
          try {
            return fan_out(t, group, j, n, version, {}, /*to_shared=*/true, /*lead_sent=*/true);
          } catch (const std::bad_alloc&) {  // the thread must not end: its queue would stall
            return table::Unexpected{std::make_error_code(std::errc::not_enough_memory)};
          }
        };
        const Result<std::vector<MemberAdmission>> admitted = admit();
        if (!admitted) Impl::add(impl_->fan_errors);
        if (done) done(admitted);
      });
  if (!queued) return table::Unexpected{make_error_code(Errc::kStopped)};
  return *job;
}

Result<bool> Engine::enqueue_job(std::string_view table, const BrandedId& group, const BrandedId& job,
                                 std::string_view id, const BrandedId& version) {
  auto admissions = fan_out(table, group, job, id, version);
  if (!admissions) {
    Impl::add(impl_->fan_errors);
    return table::Unexpected{admissions.error()};
  }
  for (const auto& a : *admissions) {
    if (a.admission != Admission::kDuplicate) return true;
  }
  return false;
}

void Engine::use_journal(std::string_view table, Journal& journal) {
  Impl::Slot* slot = impl_->find(table);
  if (slot == nullptr || slot->spec.coherence != CoherenceMode::kJob) {
    throw ConfigError("use_journal: '" + std::string(table) + "' is not a declared job-lane table");
  }
  MemoryHooks hooks;
  hooks.stale = [&journal](std::string_view n, const BrandedId& v) { return journal.remembered_stale(n, v); };
  hooks.remember = [&journal](std::string_view n, const BrandedId& v) { journal.remember(n, v); };
  slot->writer->set_memory(std::move(hooks));
}

Result<Applied> Engine::apply_and_remember(std::string_view table, std::string_view id,
                                           const BrandedId& version) {
  return impl_->ask_writer<Applied>(table, id, version,
                                    [](TableWriter& w, std::string_view name, const BrandedId& v, auto answer) {
                                      w.apply_and_remember(name, v, std::move(answer));
                                    });
}

Result<std::vector<MemberAdmission>> Engine::fan_out(std::string_view table, const BrandedId& group,
                                                     const BrandedId& job, std::string_view id,
                                                     const BrandedId& version,
                                                     std::vector<std::string> row_set,
                                                     bool to_shared, bool lead_sent) {
  auto& d = *impl_;
  Impl::add(d.fan_enqueues);
  if (!table::check_table_name(table)) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  const Impl::Slot* slot = d.find(table);
  // The message: name:version, 29 bytes (WIRE §2.1), or key:version for a declared text-key
  // table (§2.2). An undeclared table's (the relay's, a tool's) are branded.
  std::string payload;
  if (slot != nullptr && slot->spec.keys == KeyKind::kText) {
    auto frame = table::make_text_frame(id, version);
    if (!frame) return table::Unexpected{make_error_code(Errc::kBadKey)};
    payload = std::string(table::view(*frame));
  } else {
    auto name = BrandedId::parse(id);
    if (!name || (slot != nullptr && name->ns() != slot->spec.kind)) {
      return table::Unexpected{make_error_code(Errc::kKind)};
    }
    payload = std::string(table::view(table::make_frame(*name, version)));
  }
  const TableSpec defaults;
  const TableSpec& spec = slot != nullptr ? slot->spec : defaults;
  const auto keys = JobLaneKeys::for_table(table);
  const std::string job_id = job.str(), g = group.str(), lease = std::to_string(spec.job_lease_ms);
  std::optional<Impl::Membership> known;
  {
    std::lock_guard lock(d.members_mu);
    if (auto it = d.membership.find(std::string(table)); it != d.membership.end()) known = it->second;
  }
  // A list read during this call is read after the caller's L2 write: a member that is not in it
  // entered after that write, so it reads the new value from L2 after its drop-on-join, and the
  // list needs no check. A list kept from an earlier call may predate the write: its round reads
  // the epoch after the admissions, and a moved epoch means one more round on a list read now.
  // So at most two rounds and one membership read per call, however fast members come and go
  // (a bound on rounds under churn answered a timeout after every member had the job).
  // The lead (TableSpec::job_lead) leaves before any admission and alone in its server turn:
  // with the membership read when there is one, else as the first round's leading call.
  // publish's SET (single server) leads the first pipeline on the one command connection, so the
  // server runs it before the lead and every admission: no member hears of a row not yet written.
  std::optional<Impl::Call> row;
  if (!row_set.empty()) row = Impl::Call{nullptr, {}, std::move(row_set)};
  bool lead = spec.job_lead && !lead_sent;
  bool fresh = !known;
  if (!known) {
    auto read = d.read_membership(table, keys,
                                  lead ? std::optional(d.lead_call(keys, payload)) : std::nullopt,
                                  std::exchange(row, std::nullopt));
    if (!read) return table::Unexpected{read.error()};
    known = std::move(*read);
    lead = false;
  }
  std::vector<MemberAdmission> out;
  std::unordered_set<std::string> sent;  // in the second round: who has the job already
  bool shared = spec.job_shared_queue && to_shared;
  for (;;) {
    std::vector<Impl::Call> batch;
    std::vector<std::string> targets;
    batch.reserve(known->members.size() + 4);
    // The row goes with the lead's leading prefix when there is a lead (the admissions wait for
    // both), else in the one pipeline ahead of everything.
    const bool row_here = row.has_value();
    if (row_here) {
      row->lead = lead;
      batch.push_back(*std::exchange(row, std::nullopt));
    }
    if (lead) batch.push_back(d.lead_call(keys, payload));
    const std::size_t at_lead = row_here ? 1 : 0;
    const std::size_t first = at_lead + (lead ? 1 : 0);  // the members' replies start here
    for (const auto& m : known->members) {
      if (sent.count(m) != 0) continue;
      std::string mbase = keys.member_base(m);
      std::string live = mbase + "live";
      batch.push_back({&d.member_enqueue, {std::move(live)}, {std::move(mbase), job_id, payload, g, lease}});
      targets.push_back(m);
    }
    if (!fresh) batch.push_back({nullptr, {}, {"GET", keys.epoch}});
    if (shared) {
      const std::string& q = keys.qbase;
      batch.push_back({&d.genqueue,
                       {q + "job:" + job_id, q + "g:" + g + ":pending", q + "ring", q + "paused",
                        q + "glimit", q + "gactive", q + "wake"},
                       {job_id, payload, g}});
    }
    // A fresh list of no member, no shared queue to feed (the row went with the list's read: a
    // round that is not fresh always carries the epoch's read).
    if (batch.size() == first) break;
    auto replies = d.calls(std::move(batch));
    if (!replies) return table::Unexpected{replies.error()};
    if (lead) d.note_lead((*replies)[at_lead]);
    lead = false;
    if (row_here) {
      if (auto ec = Impl::set_failed(replies->front())) return table::Unexpected{ec};
    }
    // The first error wins: the queues that took the job hold it under this job id, so a retry
    // is a duplicate there and an admission where it failed.
    for (std::size_t i = first; i < replies->size(); ++i) {
      if ((*replies)[i].ec) return table::Unexpected{Impl::reply_error((*replies)[i])};
    }
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const io::Resp3Value r = (*replies)[first + i].reply.view();
      if (r.type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
      const std::int64_t verdict = r.integer();
      if (verdict < 0) {  // not live: it drops its L1 rows when it beats again
        Impl::add(d.fan_not_live);
        continue;
      }
      Impl::add(verdict == 0 ? d.fan_duplicates : d.fan_admitted);
      out.push_back({targets[i], verdict == 1   ? Admission::kEnqueued
                                 : verdict == 2 ? Admission::kHandedOff
                                                : Admission::kDuplicate});
    }
    if (shared) {
      const io::Resp3Value r = replies->back().reply.view();
      if (r.type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
      out.push_back({"*", r.integer() == 1 ? Admission::kEnqueued : Admission::kDuplicate});
      Impl::add(r.integer() == 1 ? d.fan_admitted : d.fan_duplicates);
      shared = false;
    }
    if (fresh) break;
    const io::Resp3Value epoch = (*replies)[first + targets.size()].reply.view();
    if (!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string) return table::Unexpected{unexpected()};
    if ((epoch.is_null() ? std::string_view() : epoch.str()) == known->epoch) break;
    sent.insert(targets.begin(), targets.end());
    auto read = d.read_membership(table, keys);
    if (!read) return table::Unexpected{read.error()};
    known = std::move(*read);
    fresh = true;
  }
  // No queue at all: not a duplicate (nothing holds the job), and nothing will apply it.
  if (out.empty()) return table::Unexpected{make_error_code(Errc::kNoLiveMember)};
  return out;
}

Result<bool> Engine::drop_l2(std::string_view table, std::string_view id, const BrandedId& version) {
  auto& d = *impl_;
  Impl::Slot* slot = d.find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  auto name = Impl::gate(*slot, id);
  if (!name) return table::Unexpected{name.error()};
  if (slot->spec.l2_format == L2Format::kRaw) {
    return table::Unexpected{make_error_code(Errc::kNotVersioned)};
  }
  auto reply = d.script(d.drop_l2, {d.key_of(*slot, *name)}, {std::string(version.view())});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
  return reply->view().integer() == 1;
}

Result<bool> Engine::invalidate(std::string_view table, std::string_view id) {
  return impl_->on_table(table, [&](TableRef& ref) { return invalidate(ref, id); });
}

Result<bool> Engine::invalidate(TableRef& ref, std::string_view key) {
  auto& d = *impl_;
  auto name = Impl::gate(ref, key);
  if (!name) return table::Unexpected{name.error()};
  auto reply = d.command({"DEL", d.key_of(ref, *name)});
  if (!reply) return table::Unexpected{reply.error()};
  if (reply->view().type() != io::Resp3Type::integer) return table::Unexpected{unexpected()};
  const bool existed = reply->view().integer() > 0;
  auto promise = std::make_shared<std::promise<void>>();
  auto future = promise->get_future();
  ref.writer->erase(*name, [promise] { promise->set_value(); });
  if (future.wait_for(d.options.get_timeout) != std::future_status::ready) {
    return table::Unexpected{make_error_code(Errc::kTimeout)};
  }
  return existed;
}

Result<table::Verdict> Engine::apply_coherence(std::string_view table, std::string_view id,
                                               const BrandedId& version) {
  return impl_->ask_writer<table::Verdict>(table, id, version,
                                           [](TableWriter& w, std::string_view name, const BrandedId& v, auto answer) {
                                             w.apply(name, v, std::move(answer));
                                           });
}

Result<BrandedId> Engine::mint(std::string_view ns) { return impl_->mint(ns); }

int Engine::node_id() const noexcept { return impl_->lease ? impl_->lease->node() : -1; }

std::vector<TableInfo> Engine::directory() const {
  std::vector<TableInfo> out;
  for (const auto& s : impl_->slots) {
    out.push_back(TableInfo{s->spec.name, s->spec.kind, s->spec.coherence, s->spec.ttl_ms,
                            s->ring != nullptr ? s->ring->capacity() : 0});
  }
  return out;
}

EngineStats Engine::stats() const {
  EngineStats out;
  for (const auto& s : impl_->slots) {
    TableStats t;
    t.name = s->spec.name;
    t.l1 = s->writer->map().stats();
    t.writer = s->writer->stats();
    t.rings = s->writer->ring_stats();
    t.pushes = s->pushes.load(std::memory_order_relaxed);
    t.garbage = s->garbage.load(std::memory_order_relaxed);
    t.io_thread = s->io_index;
    if (s->consumer) t.consumer = s->consumer->stats();
    t.get_hit_latency = s->get_hit.snapshot();
    t.get_miss_latency = s->get_miss.snapshot();
    t.load_latency = s->load.snapshot();
    out.tables.push_back(std::move(t));
  }
  if (impl_->io) {
    out.io_backend = impl_->io->loop().backend();
    out.io_fallback_reason = std::string(impl_->io->loop().fallback_reason());
    out.io_threads.resize(static_cast<std::size_t>(impl_->options.io_threads));
    for (const auto& s : impl_->slots) {
      auto& t = out.io_threads[static_cast<std::size_t>(s->io_index)];
      t.pushes += s->pushes.load(std::memory_order_relaxed);
      if (s->spec.coherence == CoherenceMode::kBroadcast) t.tables.push_back(s->spec.name);
      // The broadcast ring's producer is its io thread; a lead ring's is io thread 0 (where a
      // job table's io_index points too). The job ring's producer is the consumer's loop: 0.
      if (s->ring != nullptr) t.signals += s->ring->stats().wakes;
      if (s->lead_ring != nullptr) t.signals += s->lead_ring->stats().wakes;
      if (s->job_ring != nullptr) t.signals += s->job_ring->stats().wakes;
    }
    for (std::size_t k = 0; k < out.io_threads.size(); ++k) {
      auto& t = out.io_threads[k];
      for (std::size_t i = 0; i < out.tables.size(); ++i) {
        if (static_cast<std::size_t>(out.tables[i].io_thread) == k) {
          t.direct_applies += out.tables[i].writer.direct_applies;
        }
      }
    }
  }
  if (impl_->cmd) out.connections.push_back(impl_->cmd->stats());
  if (impl_->sub) out.connections.push_back(impl_->sub->stats());
  for (const auto& x : impl_->extra_io) {
    if (x.sub) out.connections.push_back(x.sub->stats());
  }
  if (impl_->cluster) {
    auto cs = impl_->cluster->stats();
    out.connections.insert(out.connections.end(), cs.connections.begin(), cs.connections.end());
    out.cluster = ClusterCounters{cs.moved, cs.ask, cs.refreshes, cs.held, cs.held_expired,
                                  cs.redirect_limit, cs.masters};
  }
  if (impl_->ssub) {
    auto subs = impl_->ssub->stats();
    out.connections.insert(out.connections.end(), subs.begin(), subs.end());
    if (out.cluster) out.cluster->resubscribes = impl_->ssub->resubscribes();
  }
  if (impl_->sentinel) {
    if (auto c = impl_->sentinel->connection_stats()) out.connections.push_back(std::move(*c));
    const SentinelWatchCounters w = impl_->sentinel->stats();
    out.sentinel = SentinelCounters{w.master, w.switches, w.reconnects, w.asks, w.role_refusals};
  }
  out.unrouted_pushes = impl_->unrouted.load(std::memory_order_relaxed);
  out.tracking_sends = impl_->tracking_sends.load(std::memory_order_relaxed);
  out.tracking_refusals = impl_->tracking_refusals.load(std::memory_order_relaxed);
  if (impl_->lease) {
    out.node_id = impl_->lease->node();
    const NodeLeaseCounters l = impl_->lease->stats();
    out.node_renewals = l.renewals;
    out.node_lapses = l.lapses;
    out.node_taken = l.taken;
  }
  if (impl_->housekeeping) out.housekeeping_pin_failures = impl_->housekeeping->pin_failures();
  if (impl_->relay) {
    const RelayCounters r = impl_->relay->stats();
    out.relay_claimed = r.claimed;
    out.relay_relayed = r.relayed;
    out.relay_malformed = r.malformed;
    out.relay_errors = r.errors;
  }
  const auto ld = [](const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  const Impl& d = *impl_;
  if (d.metrics) out.metrics = d.metrics->counters();
  out.fan_out = FanOutCounters{ld(d.fan_enqueues), ld(d.fan_admitted),         ld(d.fan_duplicates),
                               ld(d.fan_not_live), ld(d.fan_membership_reads), ld(d.fan_errors),
                               ld(d.fan_leads),    ld(d.fan_lead_receivers)};
  return out;
}

void Engine::add_thread_counts(EngineStats& stats) const {
  for (std::size_t i = 0; i < stats.tables.size() && i < impl_->slots.size(); ++i) {
    const ThreadSwitches os = thread_switches(impl_->slots[i]->writer->thread_id());
    stats.tables[i].writer.os_wakes = os.voluntary;
    stats.tables[i].writer.os_preemptions = os.involuntary;
  }
  for (std::size_t k = 0; k < stats.io_threads.size() && k < impl_->io_tids.size(); ++k) {
    const ThreadSwitches os = thread_switches(impl_->io_tids[k].load(std::memory_order_relaxed));
    stats.io_threads[k].os_wakes = os.voluntary;
    stats.io_threads[k].os_preemptions = os.involuntary;
  }
}

const TableWriter* Engine::writer(std::string_view table) const {
  Impl::Slot* slot = impl_->find(table);
  return slot == nullptr ? nullptr : slot->writer.get();
}

}  // namespace echo::engine
