// SPDX-License-Identifier: MIT
// A redis-server child process on a free loopback port, persistence off, stopped by its own pid.
// The drill, the benchmarks and the integration tests stage their server with it; never 6379,
// never anything outside 127.0.0.1. The child dies with its parent (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace echo::testing {

// A TLS listener beside the plain one (LocalTlsFiles makes the files). The plain port stays open
// on 127.0.0.1 for the readiness probe and the admin helpers (hiredis 0.14 speaks no TLS); what
// a test or the bench points its engine at is tls_port().
struct LocalServerTls {
  std::string cert_file, key_file, ca_file;  // PEM; all three, or no TLS listener
  std::string auth_clients = "optional";     // --tls-auth-clients: "no", "optional" or "yes"
  bool enabled() const noexcept { return !cert_file.empty(); }
};

struct LocalServerOptions {
  std::string binary = "redis-server";  // looked up on PATH; $ECHO_REDIS_SERVER overrides
  std::string password;                 // non-empty: --requirepass
  std::vector<std::string> extra_args;  // e.g. {"--cluster-enabled", "yes"}
  // Non-empty: the server runs with LC_ALL set to it (redis-server takes LC_COLLATE from its
  // environment, and Lua's string comparisons follow it: the collation test).
  std::string locale;
  std::chrono::milliseconds ready_timeout{10000};
  LocalServerTls tls;  // enabled(): --tls-port on a second free port (and, clustered, the bus)
};

class LocalServer {
 public:
  // Starts the server and waits until it answers PING. Throws std::runtime_error naming what
  // failed (binary missing, never answered). Caller thread; blocks up to ready_timeout.
  explicit LocalServer(LocalServerOptions options = {});
  ~LocalServer();  // stop()
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  const std::string& host() const noexcept { return host_; }
  int port() const noexcept { return port_; }
  int tls_port() const noexcept { return tls_port_; }  // 0 without LocalServerOptions::tls
  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0; }

  // SIGTERM, then SIGKILL after 5 s; reaps the child. Idempotent.
  void stop() noexcept;
  // SIGKILL now (a crash, not a shutdown); reaps the child.
  void kill() noexcept;
  // Stops (or kills) and starts again on the same port: the data is gone (no persistence).
  void restart(bool hard = false);

  // The server's `redis_version` from INFO server ("7.0.15").
  std::string version() const;

 private:
  void spawn();
  bool answers_ping() const noexcept;

  LocalServerOptions options_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = -1;
  std::filesystem::path dir_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound with port 0, then released).
int free_loopback_port();

}  // namespace echo::testing
