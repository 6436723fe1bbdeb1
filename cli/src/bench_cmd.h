// SPDX-License-Identifier: MIT
// `echostore bench [--server H:P] [--quick] [--json FILE] [--ring-capacity N] [--max-batch N]
// [--wait spin|yield|park] [--rounds N]`: the whole side-by-side suite in one command, against a
// redis-server it starts itself or the one given; progress on stderr, one table on stdout.
#pragma once

#include <CLI/CLI.hpp>

namespace echo::cli {

// Adds the `bench` subcommand to `app`; its callback runs the suite and sets `exit_code`
// (0 done, 1 a measurement failed, 2 bad arguments).
void add_bench_command(CLI::App& app, int& exit_code);

}  // namespace echo::cli
