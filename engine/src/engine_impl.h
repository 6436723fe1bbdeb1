// SPDX-License-Identifier: MIT
// The engine's private state and the declarations of its parts, one file per step of the data
// flow (docs/architecture.md, "Data flow"):
//   engine.cc          the verbs (get, put, publish, invalidate, ...) and the tables' wiring
//   engine_options.cc  the knob checks the constructor runs (ConfigError naming knob and range)
//   engine_start.cc    start() as named stages under one rollback, stop(), probe_server
//   connections.cc     the connections' options, the subscribers' events, Sentinel's redials
//   push_router.cc     a push → its table's frame → the writer (step 2)
//   l2_calls.cc        the L2 calls: blocking, pipelined batches, scripts
//   lent_call.cc       a blocking call's (or batch's) storage, kept by its calling thread
//   writer_ports.cc    what a writer asks of the engine: L2 reads, loader calls
//   job_fanout.cc      the job lane's sending side: enqueue verbs, membership, the fan-out
//   engine_stats.cc    stats(), the directory, thread counts
// Application threads never touch a socket: blocking verbs post their command to the io thread
// and wait for its answer (lent_call.h: the thread's own reusable call); the writer's L2 reads and
// the loader's conditional writes do the same without waiting (their answers come back through the
// writer's inbox).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <echo/base/clock.h>
#include <echo/base/counter.h>
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/internal/table_writer.h>
#include <echo/engine/journal.h>
#include <echo/engine/l2_frame.h>
#include <echo/io/cluster_client.h>
#include <echo/lua/scripts.h>
#include <echo/table/names.h>

#include "caller_links.h"
#include "chores.h"
#include "housekeeping.h"
#include "job_send_queue.h"
#include "lent_call.h"
#include "loader_pool.h"
#include "metrics_http.h"
#include "node_lease.h"
#include "push_router.h"
#include "sentinel_watch.h"
#include "sharded_subscriber.h"
#include "shared_relay.h"
#include "writer_wait.h"

namespace echo::engine {

using Clock = std::chrono::steady_clock;

inline std::error_code unexpected_reply() { return make_error_code(Errc::kUnexpectedReply); }

// What every connection of an engine shares: the address, credentials, fence and timeouts.
io::ConnectionOptions base_connection_options(const EngineOptions& options, std::string label);
// Every engine-wide knob the constructor checks (engine_options.cc): ConfigError naming the knob.
void check_engine_options(const EngineOptions& options);

// Publish's L2 write: put_l2 (newer-only) of `framed` under `key` with PX `ttl_ms`.
struct RowWrite {
  std::string key, removal, framed, ttl_ms;  // removal: the row's tombstone key (put_l2's KEYS[2])
};

// How a fan-out is sent: `row`, publish's L2 write, leads the first pipeline, its error the
// answer; `to_shared` false for the relay (the job came from the shared queue); `lead_sent`: the
// caller already had the lead answered (enqueue_async).
// `admissions`: the caller reads the admissions (publish_and_wait, enqueue); publish needs only
// whether any queue took the job, and then fan_out answers none (and allocates none).
struct FanOut {
  const RowWrite* row = nullptr;  // the caller's until fan_out returns
  bool to_shared = true;
  bool lead_sent = false;
  bool admissions = true;
  // publish on a table that carries values (carry_of): the value its message carries (the lead's
  // and the job's payload is then "{" key "}" version value).
  std::optional<std::string_view> carried;
};

// One declared table: what a typed handle holds (table.h) and the engine's own slot for it.
struct Engine::TableRef {
  TableSpec spec;
  std::string channel;
  // The keys whose asynchronous refill is under way (Engine::refill), by hash: a slot holds a
  // key's hash (never 0) from the refill's post until its flight answers. Before
  // the writer: a refill the stopping writer answers still finds it. Two keys of one slot
  // share it: the second waits for the first's refill, and its next miss asks again.
  static constexpr std::size_t kRefillSlots = 256;
  std::array<std::atomic<std::uint64_t>, kRefillSlots> refills{};
  std::unique_ptr<TableWriter> writer;
  CoherenceRing* ring = nullptr;  // broadcast and tracking lanes: the io thread's ring
  // The io thread whose subscriber feeds `ring` (EngineOptions::io_threads; 0 for every lane but
  // the broadcast lane). That thread is the ring's one producer.
  int io_index = 0;
  CoherenceRing* job_ring = nullptr;   // job lane: the consumer's ring (credit-limited)
  CoherenceRing* lead_ring = nullptr;  // job lane with job_lead: the lead pushes' ring (drop)
  std::unique_ptr<JobConsumer> consumer;
  std::unique_ptr<LoaderPool> loaders;            // between start() and stop()
  std::optional<table::BrandedId> publish_group;  // job lane: publish's group when none is given
  PushRouter::Counters pushes;
  // TableStats' latencies: sampled reads (Engine::note_get, any reader thread), every loader call
  // (its loader thread).
  io::LatencyRecorder get_hit, get_miss, load;
  // The handles' share of the table (Table<T>): its map and name, and the engine's life.
  std::shared_ptr<Engine::TableLife> life;
};

struct Engine::Impl {
  using Slot = Engine::TableRef;

