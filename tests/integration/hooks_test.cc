// SPDX-License-Identifier: MIT
// The operational hooks on a real server: EngineOptions::on_event hears every connection's
// connected, a lost with its cause (CLIENT KILL), reconnected and the subscriber's resubscribed,
// and each table's suspended and resumed, in that order; EngineOptions::log takes the engine's
// lines instead of stderr; and every engine thread carries its name (echo-io:<n>, echo-w:<table>,
// echo-load, echo-house) for top, ps -L and gdb.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine_nodes.h"
#include "support/seccomp.h"

namespace echo::test {
namespace {

using engine::EngineOptions;
using engine::Event;
using engine::EventKind;
using engine::LogLevel;

// Every event heard, as "kind subject" lines, with the lost ones' causes.
class Heard {
 public:
  engine::EventSink sink() {
    return [this](const Event& e) {
      std::lock_guard lock(mu_);
      lines_.push_back(std::string(to_string(e.kind)) + " " + std::string(e.subject));
      if (e.kind == EventKind::kLost) causes_.emplace_back(e.cause);
    };
  }
  bool has(const std::string& line) const {
    std::lock_guard lock(mu_);
    return std::find(lines_.begin(), lines_.end(), line) != lines_.end();
  }
  // The position of the first `line` after position `from`, or -1.
  int index_of(const std::string& line, int from = -1) const {
    std::lock_guard lock(mu_);
    for (int i = from + 1; i < static_cast<int>(lines_.size()); ++i) {
      if (lines_[static_cast<std::size_t>(i)] == line) return i;
    }
    return -1;
  }
  std::vector<std::string> causes() const {
    std::lock_guard lock(mu_);
    return causes_;
  }
  std::string all() const {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& l : lines_) out += l + "; ";
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  std::vector<std::string> causes_;
};

// The names of this process's threads (/proc/self/task/<tid>/comm).
std::set<std::string> thread_names() {
  std::set<std::string> names;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return names;
  while (dirent* d = ::readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + d->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  ::closedir(dir);
  return names;
}

class Hooks : public SingleServerTest {};

TEST_F(Hooks, EventsFollowAConnectionLossThroughToTheTableCachingAgain) {
  Heard heard;
  EngineOptions o = node_options(server(), 41);
  o.on_event = heard.sink();
  auto spec = table_spec("quotes", "AST", engine::CoherenceMode::kBroadcast, answering("px"));
  auto n = start_node(o, {spec});
  ASSERT_TRUE(n);
  EXPECT_TRUE(heard.has("connected cmd")) << heard.all();
  EXPECT_TRUE(heard.has("connected sub")) << heard.all();
  ASSERT_TRUE(eventually([&] { return heard.has("resumed quotes"); }))
      << "the first confirmation lets the table cache: " << heard.all();

  // The server drops the subscriber: lost (with its cause), then the table stops caching, the
  // connection boots again, its channels are subscribed again, and the table caches again.
  command(client(), "CLIENT KILL TYPE pubsub");
  ASSERT_TRUE(eventually(
      [&] {
        const int lost = heard.index_of("lost sub");
        return lost >= 0 && heard.index_of("resumed quotes", lost) >= 0;
      },
      15s))
      << heard.all();
  const int lost = heard.index_of("lost sub");
  const int suspended = heard.index_of("suspended quotes", lost);
  const int reconnected = heard.index_of("reconnected sub", lost);
  const int resubscribed = heard.index_of("resubscribed sub", reconnected);
  const int resumed = heard.index_of("resumed quotes", resubscribed);
  EXPECT_GE(suspended, 0) << heard.all();
  EXPECT_GE(reconnected, 0) << heard.all();
  EXPECT_GE(resubscribed, 0) << heard.all();
  EXPECT_GE(resumed, 0) << heard.all();
  ASSERT_FALSE(heard.causes().empty());
  EXPECT_NE(heard.causes().front().find("closed the connection"), std::string::npos)
      << heard.causes().front();
  // The table serves again after the events said so.
  const auto id = n->mint("AST").value();
  ASSERT_TRUE(n->get("quotes", id.view()));
  EXPECT_EQ(n->get("quotes", id.view())->source, engine::Source::kL1);
}

TEST_F(Hooks, TheLogSinkTakesTheEnginesLinesInsteadOfStderr) {
  struct Line {
    LogLevel level;
    std::string component, message;
  };
  std::mutex mu;
  std::vector<Line> lines;
  EngineOptions o = node_options(server(), 42);
  o.log = [&](LogLevel level, std::string_view component, std::string_view message) {
    std::lock_guard lock(mu);
    lines.push_back({level, std::string(component), std::string(message)});
  };
  // A writer pin the kernel refuses is said once, as a warning of the table's writer. The
  // refusal is staged with a seccomp filter on this thread, inherited by the threads start()
  // makes (writer_pin_test does the same for the counter).
  auto spec = table_spec("pinned", "AST", engine::CoherenceMode::kNone, answering("px"));
  spec.writer_cpu = 0;
  engine::Engine e(o, {spec});
  std::thread starter([&] {
    ASSERT_TRUE(refuse_syscall_on_this_thread(__NR_sched_setaffinity, EPERM));
    ASSERT_EQ(e.start(), engine::Error{});
  });
  starter.join();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return !lines.empty();
  }));
  std::lock_guard lock(mu);
  EXPECT_EQ(lines.front().level, LogLevel::kWarn);
  EXPECT_EQ(lines.front().component, "writer:pinned");
  EXPECT_NE(lines.front().message.find("cannot pin the writer to CPU 0"), std::string::npos)
      << lines.front().message;
}

TEST_F(Hooks, EveryEngineThreadIsNamed) {
  auto spec = table_spec("quotes", "AST", engine::CoherenceMode::kBroadcast, answering("px"));
  auto n = node(43, {spec});
  ASSERT_TRUE(n);
  ASSERT_TRUE(n->get("quotes", fresh_id("AST").view()));  // a miss: the first loader starts
  // Each thread names itself as it begins: wait for all of them (a loaded machine may not have
  // run a thread's first line yet).
  const std::vector<std::string> wanted = {"echo-io:0", "echo-w:quotes", "echo-load", "echo-house"};
  EXPECT_TRUE(eventually([&] {
    const auto names = thread_names();
    return std::all_of(wanted.begin(), wanted.end(),
                       [&](const std::string& w) { return names.contains(w); });
  })) << "named threads missing";
  const auto names = thread_names();
  for (const auto& w : wanted) EXPECT_TRUE(names.contains(w)) << w;
}

}  // namespace
}  // namespace echo::test
