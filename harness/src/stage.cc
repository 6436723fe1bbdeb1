// SPDX-License-Identifier: MIT
// The staging helpers of stage.h.
#include <echo/harness/stage.h>

#include <echo/engine/internal/access.h>

#include <chrono>
#include <optional>
#include <utility>

namespace echo::harness {

namespace {
Credentials& stored_credentials() {
  static Credentials c;
  return c;
}
}  // namespace

void set_credentials(Credentials c) { stored_credentials() = std::move(c); }
const Credentials& credentials() noexcept { return stored_credentials(); }

engine::EngineOptions node_options(const std::string& host, int port, unsigned node_id,
                                   int io_cpu) {
  engine::EngineOptions o;
  o.host = host;
  o.port = port;
  o.username = credentials().username;
  o.password = credentials().password;
  o.node_id = node_id;
  o.io.cpu = io_cpu;
  return o;
}

engine::EngineOptions quiet_node_options(const std::string& host, int port, unsigned node_id,
                                         int io_cpu) {
  engine::EngineOptions o = node_options(host, port, node_id, io_cpu);
  o.heartbeat = std::chrono::milliseconds(0);
  o.node_lease = std::chrono::hours(1);  // renewed every 20 minutes: not within a measurement
  return o;
}

engine::EngineOptions cluster_node_options(const std::string& seeds, unsigned node_id) {
  engine::EngineOptions o;
  o.mode = engine::ServerMode::kCluster;
  o.cluster_seeds = seeds;
  o.username = credentials().username;
  o.password = credentials().password;
  o.node_id = node_id;
  return o;
}

engine::Loader answering(std::string value) {
  return [value = std::move(value)](const table::BrandedId&) -> engine::LoadResult {
    return engine::Loaded{value, std::nullopt};
  };
}

engine::TableSpec ast_table(const std::string& name, engine::CoherenceMode mode,
                            engine::Loader loader, std::int64_t ttl_ms) {
  engine::TableSpec t;
  t.name = name;
  t.kind = "AST";
  t.loader = std::move(loader);
  t.ttl_ms = ttl_ms;
  t.coherence = mode;
  return t;
}

engine::TableSpec lane_table(const std::string& name, engine::CoherenceMode mode, int writer_cpu) {
  engine::TableSpec t = ast_table(name, mode, answering("px=100.00"), 600000);
  t.jitter = 0;
  t.writer_cpu = writer_cpu;
  return t;
}

engine::JournalOptions journal_options(const std::filesystem::path& dir, std::string group,
                                       unsigned node_id, bool full) {
  engine::JournalOptions o;
  o.dir = dir;
  o.group = std::move(group);
  o.synchronous_full = full;
  o.node_id = node_id;
  return o;
}

bool cached(const engine::Engine& node, std::string_view table, const table::BrandedId& name) {
  char buf[64];
  return engine::internal::writer_of(node, table)->map().read(name.view(), buf).status !=
         table::ReadStatus::kMiss;
}

}  // namespace echo::harness
