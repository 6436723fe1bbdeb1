// SPDX-License-Identifier: MIT
// The connector (docs/wire.md, "The connector"): one socket to Valkey/Redis driven by a UringLoop.
// It boots (HELLO 3 / RESP2 fallback, AUTH, SELECT, CLIENT SETNAME, the {emq}:version fence), pairs
// pipelined replies with their callers through a FIFO, routes RESP3 pushes to a handler, calls
// scripts by EVALSHA with one NOSCRIPT reload, beats when idle, and on socket loss fails every
// in-flight caller, reconnects with jittered backoff, re-fences, resubscribes and tells its owner.
// With ConnectionOptions::tls it speaks TLS first (connection_tls.cc), on the same loop thread.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <echo/base/fifo.h>
#include <echo/io/connection_stats.h>
#include <echo/io/io_error.h>
#include <echo/io/latency_histogram.h>
#include <echo/io/resp3_decoder.h>
#include <echo/io/resp3_value.h>
#include <echo/io/resp_encoder.h>
#include <echo/io/tls_options.h>
#include <echo/io/unique_fd.h>
#include <echo/io/uring_loop.h>

namespace echo::io {

class TlsContext;  // io/src/tls_session.h: OpenSSL stays out of this header
class TlsSession;

enum class Protocol : std::uint8_t { kAuto, kResp2, kResp3 };

// What the owner hears (on the loop thread).
enum class ConnEvent : std::uint8_t {
  kReady,         // first successful boot
  kDisconnected,  // the socket was lost (cause in the error_code); callers already failed
  kReconnected,   // booted again after a loss, re-fenced, channels resubscribed
  kStopped,       // fatal (auth_refused, no_permission, boot_refused, unexpected_hello,
                  // version_fence, cluster_node, protocol_error or tls_handshake before the first
                  // boot, tls_verify; cause() says more) or closed
};

// Where a connection should dial now (ConnectionOptions::target); an empty host keeps the last.
struct DialTarget {
  std::string host;  // numeric (an IP literal): it is resolved on the loop thread
  int port = 0;
};

struct ConnectionOptions {
  std::string host = "127.0.0.1";  // TCP target (ignored when unix_path is set)
  int port = 0;                    // 1..65535 for TCP
  std::string unix_path;           // non-empty: connect to this Unix socket instead
  std::string username = "default";
  std::string password;  // non-empty: HELLO 3 AUTH <username> <password> / AUTH
  Protocol protocol = Protocol::kAuto;
  int db = 0;                  // SELECT when > 0; 0..15 by default server config
  std::string client_name;     // CLIENT SETNAME when non-empty
  std::string label = "conn";  // the stats label
  bool fence = true;           // check {emq}:version at every boot
  std::string version_key = "{emq}:version";
  std::string version_value = "echomq:2.0.0";  // claimed (SET NX) when the key is unset
  // Other values the fence accepts as sharing this wire (never written): see fence_accepts().
  std::vector<std::string> version_accept;
  std::size_t max_pending = 10000;                  // >= 1; calls waiting for replies
  std::chrono::milliseconds connect_timeout{3000};  // >= 1 ms
  std::chrono::milliseconds boot_timeout{3000};     // per boot reply; >= 1 ms
  std::chrono::milliseconds call_timeout{5000};     // oldest reply overdue → socket loss
  std::chrono::milliseconds heartbeat{30000};       // idle PING period; 0 = off
  std::chrono::milliseconds backoff_initial{100};   // >= 1 ms
  std::chrono::milliseconds backoff_max{2000};      // >= backoff_initial
  // The receive buffer's bound against hostile peers; a reply also holds at most one element per
  // 8 of these bytes (the decoder's arena then stays within 3x this).
  std::size_t max_reply_bytes = 64u << 20;
  std::uint64_t jitter_seed = 0;  // 0 = seeded from std::random_device
  // Asked on the loop thread before every connect after the first: lets a connection follow a
  // target that moves (a cluster slot's master after a failover). A host that is not a numeric
  // address, or a port outside 1..65535, keeps the last target. host/port in options() follow.
  std::function<DialTarget()> target;
  // TLS after the TCP connect (tls_options.h; off by default). Its files load in the constructor.
  TlsOptions tls;
  // Told of every ConnEvent before the owner's handler, on the loop thread, with the label and
  // cause() in words (empty for kReady and kReconnected): an application's watcher (the engine's
  // EventSink). Must not block and must not call into the connection.
  std::function<void(ConnEvent event, std::string_view label, std::string_view cause)> observer;
};

// The {emq}:version fence's verdict on the value a server holds: version_value, or one of
// version_accept.
bool fence_accepts(const ConnectionOptions& o, std::string_view held) noexcept;

// A script called by SHA; `sha` is the lowercase hex SHA1 of `source` (the caller's promise,
// checked against SCRIPT LOAD's answer).
struct Script {
  std::string sha;
  std::string source;
};

// A script call whose storage its caller lends (Connection::evalsha_lent): `command` is the
// whole EVALSHA (EVALSHA, the sha, the key count, the keys, the arguments). The caller keeps this
// struct, `*script` and the bytes `command` views alive and unchanged until `done` has run: on
// NOSCRIPT the connection loads the script and sends `command` again.
struct LentEval;

// A reply's fate: `ec` empty → `reply` is the server's answer; `ec` == server → `reply` is the
// server's error reply (its text says why); sha_mismatch → `reply` is the
// SHA the server computed; any other `ec` → no reply (disconnected, closed, ...). The
// Resp3Value is valid only during the callback; keep it with to_owned().
using ReplyFn = std::function<void(std::error_code ec, const Resp3Value& reply)>;
using PushFn = std::function<void(const Resp3Value& push)>;
using EventFn = std::function<void(ConnEvent event, std::error_code cause)>;

struct LentEval {
  const Script* script = nullptr;
  std::span<const std::string_view> command;
  ReplyFn done;
  bool asking = false;
};

// A blocking call's outcome (other threads).
struct OwnedResult {
  std::error_code ec;
  Resp3Owned reply;
};

class Connection {
 public:
  // Binds to `loop` and checks the options (std::invalid_argument naming the knob; with TLS on,
  // loads its files: a missing or unreadable CA, certificate or key is refused here). Does not
  // connect: start() does. Any thread. Handlers run on the loop thread.
  Connection(UringLoop& loop, ConnectionOptions options, PushFn on_push = {},
             EventFn on_event = {});
  // Fails every waiter with `closed`, cancels every operation and waits until the ring holds no
  // reference to this object. Not from the loop thread; when no thread runs the loop, drives it.
  // The loop must outlive its connections (destroy connections first).
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Begins connecting. Any thread; never blocks.
  void start();
  // Blocks until the connection is ready (→ {}), stopped (→ its fatal error) or `timeout`
  // passes (→ timeout). Any thread but the loop's. A connection that has never been ready stops
  // at the first definitive answer (auth_refused, no_permission, boot_refused, unexpected_hello,
  // version_fence, cluster_node, and protocol_error: bytes that are not RESP before the first
  // boot finished; with TLS, tls_verify, and tls_handshake before the first boot); it keeps
  // dialling through refusals, closes and silence, which a restarting server also shows, so those
  // end in timeout. cause() says which in words either way.
  std::error_code wait_ready(std::chrono::milliseconds timeout);
  // The last failure in words: the fatal one once stopped, else the last loss (a refused
  // connect, a boot step with no answer, the bytes a peer sent that were not RESP, X509's or
  // OpenSSL's reason for a TLS refusal: "127.0.0.1:6380: certificate verify failed: ..."),
  // naming the address and the boot step. Empty before any failure. Any thread; takes a mutex.
  std::string cause() const;