  Impl(Engine& e, EngineOptions o) : engine(e), options(std::move(o)) {}

  Engine& engine;  // the owner: stats snapshots (metrics, stats_publish) read through it
  EngineOptions options;
  bool started = false;  // start() ran once (owner thread): an Engine runs once
  std::vector<std::unique_ptr<Slot>> slots;
  std::unordered_map<std::string_view, Slot*> by_name;
  // The journals use_journal bound, each once (owner thread, before start).
  std::vector<const Journal*> journals;
  PushRouter router;  // built with the tables; read by the io threads
  // The subscriber's CLIENT TRACKING command (every tracking table's prefix): sent at start and
  // after every reconnect; EngineStats::tracking_sends / tracking_refusals.
  std::atomic<std::uint64_t> tracking_sends{0}, tracking_refusals{0};
  // EngineOptions::housekeeping_cpus: built with the engine, before any housekeeping thread.
  std::unique_ptr<Housekeeping> housekeeping;
  // The periodic chores' one thread (the lease's renewal, stats publishing); declared before the
  // lease, whose destructor removes its renewal.
  std::unique_ptr<Chores> chores;
  // The node lease: built with the engine, taken in start(); minting waits for it.
  std::unique_ptr<NodeLease> lease;
  io::Script put_l2 = embedded_script("put_l2");
  io::Script drop_l2 = embedded_script("drop_l2");
  io::Script publish_l2 = embedded_script("publish_l2");
  io::Script receipt_ask = embedded_script("receipt_ask");
  io::Script receipt_count = embedded_script("receipt_count");
  io::Script member_enqueue = embedded_script("member_enqueue");
  io::Script genqueue = embedded_script("genqueue");

