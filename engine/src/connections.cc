// SPDX-License-Identifier: MIT
// The engine's connections: what each one dials and with which credentials, what a subscriber's
// loss and return mean for the tables it feeds, and Sentinel's redials (io thread 0).
#include "engine_impl.h"

#include "thread_name.h"
#include "thread_switches.h"

namespace echo::engine {

io::ConnectionOptions base_connection_options(const EngineOptions& options, std::string label) {
  io::ConnectionOptions c;
  c.host = options.host;
  c.port = options.port;
  c.username = options.username;
  c.password = options.password;
  c.label = std::move(label);
  c.client_name = "echostore-" + c.label;
  c.version_value = options.version_value;
  c.version_accept = options.version_accept;
  c.call_timeout = options.call_timeout;
  c.heartbeat = options.heartbeat;
  c.tls = options.tls;
  return c;
}

io::ConnectionOptions Engine::Impl::connection_options(std::string label) const {
  io::ConnectionOptions c = base_connection_options(options, std::move(label));
  if (sentinel) {
    io::DialTarget m = sentinel->master();
    c.host = std::move(m.host);
    c.port = m.port;
    // Loop thread, before each reconnect: the master as the sentinels name it now.
    c.target = [this]() -> io::DialTarget {
      if (io_closing || !sentinel) return {};
      return sentinel->master();
    };
  }
  if (options.on_event) {
    c.observer = [this](io::ConnEvent event, std::string_view who, std::string_view cause) {
      static constexpr EventKind kKinds[] = {EventKind::kConnected, EventKind::kLost,
                                             EventKind::kReconnected, EventKind::kLost};
      options.on_event(Event{kKinds[static_cast<int>(event)], who, cause});
    };
  }
  return c;
}

std::vector<io::NodeAddress> Engine::Impl::seeds() const {
  if (options.cluster_seeds.empty()) return {io::NodeAddress{options.host, options.port}};
  return io::parse_seeds(options.cluster_seeds);
}

void Engine::Impl::note_io_thread(int k) {
  name_this_thread("echo-io:" + std::to_string(k));
  io_tids[static_cast<std::size_t>(k)].store(current_tid(), std::memory_order_relaxed);
}

void Engine::Impl::on_sub_event(io::ConnEvent event, int index) {
  if (event == io::ConnEvent::kDisconnected || event == io::ConnEvent::kStopped) {
    for (auto& s : slots) {
      if (s->ring != nullptr && s->io_index == index) s->writer->subscription_lost();
    }
  } else if (event == io::ConnEvent::kReconnected) {
    if (index == 0) {
      if (!io_closing) check_role(*sub);
      resend_tracking();  // the channels' SUBSCRIBEs went already; their pushes confirm them
    }
    if (options.on_event) options.on_event(Event{EventKind::kResubscribed, sub_label(index), {}});
  }
}

// Invalidations were lost while the socket was down, so the tables stay suspended (the
// disconnect policy) until the command is answered +OK; then each flushes and caches again. A
// refusal leaves them suspended (counted, said once).
void Engine::Impl::resend_tracking() {
  const std::vector<std::string> args = router.tracking_command();
  if (args.empty() || io_closing) return;
  base::shared_add(tracking_sends);
  std::vector<std::string_view> views(args.begin(), args.end());
  const auto ec = sub->call(views, [this](std::error_code e, const io::Resp3Value& r) {
    if (e || r.type() != io::Resp3Type::simple_string || r.str() != "OK") {
      if (tracking_refusals.fetch_add(1, std::memory_order_relaxed) == 0) {
        log_line(options.log, LogLevel::kError, "engine",
                 "CLIENT TRACKING refused after a reconnect (" +
                     (e ? e.message() : std::string(r.str())) +
                     "): tracking tables stay suspended");
      }
      return;
    }
    router.tracking_confirmed();
  });
  if (ec) base::shared_add(tracking_refusals);  // the socket went again: the next reconnect resends
}

// A connection that (re)booted on the master the sentinels named asks it ROLE: a demoted master
// (back as a replica) must not serve us. Anything but "master" drops the connection as a loss
// (its reconnect backs off and dials master() again; the subscriber's loss suspends and flushes
// as any loss does) and asks the sentinels again, so a switch we missed is found. Commands
// pipelined behind ROLE before its answer may reach that replica: writes fail (READONLY), reads
// may be old. A sentinel demotes a master with CLIENT KILL TYPE normal and TYPE pubsub, so the
// subscriber is lost too, and its flush at the next confirmation drops them.
void Engine::Impl::check_role(io::Connection& c) {
  if (!sentinel || io_closing) return;
  (void)c.call({"ROLE"}, [this, &c](std::error_code e, const io::Resp3Value& r) {
    // A loss is checked again at the reconnect; a refused ROLE (an ACL) proves nothing.
    if (io_closing || e) return;
    if (r.type() == io::Resp3Type::array && r.size() >= 1 && r[0].str() == "master") return;
    sentinel->suspect();
    c.redial();
  });
}

// The job lane's parking connections follow at their next beat (JobConsumer::follow_park asks
// their target). The subscriber's redial is a loss: its tables suspend, and flush when the new
// master confirms the subscriptions (rows written on the old master may be lost in the failover).
void Engine::Impl::on_master_switch() {
  if (io_closing) return;
  for (io::Connection* c : sentinel_followers) c->redial();
}

// A switch before this closure runs is caught by the connection's next reconnect (its target)
// or ROLE check.
void Engine::Impl::follow(io::Connection* c) {
  if (!sentinel) return;
  io->loop().post([this, c] {
    if (!io_closing) sentinel_followers.push_back(c);
  });
}

}  // namespace echo::engine
