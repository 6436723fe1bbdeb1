// SPDX-License-Identifier: MIT
// The connection's protocol half (docs/wire.md, "The connector"): the boot sequence (HELLO 3 or the
// RESP2 fallback, AUTH, SELECT, CLIENT SETNAME, the version fence), resubscription, the push verbs,
// scripts by EVALSHA with one NOSCRIPT reload, and the blocking calls other threads use.
#include <echo/io/connection.h>

#include <echo/base/counter.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iterator>

namespace echo::io {

namespace {

using std::chrono::milliseconds;

bool starts_with(std::string_view s, std::string_view prefix) noexcept {
  return s.substr(0, prefix.size()) == prefix;
}

bool auth_refusal(const Resp3Value& v) noexcept {
  return v.is_error() && (starts_with(v.str(), "NOAUTH") || starts_with(v.str(), "WRONGPASS"));
}

bool no_permission(const Resp3Value& v) noexcept {
  return v.is_error() && starts_with(v.str(), "NOPERM");
}

// A reply in words for a cause: an error's text (whole: the server's errors are sentences, and
// NOAUTH's runs past 200 bytes), a simple string or a value (its first 160 bytes), else its type.
// A text cut short ends in "...".
std::string shown(const Resp3Value& v) {
  if (v.is_error() || v.type() == Resp3Type::simple_string || v.type() == Resp3Type::bulk_string) {
    const std::size_t most = v.is_error() ? 1024 : 160;
    std::string s(v.str().substr(0, most));
    if (v.str().size() > most) s += "...";
    return v.is_error() ? s : "'" + s + "'";
  }
  return v.is_null() ? std::string("nil") : "a reply of type " + std::string(to_string(v.type()));
}

bool is_ok(const Resp3Value& v) noexcept {
  return v.type() == Resp3Type::simple_string && v.str() == "OK";
}

[[noreturn]] void contract_violation(const char* what) {
  std::fprintf(stderr, "echo::io::Connection: %s\n", what);
  std::abort();
}

}  // namespace

// --- Boot ----------------------------------------------------------------------------------

bool fence_accepts(const ConnectionOptions& o, std::string_view held) noexcept {
  return held == o.version_value || std::find(o.version_accept.begin(), o.version_accept.end(),
                                              held) != o.version_accept.end();
}

// A boot step answered by a server that cannot serve yet: LOADING (a restart reading its data
// back), BUSY (a script or function past its time limit), MASTERDOWN (a replica cut off from its
// master). None says anything about us, and each passes: so not the boot's fatal refusal, but a
// socket loss (close, back off, dial again), counted in boot_retries. True when it was one.
// A boot step answered with a refusal: fatal, typed by what the server said, its words kept.
void Connection::boot_refusal(std::string_view step, const Resp3Value& v) {
  const IoErrc code = auth_refusal(v)    ? IoErrc::kAuthRefused
                      : no_permission(v) ? IoErrc::kNoPermission
                                         : IoErrc::kBootRefused;
  stop_fatal(code, std::string(step) + " at " + where() + " was answered " + shown(v));
}

bool Connection::boot_transient(const Resp3Value& v) {
  if (!v.is_error()) return false;
  const std::string_view e = v.str();
  if (!starts_with(e, "LOADING") && !starts_with(e, "BUSY") && !starts_with(e, "MASTERDOWN")) {
    return false;
  }
  base::solo_add(boot_retries_);
  lose(make_error_code(IoErrc::kServerError),
       std::string(boot_step_) + " at " + where() + " was answered " + shown(v) + " (retried)");
  return true;
}

void Connection::boot() {
  set_status(ConnStatus::kBooting);
  decoder_.reset();
  if (!recv_op_.armed) arm_recv();  // TLS: the handshake's receive may have armed it already
  if (options_.protocol == Protocol::kResp2) return boot_resp2();
  std::vector<std::string_view> hello = {"HELLO", "3"};
  if (!options_.password.empty()) {
    hello.insert(hello.end(), {"AUTH", options_.username, options_.password});
  }
  boot_step_ = "HELLO";
  enqueue_internal(hello, [this](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;  // the socket went; lose() has the rest
    if (boot_transient(v)) return;
    if (auth_refusal(v) || no_permission(v)) {
      return boot_refusal(
          options_.password.empty() ? "HELLO 3" : "HELLO 3 AUTH " + options_.username, v);
    }
    if (v.is_error()) {
      if (options_.protocol == Protocol::kAuto) return boot_resp2();
      return stop_fatal(IoErrc::kUnexpectedHello, "HELLO 3 at " + where() + " was answered " +
                                                      shown(v) + " (protocol 3 was asked for)");
    }
    const auto proto = v.find("proto");
    if (v.type() != Resp3Type::map || !proto || proto->integer() != 3) {
      return stop_fatal(IoErrc::kUnexpectedHello,
                        "HELLO 3 at " + where() + " was answered " + shown(v) +
                            ", not a map with proto 3: is this a Redis/Valkey server?");
    }
    proto_ = 3;
    boot_select();
  });
}

void Connection::boot_resp2() {
  proto_ = 2;
  if (options_.password.empty()) return boot_ping();
  std::vector<std::string_view> auth = {"AUTH"};
  if (options_.username != "default") auth.push_back(options_.username);
  auth.push_back(options_.password);
  boot_step_ = "AUTH";
  enqueue_internal(auth, [this](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;
    if (boot_transient(v)) return;
    if (!is_ok(v)) return boot_refusal("AUTH", v);
    boot_ping();
  });
}

void Connection::boot_ping() {
  const std::string_view ping[] = {"PING"};
  boot_step_ = "PING";
  enqueue_internal(ping, [this](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;
    if (boot_transient(v)) return;
    if (v.type() != Resp3Type::simple_string || v.str() != "PONG") return boot_refusal("PING", v);
    boot_select();
  });
}

void Connection::boot_select() {
  if (options_.db == 0) return boot_setname();
  const std::string db = std::to_string(options_.db);
  const std::string_view select[] = {"SELECT", db};
  boot_step_ = "SELECT";
  enqueue_internal(select, [this](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;
    if (boot_transient(v)) return;
    if (!is_ok(v)) return boot_refusal("SELECT " + std::to_string(options_.db), v);
    boot_setname();
  });
}

void Connection::boot_setname() {
  if (options_.client_name.empty()) return boot_fence();
  const std::string_view setname[] = {"CLIENT", "SETNAME", options_.client_name};
  boot_step_ = "CLIENT SETNAME";
  enqueue_internal(setname, [this](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;
    if (boot_transient(v)) return;
    if (!is_ok(v)) return boot_refusal("CLIENT SETNAME", v);
    boot_fence();
  });
}

void Connection::boot_fence() {
  if (!options_.fence) return booted();
  boot_fence_check(false);
}

void Connection::boot_fence_check(bool after_set) {
  const std::string_view get[] = {"GET", options_.version_key};
  boot_step_ = "GET {emq}:version";
  enqueue_internal(get, [this, after_set](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return;
    if (boot_transient(v)) return;
    if (v.type() == Resp3Type::bulk_string && fence_accepts(options_, v.str())) return booted();
    if (v.is_error() && starts_with(v.str(), "MOVED ")) {
      return stop_fatal(IoErrc::kClusterNode, "GET " + options_.version_key + " at " + where() +
                                                  " was answered " + shown(v) +
                                                  ": a cluster node (use the cluster mode)");
    }
    if (no_permission(v)) return boot_refusal("GET " + options_.version_key, v);
    if (v.is_null() && !after_set) {
      // Unclaimed: claim it (NX, so a concurrent claimer's value wins) and read back.
      const std::string_view set[] = {"SET", options_.version_key, options_.version_value, "NX"};
      boot_step_ = "SET {emq}:version NX";
      enqueue_internal(set, [this](std::error_code ec2, const Resp3Value& v2) {
        if (ec2 && ec2 != IoErrc::kServerError) return;
        if (no_permission(v2)) return boot_refusal("SET " + options_.version_key + " NX", v2);
        boot_fence_check(true);
      });
      return;
    }
    std::string accepted = options_.version_value;
    for (const std::string& a : options_.version_accept) {
      if (a != options_.version_value) accepted += ", " + a;
    }
    stop_fatal(IoErrc::kVersionFence, options_.version_key + " at " + where() + " holds " +
                                          shown(v) + "; this connection accepts " + accepted);
  });
}

void Connection::booted() {
  backoff_ = options_.backoff_initial;
  proto_snapshot_.store(proto_, std::memory_order_relaxed);
  if (proto_ == 3) {
    for (const std::string& ch : channels_) {
      const std::string_view sub[] = {"SUBSCRIBE", ch};
      out_.command_argv(sub);
      hold_place_for(sub);
      ++out_commands_;
    }
    schedule_flush();
  }
  ever_ready_ = true;
  boot_step_ = {};
  set_status(ConnStatus::kReady);
  if (lost_since_ready_) {
    lost_since_ready_ = false;
    base::solo_add(reconnects_);
    tell(ConnEvent::kReconnected, {});
  } else {
    tell(ConnEvent::kReady, {});
  }
}

// --- Push verbs ----------------------------------------------------------------------------

std::error_code Connection::push_command(std::span<const std::string_view> args) {
  if (status_.load(std::memory_order_relaxed) != ConnStatus::kReady) return IoErrc::kDisconnected;
  if (proto_ != 3) return IoErrc::kRequiresResp3;
  out_.command_argv(args);
  hold_place_for(args);
  ++out_commands_;
  schedule_flush();
  return {};
}

void Connection::hold_place_for(std::span<const std::string_view> args) {
  // The verbs whose every named channel gets a confirmation push of the verb's own name. Others
  // (and a bare UNSUBSCRIBE, answered per channel held) keep no place: their answers are pushes.
  static constexpr std::string_view kVerbs[] = {"subscribe",   "ssubscribe",   "psubscribe",
                                                "unsubscribe", "sunsubscribe", "punsubscribe"};
  if (args.size() < 2) return;
  const auto same = [&args](std::string_view verb) {
    return std::equal(verb.begin(), verb.end(), args[0].begin(), args[0].end(), [](char a, char b) {
      return a == std::tolower(static_cast<unsigned char>(b));
    });
  };
  const auto* verb = std::find_if(std::begin(kVerbs), std::end(kVerbs), same);
  if (verb == std::end(kVerbs)) return;
  if (fifo_.empty()) wake_tick();
  fifo_.push_back(Pending{
      {}, std::chrono::steady_clock::now(), static_cast<std::uint32_t>(args.size() - 1), *verb});
  pending_.store(fifo_.size(), std::memory_order_relaxed);
}

std::error_code Connection::subscribe(std::string_view channel) {
  const std::string_view sub[] = {"SUBSCRIBE", channel};
  std::error_code ec = push_command(sub);
  if (!ec) channels_.emplace(channel);
  return ec;
}

std::error_code Connection::unsubscribe(std::string_view channel) {
  const std::string_view unsub[] = {"UNSUBSCRIBE", channel};
  std::error_code ec = push_command(unsub);
  if (!ec) {
    if (auto it = channels_.find(channel); it != channels_.end()) channels_.erase(it);
  }
  return ec;
}

// --- Scripts -------------------------------------------------------------------------------

std::error_code Connection::evalsha(const Script& script, std::span<const std::string_view> keys,
                                    std::span<const std::string_view> argv, ReplyFn done) {
  return send_evalsha(script, keys, argv, std::move(done), /*asking=*/false);
}

std::error_code Connection::evalsha_asking(const Script& script,
                                           std::span<const std::string_view> keys,
                                           std::span<const std::string_view> argv, ReplyFn done) {
  return send_evalsha(script, keys, argv, std::move(done), /*asking=*/true);
}

std::error_code Connection::evalsha_lent(LentEval& req) { return send_eval(&req); }

template <class Hold>
std::error_code Connection::send_eval(Hold req) {
  auto resend = [this, req](std::error_code ec, const Resp3Value& v) {
    if (ec && ec != IoErrc::kServerError) return req->done(ec, v);
    if (!v.is_error() || !starts_with(v.str(), "NOSCRIPT")) return req->done(ec, v);
    base::solo_add(script_loads_);
    const std::string_view load[] = {"SCRIPT", "LOAD", req->script->source};
    enqueue_internal(load, [this, req](std::error_code ec2, const Resp3Value& sha) {
      if (ec2) return req->done(ec2, sha);
      if (sha.str() != req->script->sha) {
        return req->done(make_error_code(IoErrc::kShaMismatch), sha);
      }
      base::solo_add(evalsha_calls_);
      // The first ASKING was spent on the EVALSHA that met NOSCRIPT: without its own, the resend
      // is sent back (MOVED) by the importing node.
      if (req->asking) enqueue_asking();
      enqueue_internal(req->command, [req](std::error_code ec3, const Resp3Value& again) {
        req->done(ec3, again);
      });
    });
  };
  std::error_code ec = req->asking ? call_asking(req->command, std::move(resend))
                                   : call(req->command, std::move(resend));
  if (!ec) base::solo_add(evalsha_calls_);
  return ec;
}

std::error_code Connection::send_evalsha(const Script& script,
                                         std::span<const std::string_view> keys,
                                         std::span<const std::string_view> argv, ReplyFn done,
                                         bool asking) {
  // The request outlives this call (NOSCRIPT reloads and resends it), so it owns its bytes.
  struct Owned : LentEval {
    Script own_script;
    std::vector<std::string> args;
    std::vector<std::string_view> views;
  };
  auto req = std::make_shared<Owned>();
  req->own_script = script;
  req->args.reserve(3 + keys.size() + argv.size());
  req->args.emplace_back("EVALSHA");
  req->args.emplace_back(script.sha);
  req->args.emplace_back(std::to_string(keys.size()));
  for (auto k : keys) req->args.emplace_back(k);
  for (auto a : argv) req->args.emplace_back(a);
  req->views.assign(req->args.begin(), req->args.end());
  req->script = &req->own_script;
  req->command = req->views;
  req->done = std::move(done);
  req->asking = asking;
  return send_eval(std::move(req));
}

// --- Blocking calls (other threads) --------------------------------------------------------

OwnedResult Connection::call_blocking(std::vector<std::string> args) {
  if (loop_.in_loop_thread()) contract_violation("call_blocking() on the loop thread");
  auto result = std::make_shared<std::promise<OwnedResult>>();
  auto future = result->get_future();
  loop_.post([this, result, args = std::move(args)] {
    const std::vector<std::string_view> views(args.begin(), args.end());
    std::error_code ec = call(views, [result](std::error_code e, const Resp3Value& v) {
      result->set_value(OwnedResult{e, v.to_owned()});
    });
    if (ec) result->set_value(OwnedResult{ec, {}});
  });
  // The connection fails an overdue call itself (call_timeout → socket loss → disconnected);
  // the extra second covers a loop that is not running at all.
  if (future.wait_for(options_.call_timeout + milliseconds(1000)) != std::future_status::ready) {
    return OwnedResult{make_error_code(IoErrc::kTimeout), {}};
  }
  return future.get();
}

std::error_code Connection::push_command_blocking(std::vector<std::string> args) {
  if (loop_.in_loop_thread()) contract_violation("push_command_blocking() on the loop thread");
  auto result = std::make_shared<std::promise<std::error_code>>();
  auto future = result->get_future();
  loop_.post([this, result, args = std::move(args)] {
    const std::vector<std::string_view> views(args.begin(), args.end());
    result->set_value(push_command(views));
  });
  if (future.wait_for(options_.call_timeout) != std::future_status::ready) return IoErrc::kTimeout;
  return future.get();
}

std::error_code Connection::subscribe_blocking(std::string channel) {
  if (loop_.in_loop_thread()) contract_violation("subscribe_blocking() on the loop thread");
  auto result = std::make_shared<std::promise<std::error_code>>();
  auto future = result->get_future();
  loop_.post(
      [this, result, channel = std::move(channel)] { result->set_value(subscribe(channel)); });
  if (future.wait_for(options_.call_timeout) != std::future_status::ready) return IoErrc::kTimeout;
  return future.get();
}

}  // namespace echo::io