  // --- Loop thread only; never block; each returns {} or an error (then `done` is never run). ---
  // One command; `done` runs on the loop thread with its reply. disconnected / overloaded.
  std::error_code call(std::span<const std::string_view> args, ReplyFn done);
  std::error_code call(std::initializer_list<std::string_view> args, ReplyFn done) {
    return call(std::span<const std::string_view>(args.begin(), args.size()), std::move(done));
  }
  // EVALSHA sha nkeys keys... argv...; on NOSCRIPT: SCRIPT LOAD, check the SHA, resend once.
  std::error_code evalsha(const Script& script, std::span<const std::string_view> keys,
                          std::span<const std::string_view> argv, ReplyFn done);
  // evalsha with nothing copied: `req` and what it views are the caller's until req.done ran.
  std::error_code evalsha_lent(LentEval& req);
  // The same two after ASKING (a cluster's ASK redirect). ASKING's grant is one-shot, for the
  // connection's next command, so it is queued with the command as one unit, admitted or refused
  // together; ASKING needs no place of its own under max_pending (nor does a NOSCRIPT reload).
  // An EVALSHA resent after NOSCRIPT goes after ASKING again.
  std::error_code call_asking(std::span<const std::string_view> args, ReplyFn done);
  std::error_code evalsha_asking(const Script& script, std::span<const std::string_view> keys,
                                 std::span<const std::string_view> argv, ReplyFn done);
  // Push verbs: no FIFO entry; disconnected, or requires_resp3 (nothing sent) on RESP2.
  std::error_code subscribe(std::string_view channel);
  std::error_code unsubscribe(std::string_view channel);
  std::error_code push_command(std::span<const std::string_view> args);
  std::error_code push_command(std::initializer_list<std::string_view> args) {
    return push_command(std::span<const std::string_view>(args.begin(), args.size()));
  }
  // When ready: drops the socket as a loss (callers fail with disconnected, kDisconnected, the
  // usual backoff) so the next connect asks `target` again. Otherwise nothing.
  void redial();

