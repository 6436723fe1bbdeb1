// SPDX-License-Identifier: MIT
// Six LocalServers joined by redis-cli into a cluster; health, failover and slot moves are read
// and driven through the cluster's own commands over plain blocking hiredis clients.
#include <echo/testing/local_cluster.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace echo::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct ContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

ContextPtr connect(const std::string& host, int port) {
  ContextPtr c(redisConnectWithTimeout(host.c_str(), port, timeval{1, 0}));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeval{5, 0});
  return c;
}

ReplyPtr run(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

void render(const redisReply* r, std::string& out) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.append(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out += std::to_string(r->integer);
      break;
    case REDIS_REPLY_ARRAY:
      for (std::size_t i = 0; i < r->elements; ++i) {
        if (i > 0) out += '\n';
        render(r->element[i], out);
      }
      break;
    default:
      break;
  }
}

// "field:value" out of an INFO-style text ("cluster_state:ok\r\n...").
std::string info_field(const std::string& text, const std::string& field) {
  const std::string key = field + ":";
  std::size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const auto end = text.find_first_of("\r\n", at);
      return text.substr(at + key.size(), end == std::string::npos ? end : end - at - key.size());
    }
    at += key.size();
  }
  return {};
}

// Runs a program to completion with its output in `log`; its exit status, or -1 on timeout.
int run_program(const std::vector<std::string>& args, const std::string& log,
                milliseconds timeout) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {
  if (options_.masters < 3 || options_.masters > 16) {
    throw std::invalid_argument("LocalClusterOptions::masters must be in 3..16");
  }
  if (options_.replicas < 0 || options_.replicas > 2) {
    throw std::invalid_argument("LocalClusterOptions::replicas must be in 0..2");
  }
  if (const char* cli = std::getenv("ECHO_REDIS_CLI"); cli && *cli) options_.cli_binary = cli;
  const int total = options_.masters * (1 + options_.replicas);
  LocalServerOptions so;
  // The config file is relative to the server's own --dir (a fresh directory per server).
  so.extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", std::to_string(options_.node_timeout.count()),
                   // Any replica may take over, however long ago it last heard its master.
                   "--cluster-replica-validity-factor", "0", "--cluster-allow-replica-migration",
                   "no"};
  so.tls = options_.tls;
  if (so.tls.enabled()) {
    so.extra_args.insert(so.extra_args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
  }
  for (int i = 0; i < total; ++i) servers_.push_back(std::make_unique<LocalServer>(so));
  create();
}

LocalCluster::~LocalCluster() {
  for (auto& s : servers_) s->stop();
}

void LocalCluster::create() {
  std::vector<std::string> args = {options_.cli_binary, "--cluster", "create"};
  for (const auto& s : servers_) args.push_back(s->host() + ":" + std::to_string(s->port()));
  args.insert(args.end(),
              {"--cluster-replicas", std::to_string(options_.replicas), "--cluster-yes"});
  char tmpl[] = "/tmp/echostore-cluster-create-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::close(fd);
  const std::string log = tmpl;
  const int rc = run_program(args, log, options_.ready_timeout);
  const std::string out = slurp(log);
  ::unlink(log.c_str());
  if (rc != 0) {
    throw std::runtime_error("redis-cli --cluster create failed (exit " + std::to_string(rc) +
                             "): " + out.substr(out.size() > 600 ? out.size() - 600 : 0));
  }
  const std::size_t total = servers_.size();
  wait_until("cluster_state:ok with every node known and every replica linked",
             options_.ready_timeout, [&] {
               if (!healthy()) return false;
               for (std::size_t i = 0; i < total; ++i) {
                 const std::string info = admin(i, {"CLUSTER", "INFO"});
                 if (info_field(info, "cluster_known_nodes") != std::to_string(total)) {
                   return false;
                 }
                 const std::string repl = admin(i, {"INFO", "replication"});
                 if (info_field(repl, "role") == "slave" &&
                     info_field(repl, "master_link_status") != "up") {
                   return false;
                 }
               }
               return true;
             });
}