  // fan_out's view of each job-lane table's membership: the epoch it read, then the members it
  // read after it (docs/wire.md, "The job lane's member queues"). Any thread; guarded by
  // members_mu.
  // Each entry carries every key a fan-out to it names, built once per read.
  struct Membership {
    struct Member {
      std::string name, base, live;  // the node; its queue prefix; its live key
    };
    JobLaneKeys keys;
    std::string epoch;
    std::vector<Member> members;
    std::vector<std::string> shared_keys;  // the shared queue's ring ... wake (genqueue.lua)
  };
  std::mutex members_mu;
  std::unordered_map<std::string, std::shared_ptr<const Membership>> membership;
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
  // ServerMode::kSentinel: the master's address and its changes. Built in start() before any
  // connection, which all dial its master() (connection_options()).
  std::unique_ptr<SentinelWatch> sentinel;
  // The connections a switch redials (cmd, sub, the relay's park), registered on the loop thread
  // once each exists (follow()), so a switch never reads a pointer the owner thread is writing.
  // Loop thread only; cleared when io_closing is set.
  std::vector<io::Connection*> sentinel_followers;
  std::unique_ptr<io::Connection> cmd, sub;
  // ServerMode::kCluster: the slot router replaces `cmd`, the sharded subscriber `sub`.
  std::unique_ptr<io::ClusterClient> cluster;
  std::unique_ptr<ShardedSubscriber> ssub;
  // EngineStats::fan_out, counted by fan_out on any caller's thread.
  std::atomic<std::uint64_t> fan_enqueues{0}, fan_admitted{0}, fan_duplicates{0}, fan_not_live{0},
      fan_membership_reads{0}, fan_errors{0}, fan_leads{0}, fan_lead_receivers{0};
  std::atomic<bool> running{false};
  // Blocking calls between their running check and their answer; stop() waits for zero.
  std::atomic<int> inflight{0};
  // The application threads' own links (EngineOptions::caller_links): built in start() when the
  // command path is one plain connection (no cluster, no TLS), closed in stop(), kept until
  // destruction for stats(). publish_async's calls not yet answered, which run_mine must not
  // overtake.
  std::unique_ptr<CallerLinks> links;
  std::atomic<int> async_publishes{0};
  // Loop thread only: set by stop()'s marker closure; every closure posted to the loop checks
  // it first, so none touches a connection that stop() is about to destroy.
  bool io_closing = false;
  // The chore that publishes the stats snapshot into L2 while running (options.stats_publish
  // > 0), 0 when none.
  std::uint64_t stats_chore = 0;
  // The bound journals' stats, refreshed by a chore once a second while the metrics endpoint or
  // stats_publish is on: Journal::stats() counts rows in SQLite and waits for its connection,
  // which the io thread serving /metrics must never do. Guarded by journal_mu.
  std::uint64_t journal_chore = 0;
  mutable std::mutex journal_mu;
  std::vector<JournalStats> journal_stats;
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

  // ---- Tables and keys (engine.cc) ----
  void add_table(TableSpec spec, int& broadcast_tables);
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
  // The key gate, nothing on the wire: a branded table's kind gate (14 bytes, a valid id,
  // namespace = the table's kind; kKind), a text table's key check (kBadKey). Answers the key,
  // a view of `id`.
  static Result<std::string_view> gate(const Slot& slot, std::string_view id);
  // The message `name:version` for `table` (29 bytes), or key:version for a declared text-key
  // table; an undeclared table's (the relay's, a tool's) is branded. kBadKey / kKind (the id is
  // not of the declared table's kind) when it cannot be built.
  static Result<std::string> message_of(const Slot* slot, std::string_view id,
                                        const table::BrandedId& version);
  // The same message appended to `out`.
  static Error append_message(std::string& out, const Slot* slot, std::string_view id,
                              const table::BrandedId& version);
  // What a publish of `value` on `slot` carries: the value when the table carries values and it
  // fits carry_max_bytes, else nothing (the message carries the version only).
  static std::optional<std::string_view> carried_of(const Slot& slot, std::string_view value) {
    if (carry_of(slot.spec) == Carry::kOff || value.size() > slot.spec.carry_max_bytes) {
      return std::nullopt;
    }
    return value;
  }
  // Runs `post(done)`, which hands a writer a command that calls `done` once it ran, and waits
  // up to get_timeout for it: kTimeout past it (the command still runs). An app thread.
  // The wait is the thread's own (writer_wait.h): nothing allocated once warm.
  template <class Post>
  Error await_writer(Post&& post) {
    WriterWait& w = WriterWait::mine();
    post(w.arm());
    if (!w.wait(std::chrono::steady_clock::now() + options.get_timeout)) {
      return make_error_code(Errc::kTimeout);
    }
    return {};
  }
  // The same, for a post that borrows the thread's kept value storage (TableWriter::put_lent).
  template <class Post>
  Error await_writer_lent(Post&& post) {
    WriterWait& w = WriterWait::mine();
    post(w.value(), w.arm());
    if (!w.wait(std::chrono::steady_clock::now() + options.get_timeout)) {
      return make_error_code(Errc::kTimeout);
    }
    return {};
  }
  // The channel verb of this server mode: SPUBLISH on a cluster (the channel is sharded), else
  // PUBLISH.
  const char* publish_verb() const noexcept {
    return options.mode == ServerMode::kCluster ? "SPUBLISH" : "PUBLISH";
  }
  // publish_l2.lua's arguments for a broadcast table's write of `value` under `version` to the
  // gated `name`: the framed value, the TTL, the channel, the message (name:version, 29 bytes, or
  // key:version; when it carries the value, "{" key "}", to which the script appends the framed
  // value: docs/wire.md, "Carried values"), the verb, and then "carry". Publish and
  // publish_async send the same call.
  // `Words` is a LentCall or a WordList.
  template <class Words>
  Error publish_args(Words& out, const Slot& slot, std::string_view name,
                     const table::BrandedId& version, std::string_view value) const {
    const bool carried = carried_of(slot, value).has_value();
    append_l2_value(out.word(), version, value);
    out.word(static_cast<std::uint64_t>(slot.spec.ttl_ms));
    out.word(slot.channel);
    std::string& message = out.word();
    if (carried) {
      message.append("{").append(name).append("}");
    } else if (Error e = append_message(message, &slot, name, version)) {
      return e;  // the name passed the gate
    }
    // The channel shares the key's hash tag (table::coherence_channel): the script's slot, so on
    // a cluster the router sends it to the shard whose SSUBSCRIBErs hear the SPUBLISH.
    out.word(publish_verb());
    if (carried) out.word("carry");
    return {};
  }
  // The L2 key of a gated key (of a table whose name passed its check at creation).
  static std::string key_of(const Slot& slot, std::string_view key) {
    std::string out;
    table::append_l2_key(out, slot.spec.name, key);
    return out;
  }
  // Its removal tombstone's key (docs/wire.md, "Removals"): the scripts' KEYS[2].
  static std::string removal_key_of(const Slot& slot, std::string_view key) {
    std::string out;
    table::append_removal_key(out, slot.spec.name, key);
    return out;
  }
  int current_node() const noexcept { return lease ? lease->current() : -1; }
  // Mints through the process's one cell (table::process_minter) under the leased node:
  // no_node_lease without one, kind for a bad namespace.
  Result<table::BrandedId> mint(std::string_view ns) const;
  // `version`, or a new one of the table's kind.
  Result<table::BrandedId> version_for(const Slot& slot,
                                       std::optional<table::BrandedId> version) const;
  // The leased node as the member queues and stats keys name it.
  std::string node_name() const { return std::to_string(lease ? lease->node() : -1); }

