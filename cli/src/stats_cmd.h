// SPDX-License-Identifier: MIT
// `echostore stats --server H:P --table T [--json]`: every live node's published stats snapshot
// of table T (EngineOptions::stats_publish; why L2 and not a socket: engine/stats_export.h).
#pragma once

#include <CLI/CLI.hpp>

namespace echo::cli {

// Adds the `stats` subcommand to `app`; the callback reads the snapshots and sets `exit_code`.
void add_stats_command(CLI::App& app, int& exit_code);

}  // namespace echo::cli
