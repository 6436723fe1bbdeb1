// SPDX-License-Identifier: MIT
// The cluster router: node connections, the slot map and its refresh, redirects, held calls.
// Everything but the blocking entry points, stats() and address_of() runs on the loop thread.
#include <echo/io/cluster_client.h>

#include <echo/base/counter.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <stdexcept>

namespace echo::io {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The tick retries held calls and asks for the map while something waits for it; with nothing
// waiting (no held call, every master answering, no refresh wanted) it only looks once a second,
// and want_refresh() cuts that long sleep short.
constexpr milliseconds kTickPeriod{50};
constexpr milliseconds kIdleTickPeriod{1000};

[[noreturn]] void contract_violation(const char* what) {
  std::fprintf(stderr, "echo::io::ClusterClient: %s\n", what);
  std::abort();
}

bool starts_with(std::string_view s, std::string_view p) noexcept {
  return s.substr(0, p.size()) == p;
}

}  // namespace

struct ClusterClient::Node {
  NodeAddress addr;
  std::int16_t index = 0;
  std::unique_ptr<Connection> conn;
  bool ready() const noexcept { return conn->status() == ConnStatus::kReady; }
};

struct ClusterClient::Request {
  std::vector<std::string> args;  // the whole command (EVALSHA: keys then argv, see nkeys)
  std::optional<Script> script;   // set: args are keys[0..nkeys) then argv
  std::size_t nkeys = 0;
  std::optional<std::uint16_t> slot;
  int redirects = 0;
  Clock::time_point deadline;
  ReplyFn done;
};

ClusterClient::ClusterClient(UringLoop& loop, ClusterOptions options, ClusterPushFn on_push,
                             ClusterEventFn on_event)
    : loop_(loop),
      options_(std::move(options)),
      on_push_(std::move(on_push)),
      on_event_(std::move(on_event)) {
  if (options_.seeds.empty())
    throw std::invalid_argument("ClusterOptions::seeds must not be empty");
  for (const auto& s : options_.seeds) {
    if (s.host.empty() || s.port < 1 || s.port > 65535) {
      throw std::invalid_argument("ClusterOptions::seeds: '" + s.text() + "' is not host:port");
    }
  }
  if (options_.max_redirects < 0 || options_.max_redirects > 16) {
    throw std::invalid_argument("ClusterOptions::max_redirects must be in 0..16, got " +
                                std::to_string(options_.max_redirects));
  }
  if (options_.route_timeout.count() < 1) {
    throw std::invalid_argument("ClusterOptions::route_timeout must be >= 1 ms");
  }
  if (options_.refresh_min_interval.count() < 1) {
    throw std::invalid_argument("ClusterOptions::refresh_min_interval must be >= 1 ms");
  }
  if (options_.connection.db != 0) {
    throw std::invalid_argument("ClusterOptions::connection.db must be 0 (a cluster has one db)");
  }
  owner_index_.fill(-1);
  tick_op_.context = this;
  tick_op_.complete = &ClusterClient::on_tick;
  // Node connections are created here for the seeds (so their constructors' option checks throw
  // to the caller) and later on the loop thread for masters the map names.
  for (const auto& s : options_.seeds) node_for(s);
}

ClusterClient::~ClusterClient() {
  if (loop_.in_loop_thread()) contract_violation("destroyed on its own loop thread");
  auto shut = [this] {
    closing_ = true;
    std::deque<RequestPtr> held;
    held.swap(held_);
    for (auto& r : held) r->done(make_error_code(IoErrc::kClosed), Resp3Value{});
    if (tick_op_.armed) {
      loop_.cancel(tick_op_);  // on_tick runs closed_
    } else {
      auto finish = std::move(closed_);
      closed_ = nullptr;
      if (finish) finish();
    }
  };
  const bool closed = loop_.close_on_loop(
      [this, shut](std::function<void()> done) {
        closed_ = std::move(done);
        shut();
      },
      milliseconds(10000));
  if (!closed) contract_violation("the tick was still armed 10 s after close");
  // Each connection's destructor fails its own in-flight calls; `closing_` keeps their
  // callbacks from routing anything anew.
  nodes_.clear();
}

