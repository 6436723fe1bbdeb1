// SPDX-License-Identifier: MIT
// The journal verbs for operators. PATH is a journal file (<dir>/journal-<group>.db): the group
// comes from its name. replay needs the bus: --server HOST:PORT and --table T (the job lane's
// table), and re-enqueues uncovered intents under their recorded job ids.
#include "journal_cmd.h"

#include <echo/engine/engine.h>
#include <echo/engine/journal.h>
#include <echo/io/cluster_map.h>

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

namespace echo::cli {
namespace {

struct JournalArgs {
  std::string verb, path, server, table;
};

// The group of a file named journal-<group>.db with a branded group (docs/wire.md, "The
// journal"); nullopt for any other name. By hand: std::regex trips g++ 12's
// -Wmaybe-uninitialized under ASan, and the id parser is the authority on "branded" anyway.
std::optional<std::string> group_of(const std::filesystem::path& file) {
  const std::string base = file.filename().string();
  constexpr std::string_view kPrefix = "journal-", kSuffix = ".db";
  const std::string_view file_name(base);
  const bool shaped = file_name.size() > kPrefix.size() + kSuffix.size() &&
                      file_name.starts_with(kPrefix) && file_name.ends_with(kSuffix);
  const std::string_view group_id =
      shaped ? file_name.substr(kPrefix.size(), file_name.size() - kPrefix.size() - kSuffix.size())
             : std::string_view();
  if (!shaped || !table::BrandedId::parse(group_id)) return std::nullopt;
  return std::string(group_id);
}

int print_stats(engine::Journal& journal) {
  const auto s = journal.stats();
  std::cout << "path             " << s.path.string() << "\n"
            << "group            " << journal.group().view() << "\n"
            << "intents          " << s.intents << "\n"
            << "pending_enqueue  " << s.pending_enqueue << "\n"
            << "remembered       " << s.remembered << "\n";
  return 0;
}

int compact(engine::Journal& journal) {
  const auto retired = journal.compact();
  if (!retired) {
    std::cerr << "echostore journal compact: " << retired.error().message() << "\n";
    return 1;
  }
  std::cout << "retired " << *retired << " covered intents\n";
  return 0;
}

// Re-enqueues the uncovered intents on --table through a node on --server.
int replay(const JournalArgs& a, engine::Journal& journal) {
  if (a.server.empty() || a.table.empty()) {
    std::cerr << "echostore journal replay: --server HOST:PORT and --table T are required\n";
    return 2;
  }
  const auto address = io::parse_address(a.server);
  if (!address) {
    std::cerr << "echostore journal replay: --server wants HOST:PORT (port 1..65535), got '"
              << a.server << "'\n";
    return 2;
  }
  engine::EngineOptions eo;
  eo.host = address->host;
  eo.port = address->port;
  engine::Engine node(eo, {});
  if (auto ec = node.start()) {
    std::cerr << "echostore journal replay: cannot reach " << a.server << ": " << ec.message()
              << "\n";
    return 1;
  }
  const auto group = journal.group();
  auto result = journal.replay(
      [&](const table::BrandedId& job, std::string_view name, const table::BrandedId& version) {
        return node.enqueue_job(a.table, group, job, name, version);
      });
  if (!result) {
    std::cerr << "echostore journal replay: " << result.error().message() << "\n";
    return 1;
  }
  std::cout << "replayed " << result->replayed << ", deduplicated " << result->deduplicated;
  if (result->malformed != 0) std::cout << ", malformed " << result->malformed << " (not sent)";
  std::cout << "\n";
  if (result->malformed != 0) {
    // Intents the replay could not send are still uncovered: not a finished replay.
    std::cerr << "echostore journal replay: " << result->malformed
              << " malformed intents were skipped (not sent)\n";
    return 3;
  }
  return 0;
}

int run(const JournalArgs& a) {
  const std::filesystem::path file(a.path);
  const std::optional<std::string> group = group_of(file);
  if (!group) {
    std::cerr << "echostore journal: " << a.path << " is not named journal-<group>.db\n";
    return 2;
  }
  if (!std::filesystem::exists(file)) {
    std::cerr << "echostore journal: " << a.path << " does not exist\n";
    return 1;
  }
  engine::JournalOptions options;
  options.dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  options.group = *group;
  try {
    engine::Journal journal(options);
    if (a.verb == "stats") return print_stats(journal);
    if (a.verb == "compact") return compact(journal);
    return replay(a, journal);
  } catch (const std::exception& e) {  // opening the journal (or the engine): the verbs throw not
    std::cerr << "echostore journal: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_journal_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<JournalArgs>();
  auto* journal = app.add_subcommand("journal", "Inspect, replay or compact a journal file");
  journal->add_option("VERB", args->verb, "stats | replay | compact")
      ->required()
      ->check(CLI::IsMember({"stats", "replay", "compact"}));
  journal->add_option("PATH", args->path, "the journal file, <dir>/journal-<group>.db")->required();
  journal->add_option("--server", args->server, "HOST:PORT of the bus (replay)");
  journal->add_option("--table", args->table, "the job lane's table (replay)");
  journal->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace echo::cli