void LocalCluster::wait_until(const char* what, milliseconds timeout,
                              const std::function<bool()>& done) const {
  const auto deadline = Clock::now() + timeout;
  std::string last_error;
  while (Clock::now() < deadline) {
    try {
      if (done()) return;
    } catch (const std::exception& e) {
      last_error = e.what();  // a node still booting or just killed: ask again
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  throw std::runtime_error(std::string("LocalCluster: timed out waiting for ") + what +
                           (last_error.empty() ? "" : " (last error: " + last_error + ")"));
}

std::size_t LocalCluster::any_running() const {
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i]->running()) return i;
  }
  throw std::runtime_error("LocalCluster: no node is running");
}

std::string LocalCluster::seeds() const {
  std::string out;
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    if (!out.empty()) out += ',';
    out += s->host() + ":" + std::to_string(s->port());
  }
  return out;
}

std::string LocalCluster::tls_seeds() const {
  std::string out;
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    if (!out.empty()) out += ',';
    out += s->host() + ":" + std::to_string(s->tls_port());
  }
  return out;
}

std::vector<int> LocalCluster::ports() const {
  std::vector<int> out;
  for (const auto& s : servers_) out.push_back(s->port());
  return out;
}

std::string LocalCluster::admin(std::size_t i, const std::vector<std::string>& args) const {
  const LocalServer& s = *servers_.at(i);
  if (!s.running()) throw std::runtime_error("node " + std::to_string(i) + " is not running");
  auto c = connect(s.host(), s.port());
  if (!c) throw std::runtime_error("cannot connect to node " + std::to_string(i));
  ReplyPtr r = run(c.get(), args);
  if (!r) throw std::runtime_error("no reply from node " + std::to_string(i));
  if (r->type == REDIS_REPLY_ERROR) {
    throw std::runtime_error(args.front() + " on node " + std::to_string(i) + ": " +
                             std::string(r->str, r->len));
  }
  std::string out;
  render(r.get(), out);
  return out;
}

bool LocalCluster::healthy() const {
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (!servers_[i]->running()) continue;
    const std::string info = admin(i, {"CLUSTER", "INFO"});
    if (info_field(info, "cluster_state") != "ok" ||
        info_field(info, "cluster_slots_ok") != "16384") {
      return false;
    }
  }
  return true;
}

std::vector<ClusterNodeInfo> LocalCluster::nodes() const {
  const std::string text = admin(any_running(), {"CLUSTER", "NODES"});
  std::vector<ClusterNodeInfo> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string id, addr, flags;
    if (!(fields >> id >> addr >> flags)) continue;
    ClusterNodeInfo n;
    n.id = id;
    const auto colon = addr.rfind(':', addr.find('@'));
    n.port = std::atoi(addr.c_str() + colon + 1);
    n.master = flags.find("master") != std::string::npos;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      // Under tls-cluster the cluster names each node by its TLS port.
      if (servers_[i]->port() == n.port || (n.port != 0 && servers_[i]->tls_port() == n.port)) {
        n.index = static_cast<int>(i);
        n.running = servers_[i]->running();
      }
    }
    out.push_back(n);
  }
  return out;
}

namespace {

// True when `port` is one of `s`'s: the cluster names a node by its TLS port under tls-cluster.
bool serves(const LocalServer& s, int port) {
  return port != 0 && (s.port() == port || s.tls_port() == port);
}

// The port serving `slot` in node `c`'s CLUSTER SLOTS, or 0.
int slot_port(redisContext* c, std::uint16_t slot) {
  ReplyPtr r = run(c, {"CLUSTER", "SLOTS"});
  if (!r || r->type != REDIS_REPLY_ARRAY) return 0;
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* range = r->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
    if (slot < range->element[0]->integer || slot > range->element[1]->integer) continue;
    const redisReply* master = range->element[2];
    if (master->type == REDIS_REPLY_ARRAY && master->elements >= 2) {
      return static_cast<int>(master->element[1]->integer);
    }
  }
  return 0;
}

}  // namespace

