// SPDX-License-Identifier: MIT
// The referee's real client (`echostore referee --peers`): node-redis 6's client-side cache, the
// cache a Node.js user would pick, run as its README draws it (a RESP3 client with
// `clientSideCache`, default tracking mode). Each node is a child process (node
// bench/peers/csc_node.mjs, one client, one cache); the referee's reader threads each hold a Unix
// socket to their node's process and ask it for one GET a line, and the process writes a line
// for every invalidation its cache applied, after node-redis's own handler ran: this file's
// thread per node reads them and tells the oracle (unversioned messages, as classic tracking's).
// Writers SET plain values, as classic tracking's do.
//
// The races, as far as they can be injected from outside: the late mailer's reordering cannot
// (the server sends the invalidations, as for the tracking lanes), nor can the fill hold (the
// fill is node-redis's own GET -> insert inside its process; its guard, an in-flight placeholder
// that an invalidation marks, is what would meet the hold). And the oracle hears of an
// invalidation one pipe hop after the cache applied it: a read begun in that gap is not judged
// against it (lenient by that hop, tens of microseconds; a row stale for longer is counted).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <echo/harness/hiredis.h>
#include <echo/harness/temp_dir.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "peer_process.h"
#include "referee/plain_keys.h"
#include "referee/referee.h"

namespace echo::cli::referee {
namespace {

// A connected Unix socket to one node's process: one request line, one answer line.
class Line {
 public:
  explicit Line(const std::string& path) : fd_(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (fd_ < 0 || path.size() >= sizeof a.sun_path) {
      throw std::runtime_error("cannot make a socket for " + path);
    }
    path.copy(a.sun_path, path.size());
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
      close(fd_);
      throw std::runtime_error("cannot connect to " + path);
    }
  }
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line() { close(fd_); }

