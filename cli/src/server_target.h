// SPDX-License-Identifier: MIT
// The server a command measures against: the one --server names, or a redis-server it starts on
// a free loopback port for the command's life (`echostore bench`, `echostore referee`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <echo/engine/local_server.h>

#include "drill/drill.h"

namespace echo::cli {

struct ServerTarget {
  DrillTarget target;
  std::unique_ptr<engine::LocalServer> own;  // the started server (null for --server's)
  // "redis-server 7.0.15 on 127.0.0.1:40101 (started by the bench)", or "server H:P (given)".
  std::string described;
};

// Fills `out` from `server` (empty: start one). 0, or the exit code after saying why on stderr
// as "echostore <command>: ...": 2 for a --server that is not HOST:PORT, 1 for a server that
// would not start.
int open_server(std::string_view command, const std::string& server, ServerTarget& out);

}  // namespace echo::cli
