// SPDX-License-Identifier: MIT
// The public façade. An Engine owns one io thread, or EngineOptions::io_threads of them (io_uring;
// a command connection and, when a table declares the broadcast or tracking lane, a subscriber
// connection, one per io thread that feeds a broadcast table; under
// ServerMode::kSentinel also one connection to a sentinel), one writer thread per table, and
// each table's own loader threads (TableSpec::loader_threads). Reads hit L1 on the caller's
// thread; everything that changes L1 reaches the table's writer as a message (docs/architecture.md,
// "Threads").
//
// Errors: the constructor throws ConfigError for a knob out of range, and nothing else throws.
// start() answers a std::error_code; every data verb (get, put, broadcast, invalidate, ...)
// answers a Result<T> (error.h): the value, or an Error with its code (compare it with
// `r.error() == Errc::kKind`) and a message (r.error().message(): a loader's reason, the bound a
// loader missed). Result::value() on an error throws table::BadExpectedAccess: check first.
//
//   Engine e(options, {quotes_spec});
//   e.start();                                     // connects, subscribes, starts the writers
//   auto got = e.get("quotes", "AST0KHTOWnGLuC");  // l1 | l2 | loader
//   e.put("quotes", id, "px=106.00", version);     // L2 SET, then L1
//   e.broadcast("quotes", id, version);            // PUBLISH ecc:{quotes}:coh, receivers heard
//   e.publish("quotes", id, "px=106.00");          // both in one atomic round trip
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <typeinfo>
#include <vector>

// What an application needs and nothing of the machinery behind it (the connector, the io loop,
// the journal's SQLite side, the writer): engine.h with table.h is ~1.1x the standard headers its
// API names (docs/architecture.md, "Headers").
#include <echo/engine/answers.h>
#include <echo/engine/errc.h>
#include <echo/engine/error.h>
#include <echo/engine/keys.h>
#include <echo/engine/log.h>
#include <echo/engine/stats.h>
#include <echo/engine/table_spec.h>
#include <echo/io/connection_stats.h>
#include <echo/io/latency_histogram.h>
#include <echo/io/loop_options.h>
#include <echo/io/tls_options.h>
#include <echo/ring/ring_stats.h>
#include <echo/table/expected.h>
#include <echo/table/l1_map.h>

