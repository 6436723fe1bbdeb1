// SPDX-License-Identifier: MIT
// The sentinel watcher's loop-thread state machine: rotate through the sentinels on every loss,
// ask for the master at every boot, follow +switch-master for our name, and tell the engine.
#include "sentinel_watch.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>
#include <utility>

#include <echo/engine/errc.h>

namespace echo::engine {
namespace {

constexpr std::string_view kSwitchChannel = "+switch-master";

// A port in 1..65535 written in whole decimal digits, else 0.
int parse_port(std::string_view text) {
  int port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc{} || end != text.data() + text.size() || port < 1 || port > 65535) return 0;
  return port;
}

// `host` as a numeric address (a connection's target must be one), or "" when it does not
// resolve.
std::string numeric_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return {};
  char text[NI_MAXHOST];
  const int rc =
      ::getnameinfo(res->ai_addr, res->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  return rc == 0 ? std::string(text) : std::string();
}

}  // namespace

SentinelWatch::SentinelWatch(io::UringLoop& loop, SentinelWatchOptions options,
                             std::function<void()> on_switch)
    : loop_(loop), options_(std::move(options)), on_switch_(std::move(on_switch)) {}

SentinelWatch::~SentinelWatch() { conn_.reset(); }

Error SentinelWatch::start(std::chrono::steady_clock::time_point deadline) {
  for (auto& s : options_.sentinels) {
    std::string numeric = numeric_host(s.host);
    if (numeric.empty()) {
      return Error(Errc::kHostUnresolved, "sentinel host '" + s.host + "' does not resolve");
    }
    s.host = std::move(numeric);
  }
  io::ConnectionOptions c;
  c.host = options_.sentinels.front().host;
  c.port = options_.sentinels.front().port;
  c.password = options_.password;
  c.protocol = io::Protocol::kResp3;  // +switch-master arrives as a push on this connection
  c.label = "sentinel";
  c.client_name = "echostore-sentinel";
  c.fence = false;  // a sentinel holds no keys
  c.call_timeout = options_.call_timeout;
  c.heartbeat = options_.heartbeat;
  // A dead sentinel should cost little before the next is tried.
  c.connect_timeout = std::min(options_.call_timeout, std::chrono::milliseconds(1000));
  c.boot_timeout = c.connect_timeout;
  c.backoff_initial = std::chrono::milliseconds(50);
  c.backoff_max = std::chrono::milliseconds(1000);
  c.target = [this] { return next_sentinel(); };
  {
    std::lock_guard lock(mu_);
    dials_ = 1;
  }
  conn_ = std::make_unique<io::Connection>(
      loop_, std::move(c), [this](const io::Resp3Value& push) { on_push(push); },
      [this](io::ConnEvent event, std::error_code cause) {
        if (event == io::ConnEvent::kStopped) {
          std::lock_guard lock(mu_);
          if (!fatal_) fatal_ = cause ? cause : make_error_code(io::IoErrc::kClosed);
          cv_.notify_all();
          return;
        }
        on_event(event);
      });
  conn_->start();
  const std::size_t n = options_.sentinels.size();
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline,
                 [&] { return !master_.host.empty() || unknown_ || fatal_ || dials_ > n; });
  if (!master_.host.empty()) return {};
  if (unknown_) {
    return Error(
        Errc::kSentinelUnknownMaster,
        "sentinel " + unknown_at_ + " does not monitor master '" + options_.master_name + "'");
  }
  lock.unlock();
  const std::string last = conn_->cause();  // takes the connection's own mutex
  const std::string tail = last.empty() ? std::string() : "; the last: " + last;
  lock.lock();
  if (fatal_) return Error(fatal_, "sentinel connection stopped" + tail);
  if (dials_ > n) {
    return Error(Errc::kNoSentinel, "none of the " + std::to_string(n) +
                                        " sentinels answered the address of master '" +
                                        options_.master_name + "'" + tail);
  }
  return Error(io::IoErrc::kTimeout, "no sentinel answered the address of master '" +
                                         options_.master_name + "' in time" + tail);
}

io::DialTarget SentinelWatch::master() const {
  std::lock_guard lock(mu_);
  return master_;
}

io::DialTarget SentinelWatch::next_sentinel() {
  at_ = (at_ + 1) % options_.sentinels.size();
  {
    std::lock_guard lock(mu_);
    ++dials_;
  }
  cv_.notify_all();
  const auto& s = options_.sentinels[at_];
  return {s.host, s.port};
}

