// SPDX-License-Identifier: MIT
// The referee's control group: the two classic ways of keeping a local cache beside Redis,
// built as their documentation draws them (nothing of EchoStore's inside):
// - classic_tracking: Redis client-side caching in broadcasting mode. Each node holds a RESP3
//   connection that sent CLIENT TRACKING ON BCAST PREFIX <prefix>; an `invalidate` push deletes
//   its keys (a nil list: every key). Writers SET plain values.
// - deletion_synchronised (Nebulex's way): the writer SETs L2, then PUBLISHes an unversioned
//   "forget <key>" on one channel; each node's subscriber deletes the key. The write's number
//   rides after the key as the referee's stopwatch tag (oracle.h); the receiver ignores it.
// A node's cache is a mutex and an unordered_map. A miss is the classic cache-aside fill: the
// reader GETs the key over its own blocking connection, holds the value the same fill hold as
// EchoStore's fills (race 1), then inserts it, unguarded: whatever was deleted meanwhile.
#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/io/connection.h>
#include <echo/io/uring_loop.h>

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

#include "referee/plain_keys.h"
#include "referee/referee.h"

namespace echo::cli::referee {
namespace {

enum class Way { kTracking, kDeletion };

// One node's cache.
class ClassicMap {
 public:
  std::optional<std::string> get(const std::string& key) const {
    const std::lock_guard lock(mu_);
    const auto it = rows_.find(key);
    if (it == rows_.end()) return std::nullopt;
    return it->second;
  }
  void insert(const std::string& key, std::string value) {
    const std::lock_guard lock(mu_);
    rows_[key] = std::move(value);
  }
  bool erase(const std::string& key) {
    const std::lock_guard lock(mu_);
    return rows_.erase(key) > 0;
  }
  void clear() {
    const std::lock_guard lock(mu_);
    rows_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> rows_;
};

// `what` failed: the reply's type, or the connection's error.
class ClassicCache final : public Contestant {
 public:
  explicit ClassicCache(Way way) : way_(way) {}
  ~ClassicCache() override { stop(); }

  std::string_view name() const override {
    return way_ == Way::kTracking ? "classic_tracking" : "deletion_synchronised";
  }
  bool mails_late() const override { return way_ == Way::kDeletion; }

  void start(Stage& stage) override {
    stage_ = &stage;
    stopping_.store(false, std::memory_order_relaxed);
    prefix_ =
        std::string("referee:") + (way_ == Way::kTracking ? "ct" : "ds") + ":" + stage.run_id + ":";
    channel_ = prefix_ + "forget";
    seed_plain_keys(stage, prefix_, keys_, index_);
    for (int n = 0; n < stage.config.nodes; ++n) start_node(n);
    if (way_ == Way::kDeletion) mail_ = harness::connect(stage.target.host, stage.target.port);
  }

  std::unique_ptr<NodeReader> reader(int node) override {
    return std::make_unique<Reader>(*this, *nodes_[static_cast<std::size_t>(node)]);
  }
  std::unique_ptr<Writer> writer() override { return std::make_unique<ClassicWriter>(*this); }

  std::optional<std::uint32_t> peek(int node, std::size_t name) override {
    const auto v = nodes_[static_cast<std::size_t>(node)]->map.get(keys_[name]);
    return v ? parse_seq(*v) : std::nullopt;
  }
  std::string l2_key(std::size_t name) const override { return keys_[name]; }
  bool framed() const override { return false; }
  std::string trouble() const override {
    return lost_.load(std::memory_order_relaxed)
               ? "a node's connection was lost during the run (and its messages with it)"
               : std::string();
  }

  void stop() override {
    stopping_.store(true, std::memory_order_relaxed);
    nodes_.clear();  // each connection closes before its loop
    mail_.reset();
  }

 private:
  struct Node {
    ClassicMap map;
    std::unique_ptr<io::LoopThread> loop;
    std::unique_ptr<io::Connection> conn;  // declared after its loop: destroyed before it
  };

  void start_node(int n) {
    auto node = std::make_unique<Node>();
    Node* at = node.get();
    io::ConnectionOptions o;
    o.host = stage_->target.host;
    o.port = stage_->target.port;
    o.username = harness::credentials().username;
    o.password = harness::credentials().password;
    o.protocol = io::Protocol::kResp3;  // the pushes
    o.fence = false;                    // a plain client: no EchoMQ version key
    o.label = std::string(name()) + "-" + std::to_string(n);
    node->loop = std::make_unique<io::LoopThread>();
    node->conn = std::make_unique<io::Connection>(
        node->loop->loop(), o,
        [this, at, n](const io::Resp3Value& push) {
          if (way_ == Way::kTracking) {
            invalidated(*at, n, push);
          } else {
            forgotten(*at, n, push);
          }
        },
        [this](io::ConnEvent event, std::error_code) {
          if (event == io::ConnEvent::kDisconnected && !stopping_.load(std::memory_order_relaxed)) {
            lost_.store(true, std::memory_order_relaxed);
          }
        });
    node->conn->start();
    if (auto ec = node->conn->wait_ready(std::chrono::seconds(5))) {
      throw std::runtime_error("node " + std::to_string(n) + " could not connect: " + ec.message());
    }
    if (way_ == Way::kTracking) {
      const io::OwnedResult r =
          node->conn->call_blocking({"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", prefix_});
      if (r.ec || r.reply.view().str() != "OK") {
        throw std::runtime_error("CLIENT TRACKING ON BCAST was refused: " +
                                 (r.ec ? r.ec.message() : r.reply.view().to_debug_string()));
      }
    } else if (auto ec = node->conn->subscribe_blocking(channel_)) {
      throw std::runtime_error("SUBSCRIBE " + channel_ + " failed: " + ec.message());
    }
    nodes_.push_back(std::move(node));
  }

