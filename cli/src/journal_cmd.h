// SPDX-License-Identifier: MIT
// `echostore journal stats|replay|compact PATH`: the operator's verbs on a journal file.
#pragma once

#include <CLI/CLI.hpp>

namespace echo::cli {

// Adds the `journal` subcommand to `app`; the callback runs the verb and sets `exit_code`.
void add_journal_command(CLI::App& app, int& exit_code);

}  // namespace echo::cli
