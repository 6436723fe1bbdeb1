// SPDX-License-Identifier: MIT
// fork/exec of redis-sentinel with PR_SET_PDEATHSIG, readiness and roles read through the
// sentinels' own commands over plain blocking hiredis clients.
#include "support/sentinel_fixture.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using Clock = std::chrono::steady_clock;

// The blocking client's owners are redis_fixture.h's.
using ContextPtr = RedisClient;
using ReplyPtr = RedisReply;

ContextPtr connect(int port) {
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port, timeval{1, 0}));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeval{5, 0});
  return c;
}

// `args` on 127.0.0.1:port, after AUTH `password` when one is given.
ReplyPtr run(int port, const std::vector<std::string>& args, const std::string& password = {}) {
  auto c = connect(port);
  if (!c) return nullptr;
  if (!password.empty()) {
    ReplyPtr auth(static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password.c_str())));
    if (!auth || auth->type == REDIS_REPLY_ERROR) return auth;
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
}

std::string str(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    return std::string(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

// A RESP2 flat field/value array as a map.
std::map<std::string, std::string> fields(const redisReply* r) {
  std::map<std::string, std::string> out;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
    out[str(r->element[i])] = str(r->element[i + 1]);
  }
  return out;
}

bool reap(pid_t pid, std::chrono::milliseconds within) noexcept {
  const auto deadline = Clock::now() + within;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

template <class Pred>
bool wait_for(std::chrono::milliseconds timeout, Pred pred) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const bool last = Clock::now() >= deadline;
    if (pred()) return true;
    if (last) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

SentinelProcess::SentinelProcess(const SentinelGroupOptions& options, int master_port) {
  std::string binary = options.binary;
  if (const char* bin = std::getenv("ECHO_REDIS_SENTINEL"); bin && *bin) binary = bin;
  char tmpl[] = "/tmp/echostore-sentinel-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  }
  dir_ = tmpl;
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = testing::free_loopback_port();
    if (port_ == 6379 || port_ == 26379) continue;
    std::ofstream conf(dir_ / "sentinel.conf", std::ios::trunc);
    conf << "port " << port_ << "\n"
         << "bind 127.0.0.1\n"
         << "protected-mode no\n"
         << "daemonize no\n"
         << "dir " << dir_.string() << "\n"
         << "logfile " << (dir_ / "sentinel.log").string() << "\n"
         << "sentinel monitor " << options.master_name << " 127.0.0.1 " << master_port << " "
         << options.quorum << "\n"
         << "sentinel down-after-milliseconds " << options.master_name << " "
         << options.down_after.count() << "\n"
         << "sentinel failover-timeout " << options.master_name << " "
         << options.failover_timeout.count() << "\n"
         << "sentinel parallel-syncs " << options.master_name << " 1\n";
    if (!options.password.empty()) {
      conf << "requirepass " << options.password << "\n"
           << "sentinel sentinel-pass " << options.password << "\n";
    }
    conf.close();
    if (spawn(binary, options.password)) return;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  throw std::runtime_error("redis-sentinel (" + binary +
                           ") did not answer PING on 127.0.0.1; is Debian's redis-sentinel "
                           "installed?");
}

SentinelProcess::~SentinelProcess() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool SentinelProcess::spawn(const std::string& binary, const std::string& password) {
  std::string bin = binary, conf = (dir_ / "sentinel.conf").string();
  char* argv[] = {bin.data(), conf.data(), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::execvp(argv[0], argv);
    ::_exit(127);
  }
  pid_ = pid;
  const bool up = wait_for(std::chrono::milliseconds(10000), [&] {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: bad binary or port taken
      pid_ = -1;
      return true;
    }
    ReplyPtr r = run(port_, {"PING"}, password);
    return str(r.get()) == "PONG";
  });
  if (up && pid_ > 0) return true;
  stop();
  return false;
}

void SentinelProcess::stop() noexcept {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (!reap(pid_, std::chrono::milliseconds(5000))) {
    ::kill(pid_, SIGKILL);
    reap(pid_, std::chrono::milliseconds(5000));
  }
  pid_ = -1;
}

SentinelGroup::SentinelGroup(SentinelGroupOptions options) : options_(std::move(options)) {
  if (options_.sentinels < 1 || options_.sentinels > 7 || options_.quorum < 1 ||
      options_.quorum > options_.sentinels) {
    throw std::invalid_argument(
        "SentinelGroup: sentinels must lie in 1..7 and quorum in "
        "1..sentinels");
  }
  servers_.push_back(std::make_unique<testing::LocalServer>());
  const std::string master_port = std::to_string(servers_[0]->port());
  servers_.push_back(std::make_unique<testing::LocalServer>(
      testing::LocalServerOptions{.extra_args = {"--replicaof", "127.0.0.1", master_port}}));
  for (int i = 0; i < options_.sentinels; ++i) {
    sentinels_.push_back(std::make_unique<SentinelProcess>(options_, servers_[0]->port()));
  }
  if (!wait_for(options_.ready_timeout, [this] { return ready(); })) {
    throw std::runtime_error("the sentinels did not all see master '" + options_.master_name +
                             "', its linked replica and each other within " +
                             std::to_string(options_.ready_timeout.count()) + " ms");
  }
}

SentinelGroup::~SentinelGroup() {
  for (auto& s : sentinels_) s->stop();  // first: no failover while the servers go
  sentinels_.clear();
  servers_.clear();
}

bool SentinelGroup::ready() const {
  const int replica = servers_[1]->port();
  ReplyPtr info = run(replica, {"INFO", "replication"});
  if (str(info.get()).find("master_link_status:up") == std::string::npos) return false;
  for (const auto& s : sentinels_) {
    ReplyPtr m = run(s->port(), {"SENTINEL", "MASTER", options_.master_name}, options_.password);
    auto f = fields(m.get());
    if (f["flags"] != "master" || f["num-slaves"] != "1" ||
        f["num-other-sentinels"] != std::to_string(options_.sentinels - 1)) {
      return false;
    }
    ReplyPtr rs = run(s->port(), {"SENTINEL", "REPLICAS", options_.master_name}, options_.password);
    if (!rs || rs->type != REDIS_REPLY_ARRAY || rs->elements != 1) return false;
    auto r = fields(rs->element[0]);
    if (r["flags"] != "slave" || r["master-link-status"] != "ok" ||
        r["port"] != std::to_string(replica)) {
      return false;
    }
  }
  return true;
}

std::string SentinelGroup::sentinels() const {
  std::string out;
  for (const auto& s : sentinels_) {
    if (s->pid() <= 0) continue;
    if (!out.empty()) out += ',';
    out += "127.0.0.1:" + std::to_string(s->port());
  }
  return out;
}

int SentinelGroup::named_master(std::size_t i) const {
  ReplyPtr r =
      run(sentinels_.at(i)->port(), {"SENTINEL", "get-master-addr-by-name", options_.master_name},
          options_.password);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return 0;
  return std::atoi(str(r->element[1]).c_str());
}

void SentinelGroup::failover(std::chrono::milliseconds timeout, std::size_t via) {
  std::string last;
  const bool ok = wait_for(timeout, [&] {
    ReplyPtr r = run(sentinels_.at(via)->port(), {"SENTINEL", "FAILOVER", options_.master_name},
                     options_.password);
    last = r ? str(r.get()) : "(no reply)";
    return last == "OK";
  });
  if (!ok) throw std::runtime_error("SENTINEL FAILOVER was refused: " + last);
}

int SentinelGroup::wait_switch(int old_port, std::chrono::milliseconds timeout) const {
  int now = 0;
  const bool ok = wait_for(timeout, [&] {
    now = 0;
    for (std::size_t i = 0; i < sentinels_.size(); ++i) {
      if (sentinels_[i]->pid() <= 0) continue;
      const int named = named_master(i);
      if (named == 0 || named == old_port || (now != 0 && named != now)) return false;
      now = named;
    }
    ReplyPtr role = run(now, {"ROLE"});
    return role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
           str(role->element[0]) == "master";
  });
  if (!ok) {
    throw std::runtime_error("the sentinels did not all name a new master (old port " +
                             std::to_string(old_port) + ") within " +
                             std::to_string(timeout.count()) + " ms");
  }
  return now;
}

std::string SentinelGroup::admin(int port, const std::vector<std::string>& args) {
  ReplyPtr r = run(port, args);
  if (!r) throw std::runtime_error("no reply from 127.0.0.1:" + std::to_string(port));
  if (r->type == REDIS_REPLY_ERROR) throw std::runtime_error(str(r.get()));
  if (r->type == REDIS_REPLY_NIL) return "(nil)";
  if (r->type == REDIS_REPLY_ARRAY) {
    std::string out;
    for (std::size_t i = 0; i < r->elements; ++i) {
      if (i != 0) out += '\n';
      out += str(r->element[i]);
    }
    return out;
  }
  return str(r.get());
}

engine::EngineOptions sentinel_node_options(const SentinelGroup& group, unsigned node) {
  engine::EngineOptions o;
  o.mode = engine::ServerMode::kSentinel;
  o.sentinels = group.sentinels();
  o.sentinel_master = group.master_name();
  o.sentinel_password = group.password();
  o.node_id = node;
  // Longer than a failover (the lease keys may be lost with the old master's last writes).
  o.node_lease = std::chrono::seconds(30);
  return o;
}

}  // namespace echo::test