  // The node's loop thread: ["invalidate", [key, ...]] or ["invalidate", nil].
  void invalidated(Node& node, int n, const io::Resp3Value& push) {
    if (push.size() < 2 || push[0].str() != "invalidate") return;
    const io::Resp3Value keys = push[1];
    if (keys.is_null()) {
      node.map.clear();
      stage_->oracle.reached_all(n);
      return;
    }
    for (const io::Resp3Value k : keys) {
      const std::string key(k.str());
      const bool dropped = node.map.erase(key);
      if (const auto it = index_.find(key); it != index_.end()) {
        stage_->oracle.reached_unversioned(n, it->second, 0, dropped);
      }
    }
  }

  // The node's loop thread: ["message", channel, "forget <key> <seq>"].
  void forgotten(Node& node, int n, const io::Resp3Value& push) {
    if (push.size() < 3 || push[0].str() != "message") return;
    std::string_view payload = push[2].str();
    constexpr std::string_view kForget = "forget ";
    if (!payload.starts_with(kForget)) return;
    payload.remove_prefix(kForget.size());
    const auto space = payload.find(' ');
    if (space == std::string_view::npos) return;
    const std::string key(payload.substr(0, space));
    const bool dropped = node.map.erase(key);
    const auto it = index_.find(key);
    const auto tag = parse_seq(payload.substr(space + 1));
    if (it != index_.end()) {
      stage_->oracle.reached_unversioned(n, it->second, tag.value_or(0), dropped);
    }
  }

  static bool publish(redisContext* c, const std::string& channel, const std::string& payload,
                      std::string& error) {
    harness::Reply r = harness::command(c, "PUBLISH %b %b", channel.data(), channel.size(),
                                        payload.data(), payload.size());
    if (r && r->type == REDIS_REPLY_INTEGER) return true;
    error = reply_why(r, c, "PUBLISH");
    return false;
  }

  class Reader final : public NodeReader {
   public:
    Reader(const ClassicCache& cache, Node& node)
        : cache_(cache),
          node_(node),
          redis_(harness::connect(cache.stage_->target.host, cache.stage_->target.port)) {}
    std::optional<std::uint32_t> read(std::size_t name, std::string& error) override {
      const std::string& key = cache_.keys_[name];
      std::optional<std::string> value = node_.map.get(key);
      if (!value) {
        harness::Reply r = harness::command(redis_.get(), "GET %b", key.data(), key.size());
        if (!r || r->type != REDIS_REPLY_STRING) {
          error = reply_why(r, redis_.get(), "GET");
          return std::nullopt;
        }
        value.emplace(r->str, r->len);
        std::this_thread::sleep_for(cache_.stage_->config.fill_hold);  // race (1)
        node_.map.insert(key, *value);
      }
      const auto seq = parse_seq(*value);
      if (!seq) error = "a row that is no write's number";
      return seq;
    }

   private:
    const ClassicCache& cache_;
    Node& node_;
    harness::Context redis_;
  };

  class ClassicWriter final : public Writer {
   public:
    explicit ClassicWriter(ClassicCache& cache)
        : cache_(cache),
          redis_(harness::connect(cache.stage_->target.host, cache.stage_->target.port)) {}
    bool write(std::size_t name, std::uint32_t seq, const std::optional<table::BrandedId>&,
               bool late, std::string& error) override {
      const std::string& key = cache_.keys_[name];
      const std::string value = std::to_string(seq);
      harness::Reply r = harness::command(redis_.get(), "SET %b %b", key.data(), key.size(),
                                          value.data(), value.size());
      if (!r || r->type != REDIS_REPLY_STATUS) {
        error = reply_why(r, redis_.get(), "SET");
        return false;
      }
      if (cache_.way_ == Way::kTracking) return true;
      cache_.stage_->oracle.acked(name, seq);  // L2 holds it; the message is yet to leave
      std::string payload = "forget " + key + " " + value;
      if (!late) return publish(redis_.get(), cache_.channel_, payload, error);
      // The late message: the contestant outlives the mailer's drain (workload.cc).
      cache_.stage_->mailer.post([cache = &cache_, payload = std::move(payload)](std::string& e) {
        return publish(cache->mail_.get(), cache->channel_, payload, e);
      });
      return true;
    }

   private:
    ClassicCache& cache_;
    harness::Context redis_;
  };

  Way way_;
  Stage* stage_ = nullptr;
  std::string prefix_, channel_;
  std::vector<std::string> keys_;                         // L2 key by name index
  std::unordered_map<std::string, std::uint32_t> index_;  // name index by L2 key
  std::vector<std::unique_ptr<Node>> nodes_;
  harness::Context mail_;  // deletion_synchronised: the late mailer's own connection
  std::atomic<bool> stopping_{false}, lost_{false};
};

}  // namespace

std::vector<std::unique_ptr<Contestant>> classic_caches() {
  std::vector<std::unique_ptr<Contestant>> caches;
  caches.push_back(std::make_unique<ClassicCache>(Way::kTracking));
  caches.push_back(std::make_unique<ClassicCache>(Way::kDeletion));
  return caches;
}

}  // namespace echo::cli::referee
