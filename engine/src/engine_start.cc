// SPDX-License-Identifier: MIT
// start() as named stages run in order under one rollback (the first stage that fails is the
// answer, after stop() has undone what the earlier ones built), stop(), and probe_server.
#include "engine_impl.h"

#include <functional>
#include <thread>

#include <echo/engine/stats_export.h>

namespace echo::engine {
namespace {

// A connection that did not become ready, as start() answers it: the code, and the cause in
// words (the server's refusal, or for a timeout the last attempt's failure).
Error not_ready(std::error_code ec, const io::Connection& c, std::chrono::milliseconds waited) {
  std::string cause = c.cause();
  if (ec == io::IoErrc::kTimeout) {
    cause = "no answer from " + c.options().host + ":" + std::to_string(c.options().port) +
            " made the " + c.options().label + " connection ready within " +
            std::to_string(waited.count()) + " ms" +
            (cause.empty() ? std::string() : "; the last attempt: " + cause);
  }
  return Error(ec, std::move(cause));
}

// What is left of start's deadline, at least 1 ms.
std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Starts `c`, waits until it is ready (start's deadline), then subscribes each of `channels`.
Error open_subscriber(io::Connection& c, const std::vector<std::string>& channels,
                      Clock::time_point deadline) {
  c.start();
  const auto waited = left(deadline);
  if (auto ec = c.wait_ready(waited)) return not_ready(ec, c, waited);
  for (const auto& channel : channels) {
    if (auto ec = c.subscribe_blocking(channel)) return ec;
  }
  return {};
}

}  // namespace

Error Engine::start(std::chrono::milliseconds timeout) {
  // A deadline beyond a day is a day: Clock::now() + milliseconds::max() would overflow.
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24));
  // The constructor checked every knob; what remains can only fail here: the host does not
  // resolve (io::Connection resolves it, and says so with invalid_argument), or the kernel
  // refuses the io_uring or a thread. An error code, as for any other failed start.
  try {
    return impl_->start_once(timeout);
  } catch (const std::invalid_argument& e) {
    stop();
    return Error(Errc::kHostUnresolved, e.what());
  } catch (const std::system_error& e) {
    stop();
    return Error(e.code(), e.what());
  }
}

void Engine::stop() { impl_->stop(); }

Error Engine::Impl::start_once(std::chrono::milliseconds timeout) {
  if (running.load(std::memory_order_acquire)) return {};
  // One run per Engine. A second would restart the writers on new threads over rings whose
  // consumer side the old ones own, with job items the old consumers published still in them
  // (their tickets would ack into the next consumer's, which start at 1 again).
  if (started) return make_error_code(Errc::kStopped);
  started = true;
  const auto deadline = Clock::now() + timeout;
  const std::function<Error()> stages[] = {
      [&] { return open_io(); },
      [&] { return open_metrics(); },
      [&] { return connect_commands(deadline); },
      [&] { return check_server(deadline); },
      [&] { return start_consumers(); },
      [&] { return subscribe(deadline); },
      [&] { return subscribe_extra(deadline); },
      [&] { return await_delivery(deadline); },
      [&] { return check_carried_readers(); },
      [&] { return start_relay(); },
  };
  for (const auto& stage : stages) {
    if (Error e = stage()) {
      stop();
      return e;
    }
  }
  start_journal_refresh();
  start_stats_publishing();
  if (metrics) metrics->start();  // last: everything stats() reads is in place
  return {};
}

// Io thread 0, then the writers and their loader pools, then io threads 1.. .
Error Engine::Impl::open_io() {
  io = std::make_unique<io::LoopThread>(options.io);
  io->loop().post([this] { note_io_thread(0); });
  // Reserved once: stats() on another thread may walk the vector while it grows here.
  extra_io.reserve(static_cast<std::size_t>(options.io_threads - 1));
  for (int k = 1; k < options.io_threads; ++k) {
    io::LoopOptions lo = options.io;
    lo.cpu = -1;                                       // io.cpu pins io thread 0 only
    auto loop = std::make_unique<io::LoopThread>(lo);  // may throw: stop() sees only built ones
    loop->loop().post([this, k] { note_io_thread(k); });
    extra_io.push_back(ExtraIo{std::move(loop), nullptr});
  }
  for (auto& s : slots) {
    s->loaders = std::make_unique<LoaderPool>(s->spec.loader_threads, *housekeeping);
    s->writer->start();
  }
  return {};
}