int LocalCluster::master_of(std::uint16_t slot) const {
  const LocalServer& s = *servers_.at(any_running());
  auto c = connect(s.host(), s.port());
  if (!c) throw std::runtime_error("LocalCluster: cannot connect to a running node");
  const int port = slot_port(c.get(), slot);
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (serves(*servers_[i], port) && servers_[i]->running()) {
      return static_cast<int>(i);
    }
  }
  throw std::runtime_error("LocalCluster: no running master serves slot " + std::to_string(slot));
}

int LocalCluster::other_master(std::uint16_t slot) const {
  const int owner = master_of(slot);
  for (const auto& n : nodes()) {
    if (n.master && n.running && n.index != owner && n.index >= 0) return n.index;
  }
  throw std::runtime_error("LocalCluster: no second running master");
}

int LocalCluster::kill_master_of(std::uint16_t slot) {
  const int owner = master_of(slot);
  servers_.at(owner)->kill();
  return owner;
}

int LocalCluster::wait_failover(std::uint16_t slot, int old_master, milliseconds timeout) {
  int promoted = -1;
  wait_until("a replica to take over the slot", timeout, [&] {
    int agreed = -1;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (!servers_[i]->running()) continue;
      auto c = connect(servers_[i]->host(), servers_[i]->port());
      if (!c) return false;
      const int port = slot_port(c.get(), slot);
      if (port == 0 || serves(*servers_.at(old_master), port)) return false;
      if (agreed != -1 && agreed != port) return false;
      agreed = port;
    }
    if (!healthy()) return false;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (serves(*servers_[i], agreed)) promoted = static_cast<int>(i);
    }
    return promoted >= 0;
  });
  return promoted;
}

void LocalCluster::begin_migration(std::uint16_t slot, int target) {
  const int source = master_of(slot);
  std::string source_id, target_id;
  for (const auto& n : nodes()) {
    if (n.index == source) source_id = n.id;
    if (n.index == target) target_id = n.id;
  }
  const std::string s = std::to_string(slot);
  admin(target, {"CLUSTER", "SETSLOT", s, "IMPORTING", source_id});
  admin(source, {"CLUSTER", "SETSLOT", s, "MIGRATING", target_id});
}

void LocalCluster::finish_migration(std::uint16_t slot, int target) {
  const int source = master_of(slot);
  const std::string s = std::to_string(slot);
  const LocalServer& to = *servers_.at(target);
  while (true) {
    const std::string keys = admin(source, {"CLUSTER", "GETKEYSINSLOT", s, "100"});
    if (keys.empty()) break;
    std::vector<std::string> migrate = {"MIGRATE", to.host(), std::to_string(to.port()), "", "0",
                                        "5000",    "KEYS"};
    std::istringstream in(keys);
    for (std::string k; std::getline(in, k);) migrate.push_back(k);
    admin(source, migrate);
  }
  std::string target_id;
  for (const auto& n : nodes()) {
    if (n.index == target) target_id = n.id;
  }
  // The target first (it bumps its epoch), then the source, then every other master.
  admin(target, {"CLUSTER", "SETSLOT", s, "NODE", target_id});
  admin(source, {"CLUSTER", "SETSLOT", s, "NODE", target_id});
  for (const auto& n : nodes()) {
    if (n.master && n.running && n.index != target && n.index != source && n.index >= 0) {
      admin(n.index, {"CLUSTER", "SETSLOT", s, "NODE", target_id});
    }
  }
  wait_until("every node to see the slot's new owner", milliseconds(30000), [&] {
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (!servers_[i]->running()) continue;
      auto c = connect(servers_[i]->host(), servers_[i]->port());
      if (!c || !serves(to, slot_port(c.get(), slot))) return false;
    }
    return true;
  });
}

}  // namespace echo::testing