ClusterClient::Node& ClusterClient::node_for(const NodeAddress& addr) {
  for (auto& n : nodes_) {
    if (n->addr == addr) return *n;
  }
  auto node = std::make_unique<Node>();
  node->addr = addr;
  node->index = static_cast<std::int16_t>(nodes_.size());
  ConnectionOptions o = options_.connection;
  o.host = addr.host;
  o.port = addr.port;
  o.unix_path.clear();
  o.fence = false;  // {emq}:version lives on one slot: fence() checks it through the router
  o.label = options_.connection.label + "@" + addr.text();
  Node* raw = node.get();
  node->conn = std::make_unique<Connection>(
      loop_, std::move(o),
      [this, raw](const Resp3Value& push) {
        if (on_push_) on_push_(raw->addr, push);
      },
      [this, raw](ConnEvent event, std::error_code cause) {
        if (closing_) return;
        if (event == ConnEvent::kReady || event == ConnEvent::kReconnected) {
          if (on_event_) on_event_(ClusterEvent::kNodeReady, raw->addr, {});
          if (!fenced_ || refresh_wanted_) ask_topology();
          retry_held();
        } else {
          if (event == ConnEvent::kStopped && !fenced_ &&
              (cause == IoErrc::kTlsVerify || cause == IoErrc::kTlsHandshake)) {
            // Every node shares the TLS options: a refusal before the first map is the
            // configuration's, not this node's. The loss below still tells the owner.
            stop_fatal(cause, raw->conn->cause());
          }
          if (on_event_) on_event_(ClusterEvent::kNodeLost, raw->addr, cause);
          refresh();
        }
      });
  {
    std::lock_guard lock(map_mu_);
    addresses_.push_back(addr);
    nodes_.push_back(std::move(node));
  }
  if (started_) raw->conn->start();
  return *raw;
}

ClusterClient::Node* ClusterClient::reach(const NodeAddress& addr) {
  try {
    return &node_for(addr);
  } catch (const std::invalid_argument&) {
    // A map or a redirect named a host that does not resolve (a hostname endpoint gone from DNS,
    // or a hostile reply): on the loop thread, whose completions are noexcept, that is a node we
    // cannot reach, never a throw. Its slots stay unowned (their calls held, then cluster_down).
    base::solo_add(unresolved_);
    return nullptr;
  }
}

void ClusterClient::start() {
  loop_.post([this] {
    if (started_ || closing_) return;
    started_ = true;
    want_refresh();
    for (auto& n : nodes_) n->conn->start();
    arm_tick();
  });
}

std::error_code ClusterClient::wait_ready(milliseconds timeout) {
  if (loop_.in_loop_thread()) contract_violation("wait_ready() on the loop thread");
  std::unique_lock lock(status_mu_);
  if (!status_cv_.wait_for(lock, timeout, [this] { return ready_ || fatal_; })) {
    return IoErrc::kTimeout;
  }
  return ready_ ? std::error_code{} : fatal_;
}

// --- The map ---------------------------------------------------------------------------------

ClusterClient::Node* ClusterClient::any_ready() noexcept {
  // Rotate, so a refresh after a loss does not keep asking the same (maybe stale) node.
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node* n = nodes_[(next_probe_ + i) % nodes_.size()].get();
    if (n->ready()) {
      next_probe_ = (next_probe_ + i + 1) % nodes_.size();
      return n;
    }
  }
  return nullptr;
}

void ClusterClient::refresh() {
  want_refresh();
  ask_topology();
}

void ClusterClient::ask_topology() {
  if (closing_ || refresh_in_flight_) return;
  if (Clock::now() - last_refresh_ < options_.refresh_min_interval) return;  // the tick retries
  Node* n = any_ready();
  if (n == nullptr) return;  // a node's kReady event retries
  refresh_in_flight_ = true;
  refresh_wanted_ = false;
  last_refresh_ = Clock::now();
  const std::string_view shards[] = {"CLUSTER", "SHARDS"};
  const auto ec = n->conn->call(shards, [this, n](std::error_code e, const Resp3Value& v) {
    topology_answer(n, true, e, v);
  });
  if (ec) {
    refresh_in_flight_ = false;
    want_refresh();
  }
}