  // ---- The read path (engine.cc) ----
  // The caller's-thread half of a read, shared by get and get_async: the table, the key gate
  // (nothing on the wire), then L1. Either an answer (a hit or a refusal), or the slot whose
  // writer takes the miss of `name`.
  struct ReadHere {
    std::optional<Result<Got>> answer;
    Slot* slot = nullptr;
    std::string_view name;  // the gated key (a view of the caller's id)
  };
  ReadHere read_here(std::string_view table, std::string_view id) const;
  ReadHere read_here(Slot& slot, std::string_view id) const;
  // A miss goes single-flight through the table's writer; `done` runs on the writer thread.
  static void send_miss(Slot& slot, std::string_view name, std::function<void(Result<Got>)> done);

  // ---- The L2 calls (l2_calls.cc). Any thread but the loop's, unless it says loop thread. ----
  // A blocking call between its running check and its answer: stop() waits for none.
  struct Inflight {
    std::atomic<int>& n;
    explicit Inflight(std::atomic<int>& count);
    ~Inflight() { n.fetch_sub(1, std::memory_order_acq_rel); }
    Inflight(const Inflight&) = delete;
    Inflight& operator=(const Inflight&) = delete;
  };
  // Posts `call` (its parts built on this thread: LentCall::mine()) to io thread 0 and waits
  // for every answer (call_timeout). The parts leave back to back on the loop thread (the
  // leading ones first: LentCall::begin), so those that route to one connection leave in one
  // write (one pipeline per shard); each answer keeps its own error. stopped, or timeout.
  Error lend(LentCall& call);
  // lend() for one call: a view of its answer, valid until this thread's next call; the
  // server's error replies are server_error with the server's words.
  Result<io::Resp3Value> run(LentCall& call);
  // run() for one call that may go on the calling thread's own link (caller_links.h): written
  // and answered on this thread, no io thread between. Through io thread 0 when the thread has
  // no link, while a publish_async is unanswered (it must not be overtaken), and again there when
  // the server did not run it on the link: nothing of it left, or the master refused it
  // READONLY (a demoted master). A link the server closed while idle is dialled again first; one
  // lost after the call left answers disconnected, as the io thread's connection does.
  Result<io::Resp3Value> run_mine(LentCall& call);
  // The master a caller's link dials now: Sentinel's answer, else host:port.
  io::LinkTarget link_target() const;
  // Loop thread: issues one part of a lent call (LentCall::Issuer; `owner` is the Impl).
  static std::error_code issue_part(void* owner, LentCall::Part& part);
  // run() for words in vectors; the answer copied out.
  Result<io::Resp3Owned> command(const std::vector<std::string>& args);
  Result<io::Resp3Owned> script(const io::Script& s, const std::vector<std::string>& keys,
                                const std::vector<std::string>& argv);
  // Loop thread: the one connection, or the cluster router by slot (which always answers
  // through `done`).
  std::error_code issue(std::span<const std::string_view> args, io::ReplyFn done);
  std::error_code issue(std::initializer_list<std::string_view> args, io::ReplyFn done) {
    return issue(std::span<const std::string_view>(args.begin(), args.size()), std::move(done));
  }
  std::error_code issue_script(const io::Script& s, std::span<const std::string_view> keys,
                               std::span<const std::string_view> argv, io::ReplyFn done);
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
  // lend() for calls whose words are in vectors; the answers copied out.
  Result<std::vector<io::OwnedResult>> calls(const std::vector<Call>& batch);
  // A pipelined call's failure as a verb answers it: server_error carries the server's words
  // ("OOM command not allowed ...", "WRONGTYPE ..."), as run()'s do.
  static Error reply_error(std::error_code ec, const io::Resp3Value& reply);
  static Error reply_error(const io::OwnedResult& r) { return reply_error(r.ec, r.reply.view()); }
  // put_l2's reply: its error, unexpected_reply() for anything but 1 (stored) or 0 (L2 held a
  // version as new or newer: kept), else none.
  static Error row_failed(std::error_code ec, const io::Resp3Value& reply);
  static Error row_failed(const io::OwnedResult& r) { return row_failed(r.ec, r.reply.view()); }
  // The L1 row of a write L2 already holds (put, publish): the writer's put, waited for up to
  // get_timeout. `guard`: a tracking table's forget_token, taken before L2 was written.
  Result<table::BrandedId> put_l1(Slot& slot, std::string_view name, std::string_view value,
                                  const table::BrandedId& version,
                                  std::uint64_t guard = TableWriter::kNoGuard);
  // One coherence message applied by the table's writer while the caller waits (up to
  // get_timeout): the key gate, a running writer, then submit(writer, name, version, answer).
  template <typename T, typename Submit>
  Result<T> ask_writer(std::string_view table, std::string_view id, const table::BrandedId& version,
                       Submit submit);

