// SPDX-License-Identifier: MIT
// The sizes and alignments of the installed headers' classes, compiled twice into
// ndebug_layout_test: once with NDEBUG, once without (tests/CMakeLists.txt). A program built
// without NDEBUG must be able to use a library built with it (the package ships one build).
#include <echo/engine/engine.h>
#include <echo/engine/internal/job_consumer.h>
#include <echo/engine/internal/table_writer.h>
#include <echo/engine/journal.h>
#include <echo/io/connection.h>
#include <echo/io/resp3_decoder.h>
#include <echo/io/uring_loop.h>
#include <echo/ring/doorbell.h>
#include <echo/ring/spsc_ring.h>
#include <echo/table/epoch.h>
#include <echo/table/l1_map.h>
#include <echo/table/row_arena.h>

#include <string>
#include <utility>
#include <vector>

#include "layout/probe.h"

namespace echo::test {

#define ECHO_PROBE(T) \
  { #T, sizeof(T), alignof(T) }

std::vector<Layout> ECHO_PROBE_FUNCTION() {
  return {
      ECHO_PROBE(engine::Engine),
      ECHO_PROBE(engine::EngineOptions),
      ECHO_PROBE(engine::EngineStats),
      ECHO_PROBE(engine::TableSpec),
      ECHO_PROBE(engine::TableWriter),
      ECHO_PROBE(engine::WriterStats),
      ECHO_PROBE(engine::CoherenceItem),
      ECHO_PROBE(engine::JobConsumer),
      ECHO_PROBE(engine::Journal),
      ECHO_PROBE(engine::JournalOptions),
      ECHO_PROBE(io::Connection),
      ECHO_PROBE(io::ConnectionOptions),
      ECHO_PROBE(io::UringLoop),
      ECHO_PROBE(io::LoopOptions),
      ECHO_PROBE(io::Resp3Decoder),
      ECHO_PROBE(ring::Doorbell),
      ECHO_PROBE(ring::SpscRing<engine::CoherenceItem>),
      ECHO_PROBE(ring::SpscRing<int>),
      ECHO_PROBE(ring::detail::OwnerCheck),
      ECHO_PROBE(table::L1Map),
      ECHO_PROBE(table::ReadGuard),
      ECHO_PROBE(table::RowArena),
      ECHO_PROBE(table::L1Config),
  };
}

}  // namespace echo::test