void SentinelWatch::on_event(io::ConnEvent event) {
  if (closing_) return;
  if (event == io::ConnEvent::kReady) {
    // Subscribed once: the connection itself subscribes again after every reconnect.
    (void)conn_->subscribe(kSwitchChannel);
    ask();
  } else if (event == io::ConnEvent::kReconnected) {
    {
      std::lock_guard lock(mu_);
      ++counters_.reconnects;
    }
    ask();  // another sentinel now: a switch heard by none of ours while we were away shows here
  }
  // kDisconnected: nothing to do; the reconnect dials the next sentinel (next_sentinel()).
}

void SentinelWatch::suspect() {
  {
    std::lock_guard lock(mu_);
    ++counters_.role_refusals;
  }
  ask();
}

void SentinelWatch::ask() {
  if (closing_ || !conn_) return;
  (void)conn_->call(
      {"SENTINEL", "get-master-addr-by-name", options_.master_name},
      [this](std::error_code e, const io::Resp3Value& r) {
        if (closing_) return;
        if (e == io::IoErrc::kDisconnected || e == io::IoErrc::kClosed) return;  // asked again
        if (!e && r.is_null()) {
          bool first = false;
          {
            std::lock_guard lock(mu_);
            first = !unknown_;
            unknown_ = true;
            unknown_at_ = conn_->options().host + ":" + std::to_string(conn_->options().port);
          }
          cv_.notify_all();
          if (first) {
            std::fprintf(stderr, "echo::engine: sentinel %s:%d does not know master '%s'\n",
                         conn_->options().host.c_str(), conn_->options().port,
                         options_.master_name.c_str());
          }
          return;
        }
        const int port =
            !e && r.type() == io::Resp3Type::array && r.size() == 2 ? parse_port(r[1].str()) : 0;
        if (port == 0 || r[0].str().empty()) {
          // An error reply or a garbled one (not a sentinel, or no such command): the next one.
          std::fprintf(stderr, "echo::engine: sentinel %s:%d answered no master address: %s\n",
                       conn_->options().host.c_str(), conn_->options().port,
                       e && e != io::IoErrc::kServerError ? e.message().c_str()
                                                          : std::string(r.str()).c_str());
          conn_->redial();
          return;
        }
        {
          std::lock_guard lock(mu_);
          ++counters_.asks;
        }
        adopt(std::string(r[0].str()), port);
      });
}

void SentinelWatch::on_push(const io::Resp3Value& push) {
  // ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]
  if (closing_ || push.size() != 3 || push[0].str() != "message" ||
      push[1].str() != kSwitchChannel) {
    return;
  }
  std::string_view rest = push[2].str();
  std::vector<std::string_view> f;
  while (!rest.empty() && f.size() < 6) {
    const std::size_t sp = rest.find(' ');
    f.push_back(rest.substr(0, sp));
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
  }
  if (f.size() != 5 || f[0] != options_.master_name) return;  // another master's, or garbled
  const int port = parse_port(f[4]);
  if (port == 0 || f[3].empty()) return;
  adopt(std::string(f[3]), port);
}

void SentinelWatch::adopt(std::string host, int port) {
  // A connection's target must be a numeric address. Sentinels name masters by IP unless told
  // to announce host names (announce-hostnames yes): then this resolves it, on the loop thread.
  std::string numeric = numeric_host(host);
  if (numeric.empty()) {
    std::fprintf(stderr,
                 "echo::engine: the sentinels name master '%s' at '%s', which does not "
                 "resolve: not followed\n",
                 options_.master_name.c_str(), host.c_str());
    return;
  }
  host = std::move(numeric);
  bool changed = false, first = false;
  {
    std::lock_guard lock(mu_);
    first = master_.host.empty();
    changed = host != master_.host || port != master_.port;
    if (changed) {
      master_ = io::DialTarget{std::move(host), port};
      counters_.master = master_.host + ":" + std::to_string(port);
      if (!first) ++counters_.switches;
    }
  }
  cv_.notify_all();
  if (changed && !first && !closing_ && on_switch_) on_switch_();
}

std::optional<io::ConnectionStats> SentinelWatch::connection_stats() const {
  if (!conn_) return std::nullopt;
  return conn_->stats();
}

SentinelWatchCounters SentinelWatch::stats() const {
  std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace echo::engine
