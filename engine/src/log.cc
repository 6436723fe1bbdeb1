// SPDX-License-Identifier: MIT
// The operational hooks' defaults: a log line on stderr when no sink is set, and the names of
// levels and events.
#include <echo/engine/log.h>

#include <cstdio>
#include <string>

namespace echo::engine {

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

std::string_view to_string(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::kConnected:
      return "connected";
    case EventKind::kLost:
      return "lost";
    case EventKind::kReconnected:
      return "reconnected";
    case EventKind::kResubscribed:
      return "resubscribed";
    case EventKind::kSuspended:
      return "suspended";
    case EventKind::kResumed:
      return "resumed";
  }
  return "unknown";
}

void log_line(const LogSink& sink, LogLevel level, std::string_view component,
              std::string_view message) {
  if (sink) return sink(level, component, message);
  // One write per line, so lines of several threads do not interleave.
  std::string line = "echostore " + std::string(to_string(level)) + " " + std::string(component) +
                     ": " + std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace echo::engine