// Bound now, so a port in use fails start() before anything dials; it accepts only at the end
// of start(). It lives on io thread 0.
Error Engine::Impl::open_metrics() {
  if (options.metrics_port == 0) return {};
  metrics = std::make_unique<MetricsEndpoint>(
      io->loop(), [this] { return to_prometheus(take_snapshot(engine, node_name())); });
  return metrics->open(options.metrics_bind, options.metrics_port);
}

// The command path: the cluster router, or one connection (to the master the sentinels name).
Error Engine::Impl::connect_commands(Clock::time_point deadline) {
  if (options.mode != ServerMode::kCluster) return connect_single(deadline);
  io::ClusterOptions co;
  co.seeds = seeds();
  co.connection = connection_options("cmd");
  co.max_redirects = options.cluster_max_redirects;
  co.route_timeout = options.call_timeout;
  cluster = std::make_unique<io::ClusterClient>(io->loop(), std::move(co));
  cluster->start();
  if (auto ec = cluster->wait_ready(left(deadline))) return Error(ec, cluster->cause());
  running.store(true, std::memory_order_release);
  return {};
}

Error Engine::Impl::connect_single(Clock::time_point deadline) {
  io::EventFn on_cmd_event;
  if (options.mode == ServerMode::kSentinel) {
    SentinelWatchOptions so;
    so.sentinels = io::parse_seeds(options.sentinels);
    so.master_name = options.sentinel_master;
    so.password = options.sentinel_password;
    so.call_timeout = options.call_timeout;
    so.heartbeat = options.heartbeat;
    sentinel =
        std::make_unique<SentinelWatch>(io->loop(), std::move(so), [this] { on_master_switch(); });
    if (auto ec = sentinel->start(deadline)) return ec;
    on_cmd_event = [this](io::ConnEvent event, std::error_code) {
      if (io_closing) return;  // stop() is destroying cmd
      if (event == io::ConnEvent::kReady || event == io::ConnEvent::kReconnected) check_role(*cmd);
    };
  }
  cmd = std::make_unique<io::Connection>(io->loop(), connection_options("cmd"), io::PushFn{},
                                         std::move(on_cmd_event));
  cmd->start();
  follow(cmd.get());
  const auto waited = left(deadline);
  if (auto ec = cmd->wait_ready(waited)) {
    Error e = not_ready(ec, *cmd, waited);
    if (ec == io::IoErrc::kClusterNode) e.code = make_error_code(Errc::kWrongMode);
    return e;
  }
  if (options.caller_links > 0 && !options.tls.enabled) {
    links = std::make_unique<CallerLinks>(
        options.caller_links, [this] { return link_target(); },
        std::min<std::chrono::milliseconds>(options.call_timeout, std::chrono::seconds(1)));
  }
  running.store(true, std::memory_order_release);
  return {};
}

