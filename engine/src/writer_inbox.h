// SPDX-License-Identifier: MIT
// The table writer's inbox (table_writer.cc's loop drains it, table_writer_inbox.cc posts to it):
// a lock-free MPSC queue of commands, private to echostore::engine.
#pragma once

#include <echo/engine/internal/table_writer.h>

#include <concurrentqueue/concurrentqueue.h>

namespace echo::engine {

struct TableWriter::Inbox {
  moodycamel::ConcurrentQueue<Command> q;
};

}  // namespace echo::engine