  // --- Any thread but the loop's: post the call and wait (call_timeout bounds the wait). ---
  OwnedResult call_blocking(std::vector<std::string> args);
  std::error_code push_command_blocking(std::vector<std::string> args);
  std::error_code subscribe_blocking(std::string channel);

  // Any thread; relaxed snapshot (see ConnectionStats).
  ConnectionStats stats() const;
  ConnStatus status() const noexcept { return status_.load(std::memory_order_acquire); }
  UringLoop& loop() noexcept { return loop_; }
  const ConnectionOptions& options() const noexcept { return options_; }

 private:
  struct Pending {
    ReplyFn done;  // empty: an internal reply (heartbeat) consumed silently
    std::chrono::steady_clock::time_point sent;
    // A push verb's place (a (un)subscribe naming its channels): the server answers it with one
    // confirmation push per channel, or with one error reply. Both end here, so an error never
    // reaches the next caller. `confirms` left; `kind` the confirmation's first element.
    std::uint32_t confirms = 0;
    std::string_view kind;  // one of hold_place_for's static verbs
  };
  void hold_place_for(std::span<const std::string_view> args);

  // Op completions (loop thread).
  static void on_connect(IoOp& op, int res) noexcept;
  static void on_recv(IoOp& op, int res) noexcept;
  static void on_send(IoOp& op, int res) noexcept;
  static void on_flush(IoOp& op, int res) noexcept;
  static void on_tick(IoOp& op, int res) noexcept;
  // The tick's next period: kTickPeriod while anything it watches can expire (a call or a boot
  // step awaiting its answer, a TLS handshake, a socket not ready); else, ready and idle, until
  // the heartbeat is due. Loop thread.
  std::chrono::milliseconds tick_period(std::chrono::steady_clock::time_point now) const noexcept;
  // Loop thread, when a call or a boot step enters an empty FIFO: a tick armed for an idle
  // connection comes back now (cancelled: on_tick runs and re-arms at kTickPeriod), so the
  // call's deadline is watched as before.
  void wake_tick() noexcept {
    if (tick_idle_ && tick_op_.armed) {
      tick_idle_ = false;
      loop_.cancel(tick_op_);
    }
  }
  static void on_backoff(IoOp& op, int res) noexcept;