  // The broadcast lane's receipts (docs/wire.md, "Receipts"), once the write of `name` at
  // `version` is published: the ask under `receipt` on the table's ask channel, then its receipt
  // key read every 0.2 ms (backing off to 5 ms) until as many nodes applied the write as heard
  // the ask (answered), or `until` passed (kTimeout, "<k> of <n> nodes applied it ...").
  Result<std::size_t> await_receipts(const Slot& slot, std::string_view name,
                                     const table::BrandedId& version,
                                     const table::BrandedId& receipt, Clock::time_point until);

  // ---- The writer's ports (writer_ports.cc): called on the writer thread; never block. ----
  WriterPorts ports_for(Slot& slot);
  void load_into_l2(Slot& slot, const std::string& name, const table::BrandedId& minted,
                    bool write_l2, const std::shared_ptr<LoadClaim>& claim,
                    std::function<void(LoadOutcome)> done);

  // ---- The job lane's sending side (job_fanout.cc). Any thread. ----
  // The job lane's publish (Engine::publish's job-lane overload), with what it sent: the job id
  // and the queues that hold it (Engine::publish_and_wait waits for their completions).
  struct PublishedJob {
    table::BrandedId version, job;
    std::vector<MemberAdmission> admitted;
  };
  // `admissions`: as FanOut's (publish reads none).
  Result<PublishedJob> publish_job(Slot& on, const table::BrandedId& group, std::string_view id,
                                   std::string_view value, std::optional<table::BrandedId> version,
                                   bool admissions = true);
  Result<std::vector<MemberAdmission>> fan_out(std::string_view table,
                                               const table::BrandedId& group,
                                               const table::BrandedId& job, std::string_view id,
                                               const table::BrandedId& version,
                                               FanOut how = FanOut{});
  struct Round;
  Result<bool> fan_out_round(Round& r, std::vector<MemberAdmission>& out);
  std::size_t round_calls(LentCall& c, const Round& r) const;
  // Reads a job-lane table's membership: the epoch, then the members (one pipeline, one shard),
  // and keeps it as fan_out's view. `lead`: a lead push of that payload sent in the same
  // pipeline. `row`: publish's L2 write sent ahead of both (single server), whose failure is the
  // answer.
  Result<std::shared_ptr<const Membership>> read_membership(std::string_view table,
                                                            const JobLaneKeys& keys,
                                                            const std::string* lead = nullptr,
                                                            const RowWrite* row = nullptr);
  // Publish's row write (put_l2.lua, newer-only) as a part of `c`.
  void add_row(LentCall& c, const RowWrite& row, bool lead) const;
  // The job lane's lead push of `payload` on `keys.lead` (TableSpec::job_lead), leading.
  void add_lead(LentCall& c, const JobLaneKeys& keys, std::string_view payload) const;
  void note_lead(const LentCall::Part& p);  // a lead that failed costs nothing but its speed