void ClusterClient::topology_answer(Node* from, bool shards, std::error_code ec,
                                    const Resp3Value& v) {
  if (closing_) return;
  if (shards && ec == IoErrc::kServerError) {
    // A server without CLUSTER SHARDS (before 7.0): the older CLUSTER SLOTS says the same.
    const std::string_view slots[] = {"CLUSTER", "SLOTS"};
    const auto e2 = from->conn->call(slots, [this, from](std::error_code e, const Resp3Value& r) {
      topology_answer(from, false, e, r);
    });
    if (!e2) return;
    ec = e2;
  }
  refresh_in_flight_ = false;
  if (!shards && ec == IoErrc::kServerError &&
      v.str().find("cluster support disabled") != std::string_view::npos) {
    return stop_fatal(IoErrc::kTopologyRefused);  // a single server: the mode is wrong
  }
  std::optional<std::vector<SlotRange>> ranges;
  if (!ec)
    ranges =
        shards ? parse_cluster_shards(v, options_.connection.tls.enabled) : parse_cluster_slots(v);
  if (!ranges || ranges->empty()) {
    base::solo_add(refresh_failures_);
    want_refresh();  // the tick asks again, of the next ready node
    return;
  }
  apply(*ranges);
  retry_held();
}

void ClusterClient::apply(const std::vector<SlotRange>& ranges) {
  std::array<Node*, kClusterSlots> next{};
  std::vector<Node*> masters;
  for (const SlotRange& r : ranges) {
    Node* n = reach(r.master);
    if (n == nullptr) continue;
    if (std::find(masters.begin(), masters.end(), n) == masters.end()) masters.push_back(n);
    for (unsigned s = r.first; s <= r.last; ++s) next[s] = n;
  }
  bool changed = false;
  {
    std::lock_guard lock(map_mu_);
    for (unsigned s = 0; s < kClusterSlots; ++s) {
      if (next[s] != owner_[s]) changed = true;
      owner_index_[s] = next[s] ? next[s]->index : std::int16_t{-1};
    }
  }
  owner_ = next;
  masters_list_ = masters;
  masters_.store(masters.size(), std::memory_order_relaxed);
  base::solo_add(refreshes_);
  if (changed && fenced_ && on_event_) on_event_(ClusterEvent::kTopologyChanged, {}, {});
  if (!fenced_) fence(false);
}

// The {emq}:version fence (docs/wire.md, "The connector"), once, on the master of its slot.
void ClusterClient::fence(bool after_set) {
  if (!options_.connection.fence) return become_ready();
  const std::string& key = options_.connection.version_key;
  const std::string& want = options_.connection.version_value;
  const std::string_view get[] = {"GET", key};
  call(get, [this, after_set, key, want](std::error_code ec, const Resp3Value& v) {
    if (closing_ || fenced_) return;
    if (!ec && v.type() == Resp3Type::bulk_string && fence_accepts(options_.connection, v.str())) {
      return become_ready();
    }
    if (!ec && v.is_null() && !after_set) {
      const std::string_view set[] = {"SET", key, want, "NX"};
      call(set, [this](std::error_code, const Resp3Value&) {
        if (!closing_ && !fenced_) fence(true);
      });
      return;
    }
    if (ec && ec != IoErrc::kServerError) {
      want_refresh();  // not an answer: the next map asks again
      return;
    }
    stop_fatal(IoErrc::kVersionFence);
  });
}

void ClusterClient::become_ready() {
  fenced_ = true;
  {
    std::lock_guard lock(status_mu_);
    ready_ = true;
  }
  status_cv_.notify_all();
  if (!ready_sent_) {
    ready_sent_ = true;
    if (on_event_) on_event_(ClusterEvent::kReady, {}, {});
  }
}

std::string ClusterClient::cause() const {
  std::lock_guard lock(status_mu_);
  return cause_;
}

void ClusterClient::stop_fatal(std::error_code cause, std::string detail) {
  {
    std::lock_guard lock(status_mu_);
    if (fatal_) return;  // each seed refused by TLS stops the client: the first one says why
    fatal_ = cause;
    cause_ = std::move(detail);
  }
  status_cv_.notify_all();
  if (on_event_) on_event_(ClusterEvent::kStopped, {}, cause);
}

Connection* ClusterClient::master_of(std::uint16_t slot) noexcept {
  Node* n = owner_[slot & (kClusterSlots - 1)];
  return n ? n->conn.get() : nullptr;
}

NodeAddress ClusterClient::address_of(std::uint16_t slot) const {
  std::lock_guard lock(map_mu_);
  const auto i = owner_index_[slot & (kClusterSlots - 1)];
  return i < 0 ? NodeAddress{} : addresses_[static_cast<std::size_t>(i)];
}

// --- Calls -----------------------------------------------------------------------------------

void ClusterClient::call(std::span<const std::string_view> args, ReplyFn done) {
  auto req = std::make_shared<Request>();
  req->args.assign(args.begin(), args.end());
  req->slot = command_slot(args);
  req->done = std::move(done);
  req->deadline = Clock::now() + options_.route_timeout;
  route(req);
}

