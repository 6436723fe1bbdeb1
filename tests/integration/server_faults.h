// SPDX-License-Identifier: MIT
// Shared by the server-side fault tests (server_faults_test, server_restart_test): finding the
// engine's own connections in the server's CLIENT LIST by their CLIENT SETNAME names, a
// connection's stats by label, a recorder of the engine's connection events for the messages, and
// the wait for a node whose subscription came back (resubscribed, flushed, caching again).
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine_nodes.h"

namespace echo::test {

// The ids of the server's clients named `name` ("echostore-cmd", "echostore-sub": the engine
// names each connection "echostore-<label>", engine.cc base_connection_options).
inline std::vector<long long> client_ids(redisContext* c, std::string_view name) {
  std::vector<long long> ids;
  RedisReply r = command(c, "CLIENT LIST");
  if (!r || r->type != REDIS_REPLY_STRING) return ids;
  std::istringstream lines(std::string(r->str, r->len));
  const std::string want = " name=" + std::string(name) + " ";
  for (std::string line; std::getline(lines, line);) {
    if (line.find(want) == std::string::npos || line.rfind("id=", 0) != 0) continue;
    ids.push_back(std::stoll(line.substr(3)));
  }
  return ids;
}

inline io::ConnectionStats conn_stats(const engine::Engine& e, std::string_view label) {
  for (const auto& c : e.stats().connections) {
    if (c.label == label) return c;
  }
  ADD_FAILURE() << "no connection labelled " << label;
  return {};
}

// The engine's connection and table events as lines ("lost sub: 127.0.0.1:7000 closed the
// connection"), recorded from the io and writer threads (EngineOptions::on_event) for messages.
class EventLog {
 public:
  engine::EventSink sink() {
    return [this](const engine::Event& e) {
      const std::lock_guard lock(mutex_);
      std::string line = std::string(engine::to_string(e.kind)) + " " + std::string(e.subject);
      if (!e.cause.empty()) line += ": " + std::string(e.cause);
      lines_.push_back(std::move(line));
    };
  }
  std::string text() const {
    const std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& l : lines_) out += "  " + l + "\n";
    return out;
  }
  // How many lines begin with `prefix` ("lost cmd", "resubscribed sub").
  int count(std::string_view prefix) const {
    const std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& l : lines_) n += l.rfind(prefix, 0) == 0;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// A version minted by `e` once it holds its node lease: a fault that blocks writes longer than
// the lease (the tests' node_options lease 3 s; a CLIENT PAUSE WRITE of 3 s stops the renewals)
// lapses it, and mint answers no_node_lease (typed; nothing else) until a renewal takes the node
// again. Waits up to 10 s; nullopt, and a test failure, if it never holds it.
inline std::optional<table::BrandedId> mint_when_leased(engine::Engine& e, std::string_view ns) {
  std::optional<table::BrandedId> v;
  std::string other;
  const bool ok = eventually(
      [&] {
        auto m = e.mint(ns);
        if (m) v = *m;
        if (!m && m.error() != engine::Errc::kNoNodeLease) other = m.error().message();
        return m.has_value();
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(ok) << "the node never held its lease again";
  EXPECT_EQ(other, "") << "mint answered other than no_node_lease";
  return v;
}

// True once `e`'s subscriber has booted again more than `reconnects_before` times in all, its
// table `table` has flushed on that loss more than `flushes_before` times, and it caches again
// (the resubscribe's confirmation resumed it): the disconnect policy's flush has run (within 20 s).
inline bool subscription_recovered(const engine::Engine& e, std::string_view table,
                                   std::uint64_t reconnects_before, std::uint64_t flushes_before) {
  return eventually(
      [&] {
        const auto w = writer_of(e, table).stats();
        return conn_stats(e, "sub").reconnects > reconnects_before &&
               w.disconnect_flushes > flushes_before && !w.suspended;
      },
      std::chrono::seconds(20));
}

}  // namespace echo::test