  // ---- Connections (connections.cc) ----
  io::ConnectionOptions connection_options(std::string label) const;
  std::vector<io::NodeAddress> seeds() const;
  void note_io_thread(int k);  // on io thread k, first thing: its name and kernel id
  // Io thread `index`'s subscriber went or came back (on that io thread): only the tables it
  // feeds suspend. Sentinel ROLE checks and tracking live on io thread 0 alone.
  void on_sub_event(io::ConnEvent event, int index);
  static std::string sub_label(int index) {
    return index == 0 ? std::string("sub") : "sub:" + std::to_string(index);
  }
  void resend_tracking();              // loop thread, after the subscriber's reconnect
  void check_role(io::Connection& c);  // Sentinel: a demoted master must not serve us
  void on_master_switch();             // Sentinel: every connection that is up redials
  void follow(io::Connection* c);      // owner thread: a switch from now on redials `c`

  // ---- Start and stop (engine_start.cc) ----
  Error start_once(std::chrono::milliseconds timeout);
  Error open_io();
  Error open_metrics();
  Error connect_commands(Clock::time_point deadline);
  Error connect_single(Clock::time_point deadline);
  Error check_server(Clock::time_point deadline);
  Error start_consumers();
  Error subscribe(Clock::time_point deadline);
  Error subscribe_extra(Clock::time_point deadline);
  Error await_delivery(Clock::time_point deadline);
  Error check_carried_readers();
  Error start_relay();
  void start_stats_publishing();
  void start_journal_refresh();
  void stop();
};

template <typename T, typename Submit>
Result<T> Engine::Impl::ask_writer(std::string_view table, std::string_view id,
                                   const table::BrandedId& version, Submit submit) {
  Slot* slot = find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  auto name = gate(*slot, id);
  if (!name) return table::Unexpected{name.error()};
  if (!slot->writer->running()) return table::Unexpected{make_error_code(Errc::kStopped)};
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  // The writer answers every command, `stopped` included when stop() overtakes this one.
  submit(*slot->writer, *name, version,
         [promise](Result<T> v) { promise->set_value(std::move(v)); });
  if (future.wait_for(options.get_timeout) != std::future_status::ready) {
    return table::Unexpected{make_error_code(Errc::kTimeout)};
  }
  return future.get();
}

}  // namespace echo::engine
