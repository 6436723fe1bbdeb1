// SPDX-License-Identifier: MIT
// fork/exec of redis-server with PR_SET_PDEATHSIG, readiness by PING over hiredis, stop by pid.
#include <echo/testing/local_server.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

namespace echo::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct RedisContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

ContextPtr connect(const std::string& host, int port, const std::string& password) {
  timeval tv{0, 500000};
  ContextPtr c(redisConnectWithTimeout(host.c_str(), port, tv));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeval{2, 0});
  if (!password.empty()) {
    ReplyPtr r(static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password.c_str())));
    if (!r || r->type == REDIS_REPLY_ERROR) return nullptr;
  }
  return c;
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

// A socket bound to 127.0.0.1:port (0: any free port), or -1 with errno set.
int bind_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

bool loopback_port_free(int port) {
  const int fd = bind_loopback(port);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

int free_loopback_port() {
  const int fd = bind_loopback(0);
  if (fd < 0) throw std::runtime_error(std::string("bind 127.0.0.1:0: ") + std::strerror(errno));
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("getsockname: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

LocalServer::LocalServer(LocalServerOptions options) : options_(std::move(options)) {
  if (const char* bin = std::getenv("ECHO_REDIS_SERVER"); bin && *bin) options_.binary = bin;
  char tmpl[] = "/tmp/echostore-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  }
  dir_ = tmpl;
  // A port can be taken between probe and bind; try a few before giving up. A cluster node also
  // binds its bus at port + 10000, which must exist (the kernel's ephemeral range reaches 60999)
  // and be free: a probe that misses either is not an attempt.
  const auto& extra = options_.extra_args;
  const bool cluster = std::find(extra.begin(), extra.end(), "--cluster-enabled") != extra.end();
  for (int attempt = 0, probes = 0; attempt < 5 && probes < 1000; ++probes) {
    port_ = free_loopback_port();
    if (port_ == 6379) continue;
    if (cluster && (port_ + 10000 > 65535 || !loopback_port_free(port_ + 10000))) continue;
    if (options_.tls.enabled()) {
      tls_port_ = free_loopback_port();
      if (tls_port_ == 6379 || tls_port_ == port_) continue;
    }
    ++attempt;
    spawn();
    if (running()) return;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  throw std::runtime_error("redis-server (" + options_.binary + ") did not answer PING on " +
                           host_ + " within " + std::to_string(options_.ready_timeout.count()) +
                           " ms; is Debian's redis-server installed?");
}

LocalServer::~LocalServer() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void LocalServer::spawn() {
  std::vector<std::string> args = {options_.binary,
                                   "--port", std::to_string(port_),
                                   "--bind", host_,
                                   "--save", "",
                                   "--appendonly", "no",
                                   "--daemonize", "no",
                                   "--protected-mode", "no",
                                   "--dir", dir_.string(),
                                   "--logfile", (dir_ / "redis.log").string()};
  if (!options_.password.empty()) {
    args.insert(args.end(), {"--requirepass", options_.password});
  }
  if (options_.tls.enabled()) {
    const auto& t = options_.tls;
    args.insert(args.end(), {"--tls-port", std::to_string(tls_port_), "--tls-cert-file",
                             t.cert_file, "--tls-key-file", t.key_file, "--tls-ca-cert-file",
                             t.ca_file, "--tls-auth-clients", t.auth_clients});
    // The bus follows the TLS port under tls-cluster: pin it where the constructor probed.
    const auto& extra = options_.extra_args;
    if (std::find(extra.begin(), extra.end(), "--cluster-enabled") != extra.end()) {
      args.insert(args.end(), {"--cluster-port", std::to_string(port_ + 10000)});
    }
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child's environment, built here (the child may only make async-signal-safe calls).
  std::string lc_all = "LC_ALL=" + options_.locale;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (options_.locale.empty() || std::strncmp(*e, "LC_ALL=", 7) != 0) envp.push_back(*e);
  }
  if (!options_.locale.empty()) envp.push_back(lc_all.data());
  envp.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = Clock::now() + options_.ready_timeout;
  while (Clock::now() < deadline) {
    if (answers_ping()) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) break;  // exited: bad binary or port taken
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
}

bool LocalServer::answers_ping() const noexcept {
  auto c = connect(host_, port_, options_.password);
  if (!c) return false;
  ReplyPtr r(static_cast<redisReply*>(redisCommand(c.get(), "PING")));
  return r && r->type == REDIS_REPLY_STATUS && std::strcmp(r->str, "PONG") == 0;
}

void LocalServer::stop() noexcept {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (!reap(pid_, std::chrono::milliseconds(5000))) {
    ::kill(pid_, SIGKILL);
    reap(pid_, std::chrono::milliseconds(5000));
  }
  pid_ = -1;
}

void LocalServer::kill() noexcept {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  reap(pid_, std::chrono::milliseconds(5000));
  pid_ = -1;
}

void LocalServer::restart(bool hard) {
  if (hard) {
    kill();
  } else {
    stop();
  }
  // The old socket may linger briefly; retry on the same port so clients reconnect to it.
  for (int attempt = 0; attempt < 50 && !running(); ++attempt) {
    spawn();
    if (!running()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!running()) {
    throw std::runtime_error("redis-server did not restart on port " + std::to_string(port_));
  }
}

std::string LocalServer::version() const {
  auto c = connect(host_, port_, options_.password);
  if (!c) throw std::runtime_error("cannot connect to " + host_ + ":" + std::to_string(port_));
  ReplyPtr r(static_cast<redisReply*>(redisCommand(c.get(), "INFO server")));
  if (!r || r->type != REDIS_REPLY_STRING) throw std::runtime_error("INFO server failed");
  const std::string info(r->str, r->len);
  const std::string key = "redis_version:";
  const auto at = info.find(key);
  if (at == std::string::npos) return "unknown";
  const auto end = info.find_first_of("\r\n", at);
  return info.substr(at + key.size(), end - at - key.size());
}

}  // namespace echo::testing
