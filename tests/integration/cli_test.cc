// SPDX-License-Identifier: MIT
// The `echostore` program as an operator meets it: every usage error exits 2, --server is parsed
// strictly, `stats` refuses a value that is not a snapshot by node, reads over TLS with
// --tls-* (a wrong CA refused by name), reads every master of a cluster and redraws one screen
// per refresh under --watch (bounded by --count), `journal replay` that skipped
// malformed intents is not a success, `bench --json` and `--html` with paths that are not UTF-8
// write their files instead of aborting (the page well-formed and holding every row), and a short
// `referee` run shows both sides of the face-off. Runs the program built beside this test
// (ECHO_CLI_PATH) against a real server started here; registered only when the CLI is built
// (ECHO_BUILD_CLI). `bench --only neighbour` gives its three rows with finite ratios even where a
// gap count is 0. `bench --peers` and `referee --peers` without the peers' packages name the
// command that installs them.
#include <echo/engine/journal.h>
#include <echo/engine/stats_export.h>
#include <echo/table/branded_id.h>
#include <echo/testing/local_cluster.h>
#include <echo/testing/local_server.h>
#include <echo/testing/local_tls.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/redis_fixture.h"
#include "support/temp_dir.h"

extern char** environ;

namespace echo::test {
namespace {

struct Ran {
  int status = -1;  // the exit code, or 128 + the signal that ended it
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the program with `args`, its stdout and stderr into files, and waits for it.
Ran run_cli(const std::vector<std::string>& args) {
  TempDir dir("echo-cli-");
  const std::string out = (dir.path() / "out").string(), err = (dir.path() / "err").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv{const_cast<char*>(ECHO_CLI_PATH)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  Ran r;
  if (posix_spawn(&pid, ECHO_CLI_PATH, &fa, nullptr, argv.data(), environ) != 0) {
    ADD_FAILURE() << "cannot run " << ECHO_CLI_PATH;
    posix_spawn_file_actions_destroy(&fa);
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

class CliTest : public SingleServerTest {
 protected:
  std::string server_arg() const { return server().host() + ":" + std::to_string(server().port()); }
};

// A journal file in `dir` with no intent in it (created by opening it once).
std::filesystem::path empty_journal(const TempDir& dir) {
  engine::JournalOptions o;
  o.dir = dir.path();
  o.group = "PRT0KHTOWnGLuC";
  engine::Journal j(o);
  return j.path();
}

// Exit 2 is a usage error only: a command whose own server cannot start (no such binary here),
// and a journal file that does not exist, exit 1 with the cause on stderr.
TEST_F(CliTest, AFailureThatIsNotAUsageErrorExitsOne) {
  ::setenv("ECHO_REDIS_SERVER", "/nonexistent/redis-server", 1);
  const std::vector<std::vector<std::string>> commands = {{"drill"},
                                                          {"drill", "--cluster"},
                                                          {"drill", "--chaos", "10"},
                                                          {"bench", "--quick"},
                                                          {"referee", "--quick"}};
  std::vector<Ran> ran;
  for (const auto& args : commands) ran.push_back(run_cli(args));
  ::unsetenv("ECHO_REDIS_SERVER");
  for (std::size_t i = 0; i < commands.size(); ++i) {
    EXPECT_EQ(ran[i].status, 1) << commands[i][0] << ": " << ran[i].out << ran[i].err;
    EXPECT_NE((ran[i].out + ran[i].err).find("redis-server"), std::string::npos) << ran[i].err;
  }
  TempDir dir;
  const Ran missing =
      run_cli({"journal", "stats", (dir.path() / "journal-PRT0KHTOWnGLuC.db").string()});
  EXPECT_EQ(missing.status, 1) << missing.err;
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
}

TEST_F(CliTest, EveryUsageErrorExitsTwo) {
  // CLI11's own codes were 105 (a validator), 106 (a required option), 109 (an extra argument).
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"no-such-command"},
      {"id", "mint", "ABC", "--node", "5000"},
      {"id", "mint", "ABC", "--node", "x"},
      {"stats", "--table", "t"},
      {"journal", "frobnicate", "/tmp/journal-PRT0KHTOWnGLuC.db"},
      {"id", "decode", "USR0NgWEfAEJfs", "extra"},
      {"drill", "--chaos", "5"},                // the chaos drill runs 10..86400 s
      {"drill", "--seed", "3"},                 // a seed is the chaos drill's alone
      {"drill", "--chaos", "60", "--cluster"},  // the chaos drill runs on one server
      {"bench", "--only", "neighbor"},          // the part is spelt as the row ids spell it
      {"bench", "--peers", "--only", "micro"},  // --peers is a part of its own
  };
  for (const auto& args : bad) {
    const Ran r = run_cli(args);
    std::string line;
    for (const auto& a : args) line += a + ' ';
    EXPECT_EQ(r.status, 2) << line << "\n" << r.err;
  }
  EXPECT_EQ(run_cli({"--help"}).status, 0);
  EXPECT_EQ(run_cli({"id", "decode", "USR0NgWEfAEJfs"}).status, 0);
}

TEST_F(CliTest, ServerIsParsedStrictly) {
  // std::stoi read "<port>x" as <port> and went on against the server.
  for (const std::string suffix : {"x", " ", "0000000000000000000000"}) {
    const std::string arg = server_arg() + suffix;
    const Ran r = run_cli({"stats", "--server", arg, "--table", "t"});
    EXPECT_EQ(r.status, 2) << arg << ": " << r.err;
    EXPECT_NE(r.err.find("HOST:PORT"), std::string::npos) << r.err;
  }
  TempDir dir;
  const std::filesystem::path file = empty_journal(dir);
  const Ran r = run_cli(
      {"journal", "replay", file.string(), "--server", server_arg() + "x", "--table", "limits"});
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("HOST:PORT"), std::string::npos) << r.err;
}

// The drill checks its server before any gate: a refused password stops it within 2 s, exit 1,
// naming the cause in the server's words; the same user with its password passes the check
// (the drill then runs; stopped here at its first gate's output by reading only the header).
TEST_F(CliTest, DrillStopsAtOnceNamingWhyTheServerCannotBeUsed) {
  command(client(), "ACL SETUSER drill on >right ~* &* +@all");
  const auto t0 = std::chrono::steady_clock::now();
  const Ran r =
      run_cli({"drill", "--server", server_arg(), "--user", "drill", "--password", "wrong"});
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("auth_refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("WRONGPASS"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("stage"), std::string::npos) << "no gate ran: " << r.out;
  EXPECT_LT(took, std::chrono::seconds(3)) << "2 s for the check, plus the program's start";
  command(client(), "ACL DELUSER drill");
}

// The peers (bench --peers, referee --peers) need Node.js and bench/peers's packages, which
// neither CI nor this test installs: where they are missing, exit 1 before any row or contestant
// runs, naming the command that installs them (a directory with the scripts but no node_modules
// stands for a fresh clone, whether or not this machine has a node).
TEST_F(CliTest, PeersNameTheirSetupWhenNodeOrPackagesAreMissing) {
  TempDir dir;
  for (const char* script : {"peers.mjs", "csc_node.mjs"}) {
    std::ofstream(dir.path() / script) << "// empty\n";
  }
  const std::string peers_dir = dir.path().string();
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"bench", "--peers", "--server", server_arg(), "--peers-dir", peers_dir},
           {"referee", "--peers", "--quick", "--server", server_arg(), "--peers-dir", peers_dir}}) {
    const Ran r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args[0] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("scripts/setup.sh --peers"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("| "), std::string::npos) << "no table: " << r.out;
  }
}

TEST_F(CliTest, StatsReadsThePasswordFromRedisCliAuth) {
  command(client(), "ACL SETUSER watcher on >pw ~* &* +@all");
  // Wrong through the environment: refused, named.
  ::setenv("REDISCLI_AUTH", "nope", 1);
  Ran r = run_cli({"stats", "--server", server_arg(), "--table", "t", "--user", "watcher"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("WRONGPASS"), std::string::npos) << r.err;
  // Right through the environment: it reads (no node publishes table t: exit 1, saying so).
  ::setenv("REDISCLI_AUTH", "pw", 1);
  r = run_cli({"stats", "--server", server_arg(), "--table", "t", "--user", "watcher"});
  ::unsetenv("REDISCLI_AUTH");
  EXPECT_EQ(r.err.find("WRONGPASS"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no node"), std::string::npos) << r.err;
  command(client(), "ACL DELUSER watcher");
}

// --tls-*: stats reads over TLS (the server's TLS listener, certificates made here); a CA that did
// not sign the server's certificate is refused naming X509's reason; TLS flags that cannot apply
// (bench or drill against --server with no --tls-port) are usage errors.
TEST_F(CliTest, StatsSpeaksTlsAndAWrongCaIsRefusedByName) {
  testing::LocalTlsFiles files;
  testing::LocalServerOptions so;
  so.tls.cert_file = files.server_cert();
  so.tls.key_file = files.server_key();
  so.tls.ca_file = files.ca_file();
  testing::LocalServer tls_server(so);
  const std::string at = tls_server.host() + ":" + std::to_string(tls_server.tls_port());
  Ran r = run_cli({"stats", "--server", at, "--table", "t", "--tls-ca", files.ca_file()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("no node"), std::string::npos) << r.err;
  r = run_cli({"stats", "--server", at, "--table", "t", "--tls-ca", files.other_ca_file()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("tls_verify"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("certificate verify failed"), std::string::npos) << r.err;
  r = run_cli({"stats", "--server", at, "--table", "t", "--tls-ca", files.ca_file(),
               "--tls-server-name", "cache.echostore.invalid"});
  EXPECT_NE(r.err.find("hostname mismatch"), std::string::npos) << r.err;
  r = run_cli({"bench", "--server", server_arg(), "--only", "lanes", "--tls-ca", files.ca_file()});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--tls-port"), std::string::npos) << r.err;
  r = run_cli({"drill", "--server", server_arg(), "--tls-port", "6380"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--tls-ca"), std::string::npos) << r.err;
}

TEST_F(CliTest, StatsRefusesAValueThatIsNotASnapshotByNode) {
  engine::StatsSnapshot s;
  s.node = "2";
  engine::TableStats t;
  t.name = "quotes";
  s.engine.tables = {t};
  const std::string good = engine::to_json(s);
  std::string negative = good;
  const auto at = negative.find("\"hits\":0");
  ASSERT_NE(at, std::string::npos);
  negative.replace(at, 8, "\"hits\":-5");
  command(client(), "SET %s %s", engine::stats_key("quotes", "1").c_str(), "not json at all");
  command(client(), "SET %s %s", engine::stats_key("quotes", "2").c_str(), good.c_str());
  command(client(), "SET %s %s", engine::stats_key("quotes", "3").c_str(), negative.c_str());
  for (const bool json : {true, false}) {
    std::vector<std::string> args = {"stats", "--server", server_arg(), "--table", "quotes"};
    if (json) args.push_back("--json");
    const Ran r = run_cli(args);
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("node '1'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("node '3'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("node '2'"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("not json"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("18446744073709551611"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("-5"), std::string::npos) << r.out;
    if (json) {
      EXPECT_EQ(r.out, "[" + good + "]\n");
    } else {
      EXPECT_NE(r.out.find("node=\"2\""), std::string::npos) << r.out;
    }
  }
  // Only good snapshots: exit 0.
  command(client(), "DEL %s %s", engine::stats_key("quotes", "1").c_str(),
          engine::stats_key("quotes", "3").c_str());
  EXPECT_EQ(run_cli({"stats", "--server", server_arg(), "--table", "quotes", "--json"}).status, 0);
}

TEST_F(CliTest, JournalReplayThatSkippedMalformedIntentsIsNotASuccess) {
  TempDir dir;
  const std::filesystem::path file = empty_journal(dir);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "INSERT INTO intents(job_id, name_id, version, enqueued, recorded_at) "
                         "VALUES ('not-a-job', 'not-a-name', 'not-a-version', 0, 0)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  const Ran r =
      run_cli({"journal", "replay", file.string(), "--server", server_arg(), "--table", "limits"});
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("malformed 1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("1 malformed intents were skipped"), std::string::npos) << r.err;
}

TEST_F(CliTest, JournalStatsOnAJournalAnotherProcessHasOpenIsRefusedNamingTheOwner) {
  // One owner per file: while this process holds the journal (exclusive, the default) the
  // program's own Journal is refused at once, exit 1, the cause named; once it is closed the
  // same command reads the file.
  TempDir dir;
  engine::JournalOptions o;
  o.dir = dir.path();
  o.group = "PRT0KHTOWnGLuC";
  std::filesystem::path file;
  {
    engine::Journal j(o);
    file = j.path();
    ASSERT_TRUE(j.record(table::BrandedId::encode("AST", 1).value(),
                         table::BrandedId::encode("TXN", 1).value()));
    const Ran r = run_cli({"journal", "stats", file.string()});
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("is open in another process (one owner per file"), std::string::npos)
        << r.err;
  }
  const Ran r = run_cli({"journal", "stats", file.string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("intents          1"), std::string::npos) << r.out;
}

// Whether `text` is well-formed XML as far as the bench's page uses it: every element closed in
// order, attributes quoted, only the five predefined entities and numeric references, no raw
// '<' or '&' in text, no control byte. Returns "" or what is wrong and where.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  std::size_t i = 0;
  auto where = [&] { return " at byte " + std::to_string(i); };
  while (i < text.size()) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
      return "a control byte" + where();
    }
    if (c == '&') {
      const auto semi = text.find(';', i);
      const std::string ref = semi == std::string::npos ? "" : text.substr(i, semi - i + 1);
      static const std::vector<std::string> kNamed{"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
      const bool numeric = ref.size() > 3 && ref[1] == '#';
      if (!numeric && std::find(kNamed.begin(), kNamed.end(), ref) == kNamed.end()) {
        return "a bare '&'" + where();
      }
      i = semi + 1;
      continue;
    }
    if (c != '<') {
      ++i;
      continue;
    }
    if (text.compare(i, 2, "<!") == 0) {  // the doctype
      const auto end = text.find('>', i);
      if (end == std::string::npos) return "an unclosed declaration" + where();
      i = end + 1;
      continue;
    }
    const bool closing = text.compare(i, 2, "</") == 0;
    std::size_t j = i + (closing ? 2 : 1);
    const std::size_t name_start = j;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '-'))
      ++j;
    const std::string name = text.substr(name_start, j - name_start);
    if (name.empty()) return "a '<' that starts no tag" + where();
    bool self_closing = false;
    while (j < text.size() && text[j] != '>') {  // attributes: name="value"
      if (text[j] == '"' || text[j] == '\'') {
        const auto close = text.find(text[j], j + 1);
        if (close == std::string::npos) return "an unclosed attribute" + where();
        if (text.find('<', j + 1) < close) return "a '<' in an attribute" + where();
        j = close + 1;
        continue;
      }
      if (text[j] == '/' && j + 1 < text.size() && text[j + 1] == '>') self_closing = true;
      if (text[j] == '=' && (j + 1 >= text.size() || (text[j + 1] != '"' && text[j + 1] != '\''))) {
        return "an unquoted attribute" + where();
      }
      ++j;
    }
    if (j >= text.size()) return "an unclosed tag" + where();
    if (closing) {
      if (open.empty() || open.back() != name) {
        return "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">") +
               where();
      }
      open.pop_back();
    } else if (!self_closing) {
      open.push_back(name);
    }
    i = j + 1;
  }
  return open.empty() ? "" : "<" + open.back() + "> is never closed";
}

TEST(BenchHtmlCheck, SeesWhatIsNotWellFormed) {
  EXPECT_EQ(xml_problem("<!DOCTYPE html><a x=\"1\"><b/>&amp;&#39;</a>"), "");
  EXPECT_NE(xml_problem("<a><b></a></b>"), "");
  EXPECT_NE(xml_problem("<a>x & y</a>"), "");
  EXPECT_NE(xml_problem("<a x=1></a>"), "");
  EXPECT_NE(xml_problem("<a>"), "");
}

TEST_F(CliTest, BenchJsonAndHtmlToPathsThatAreNotUtf8AreWrittenWhole) {
  // The path is in the JSON's command line; nlohmann's dump threw (type_error 316) outside any
  // catch: std::terminate after the whole run. The page holds the same command line, every row
  // (a bar, a table line) and a percentile curve for each lane row that kept its messages.
  TempDir dir;
  const std::string path = (dir.path() / "figures-\xFF.json").string();
  const std::string page = (dir.path() / "figures-\xFF.html").string();
  const Ran r = run_cli({"bench", "--server", server_arg(), "--quick", "--rounds", "1", "--json",
                         path, "--html", page});
  EXPECT_EQ(r.status, 0) << r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
  const std::string text = slurp(path);
  EXPECT_NE(text.find("figures-\xEF\xBF\xBD.json"), std::string::npos) << text.substr(0, 300);
  const std::string html = slurp(page);
  ASSERT_FALSE(html.empty());
  EXPECT_EQ(xml_problem(html), "");
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_GE(j.at("rows").size(), 10u);
  for (const auto& row : j.at("rows")) {
    const std::string id = row.at("id");
    EXPECT_NE(html.find("<g class=\"bar\" data-row=\"" + id + "\">"), std::string::npos) << id;
    EXPECT_NE(html.find("<tr data-row=\"" + id + "\">"), std::string::npos) << id;
  }
  for (const char* lane : {"broadcast_vs_floor", "job_vs_broadcast", "remembered_vs_job"}) {
    EXPECT_NE(html.find("role=\"img\" data-row=\"" + std::string(lane) + "\""), std::string::npos)
        << lane;
  }
  EXPECT_NE(html.find("<polyline"), std::string::npos);
}

TEST_F(CliTest, BenchOnlyNeighbourGivesThreeFiniteRowsOrSaysWhyNot) {
  // Gap counts may be 0 in either contender on a quiet CPU: the ratio is (ours + 1) / (alone + 1)
  // gaps/s, never the 0/0 or x/0 that nlohmann writes as null. On one CPU the rows are left out.
  TempDir dir;
  const std::string path = (dir.path() / "neighbour.json").string();
  const Ran r = run_cli({"bench", "--server", server_arg(), "--only", "neighbour", "--quick",
                         "--rounds", "1", "--json", path});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(path), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  if (j.at("machine").at("cores").get<unsigned>() < 2) {
    EXPECT_TRUE(j.at("rows").empty());
    EXPECT_NE(r.err.find("left out"), std::string::npos) << r.err;
    return;
  }
  std::vector<std::string> ids;
  for (const auto& row : j.at("rows")) {
    ids.push_back(row.at("id"));
    ASSERT_TRUE(row.at("ratio").is_number()) << row.dump();
    EXPECT_GT(row.at("ratio").get<double>(), 0) << row.dump();
    EXPECT_GE(row.at("ours_median").get<double>(), 0) << row.dump();
    EXPECT_GE(row.at("baseline_median").get<double>(), 0) << row.dump();
    EXPECT_EQ(row.at("ratio_offset").get<double>(), 1) << row.dump();
    EXPECT_EQ(row.at("also").size(), 2u) << row.dump();
    EXPECT_NE(row.at("placement").get<std::string>().find("CPU 1"), std::string::npos);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"neighbour_gaps_vs_alone_idle",
                                           "neighbour_gaps_vs_alone_sparse",
                                           "neighbour_gaps_vs_alone_burst"}));
}

TEST_F(CliTest, RefereeFindsNoStaleEchoStoreReadAndSeesTheClassicRace) {
  // Every EchoStore lane: 0 stale reads and 0 permanently stale rows. Each classic contestant:
  // at least one row left stale, or the referee has not shown it can see the race it measures.
  // The classic race comes from the last writes of hot names landing while a fill of theirs is
  // held (2 ms; a few of them per contestant at --quick's write rate), not from the run's length.
  TempDir dir;
  const std::string path = (dir.path() / "referee.json").string();
  const Ran r =
      run_cli({"referee", "--server", server_arg(), "--quick", "--seconds", "2", "--json", path});
  EXPECT_EQ(r.status, 0) << r.out << r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
  const auto j = nlohmann::json::parse(slurp(path), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << slurp(path);
  std::vector<std::string> names;
  for (const auto& c : j.at("contestants")) {
    const std::string name = c.at("name");
    names.push_back(name);
    ASSERT_TRUE(c.at("ran").get<bool>()) << name << ": " << c.value("failure", "");
    EXPECT_GT(c.at("reads").get<std::uint64_t>(), 0u) << name;
    EXPECT_GT(c.at("writes").get<std::uint64_t>(), 0u) << name;
    if (name.starts_with("echostore_")) {
      EXPECT_EQ(c.at("stale_reads").get<std::uint64_t>(), 0u) << name;
      EXPECT_EQ(c.at("permanently_stale").get<std::uint64_t>(), 0u) << name;
    } else {
      EXPECT_GE(c.at("permanently_stale").get<std::uint64_t>(), 1u) << name;
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"echostore_broadcast", "echostore_job", "echostore_tracking",
                                      "echostore_broadcast_carried", "echostore_job_carried",
                                      "classic_tracking", "deletion_synchronised"}));
  EXPECT_NE(r.out.find("| echostore_tracking |"), std::string::npos) << r.out;
}

// ---- stats on a cluster and --watch ----

// A published snapshot of `table` by `node`: 42 rows, 90 hits and 10 misses, a ring 7/4096
// full, lag samples in the [1024, 2048) ns bucket, one ready connection.
std::string watch_snapshot(const std::string& table, const std::string& node) {
  engine::StatsSnapshot s;
  s.node = node;
  engine::TableStats t;
  t.name = table;
  t.l1.size = 42;
  t.l1.hits = 90;
  t.l1.misses = 10;
  t.writer.lag_histogram[10] = 100;
  ring::RingStats r;
  r.capacity = 4096;
  r.occupancy = 7;
  t.rings = {r};
  s.engine.tables = {t};
  io::ConnectionStats c;
  c.label = "command";
  c.status = io::ConnStatus::kReady;
  s.engine.connections = {c};
  return engine::to_json(s);
}

// On a cluster each table's stats keys live on the master of its hash tag's slot: stats asked on
// one master finds the tables another master holds (CLUSTER SLOTS, then SCAN on each master).
TEST(CliStatsCluster, ReadsEveryMasterOfACluster) {
  std::unique_ptr<testing::LocalCluster> cluster;
  try {
    cluster = std::make_unique<testing::LocalCluster>(testing::LocalClusterOptions{.replicas = 0});
  } catch (const std::exception& e) {
    FAIL() << "the cluster did not start: " << e.what();
  }
  // Two tables whose keys sit on different masters.
  const auto slot_of = [&](const std::string& table) {
    return static_cast<std::uint16_t>(
        std::stoi(cluster->admin(0, {"CLUSTER", "KEYSLOT", engine::stats_key(table, "1")})));
  };
  const std::string first = "quotes";
  const int first_master = cluster->master_of(slot_of(first));
  std::string second;
  for (int i = 0; i < 100 && second.empty(); ++i) {
    const std::string name = "table" + std::to_string(i);
    if (cluster->master_of(slot_of(name)) != first_master) second = name;
  }
  ASSERT_FALSE(second.empty());
  for (const std::string& table : {first, second}) {
    const int m = cluster->master_of(slot_of(table));
    cluster->admin(static_cast<std::size_t>(m),
                   {"SET", engine::stats_key(table, "1"), watch_snapshot(table, "1")});
  }
  // Asked on the master that holds only the second table's key, found by asking (no --cluster).
  const int asked = cluster->master_of(slot_of(second));
  const std::string at =
      "127.0.0.1:" + std::to_string(cluster->server(static_cast<std::size_t>(asked)).port());
  for (const bool flag : {false, true}) {
    std::vector<std::string> args = {"stats", "--server", at, "--table", first, "--table", second};
    if (flag) args.push_back("--cluster");
    const Ran r = run_cli(args);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("table=\"" + first + "\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("table=\"" + second + "\""), std::string::npos) << r.out;
  }
}

TEST_F(CliTest, StatsClusterOnASingleServerIsRefusedByName) {
  command(client(), "SET %s %s", engine::stats_key("quotes", "1").c_str(),
          watch_snapshot("quotes", "1").c_str());
  const Ran r = run_cli({"stats", "--server", server_arg(), "--table", "quotes", "--cluster"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("not a cluster node"), std::string::npos) << r.err;
  // Without --cluster the single server is read as before.
  EXPECT_EQ(run_cli({"stats", "--server", server_arg(), "--table", "quotes"}).status, 0);
}

TEST_F(CliTest, StatsWatchRedrawsOneScreenPerRefreshAndStopsAtCount) {
  command(client(), "SET %s %s", engine::stats_key("quotes", "1").c_str(),
          watch_snapshot("quotes", "1").c_str());
  command(client(), "SET %s %s", engine::stats_key("quotes", "2").c_str(),
          watch_snapshot("quotes", "2").c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const Ran r = run_cli(
      {"stats", "--server", server_arg(), "--table", "quotes", "--watch", "0.3", "--count", "3"});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_GE(took, std::chrono::milliseconds(550)) << "3 screens are 2 periods apart";
  // Three screens, each begun with home + clear.
  std::size_t screens = 0;
  for (std::size_t at = 0; (at = r.out.find("\x1b[H\x1b[2J", at)) != std::string::npos; ++at) {
    ++screens;
  }
  EXPECT_EQ(screens, 3u) << r.out;
  const std::string last = r.out.substr(r.out.rfind("\x1b[H\x1b[2J"));
  for (const char* word :
       {"TABLE", "ROWS", "HIT%", "DROPS/S", "RING", "LAG p99", "CONN u/d", "every 0.3s"}) {
    EXPECT_NE(last.find(word), std::string::npos) << word << " in\n" << last;
  }
  // Two nodes of quotes: 84 rows, ring 14/8192, lag p99 in the bucket ending at 2048 ns, two
  // ready connections. The first screen's hit ratio is since start (90.0); later ones, between
  // refreshes with no new reads, "-", and drops/s 0.0.
  const std::string first = r.out.substr(0, r.out.find("\x1b[H\x1b[2J", 1));
  EXPECT_NE(first.find("90.0"), std::string::npos) << first;
  std::istringstream rows(last);
  std::string line, quotes;
  while (std::getline(rows, line)) {
    if (line.rfind("quotes", 0) == 0) quotes = line;
  }
  std::istringstream cols(quotes);
  std::vector<std::string> c;
  for (std::string w; cols >> w;) c.push_back(w);
  ASSERT_EQ(c.size(), 8u) << quotes;
  EXPECT_EQ(c[1], "2");        // nodes
  EXPECT_EQ(c[2], "84");       // rows
  EXPECT_EQ(c[3], "-");        // hit% between refreshes: no reads
  EXPECT_EQ(c[4], "0.0");      // drops/s
  EXPECT_EQ(c[5], "14/8192");  // ring occupancy
  EXPECT_EQ(c[6], "2us");      // lag p99
  EXPECT_EQ(c[7], "2/0");      // connections up/down
}

TEST_F(CliTest, StatsWatchWantsAPositivePeriod) {
  EXPECT_EQ(run_cli({"stats", "--server", server_arg(), "--table", "q", "--watch", "0"}).status, 2);
}

}  // namespace
}  // namespace echo::test
