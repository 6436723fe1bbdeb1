// SPDX-License-Identifier: MIT
// The engine-wide knobs the constructor checks, so that a bad configuration never starts: each
// refusal is a ConfigError naming the knob, its range and the value given.
#include "engine_impl.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace echo::engine {
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
  if (o.caller_links > 1024) {
    throw ConfigError("caller_links must lie in 0..1024, got " + std::to_string(o.caller_links));
  }
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
      throw ConfigError(
          "sentinels / sentinel_master are set but mode is not sentinel (set mode = "
          "ServerMode::kSentinel)");
    }
    return;
  }
  if (o.sentinels.empty()) {
    throw ConfigError(
        "sentinels must list 1 or more sentinels as host:port,host:port,... when mode "
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
    throw ConfigError(
        "sentinel_master must be the monitored master's name, 1..255 bytes with no "
        "space or control byte, got '" +
        o.sentinel_master + "'");
  }
}

// ServerMode::kCluster's knobs, and their absence in the other modes.
void check_cluster_knobs(const EngineOptions& o) {
  if (o.mode != ServerMode::kCluster) {
    if (!o.cluster_seeds.empty()) {
      throw ConfigError(
          "cluster_seeds is set but mode is not cluster (set mode = ServerMode::kCluster)");
    }
    return;
  }
  if (!o.cluster_seeds.empty()) {
    try {
      (void)io::parse_seeds(o.cluster_seeds);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(std::string("cluster_seeds: ") + e.what());
    }
  }
  if (o.cluster_max_redirects < 0 || o.cluster_max_redirects > 16) {
    throw ConfigError("cluster_max_redirects must lie in 0..16, got " +
                      std::to_string(o.cluster_max_redirects));
  }
}

// The threads: how many io threads, where the housekeeping ones may run.
void check_thread_knobs(const EngineOptions& o) {
  if (o.io_threads < 1 || o.io_threads > 16) {
    throw ConfigError("io_threads must lie in 1..16, got " + std::to_string(o.io_threads));
  }
  if (o.io_threads > 1 && o.mode != ServerMode::kSingle) {
    throw ConfigError(
        "io_threads above 1 needs mode single (a cluster's sharded subscriber and a "
        "sentinel's redials run on io thread 0), got " +
        std::to_string(o.io_threads));
  }
  for (const int cpu : o.housekeeping_cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      throw ConfigError("housekeeping_cpus: each CPU must lie in 0.." +
                        std::to_string(CPU_SETSIZE - 1) + ", got " + std::to_string(cpu));
    }
  }
}

// The node, its lease, and what the engine publishes about itself.
void check_node_knobs(const EngineOptions& o) {
  if (const auto p = o.stats_publish.count(); p != 0 && (p < 100 || p > 3600000)) {
    throw ConfigError("stats_publish must be 0 (off) or lie in 100..3,600,000 ms, got " +
                      std::to_string(p));
  }
  if (o.node_id > table::kMaxNode && o.node_id != EngineOptions::kAutoNode) {
    throw ConfigError("node_id must be auto (EngineOptions::kAutoNode) or lie in 0..1023, got " +
                      std::to_string(o.node_id));
  }
  if (const auto l = o.node_lease.count(); l < 1000 || l > 3'600'000) {
    throw ConfigError("node_lease must lie in 1000..3,600,000 ms, got " + std::to_string(l));
  }
  MetricsEndpoint::check_options(o);  // metrics_port / metrics_bind
}

}  // namespace

void check_engine_options(const EngineOptions& o) {
  // Sentinel mode dials what the sentinels name, a cluster with seeds its seeds: host and port
  // are not used then.
  const bool by_seeds = o.mode == ServerMode::kSentinel ||
                        (o.mode == ServerMode::kCluster && !o.cluster_seeds.empty());
  if (!by_seeds && (o.port < 1 || o.port > 65535)) {
    throw ConfigError("port must lie in 1..65535, got " + std::to_string(o.port));
  }
  check_cluster_knobs(o);
  check_sentinel_knobs(o);
  check_connection_knobs(o, by_seeds);
  check_thread_knobs(o);
  check_node_knobs(o);
}

}  // namespace echo::engine
