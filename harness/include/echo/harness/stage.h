// SPDX-License-Identifier: MIT
// What a measurement stages on the engine: its nodes' options (a single server or a cluster), the
// table every drill gate and bench declares (ast_table) and the benches' lane table on it, a
// journal's options, and the plain map read that observes a row gone.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/engine/table_spec.h>
#include <echo/table/branded_id.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace echo::harness {

// The ACL credentials every staged node (node_options, cluster_node_options) and every plain
// connection (hiredis.h's connect) presents: the CLI's --user/--password (or REDISCLI_AUTH). Set
// once, before anything connects (not thread-safe against connects in flight). An empty password
// presents none.
struct Credentials {
  std::string username = "default";
  std::string password;
};
void set_credentials(Credentials c);
const Credentials& credentials() noexcept;

// A node of the server at host:port minting as `node_id`, its io thread on CPU `io_cpu`
// (-1: unpinned); every other knob at its default.
engine::EngineOptions node_options(const std::string& host, int port, unsigned node_id,
                                   int io_cpu = -1);

// The same with the idle heartbeat off: nothing on the wire but the measured traffic.
engine::EngineOptions quiet_node_options(const std::string& host, int port, unsigned node_id,
                                         int io_cpu);

// A node of the cluster reached through `seeds` ("host:port,..."), minting as `node_id`; every
// other knob at its default.
engine::EngineOptions cluster_node_options(const std::string& seeds, unsigned node_id);

// A loader that answers `value`, its version minted by the engine.
engine::Loader answering(std::string value);

// Table `name` of AST rows filled by `loader`, living `ttl_ms`, under coherence `mode`; every
// other knob at its default. What the drill's gates and the benches declare, before their own
// knobs.
engine::TableSpec ast_table(const std::string& name, engine::CoherenceMode mode,
                            engine::Loader loader, std::int64_t ttl_ms = 60000);

// The benches' lane table: AST rows whose loader answers "px=100.00", a 600 s ttl without
// jitter (no row expires during a run), coherence `mode`, its writer on CPU `writer_cpu`.
engine::TableSpec lane_table(const std::string& name, engine::CoherenceMode mode, int writer_cpu);

// A journal of `group` in `dir` minting as `node_id` (synchronous NORMAL unless `full`).
engine::JournalOptions journal_options(const std::filesystem::path& dir, std::string group,
                                       unsigned node_id, bool full = false);

// Is `name` a live row of `table` on `node`? A plain L1 map read: no flight, no wire.
bool cached(const engine::Engine& node, std::string_view table, const table::BrandedId& name);

}  // namespace echo::harness