void ClusterClient::call_slot(std::uint16_t slot, std::span<const std::string_view> args,
                              ReplyFn done) {
  auto req = std::make_shared<Request>();
  req->args.assign(args.begin(), args.end());
  req->slot = static_cast<std::uint16_t>(slot & (kClusterSlots - 1));
  req->done = std::move(done);
  req->deadline = Clock::now() + options_.route_timeout;
  route(req);
}

void ClusterClient::evalsha(const Script& script, std::span<const std::string_view> keys,
                            std::span<const std::string_view> argv, ReplyFn done) {
  auto req = std::make_shared<Request>();
  req->script = script;
  req->nkeys = keys.size();
  req->args.assign(keys.begin(), keys.end());
  req->args.insert(req->args.end(), argv.begin(), argv.end());
  if (!keys.empty()) req->slot = hash_slot(keys.front());
  req->done = std::move(done);
  req->deadline = Clock::now() + options_.route_timeout;
  route(req);
}

void ClusterClient::route(const RequestPtr& req) {
  if (closing_) return finish(req, make_error_code(IoErrc::kClosed), Resp3Value{});
  Node* n = req->slot ? owner_[*req->slot] : any_ready();
  if (n == nullptr || !n->ready()) return hold(req);
  send(req, n, false);
}

void ClusterClient::send(const RequestPtr& req, Node* node, bool asking) {
  const std::vector<std::string_view> views(req->args.begin(), req->args.end());
  auto cb = [this, req, node](std::error_code ec, const Resp3Value& v) {
    answered(req, node, ec, v);
  };
  // After ASK, ASKING and the command go as one unit (call_asking): ASKING written alone, its
  // command refused, would grant the next caller's command on that node instead.
  Connection& conn = *node->conn;
  std::error_code ec;
  if (req->script) {
    const std::span<const std::string_view> all(views);
    const auto keys = all.first(req->nkeys);
    const auto argv = all.subspan(req->nkeys);
    ec = asking ? conn.evalsha_asking(*req->script, keys, argv, std::move(cb))
                : conn.evalsha(*req->script, keys, argv, std::move(cb));
  } else {
    ec = asking ? conn.call_asking(views, std::move(cb)) : conn.call(views, std::move(cb));
  }
  if (ec == IoErrc::kDisconnected) return hold(req);  // never written: safe to send later
  if (ec) finish(req, ec, Resp3Value{});
}

void ClusterClient::answered(const RequestPtr& req, Node* node, std::error_code ec,
                             const Resp3Value& v) {
  if (closing_ || ec != IoErrc::kServerError) {
    // Sent and lost (disconnected): it may have run, so it is not resent; the map is refreshed
    // for the calls that follow.
    if (ec == IoErrc::kDisconnected && !closing_) refresh();
    return finish(req, ec, v);
  }
  const std::string_view text = v.str();
  const bool again = starts_with(text, "TRYAGAIN") || starts_with(text, "CLUSTERDOWN");
  auto redirect = again ? std::nullopt : parse_redirect(text);
  if (!again && !redirect) return finish(req, ec, v);
  if (redirect && redirect->to.host.empty()) redirect->to.host = node->addr.host;
  Node* to = redirect ? reach(redirect->to) : nullptr;
  if (redirect && to == nullptr) {
    return finish(req, make_error_code(IoErrc::kClusterDown), Resp3Value{});
  }
  if (redirect && redirect->kind == Redirect::Kind::kMoved) {
    // The map was wrong about this slot whatever becomes of the call: fix it, refresh the rest.
    owner_[redirect->slot] = to;
    {
      std::lock_guard lock(map_mu_);
      owner_index_[redirect->slot] = to->index;
    }
    refresh();
  }
  if (++req->redirects > options_.max_redirects) {
    base::solo_add(redirect_limit_);
    return finish(req, make_error_code(IoErrc::kTooManyRedirects), v);
  }
  if (again) {
    // A slot mid-migration (multi-key) or a cluster still electing: ask again shortly.
    base::solo_add(tryagain_);
    refresh();
    return hold(req);
  }
  if (redirect->kind == Redirect::Kind::kAsk) {
    base::solo_add(ask_);
    if (!to->ready()) return hold(req);  // held calls resend by the map: the source ASKs again
    return send(req, to, true);
  }
  base::solo_add(moved_);
  if (!to->ready()) return hold(req);
  send(req, to, false);
}

