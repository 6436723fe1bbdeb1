// SPDX-License-Identifier: MIT
// The engine's operational hooks: where its few log lines go (a sink of level, component and
// message), and the connection and table events an application can watch (connected, lost,
// reconnected, resubscribed, suspended, resumed). Both are optional EngineOptions fields; with
// no sink the lines go to stderr as one line each.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace echo::engine {

enum class LogLevel : std::uint8_t { kInfo, kWarn, kError };
std::string_view to_string(LogLevel level) noexcept;  // "info", "warn", "error"

// (level, component, message): component is "engine", "io", "writer:<table>", "job:<table>",
// "node_lease", ... Runs on the thread that noticed (the io thread, a table's writer, the node
// lease's renewal on echo-house, the thread in start()); it must not block and must not call into
// the engine. The views live only during the call.
using LogSink =
    std::function<void(LogLevel level, std::string_view component, std::string_view message)>;

// One line through `sink`, or "echostore <level> <component>: <message>" on stderr when it is
// empty. Any thread.
void log_line(const LogSink& sink, LogLevel level, std::string_view component,
              std::string_view message);

enum class EventKind : std::uint8_t {
  kConnected,     // a connection booted for the first time
  kLost,          // a ready connection lost its socket (cause says why); it redials with backoff
  kReconnected,   // it booted again after a loss (re-fenced)
  kResubscribed,  // the subscriber's channels (and tracking prefixes) were subscribed again
  kSuspended,     // a table stopped caching (its subscription was lost, flush policy)
  kResumed,       // a table caches again (its subscription was confirmed; L1 was flushed)
};
std::string_view to_string(EventKind kind) noexcept;  // "connected", "lost", ...

struct Event {
  EventKind kind;
  // The connection's label ("cmd", "sub", "park-<table>", "relay", cluster nodes' "cmd@host:port")
  // or the table's name (kSuspended, kResumed).
  std::string_view subject;
  std::string_view cause;  // kLost: the cause in words; else empty
};

// Connection events run on the io thread, table events on the table's writer thread: the hook
// must not block (it holds up every connection, or every row of the table) and must not call
// into the engine. The views live only during the call.
using EventSink = std::function<void(const Event& event)>;

}  // namespace echo::engine