// The server is what the mode says (a master, not a cluster node for mode single), then the
// node lease, before anything that mints or names this node (member queues, stats keys).
Error Engine::Impl::check_server(Clock::time_point deadline) {
  // The master the sentinels named must say so before anything is written there (a failover
  // under way names the old master until it ends): ROLE until it does, or start's deadline.
  while (sentinel) {
    auto role = command({"ROLE"});
    if (role && role->view().type() == io::Resp3Type::array && role->view().size() >= 1 &&
        role->view()[0].str() == "master") {
      break;
    }
    if (Clock::now() >= deadline) {
      return Error(Errc::kNotMaster,
                   "the master the sentinels name, " + sentinel->stats().master +
                       ", did not answer ROLE as a master before start's deadline");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (options.mode != ServerMode::kCluster) {
    // A cluster node would answer MOVED to most keys: refuse the mismatch at start.
    auto info = command({"INFO", "cluster"});
    if (info && info->view().str().find("cluster_enabled:1") != std::string_view::npos) {
      return make_error_code(Errc::kWrongMode);
    }
  }
  if (auto ec = lease->acquire(deadline)) return ec;
  for (auto& s : slots) {
    if (s->spec.coherence == CoherenceMode::kJob) s->publish_group = mint("PRT").value();
  }
  return {};
}

// Each job-lane table's consumer, parked on a connection of its own. On a cluster every key of
// this node's member queue shares its hash tag: the router sends each call to that shard, and
// the consumer parks on a connection to the same master.
Error Engine::Impl::start_consumers() {
  for (auto& s : slots) {
    if (s->job_ring == nullptr) continue;
    io::ConnectionOptions park = connection_options("park-" + s->spec.name);
    CommandPort port = cluster ? CommandPort{} : CommandPort::of(*cmd);
    if (cluster) {
      const std::uint16_t slot =
          io::hash_slot(JobLaneKeys::for_table(s->spec.name).member_base(node_name()));
      const auto owner = cluster->address_of(slot);
      const auto at = owner.host.empty() ? seeds().front() : owner;
      park.host = at.host;
      park.port = at.port;
      park.fence = false;  // the router fenced {emq}:version on its own slot's master
      // Each reconnect dials the slot's master in the router's current map (a failover's
      // promoted replica). Loop thread; io_closing: the router is going away.
      park.target = [this, slot]() -> io::DialTarget {
        if (io_closing || !cluster) return {};
        auto a = cluster->address_of(slot);
        return {std::move(a.host), a.port};
      };
      port.call_fn = [this](std::span<const std::string_view> args, io::ReplyFn done) {
        cluster->call(args, std::move(done));
        return std::error_code{};
      };
      port.evalsha_fn = [this](const io::Script& script, std::span<const std::string_view> keys,
                               std::span<const std::string_view> argv, io::ReplyFn done) {
        cluster->evalsha(script, keys, argv, std::move(done));
        return std::error_code{};
      };
    }
    s->consumer = std::make_unique<JobConsumer>(io->loop(), std::move(port), std::move(park),
                                                *s->writer, *s->job_ring, node_name());
    s->consumer->start();
  }
  return {};
}

// Io thread 0's subscriber: its broadcast lanes', then every lead's channel (the sharded
// subscriber on a cluster), and the tracking lane's CLIENT TRACKING, whose refusal fails start.
Error Engine::Impl::subscribe(Clock::time_point deadline) {
  std::vector<std::string> channels = router.channels_of(0);
  if (!channels.empty() && cluster) {
    ShardedSubscriber::Handlers h;
    h.message = [this](std::string_view channel, std::string_view payload) {
      if (!router.route(channel, payload)) router.count_unrouted();
    };
    h.confirmed = [this](std::string_view channel) { router.confirmed(channel); };
    h.lost = [this](std::string_view channel) { router.lost(channel); };
    h.unrouted = [this] { router.count_unrouted(); };
    ssub = std::make_unique<ShardedSubscriber>(*cluster, connection_options("ssub"),
                                               std::move(channels), std::move(h));
    ssub->start();
    return {};
  }
  if (channels.empty() && !router.tracking()) return {};
  sub = std::make_unique<io::Connection>(
      io->loop(), connection_options("sub"),
      [this](const io::Resp3Value& push) { router.on_push(push); },
      [this](io::ConnEvent event, std::error_code) { on_sub_event(event, 0); });
  follow(sub.get());
  if (Error e = open_subscriber(*sub, channels, deadline)) return e;
  const auto args = router.tracking_command();
  if (args.empty()) return {};
  // Anything but +OK fails the start. Pushes go to this (RESP3) connection itself.
  base::shared_add(tracking_sends);
  auto r = sub->call_blocking(args);
  const io::Resp3Value v = r.reply.view();
  if (r.ec || v.type() != io::Resp3Type::simple_string || v.str() != "OK") {
    base::shared_add(tracking_refusals);
    return Error(
        Errc::kTrackingRefused,
        "CLIENT TRACKING ON BCAST was answered " +
            (r.ec && r.ec != io::IoErrc::kServerError ? r.ec.message() : std::string(v.str())));
  }
  router.tracking_confirmed();
  return {};
}

// The other io threads' subscribers, each with the broadcast tables dealt to it (mode single).
Error Engine::Impl::subscribe_extra(Clock::time_point deadline) {
  for (int k = 1; k < options.io_threads; ++k) {
    const std::vector<std::string> mine = router.channels_of(k);
    if (mine.empty()) continue;
    auto& x = extra_io[static_cast<std::size_t>(k - 1)];
    x.sub = std::make_unique<io::Connection>(
        x.loop->loop(), connection_options(sub_label(k)),
        [this](const io::Resp3Value& push) { router.on_push(push); },
        [this, k](io::ConnEvent event, std::error_code) { on_sub_event(event, k); });
    if (Error e = open_subscriber(*x.sub, mine, deadline)) return e;
  }
  return {};
}

// Caching starts only once each lane confirmed delivery: the server's subscription confirmation
// (broadcast) or this node's first membership beat (job). A job-lane table whose membership
// shows another process beating as this node never confirms: start refuses.
Error Engine::Impl::await_delivery(Clock::time_point deadline) {
  for (auto& slot : slots) {
    if (slot->spec.coherence == CoherenceMode::kNone) continue;
    while (slot->writer->stats().suspended) {
      if (slot->consumer && slot->consumer->stats().member_conflicts > 0) {
        return make_error_code(Errc::kMemberConflict);
      }
      if (Clock::now() >= deadline) return make_error_code(io::IoErrc::kTimeout);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return {};
}

// A broadcast table that carries values must not send them to a subscriber that reads only the
// 29-byte message: it would count them as garbage and keep its older rows. Every subscriber of
// this version subscribes the table's carried_marker too, so fewer marker subscribers than
// channel subscribers means such a reader (this node's own subscription counts in both). Checked
// once, here: a reader that joins later is not seen (docs/wire.md, "Carried values"). On a
// cluster the count would have to come from the channel's shard: not checked there.
Error Engine::Impl::check_carried_readers() {
  if (cluster) return {};
  for (const auto& slot : slots) {
    if (slot->spec.coherence != CoherenceMode::kBroadcast || carry_of(slot->spec) == Carry::kOff) {
      continue;
    }
    const std::string marker = carried_marker(slot->channel);
    auto reply = command({"PUBSUB", "NUMSUB", slot->channel, marker});
    if (!reply) return reply.error();
    const io::Resp3Value v = reply->view();
    if (v.type() != io::Resp3Type::array || v.size() != 4 ||
        v[1].type() != io::Resp3Type::integer || v[3].type() != io::Resp3Type::integer) {
      return unexpected_reply();
    }
    if (const std::int64_t blind = v[1].integer() - v[3].integer(); blind > 0) {
      return Error(Errc::kMixedFrames,
                   "table '" + slot->spec.name + "' carries values (carry " +
                       std::string(to_string(carry_of(slot->spec))) + "), but " +
                       std::to_string(blind) + " subscriber(s) of " + slot->channel +
                       " read only the 29-byte message (the original's nodes, or an older "
                       "EchoStore): set carry off on this table, or upgrade them");
    }
  }
  return {};
}

// The shared-queue relay, when a job-lane table has job_relay: it consumes ecc.coh.<t> for the
// original's writers and fans each job out to the member queues.
Error Engine::Impl::start_relay() {
  std::vector<SharedQueueRelay::Table> relayed;
  std::int64_t beat_ms = 60'000;
  for (auto& s : slots) {
    if (s->spec.coherence != CoherenceMode::kJob || !s->spec.job_relay) continue;
    relayed.push_back({&s->spec, JobLaneKeys::for_table(s->spec.name)});
    beat_ms = std::min(beat_ms, s->spec.job_beat_ms);
  }
  if (relayed.empty()) return {};
  const std::chrono::milliseconds beat(beat_ms);
  SharedQueueRelay::Ports ports;
  ports.command = [this](const std::vector<std::string>& args) { return command(args); };
  ports.script = [this](const io::Script& s, const std::vector<std::string>& keys,
                        const std::vector<std::string>& argv) { return script(s, keys, argv); };
  ports.fan_out = [this](const TableSpec& spec, const table::BrandedId& group,
                         const table::BrandedId& job, std::string_view name,
                         const table::BrandedId& version) -> std::error_code {
    auto r = fan_out(spec.name, group, job, name, version, FanOut{.to_shared = false});
    return r ? std::error_code{} : static_cast<std::error_code>(r.error());
  };
  if (cluster) {
    // The wake lists hash to several slots (no one BLPOP takes them all): poll every beat.
    ports.park = [](const std::vector<std::string>&, std::chrono::milliseconds t) {
      std::this_thread::sleep_for(t);
    };
  } else {
    io::ConnectionOptions park = connection_options("relay");
    park.call_timeout = beat + std::chrono::seconds(2);  // a park outlasts its BLPOP's timeout
    relay_park = std::make_unique<io::Connection>(io->loop(), std::move(park));
    relay_park->start();
    follow(relay_park.get());
    if (auto ec = relay_park->wait_ready(options.call_timeout)) {
      return not_ready(ec, *relay_park, options.call_timeout);
    }
    auto id = relay_park->call_blocking({"CLIENT", "ID"});
    if (id.ec) return id.ec;
    if (id.reply.view().type() == io::Resp3Type::integer) {
      relay_client = std::to_string(id.reply.view().integer());
    }
    ports.park = [this](const std::vector<std::string>& lists, std::chrono::milliseconds t) {
      std::vector<std::string> args{"BLPOP"};
      args.insert(args.end(), lists.begin(), lists.end());
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.3f", static_cast<double>(t.count()) / 1000.0);
      args.emplace_back(seconds);
      // A lost connection answers at once: wait out the beat rather than spin on the errors.
      if (relay_park->call_blocking(std::move(args)).ec) std::this_thread::sleep_for(t);
    };
  }
  relay = std::make_unique<SharedQueueRelay>(std::move(relayed), std::move(ports), beat);
  relay->set_housekeeping(*housekeeping);
  relay->start();
  return {};
}

// One SET per table per period, best effort: a missed one only lets the key age (PX 3 periods).
void Engine::Impl::start_stats_publishing() {
  if (options.stats_publish.count() == 0) return;
  stats_chore = chores->add(std::chrono::milliseconds(0), [this] {
    const auto period = options.stats_publish;
    const std::string node = node_name();
    const StatsSnapshot snap = take_snapshot(engine, node);
    for (const auto& s : slots) {
      (void)command({"SET", stats_key(s->spec.name, node), to_json(only_table(snap, s->spec.name)),
                     "PX", std::to_string(3 * period.count())});
    }
    return period;
  });
}

void Engine::Impl::start_journal_refresh() {
  if (journals.empty() || (options.metrics_port == 0 && options.stats_publish.count() == 0)) return;
  journal_chore = chores->add(std::chrono::milliseconds(0), [this] {
    std::vector<JournalStats> fresh;
    for (const Journal* j : journals) fresh.push_back(j->stats());
    const std::lock_guard lock(journal_mu);
    journal_stats = std::move(fresh);
    return std::chrono::milliseconds(1000);
  });
}

void Engine::Impl::stop() {
  if (journal_chore != 0) {
    chores->remove(journal_chore);
    journal_chore = 0;
  }
  if (stats_chore != 0) {
    chores->remove(stats_chore);  // waits out a round under way
    stats_chore = 0;
  }
  if (metrics) metrics->close();  // on the still-running io thread
  // Every job enqueue_async handed off gets its admissions and its callback while the engine
  // still runs; a call after this answers kStopped.
  job_sends.close_and_drain();
  if (lease) lease->release();  // while the command connection still runs
  if (chores) chores->stop();   // no chore is left: its thread ends
  if (relay) {
    // Its BLPOP parks up to a beat: CLIENT UNBLOCK ends it (a park that begins just after costs
    // at most that beat). The relay's calls run while the io thread still does.
    relay->stop([this] {
      if (!relay_client.empty() && cmd) (void)command({"CLIENT", "UNBLOCK", relay_client});
    });
    relay.reset();
  }
  running.store(false, std::memory_order_seq_cst);  // seq_cst: see Inflight
  // Blocking calls already posted finish on the still-running io thread.
  while (inflight.load(std::memory_order_seq_cst) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (links) links->close_all();  // no call is on one now, and none starts
  if (io) {
    // No push into a ring after each loop ran this closure: one waiting for space in a full ring
    // returns first, as the writers still drain. Each loop runs closures between pushes, and its
    // post queue orders the close before the closure.
    router.close();
    std::vector<io::UringLoop*> loops{&io->loop()};
    for (auto& x : extra_io) loops.push_back(&x.loop->loop());
    for (io::UringLoop* loop : loops) {
      std::promise<void> closed;
      loop->post([&closed] { closed.set_value(); });
      closed.get_future().wait();
    }
  }
  for (auto& s : slots) s->writer->stop();
  for (auto& s : slots) s->loaders.reset();  // joins: no loader job posts to the loop after this
  if (io) {
    // From here on, closures still queued on the loop answer `stopped` without touching a
    // connection; then the connections can go (their destructors drive the loop as needed).
    std::promise<void> marked;
    io->loop().post([this, &marked] {
      io_closing = true;
      sentinel_followers.clear();
      if (sentinel) sentinel->stop_on_loop();
      for (auto& s : slots) {
        if (s->consumer) s->consumer->stop_on_loop();
      }
      marked.set_value();
    });
    marked.get_future().wait();
  }
  ssub.reset();
  sub.reset();
  for (auto& x : extra_io) x.sub.reset();  // while its loop runs, as sub
  for (auto& x : extra_io) x.loop->join();
  extra_io.clear();
  relay_park.reset();
  cluster.reset();
  cmd.reset();  // fails the consumers' calls in flight (their callbacks name the consumers)
  // The consumers (their parking connections) go while the io thread still runs the loop, like
  // every other connection: it is the thread that submitted their operations. After the join the
  // destructor would drive the ring from this thread while the kernel hands those operations'
  // completions to its fallback worker, and a link timeout can no longer cancel its connect.
  for (auto& s : slots) s->consumer.reset();
  // The writers are stopped for good (start() refuses a second run), but their ack sinks named
  // the consumers just destroyed.
  for (auto& s : slots) s->writer->set_ack_sink(nullptr);
  sentinel.reset();  // last of the connections: the others' targets asked it
  if (io) io->join();
  io.reset();
  io_closing = false;
  router.reopen();
}

Error probe_server(const EngineOptions& options, std::chrono::milliseconds timeout) {
  io::ConnectionOptions c = base_connection_options(options, "probe");
  c.heartbeat = std::chrono::milliseconds(0);
  if (options.mode == ServerMode::kCluster) {
    const auto seeds = options.cluster_seeds.empty()
                           ? std::string(options.host + ":" + std::to_string(options.port))
                           : options.cluster_seeds;
    const auto first = io::parse_address(seeds.substr(0, seeds.find(',')));
    if (!first) return Error(Errc::kHostUnresolved, "cluster_seeds: '" + seeds + "'");
    c.host = first->host;
    c.port = first->port;
    c.fence = false;
  }
  // A step's deadline inside the probe's, so that a silent peer is named before the probe ends.
  const auto step = std::max(std::chrono::milliseconds(1), timeout * 2 / 3);
  c.connect_timeout = std::min(c.connect_timeout, step);
  c.boot_timeout = std::min(c.boot_timeout, step);
  try {
    io::LoopThread lt;
    io::Connection conn(lt.loop(), c);
    conn.start();
    const std::error_code ec = conn.wait_ready(timeout);
    return ec ? not_ready(ec, conn, timeout) : Error{};
  } catch (const std::invalid_argument& e) {
    return Error(Errc::kHostUnresolved, e.what());
  } catch (const std::system_error& e) {
    return Error(e.code(), e.what());
  }
}

}  // namespace echo::engine