  // The answer to `request`; nullopt when the process is gone.
  std::optional<std::string> ask(const std::string& request) {
    const std::string bytes = request + '\n';
    for (std::size_t at = 0; at < bytes.size();) {
      const ssize_t n = send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return std::nullopt;
      at += static_cast<std::size_t>(n);
    }
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      char chunk[512];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

class NodeRedisCache final : public Contestant {
 public:
  explicit NodeRedisCache(std::string peers_dir)
      : dir_(std::move(peers_dir)), sockets_("echostore-referee-csc-") {}
  ~NodeRedisCache() override { stop(); }

  std::string_view name() const override { return "node_redis_csc"; }
  bool mails_late() const override { return false; }

  void start(Stage& stage) override {
    stage_ = &stage;
    stopping_.store(false, std::memory_order_relaxed);
    lost_.store(false, std::memory_order_relaxed);
    const std::string node = peer_node("referee", dir_, "csc_node.mjs", {"redis"});
    prefix_ = "referee:csc:" + stage.run_id + ":";
    seed_plain_keys(stage, prefix_, keys_, index_);
    for (int n = 0; n < stage.config.nodes; ++n) start_node(node, n);
  }

  std::unique_ptr<NodeReader> reader(int node) override {
    return std::make_unique<Reader>(*this, nodes_[static_cast<std::size_t>(node)]->socket);
  }
  std::unique_ptr<Writer> writer() override { return std::make_unique<PlainWriter>(*this); }

  std::optional<std::uint32_t> peek(int node, std::size_t name) override {
    Node& n = *nodes_[static_cast<std::size_t>(node)];
    const std::lock_guard lock(n.control_mu);
    const auto v = n.control->ask("p " + keys_[name]);
    if (!v || *v == "-" || v->starts_with('!')) return std::nullopt;
    return parse_seq(*v);
  }
  std::string l2_key(std::size_t name) const override { return keys_[name]; }
  bool framed() const override { return false; }
  std::string trouble() const override {
    return lost_.load(std::memory_order_relaxed)
               ? "a node's process ended during the run (its invalidations with it)"
               : std::string();
  }

  void stop() override {
    stopping_.store(true, std::memory_order_relaxed);
    for (auto& n : nodes_) n->child->close_stdin();  // each process ends; its events thread too
    nodes_.clear();
  }

 private:
  struct Node {
    std::string socket;
    std::unique_ptr<ChildProcess> child;
    std::unique_ptr<Line> control;  // peek's line
    std::mutex control_mu;
    std::jthread events;  // declared last: joined first, while the rest still stands
    ~Node() {
      if (child) child->close_stdin();
      if (events.joinable()) events.join();
    }
  };

  void start_node(const std::string& node, int n) {
    auto at = std::make_unique<Node>();
    at->socket = (sockets_.path() / ("node-" + std::to_string(n) + ".sock")).string();
    at->child = std::make_unique<ChildProcess>(std::vector<std::string>{
        node, dir_ + "/csc_node.mjs", "--host", stage_->target.host, "--port",
        std::to_string(stage_->target.port), "--socket", at->socket});
    const auto ready = at->child->read_line(std::chrono::seconds(20));
    if (!ready || *ready != "ready") {
      throw std::runtime_error("node " + std::to_string(n) + "'s process did not start (" +
                               (ready ? "it said '" + *ready + "'" : "it said nothing") + ")");
    }
    at->control = std::make_unique<Line>(at->socket);
    ChildProcess* child = at->child.get();
    at->events = std::jthread([this, child, n] {
      for (;;) {
        const auto line = child->read_line(std::chrono::hours(1));
        if (!line) break;
        heard(n, *line);
      }
      if (!stopping_.load(std::memory_order_relaxed)) lost_.store(true, std::memory_order_relaxed);
    });
    nodes_.push_back(std::move(at));
  }

  // Node n's events thread: "i KEY 1|0" or "i *", after the cache applied it.
  void heard(int n, const std::string& line) {
    if (line == "i *") {
      stage_->oracle.reached_all(n);
      return;
    }
    if (!line.starts_with("i ") || line.size() < 4) return;
    const std::string key = line.substr(2, line.size() - 4);
    const bool dropped = line.back() == '1';
    if (const auto it = index_.find(key); it != index_.end()) {
      // The cause, for the latency figure only: node-redis tracks in the default mode, where the
      // server announces the first write after the client's last read of the key and then none
      // until it reads it again, so its invalidations cannot be matched to the writes in order
      // (as BCAST's are). The newest write begun is the cause unless another write of the key
      // began in the push's flight (tens of microseconds): then the figure is short by that.
      const std::uint32_t cause = stage_->oracle.started(it->second);
      stage_->oracle.reached_unversioned(n, it->second, cause, dropped);
    }
  }

  class Reader final : public NodeReader {
   public:
    Reader(const NodeRedisCache& cache, const std::string& socket) : cache_(cache), line_(socket) {}
    std::optional<std::uint32_t> read(std::size_t name, std::string& error) override {
      const auto v = line_.ask("g " + cache_.keys_[name]);
      if (!v) {
        error = "the node's process is gone";
        return std::nullopt;
      }
      if (v->starts_with('!')) {
        error = "GET: " + v->substr(1);
        return std::nullopt;
      }
      const auto seq = parse_seq(*v);
      if (!seq) error = "a row that is no write's number";
      return seq;
    }

   private:
    const NodeRedisCache& cache_;
    Line line_;
  };

  class PlainWriter final : public Writer {
   public:
    explicit PlainWriter(NodeRedisCache& cache)
        : cache_(cache),
          redis_(harness::connect(cache.stage_->target.host, cache.stage_->target.port)) {}
    bool write(std::size_t name, std::uint32_t seq, const std::optional<table::BrandedId>&, bool,
               std::string& error) override {
      const std::string& key = cache_.keys_[name];
      const std::string value = std::to_string(seq);
      harness::Reply r = harness::command(redis_.get(), "SET %b %b", key.data(), key.size(),
                                          value.data(), value.size());
      if (r && r->type == REDIS_REPLY_STATUS) return true;
      error = reply_why(r, redis_.get(), "SET");
      return false;
    }

   private:
    NodeRedisCache& cache_;
    harness::Context redis_;
  };

  std::string dir_;
  harness::TempDir sockets_;
  Stage* stage_ = nullptr;
  std::string prefix_;
  std::vector<std::string> keys_;                         // L2 key by name index
  std::unordered_map<std::string, std::uint32_t> index_;  // name index by L2 key
  std::vector<std::unique_ptr<Node>> nodes_;
  std::atomic<bool> stopping_{false}, lost_{false};
};

}  // namespace

std::vector<std::unique_ptr<Contestant>> real_clients(const std::string& peers_dir) {
  std::vector<std::unique_ptr<Contestant>> clients;
  clients.push_back(std::make_unique<NodeRedisCache>(peers_dir));
  return clients;
}

}  // namespace echo::cli::referee