void ClusterClient::finish(const RequestPtr& req, std::error_code ec, const Resp3Value& v) {
  ReplyFn done = std::move(req->done);
  req->done = nullptr;
  if (done) done(ec, v);
}

void ClusterClient::hold(const RequestPtr& req) {
  if (closing_) return finish(req, make_error_code(IoErrc::kClosed), Resp3Value{});
  base::solo_add(held_count_);
  held_.push_back(req);
  want_refresh();
}

void ClusterClient::retry_held() {
  if (held_.empty() || closing_) return;
  std::deque<RequestPtr> batch;
  batch.swap(held_);
  const auto now = Clock::now();
  for (auto& r : batch) {
    const bool routable =
        r->slot ? (owner_[*r->slot] && owner_[*r->slot]->ready()) : any_ready() != nullptr;
    if (routable) {
      route(r);
    } else if (now >= r->deadline) {
      base::solo_add(held_expired_);
      finish(r, make_error_code(IoErrc::kClusterDown), Resp3Value{});
    } else {
      held_.push_back(r);
    }
  }
}

void ClusterClient::want_refresh() {
  refresh_wanted_ = true;
  if (tick_long_ && tick_op_.armed && !closing_) {
    tick_long_ = false;
    loop_.cancel(tick_op_);  // on_tick runs now and re-arms the short tick
  }
}

// Called by start() (no map yet) and by on_tick, which has just marked the map wanted for any
// master that does not answer: so a master that is down keeps the tick short through
// refresh_wanted_ or refresh_in_flight_.
void ClusterClient::arm_tick() {
  const bool waiting = !held_.empty() || refresh_wanted_ || refresh_in_flight_;
  tick_long_ = !waiting;
  loop_.after(waiting ? kTickPeriod : kIdleTickPeriod, tick_op_);
}

void ClusterClient::on_tick(IoOp& op, int) noexcept {
  auto* self = static_cast<ClusterClient*>(op.context);
  if (self->closing_) {
    auto finish = std::move(self->closed_);
    self->closed_ = nullptr;
    if (finish) finish();  // the destructor may continue from here: touch nothing after
    return;
  }
  if (!self->held_.empty()) {
    self->refresh_wanted_ = true;
    self->retry_held();
  }
  // A master that is down may have been replaced by now: keep asking (refresh_min_interval
  // apart) until the map names masters that answer, even with no call waiting.
  for (const Node* m : self->masters_list_) {
    if (!m->ready()) self->refresh_wanted_ = true;
  }
  if (self->refresh_wanted_) self->ask_topology();
  self->arm_tick();
}

// --- Other threads ---------------------------------------------------------------------------

OwnedResult ClusterClient::call_blocking(std::vector<std::string> args) {
  if (loop_.in_loop_thread()) contract_violation("call_blocking() on the loop thread");
  auto result = std::make_shared<std::promise<OwnedResult>>();
  auto future = result->get_future();
  loop_.post([this, result, args = std::move(args)] {
    const std::vector<std::string_view> views(args.begin(), args.end());
    call(views, [result](std::error_code e, const Resp3Value& v) {
      result->set_value(OwnedResult{e, v.to_owned()});
    });
  });
  const auto bound = options_.route_timeout + options_.connection.call_timeout + milliseconds(1000);
  if (future.wait_for(bound) != std::future_status::ready) {
    return OwnedResult{make_error_code(IoErrc::kTimeout), {}};
  }
  return future.get();
}

ClusterStats ClusterClient::stats() const {
  ClusterStats s;
  s.moved = moved_.load(std::memory_order_relaxed);
  s.ask = ask_.load(std::memory_order_relaxed);
  s.tryagain = tryagain_.load(std::memory_order_relaxed);
  s.refreshes = refreshes_.load(std::memory_order_relaxed);
  s.refresh_failures = refresh_failures_.load(std::memory_order_relaxed);
  s.unresolved = unresolved_.load(std::memory_order_relaxed);
  s.redirect_limit = redirect_limit_.load(std::memory_order_relaxed);
  s.held = held_count_.load(std::memory_order_relaxed);
  s.held_expired = held_expired_.load(std::memory_order_relaxed);
  s.masters = masters_.load(std::memory_order_relaxed);
  std::lock_guard lock(map_mu_);
  s.nodes = nodes_.size();
  for (const auto& n : nodes_) s.connections.push_back(n->conn->stats());
  return s;
}

}  // namespace echo::io