namespace echo::engine {

// Where L2 lives: one server, a Valkey/Redis Cluster (commands routed by slot, the broadcast
// lane on sharded pub/sub), or one master found and followed through Redis Sentinel (every
// connection dials the master the sentinels name; a +switch-master moves them all, and the
// subscriber's loss applies the disconnect policy: README "Sentinel"). Checked at construction;
// start() fails if the server disagrees.
enum class ServerMode : std::uint8_t { kSingle, kCluster, kSentinel };

struct EngineOptions {
  std::string host = "127.0.0.1";  // 1..255 bytes, no space or control byte; resolved in
                                   // start() (host_unresolved when it does not)
  int port = 0;                    // 1..65535; required unless cluster_seeds is set
  ServerMode mode = ServerMode::kSingle;
  // kCluster: seed nodes "host:port,host:port,..." (empty: host:port above); any live node serves.
  std::string cluster_seeds;
  int cluster_max_redirects = 5;  // kCluster: MOVED/ASK per call, 0..16
  // kSentinel (and only then; host and port are ignored): the sentinels "host:port,host:port,..."
  // (1 or more; names resolved in start(), host_unresolved when one does not), asked in turn, and
  // the name they monitor the master under (sentinel_master: 1..255 bytes, no space or control
  // byte). Default: both empty. start() answers sentinel_unknown_master when the first sentinel
  // that answers does not know the name, no_sentinel when none answers.
  std::string sentinels;
  std::string sentinel_master;
  // The sentinels' own requirepass (HELLO 3 AUTH default <it>); empty (the default): none. The
  // master's is `password` below.
  std::string sentinel_password;
  // ACL credentials (HELLO 3 AUTH <username> <password>; AUTH under the RESP2 fallback). An
  // empty password sends none (the server's default user, nopass). README "Least privilege"
  // gives the ACL line with every command and key the engine needs.
  std::string username = "default";
  std::string password;
  // TLS on every connection this engine opens (command, subscriber, job-lane parkers, the relay,
  // each cluster node's, the sharded subscriber's): off by default. With enabled, ca_file (empty
  // = the system store), cert_file and key_file (a client certificate: both or neither) must name
  // readable PEM files (ConfigError naming the knob, e.g. "tls.key_file"); server_name (empty =
  // the host dialled) is sent as SNI and checked in the server's certificate. start() answers
  // io tls_verify or tls_handshake when the server's certificate or the handshake is refused.
  // A cluster over TLS needs tls-cluster yes on its nodes, so its topology names TLS ports.
  io::TlsOptions tls;
  // This engine's minting node: kAutoNode (the default) leases the first free node in 0..1023 at
  // start; 0..1023 leases that one (start fails node_taken when another process holds it). Either
  // way the lease ({ecc}:node:<n>, renewed every third of node_lease) is what lets the engine
  // mint: two live processes never mint under one node (docs/wire.md, "Node leases"). node_id()
  // says which.
  static constexpr unsigned kAutoNode = ~0u;
  unsigned node_id = kAutoNode;
  // How long a node lease lives unrenewed: 1000..3,600,000 ms. A process cut off from the server
  // for longer stops minting (puts without a version, loader fills answer no_node_lease) until
  // a renewal holds the lease again.
  std::chrono::milliseconds node_lease{15000};
  io::LoopOptions io{};  // io thread: wait mode, CPU pinning, backend (auto:
                         // io_uring, epoll where the kernel refuses it)
  // io.threads: how many io threads (each its own loop, named echo-io:<n>): 1..16, default 1.
  // Io thread 0 carries the command connection, the job lanes (consumers, parkers, leads), the
  // tracking lane and the relay; the broadcast tables are dealt round-robin over the io threads
  // from the last one down (the first broadcast table on io thread N-1, ..., so that with 2 the
  // first table's pushes leave the thread the command path runs on). Each io thread with a
  // broadcast table opens its own subscriber connection ("sub:<n>"; "sub" on thread 0) carrying
  // only its tables' channels, and feeds each of those tables through its own ring: one ring per
  // (io thread, table), one producer each (docs/architecture.md, "Threads"). io.cpu pins io thread
  // 0 only. Above 1 needs mode single (ConfigError otherwise): a cluster's sharded subscriber and
  // a sentinel's redials live on io thread 0. 16: more io threads than that only add
  // connections; two tables on one io thread share its decode, nothing else.
  int io_threads = 1;
  // The CPUs the engine's housekeeping threads run on: the chores thread (echo-house: the node
  // lease's renewal and the stats publisher), the tables' loaders (echo-load), the relay
  // (echo-relay) and the job sender (echo-jobsend). Empty (the default): wherever the scheduler
  // puts them. Each 0..1023; a CPU outside the process's cpuset is counted
  // (EngineStats::housekeeping_pin_failures) and that thread runs unpinned. The io threads (io.cpu)
  // and the writers (TableSpec::writer_cpu) have their own knobs; a Journal's flusher is the
  // journal's (JournalOptions::flusher_cpus).
  std::vector<int> housekeeping_cpus;
  std::chrono::milliseconds get_timeout{10000};  // a miss's wait for its flight (the original's);
                                                 // 1..3,600,000 ms
  std::chrono::milliseconds call_timeout{5000};  // a blocking L2 call; 1..3,600,000 ms
  // How many application threads may each keep a connection of their own to the master, on
  // which a broadcast table's publish is written and answered by the calling thread itself: a
  // publish then costs its round trip alone, where handing it to io thread 0 and being handed
  // the answer back adds two cross-thread wakes (docs/architecture.md, "A publish on the caller's
  // own link"). The first caller_links threads to publish get one (dialled at their first
  // publish; a thread's ends with it); the others, and every call while one of the thread's
  // publish_async calls is unanswered, go through io thread 0 in order. Not with TLS or a
  // cluster (those publishes go through io thread 0). 0..1024, default 16; 0: every call goes
  // through io thread 0.
  std::size_t caller_links = 16;
  std::chrono::milliseconds heartbeat{30000};  // idle PING on each connection; 0 = off,
                                               // else at most 3,600,000 ms
  // The {emq}:version fence (docs/wire.md, "The fence"): the value this engine claims when the key
  // is unset (not empty), and the others it accepts as sharing the wire. The chapters' bus writes
  // echomq:2.0.0, the original's current code echomq:3.0.0; every key and script the coherence
  // lanes use (genqueue, gclaim, complete, retry, reap, promote; the job hash's state, attempts,
  // payload, group) is the same in both, and 3.0.0's additions (flow fields read by complete and
  // retry, lock keys, admin verbs) are optional fields our jobs never carry: either era's consumer
  // claims and completes the other's jobs. README "Beside the original".
  std::string version_value = "echomq:2.0.0";
  std::vector<std::string> version_accept = {"echomq:2.0.0", "echomq:3.0.0"};
  // Every this often, SET ecc:{t}:stats:<node_id> to each table's JSON stats snapshot, PX three
  // periods (stats_export.h; `echostore stats` reads them). 0 = off, else 100..3,600,000 ms.
  std::chrono::milliseconds stats_publish{0};
  // The metrics endpoint (metrics_http.h): an HTTP listener on metrics_bind:metrics_port that
  // answers GET /metrics with the Prometheus text of this engine's snapshot (stats_export.h),
  // served on the io thread without blocking it. 0 (the default) = off, else 1..65535; start()
  // fails with the address and errno's words when the port cannot be bound. metrics_bind: an
  // IPv4 literal, "127.0.0.1" by default (this host only); binding it beyond loopback (say
  // "0.0.0.0") exposes every table's name and counters, unauthenticated: the operator's choice.
  int metrics_port = 0;
  std::string metrics_bind = "127.0.0.1";
  // Operational hooks (log.h): where the engine's lines go (empty: one line each on stderr), and
  // a watcher of connection events (connected, lost with its cause, reconnected, resubscribed;
  // on the connection's io thread) and table events (suspended, resumed; on the table's writer
  // thread). Both must not block and must not call into the engine.
  LogSink log;
  EventSink on_event;
};

// A read's answer.
struct Got {
  std::string value;
  std::optional<table::BrandedId> version;
  Source source = Source::kL1;
};

// One declared table as the directory lists it (docs/wire.md, "Table semantics").
struct TableInfo {
  std::string name, kind;
  CoherenceMode coherence;
  std::int64_t ttl_ms;
  std::size_t ring_capacity;  // 0 when the table has no ring (coherence none/job)
};

// The job lane's admission verdict for one member queue ("*" names the shared queue).
enum class Admission : std::uint8_t { kEnqueued, kDuplicate, kHandedOff };
struct MemberAdmission {
  std::string member;
  Admission admission;
};

// Reads timed per reading thread: 1 in kGetSampleEvery (a power of two). At 64 the sample costs
// about one thread-local increment per read (the measurement: docs of TableStats' latencies).
inline constexpr unsigned kGetSampleEvery = 64;
static_assert((kGetSampleEvery & (kGetSampleEvery - 1)) == 0, "the sample test is a mask");

namespace detail {
// True on every kGetSampleEvery-th read of the calling thread. Reader thread; no atomic, no
// syscall, no allocation.
inline bool sample_get() noexcept {
  thread_local unsigned reads = 0;
  return (++reads & (kGetSampleEvery - 1)) == 0;
}
}  // namespace detail

struct TableStats {
  std::string name;
  std::optional<JobConsumerStats> consumer;  // job-lane tables
  table::L1Stats l1;
  WriterStats writer;
  std::vector<ring::RingStats> rings;
  int io_thread = 0;  // the io thread whose subscriber feeds this table (EngineOptions::io_threads)
  // Pushes routed and frames refused: the broadcast lane's, or the job lane's lead (job_lead).
  std::uint64_t pushes = 0, garbage = 0;
  // Carried messages applied as drops because their ring's arena was full
  // (TableSpec::carry_arena_bytes): each costs its readers one refill.
  std::uint64_t carry_degraded = 0;
  // Reads timed on a sample, 1 in kGetSampleEvery per reading thread (an L1 hit costs ~50-130 ns:
  // two clock reads on every one would cost more than the read): hits (answered from L1) and
  // misses (L2, the loader, or an error), caller's call → its answer.
  io::LatencySnapshot get_hit_latency, get_miss_latency;
  // Every loader call, on the loader thread: call → return (or throw).
  io::LatencySnapshot load_latency;
};

// The metrics endpoint's counters (EngineOptions::metrics_port; zero while it is off).
struct MetricsCounters {
  std::uint64_t requests = 0;               // requests answered (any status)
  std::uint64_t ok = 0, client_errors = 0;  // 2xx; 4xx (400, 404, 405, 431: past 8 KiB)
  std::uint64_t server_errors = 0;          // 5xx (503: more than 16 clients at once)
  std::uint64_t dropped = 0;                // clients closed unanswered: the 2 s deadline,
                                            // a socket error, a close before a whole request
  std::uint64_t connected = 0;              // clients connected now (gauge)
};

// ServerMode::kCluster: the router's counters (io::ClusterStats) and the sharded subscriber's.
struct ClusterCounters {
  std::uint64_t moved = 0, ask = 0, refreshes = 0, held = 0, held_expired = 0, redirect_limit = 0,
                masters = 0, resubscribes = 0;
};

// The job lane's writer side (enqueue, enqueue_job, the journal's replay through them): what the
// fan-out to the member queues answered, summed over every table this engine enqueued to.
struct FanOutCounters {
  std::uint64_t enqueues = 0;    // enqueue / enqueue_job / job-lane publish calls
  std::uint64_t admitted = 0;    // queues that newly took a job (enqueued or handed off)
  std::uint64_t duplicates = 0;  // queues that already held the job
  std::uint64_t not_live = 0;    // listed members skipped: no live key (they drop L1 on return)
  std::uint64_t membership_reads = 0;  // membership read because the epoch moved (or first use)
  std::uint64_t errors = 0;            // calls that answered an error (no_live_member included,
                                       // but for publish, which answers success then)
  std::uint64_t leads = 0;             // lead pushes published (TableSpec::job_lead)
  std::uint64_t lead_receivers = 0;    // the subscribers the server said heard them, summed
};

// ServerMode::kSentinel: the watcher's counters.
struct SentinelCounters {
  std::string master;            // "host:port" the engine's connections dial now
  std::uint64_t switches = 0;    // master changes followed (+switch-master, or found on a re-ask)
  std::uint64_t reconnects = 0;  // the watcher's sentinel connection lost and booted again
                                 // (on the next sentinel of the list)
  std::uint64_t asks = 0;        // get-master-addr-by-name answered with an address
  std::uint64_t role_refusals = 0;  // connections that found the named master answering ROLE as
                                    // a replica (a demoted master): dropped, the sentinels re-asked
};

struct EngineStats {
  std::vector<TableStats> tables;
  std::vector<io::ConnectionStats> connections;
  std::optional<ClusterCounters> cluster;
  std::optional<SentinelCounters> sentinel;
  FanOutCounters fan_out;
  std::uint64_t unrouted_pushes = 0;  // pushes for no declared table, or not messages
  // Tracking tables: CLIENT TRACKING commands sent (start, each reconnect) and refused or lost.
  std::uint64_t tracking_sends = 0, tracking_refusals = 0;
  // The node lease: the node (-1 before start), renewals confirmed, lapses (minting stopped).
  int node_id = -1;
  std::uint64_t node_renewals = 0, node_lapses = 0, node_taken = 0;
  // Housekeeping threads the kernel refused to pin to EngineOptions::housekeeping_cpus.
  std::uint64_t housekeeping_pin_failures = 0;
  // The callers' own links (EngineOptions::caller_links): threads holding one now, links
  // dialled, publishes answered on one, and publishes sent through io thread 0 after their link
  // failed them (lost before the answer, or refused READONLY by a demoted master).
  std::uint64_t caller_links_held = 0, caller_link_opens = 0, caller_link_calls = 0,
                caller_link_fallbacks = 0;
  // The shared-queue relay (TableSpec::job_relay), summed over this engine's relaying tables.
  std::uint64_t relay_claimed = 0, relay_relayed = 0, relay_malformed = 0, relay_errors = 0;
  // The io thread's loop (EngineOptions::io.backend): kUring or kEpoll once started (kAuto
  // before), and why an auto loop fell back to epoll ("io_uring refused (Operation not
  // permitted)"; empty when it did not).
  io::Backend io_backend = io::Backend::kAuto;
  std::string io_fallback_reason;
  MetricsCounters metrics;
  // Per io thread (index = its n in echo-io:<n>; empty before start): the pushes its subscriber
  // routed into rings, and the broadcast tables it feeds; what it costs its neighbours: signals
  // (futex wakes it sent writers through its rings), direct_applies (items it applied under a
  // parked writer's token instead), and the kernel's counts for the thread: os_wakes (voluntary
  // context switches: one wake per sleep) and os_preemptions (involuntary ones). An io thread
  // makes no membarrier call: reclamation runs on the writers only.
  struct IoThread {
    std::uint64_t pushes = 0;
    std::vector<std::string> tables;
    std::uint64_t signals = 0, direct_applies = 0, os_wakes = 0, os_preemptions = 0;
  };
  std::vector<IoThread> io_threads;
};

// Boots one connection to the server `options` names, as the engine's own connections boot
// (HELLO 3 with the credentials, then the {emq}:version fence), and closes it: {} when it became
// ready within `timeout`, else start()'s first-failure answer with the cause in words (a wrong
// password, an ACL denial, bytes that are not RESP, a foreign fence; timeout naming the last
// attempt when nothing answered). In cluster mode it boots on the first seed, without the fence
// (the router checks that on its slot's master). Any thread but an engine's io thread; blocks up
// to `timeout`; throws nothing (a host that does not resolve answers host_unresolved). What
// `echostore drill --server` runs before its gates.
Error probe_server(const EngineOptions& options, std::chrono::milliseconds timeout);

template <class T>
class Table;  // table.h: a typed handle on one declared table

class Engine;
class Journal;        // echo/engine/journal.h: a program that binds one includes it
struct JournalStats;  // the same header
class TableWriter;    // echo/engine/internal/table_writer.h
namespace internal {
// The table's writer (its map, its stats), or nullptr: for the project's own tests, drill and
// profiling (echo/engine/internal/access.h), not for applications.
const TableWriter* writer_of(const Engine& engine, std::string_view table);
}  // namespace internal

class Engine {
 public:
  // Validates every declaration (ConfigError naming the table and knob). Starts nothing.
  Engine(EngineOptions options, std::vector<TableSpec> tables);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Connects, boots, subscribes every broadcast table and waits for the confirmations (and each
  // job-lane table's first membership beat), then starts the writers. Owner thread; blocks up to
  // `timeout`. Returns the first failure: member_conflict when another process beats as this
  // node_id in a job-lane table's membership (job_consumer.h, "Two processes, one node id").
  // tracking_refused when a tracking table's CLIENT TRACKING is answered other than +OK.
  // no_free_node (node_id auto, all 1024 leased) or node_taken (an explicit node_id another
  // process leases): the node lease, taken before anything mints.
  // ServerMode::kSentinel: sentinel_unknown_master, no_sentinel, not_master (errc.h).
  // io tls_verify (the server's certificate failed the chain or name check) or tls_handshake
  // (the handshake or an alert right after it: a client certificate required, not a TLS peer)
  // with EngineOptions::tls; the detail carries X509's or OpenSSL's reason.
  // host_unresolved when the host (or a seed) does not resolve, the kernel's error when the
  // io_uring or a thread cannot be made; it never throws for a knob the constructor accepted.
  // The server's first definitive answer ends start() at once, with the connector's code and
  // the server's words in Error::detail: auth_refused (WRONGPASS), no_permission (an ACL
  // denial), protocol_error (a peer that is not Redis: the bytes it sent), version_fence (the
  // value held), boot_refused, unexpected_hello, wrong_mode. timeout only when nothing answered
  // in time; its detail names the last attempt ("connect to 127.0.0.1:7000: Connection
  // refused", "127.0.0.1:7000 did not answer the boot's HELLO within 3000 ms").
  // A timeout beyond 24 h is taken as 24 h.
  // An Engine runs once: start() after stop(), or after a start() that failed, answers stopped
  // (construct a new Engine); start() while running answers success.
  Error start(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Stops the writers, the loader threads and the io thread; waiters get `stopped`. Idempotent.
  // Waits for every loader call under way to return (a thread cannot be cancelled; a loader
  // that never returns keeps stop() from returning).
  void stop();

  // ---- Any application thread. ----
  // Cache-aside read: an L1 hit never leaves this thread (no lock, no syscall); a miss goes
  // single-flight through the writer (one L2 GET per name; the table's loader on an L2 nil).
  // Blocks up to get_timeout on a miss. no_such_cache, kind (nothing on the wire),
  // corrupt_l2_frame, loader_failed (message: "loader failed: <LoadError::reason or the
  // exception's what()>"), loader_timeout (TableSpec::loader_timeout), timeout, contended,
  // stopped, or a connection error.
  Result<Got> get(std::string_view table, std::string_view id);
  // get for many keys of one table at once: every miss is sent before any is waited for, so
  // their L2 reads leave together, pipelined on the command connection (one round trip for all
  // the misses, plus the loader for the keys L2 lacks). One answer per key, in the keys' order;
  // a key not answered within get_timeout answers timeout. Blocks; any application thread.
  std::vector<Result<Got>> get_many(std::string_view table, std::span<const std::string_view> ids);
  // The same, without waiting. `done` runs exactly once: inline on the caller's thread for a hit
  // or a refusal; for a miss on the table's writer thread, or `stopped` on the thread that stops
  // the engine (or on this one, when the engine stopped first). It must not block and must not
  // call back into this engine's waiting verbs (get, put, ...): on the writer thread it holds up
  // every row, message and miss of its table while it runs. get_async imposes no timeout of
  // its own (a flight's loader stage still ends at the table's loader_timeout).
  void get_async(std::string_view table, std::string_view id,
                 std::function<void(Result<Got>)> done);
  // SET ecc:{t}:<id> version‖value PX ttl, then the L1 row (read-your-writes). The version is
  // minted in the table's kind when not given. Blocks for one round trip and one writer hop.
  Result<table::BrandedId> put(std::string_view table, std::string_view id, std::string_view value,
                               std::optional<table::BrandedId> version = std::nullopt);
  // put and its announcement in one call, returning the version (minted in the table's kind when
  // not given, as put's). Then the L1 row, as put's (read-your-writes). By the table's declared
  // coherence:
  // - broadcast: one script (lua/scripts/publish_l2.lua) SETs ecc:{t}:<id> version‖value PX ttl
  //   (no jitter) and PUBLISHes the 29-byte message on ecc:{t}:coh (SPUBLISH on a cluster: the key
  //   and the channel share the hash tag {t}, one slot, and redis-server 7.0 lets a script
  //   SPUBLISH there). Atomic on the server: both or neither, so no node hears the message before
  //   the row exists, and a connection lost mid-call never leaves a row without its message (nor
  //   a message without its row). One round trip, on the calling thread's own connection when
  //   it holds one (EngineOptions::caller_links; else through io thread 0), then the L1 put.
  //   Each subscriber then hears it as a broadcast (at-most-once; a lost subscription is its
  //   disconnect policy's business).
  // - job: the job-lane overload below, under the lane group the engine minted for this table at
  //   construction (namespace PRT; one lane per writer engine, as a journal's group is one lane
  //   per writer process).
  // - tracking: put (the SET is the announcement: the server invalidates every tracking node).
  // - none: put (nothing to announce; TTL is the only coherence).
  // Blocks; any application thread (not the io thread, not a writer, not a loader). no_such_cache,
  // kind (nothing on the wire), stopped, timeout, or the connection's error. On a connection error
  // the row and its announcement may both have landed or neither (never one alone on the broadcast
  // lane): publishing again is safe (the SET keeps the newer row; newer wins wherever it is heard),
  // and with the same version the L1s that already applied it find it stale.
  Result<table::BrandedId> publish(std::string_view table, std::string_view id,
                                   std::string_view value,
                                   std::optional<table::BrandedId> version = std::nullopt);
  // The job lane's publish, whatever the table's own coherence (a writer that is not a member
  // declares its job-lane tables with coherence none, as it would to call enqueue): SET the row,
  // then enqueue's fan-out (one job under a fresh JOB id in lane `group`, with the lead when the
  // table says job_lead). The table must be declared here (its kind gate and ttl).
  // - Single server: the SET leads the fan-out's first pipeline on the one command connection, so
  //   the server runs it before any member_enqueue or lead PUBLISH: no member hears the message
  //   before the row exists. Round trips as enqueue's (one, or two with job_lead). Not atomic: a
  //   connection lost mid-pipeline may leave the row without (some of) its jobs (never a job
  //   without its row: the server runs the pipeline in order), answered as the connection's
  //   error; publish again (a new job id: members apply it twice, harmless). A SET
  //   the server refuses (OOM) answers its error though the jobs behind it in the pipeline went
  //   out: their members drop the row and read L2's older one (harmless).
  // - Cluster: the member queues live on other slots (other shards), so the fan-out leaves only
  //   once the SET has answered: one round trip more than enqueue's.
  // A fan-out that finds no live member (and no shared queue) is not an error here: the row is in
  // L2 and no member holds it in L1 (a member that was not live drops its rows when it beats
  // again). Not recorded in a journal (use put, then the journal and enqueue_job, for a writer
  // whose announcements must survive its own crash). Errors as publish above, plus the fan-out's.
  Result<table::BrandedId> publish(std::string_view table, const table::BrandedId& group,
                                   std::string_view id, std::string_view value,
                                   std::optional<table::BrandedId> version = std::nullopt);
  // publish's answer, once the L1 row is in (read-your-writes from then on): the version, or the
  // error (the call's, as publish's). Runs on the table's writer thread after a success, on io
  // thread 0 after an error, on the job-send thread ("echo-jobsend") on the job lane; exactly
  // once, `stopped` when the engine stops first. It must not block and must not call the engine's
  // waiting verbs (get, put, publish, ...): it holds up that thread's table, connection or queue.
  using PublishDone = std::function<void(const Result<table::BrandedId>& published)>;
  // publish, without waiting: the same wire, byte for byte. This thread builds the call (the key
  // gate, the version, the framed value: a few allocations) and hands it to io thread 0, which
  // pipelines it with every other call on the command connection; `done` hears the outcome. The
  // job lane's publish (two ordered round trips) runs whole on the job-send thread, in call
  // order. Answers the version at once, or a refusal with nothing sent: no_such_cache, kind or
  // bad_key, no_node_lease, stopped. Calls of one thread reach the server in call order (one
  // connection, one io thread); their `done`s may run in another order. Any application thread.
  Result<table::BrandedId> publish_async(std::string_view table, std::string_view id,
                                         std::string value, PublishDone done,
                                         std::optional<table::BrandedId> version = std::nullopt);
  // publish, then wait until every live node applied it, or `deadline` (from the call) passed.
  // The job lane: each member's consumer completes its job once its writer applied the message
  // (completion deletes the job), so a write is known applied by every member queue the fan-out
  // reached (every member live when it ran); "<k> of <n> members applied it by the deadline".
  // The broadcast and tracking lanes (an EchoStore extension, docs/wire.md "Receipts"): after the
  // publish, a receipt ask on the table's ask channel `ecc:{t}:ask`; each node that listens to
  // the table hears it after the message or invalidation (one connection), applies what its ring
  // holds, and, when its L1 holds no row of the key older than the version, counts itself in the
  // receipt key; the ask's PUBLISH answers how many nodes heard it (this one too). A node whose
  // ring dropped the message (the drop policy) never counts itself, and a node of the original
  // EchoStore never hears the ask: it is not counted. "<k> of <n> nodes applied it by the
  // deadline".
  // Answers how many applied it (0: no member was live, or no node heard the ask);
  // Errc::kTimeout when some had not (the write stands; a job lane's jobs stay to be applied).
  // A table without coherence answers Errc::kNoReceipts, nothing written. Blocks: publish's round
  // trips, then (job) one EXISTS per waiting member queue, or one PUBLISH and then one GET of the
  // receipt key, per poll (every 0.2 ms, backing off to 5 ms). Any application thread.
  Result<std::size_t> publish_and_wait(std::string_view table, std::string_view id,
                                       std::string_view value, std::chrono::milliseconds deadline,
                                       std::optional<table::BrandedId> version = std::nullopt);
  // PUBLISH ecc:{t}:coh <29 bytes>: the number of subscribers that heard it (at-most-once).
  Result<std::int64_t> broadcast(std::string_view table, std::string_view id,
                                 const table::BrandedId& version);
  // The job lane's writer verb: one job (a fresh JOB id, payload name:version, lane `group`, a
  // valid branded id) admitted into the member queue of every live member of `table`'s job lane
  // (and into the shared queue ecc.coh.<t> when the table says job_shared_queue): one
  // member_enqueue per member queue, each on its own slot, all sent at once (one pipeline per
  // shard), plus a read of the membership epoch; when the membership changed since this engine
  // last read it, a read of the membership and a send to the members it did not have
  // (member_enqueue.lua, "Membership"). With the table's job_lead (the default), the message is
  // first PUBLISHed on the table's lead channel, and the admissions leave only once its reply is
  // in (with the membership read, when there is one): the server then runs them in a later turn,
  // so the lead's push reaches every listening member without waiting for the scripts, and the
  // call takes one round trip more. An undeclared table uses the default knobs. At-least-once
  // per member: on an error some queues may hold the job already; a retry through enqueue() mints
  // a new job id, so those members apply the message twice (harmless: newer wins), while
  // enqueue_job() under the same id is a duplicate there.
  // Errc::kNoLiveMember when no queue took it: no member was live and there is no shared queue.
  Result<std::vector<MemberAdmission>> enqueue(std::string_view table,
                                               const table::BrandedId& group, std::string_view id,
                                               const table::BrandedId& version);
  // enqueue_async's answer: enqueue's, once every member queue answered. Runs on the engine's
  // job-send thread ("echo-jobsend"; SCHED_BATCH when the process runs under the default policy,
  // so its wake never preempts the sender), one job at a time in call order: a slow callback
  // delays the admissions of the jobs queued after it. It may call the engine's verbs
  // (enqueue_async too), but not stop(), and must not throw (the thread would end the process).
  using EnqueueDone = std::function<void(const Result<std::vector<MemberAdmission>>& admitted)>;
  // enqueue, with the sender held only through the lead: with the table's job_lead (the default)
  // it PUBLISHes the lead, waits for its reply (one round trip, as broadcast), hands the
  // admissions (enqueue's fan-out, under the returned job id) to the engine's job-send thread and
  // returns the job id; without job_lead it returns once the job is handed to that thread. The
  // wire is enqueue's, byte for byte: the lead alone, then the admissions once its reply is in.
  // At-least-once as enqueue: `done` gets enqueue's answer (Errc::kNoLiveMember, an io error) and
  // the caller retries through enqueue_job under the returned id (a duplicate where a queue
  // already holds it). An empty `done` leaves the answer to stats (fan_out.errors). Errors
  // returned here mean nothing was handed off: kNoSuchCache, kKind, kBadKey (the payload),
  // kStopped (not running, or stop() began; the lead may have gone out, at-most-once as ever).
  // stop() drains the job-send thread first: every job handed off gets its admissions and its
  // `done` while the engine still runs. Any thread but the io thread; the job-send thread starts at
  // the first call.
  Result<table::BrandedId> enqueue_async(std::string_view table, const table::BrandedId& group,
                                         std::string_view id, const table::BrandedId& version,
                                         EnqueueDone done);
  // The same under a given job id (the journal's recorded one): true when some queue newly
  // admitted it, false when every queue already held it (duplicate); Errc::kNoLiveMember when
  // there was no queue to hold it (the journal's intent then stays unmarked for a later replay).
  Result<bool> enqueue_job(std::string_view table, const table::BrandedId& group,
                           const table::BrandedId& job, std::string_view id,
                           const table::BrandedId& version);
  // Binds `journal` (which must outlive the engine) to a declared job-lane table: its consumer
  // consults the applied memory before the cache and remembers every verdict. Owner thread,
  // before start(). ConfigError for an undeclared table.
  void use_journal(std::string_view table, Journal& journal);
  // The stats of the journals use_journal bound, as a chore last read them (once a second while
  // metrics_port or stats_publish is on; empty otherwise): take_snapshot adds them, so the
  // endpoint and stats_publish carry the journal families. Any thread; never touches SQLite.
  std::vector<JournalStats> journal_stats() const;
  // apply_and_remember (docs/wire.md, "The journal"): the journal's memory first (remembered_stale
  // touches nothing), else the table's verdict, then the memory's newer-only upsert. `id` gated as
  // apply_coherence.
  Result<Applied> apply_and_remember(std::string_view table, std::string_view id,
                                     const table::BrandedId& version);
  // drop_l2 (docs/wire.md, "L2 values"): deletes the L2 row iff `version` is newer; true if it did.
  Result<bool> drop_l2(std::string_view table, std::string_view id,
                       const table::BrandedId& version);
  // A delete every node hears: a tombstone under `version` (minted in the table's kind when not
  // given), newer wins like any write. L2's row goes unless L2 holds a newer one, L2 keeps the
  // removal's version for one TTL (ecc:rm:{t}:<id>, docs/wire.md "Removals": a newer-only write
  // of an older version, a slow loader's, is refused, so no node reads the removed row back), and
  // the message name:version goes through the table's lane, so every node drops an older row and
  // remembers the version (a fill of an older value is refused; a later write is newer). By
  // coherence: broadcast, one script (lua/scripts/publish_l2.lua, 'remove': the DEL and the
  // PUBLISH both or neither); job, the conditional DEL and then enqueue's fan-out (no live member
  // is not an error); tracking, the conditional DEL (the server invalidates every tracking node);
  // none, the conditional DEL. Then this node's row goes before the call returns. Answers the
  // tombstone's version. Blocks for one round trip (two on the job lane) and one writer hop; any
  // application thread. no_such_cache, kind or bad_key, not_versioned (a raw L2 table),
  // no_node_lease, timeout, stopped, or the connection's error (the removal may have run: remove
  // again, the tombstone is idempotent).
  Result<table::BrandedId> remove(std::string_view table, std::string_view id,
                                  std::optional<table::BrandedId> version = std::nullopt);
  // Admin: DEL the L2 key and delete the L1 row, unconditionally. true when L2 held the key
  // (DEL removed it), false when it had none; the L1 row is gone either way.
  Result<bool> invalidate(std::string_view table, std::string_view id);
  // Applies one coherence message through the table's writer (the job lane's handler, tests):
  // the key gate on `id` (a branded table's kind, kKind; a text table's key, kBadKey), then the
  // newer-wins verdict (docs/wire.md, "Table semantics").
  Result<table::Verdict> apply_coherence(std::string_view table, std::string_view id,
                                         const table::BrandedId& version);
  // Mints a version in `ns` (3 bytes A-Z) on this engine's node: kind for a bad namespace,
  // no_node_lease while the engine holds no lease (before start, or lapsed).
  Result<table::BrandedId> mint(std::string_view ns);
  // The node this engine leased at start (fixed for the run), -1 before. Any thread.
  int node_id() const noexcept;

  // ---- Typed handles (table.h). ----
  // The handle on a declared table of T values (typed<T>() in its declaration; std::string for
  // an untyped one). Resolved once, used from any thread while this engine lives. Throws
  // ConfigError for an undeclared table or another value type: like the declaration itself, a
  // handle is set up once, not per call.
  template <class T>
  Table<T> table(std::string_view name);

  // A declared table (opaque): what a handle holds.
  struct TableRef;
  // What a handle keeps of its table beyond the engine's life: the L1 map (cleared when the
  // engine stops, so a read misses), the table's name, and whether the engine still exists
  // (false from ~Engine on: the handle's verbs answer stopped and never touch the engine).
  struct TableLife {
    std::shared_ptr<const table::L1Map> map;
    std::string name;
    std::atomic<bool> engine_alive{true};
  };
  // The handles' way in, public for table.h's templates (applications use the handle).
  TableRef& resolve(std::string_view name, const std::type_info& type);
  static const table::L1Map& l1_of(const TableRef& ref) noexcept;
  static std::string_view name_of(const TableRef& ref) noexcept;
  static std::shared_ptr<const TableLife> life_of(const TableRef& ref) noexcept;
  // The sampled read timing (TableStats::get_hit_latency): records now - t0_ns (steady clock).
  static void note_get(TableRef& ref, bool hit, std::int64_t t0_ns) noexcept;
  // A miss that must not wait (try_read, on_miss refill): asks the table's writer to fill `key`
  // and returns at once; one refill per key at a time, however many threads miss it. A bad key,
  // or a stopped engine, starts nothing. Any thread; never blocks.
  static void refill(TableRef& ref, std::string_view key) noexcept;
  static bool try_refills(const TableRef& ref) noexcept;
  Result<Got> get(TableRef& ref, std::string_view key);
  std::vector<Result<Got>> get_many(TableRef& ref, std::span<const std::string_view> keys);
  Result<table::BrandedId> put(TableRef& ref, std::string_view key, std::string_view bytes,
                               std::optional<table::BrandedId> version);
  Result<bool> invalidate(TableRef& ref, std::string_view key);
  Result<table::BrandedId> remove(TableRef& ref, std::string_view key,
                                  std::optional<table::BrandedId> version);
  Result<table::BrandedId> publish_async(TableRef& ref, std::string_view key, std::string bytes,
                                         PublishDone done, std::optional<table::BrandedId> version);
  Result<table::BrandedId> publish(TableRef& ref, std::string_view key, std::string_view bytes,
                                   std::optional<table::BrandedId> version);

  // ---- Any thread. ----
  std::vector<TableInfo> directory() const;
  // Fills the kernel's counts of this engine's writer and io threads into `stats` (from stats()):
  // WriterStats and EngineStats::IoThread os_wakes and os_preemptions. Any thread; reads
  // /proc (three syscalls a thread): not for a polling loop, which stats() alone serves.
  void add_thread_counts(EngineStats& stats) const;
  EngineStats stats() const;
  bool running() const noexcept;

 private:
  friend const TableWriter* internal::writer_of(const Engine& engine, std::string_view table);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace echo::engine

#include <echo/engine/table.h>  // Table<T> and Engine::table<T>: after Engine is complete