  void begin_connect();
  void arm_recv();
  void schedule_flush();
  void send_some();
  void enqueue_internal(std::span<const std::string_view> args, ReplyFn done);
  std::error_code admit();  // a caller's command: ready, and a place under max_pending
  void enqueue_asking();
  std::error_code send_evalsha(const Script& script, std::span<const std::string_view> keys,
                               std::span<const std::string_view> argv, ReplyFn done, bool asking);
  // Sends req->command; on NOSCRIPT loads the script, checks its SHA and sends it once more.
  // `Hold` keeps the request alive: a LentEval* (the caller's) or a shared_ptr to an owned one.
  template <class Hold>
  std::error_code send_eval(Hold req);
  void dispatch();
  void boot();
  void boot_resp2();
  void boot_ping();
  void boot_select();
  void boot_setname();
  void boot_fence();
  void boot_fence_check(bool after_set);
  bool boot_transient(const Resp3Value& v);
  void booted();
  void drop_socket();
  void lose(std::error_code cause, std::string detail = {});
  void stop_fatal(std::error_code cause, std::string detail = {});
  void tell(ConnEvent event, std::error_code cause);  // the observer, then the owner
  void boot_refusal(std::string_view step, const Resp3Value& v);
  std::string where() const;  // "127.0.0.1:6380" or the Unix path
  // TLS (connection_tls.cc), loop thread.
  void start_tls();
  void tls_received(int res);
  void tls_send_some();
  void tls_failed();
  void tls_goodbye();
  void fail_pending(std::error_code ec);
  void schedule_reconnect();
  void set_status(ConnStatus s);
  void begin_close();
  void maybe_finish_close();
  bool quiescent() const noexcept;

  UringLoop& loop_;
  ConnectionOptions options_;
  PushFn on_push_;
  EventFn on_event_;

  // Socket and ops (loop thread).
  UniqueFd fd_;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  IoOp connect_op_, recv_op_, send_op_, flush_op_, tick_op_, backoff_op_;
  Resp3Decoder decoder_;
  RespEncoder out_;                 // commands gathered since the last send began
  RespEncoder sending_;             // bytes handed to the kernel (consumed as they are written)
  std::uint64_t out_commands_ = 0;  // commands in out_ (for the commands/pipelines counters)
  base::Fifo<Pending> fifo_;        // keeps its storage: a steady call rate allocates nothing
  std::set<std::string, std::less<>> channels_;
  std::size_t recv_len_ = 0;        // size of the receive in flight
  const char* recv_buf_ = nullptr;  // where it lands (in the decoder's buffer)
  bool last_recv_full_ = true;      // it filled its buffer: more may be waiting in the socket
  std::uint64_t conn_gen_ = 0;      // bumped at every socket loss; dispatch stops when it changes

  // TLS (loop thread; tls_ctx_ set once in the constructor when options_.tls.enabled). The
  // session lives with its socket. tls_in_ is what the receive fills; tls_out_ from tls_sent_ on
  // is what the kernel is sending (like sending_: cleared at a loss, refilled only once the old
  // send completed).
  std::shared_ptr<TlsContext> tls_ctx_;
  std::unique_ptr<TlsSession> tls_;
  std::vector<char> tls_in_;
  std::string tls_out_;
  std::size_t tls_sent_ = 0;
  bool tls_handshaking_ = false;
  std::chrono::steady_clock::time_point tls_began_{};

  // Boot and reconnect (loop thread).
  bool lost_since_ready_ = false;
  bool ever_ready_ = false;     // set at the first boot; protocol errors before it are fatal
  std::string_view boot_step_;  // the boot command awaiting its answer ("HELLO", ...)
  std::string first_bytes_;     // the first bytes this socket received (at most 24), for causes
  bool started_ = false;
  bool closing_ = false;
  int proto_ = 0;
  std::chrono::milliseconds backoff_;
  std::chrono::steady_clock::time_point last_io_{};
  bool tick_idle_ = false;  // the armed tick is an idle connection's (tick_period)
  std::mt19937_64 rng_;

  // Status for other threads: release on change, acquire in status(); wait_ready sleeps on cv_.
  std::atomic<ConnStatus> status_{ConnStatus::kIdle};
  std::atomic<int> proto_snapshot_{0};
  mutable std::mutex status_mu_;
  std::condition_variable status_cv_;
  std::error_code fatal_;         // guarded by status_mu_
  std::string cause_;             // guarded by status_mu_: cause()
  std::function<void()> closed_;  // set by the destructor; run when quiescent

  std::atomic<std::uint64_t> pushes_{0}, overloads_{0}, commands_{0}, pipelines_{0}, replies_{0},
      reconnects_{0}, script_loads_{0}, evalsha_calls_{0}, bytes_out_{0}, wire_errors_{0},
      boot_retries_{0}, push_refusals_{0}, pending_{0};
  LatencyRecorder reply_latency_;  // recorded on the loop thread, read anywhere
};

}  // namespace echo::io
