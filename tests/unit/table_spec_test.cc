// SPDX-License-Identifier: MIT
// A table's declaration: the defaults serve, and each knob out of range is refused with a
// message naming the knob and its range.
#include <gtest/gtest.h>

#include <echo/engine/table_spec.h>

namespace echo::engine {
namespace {

TableSpec good() {
  TableSpec s;
  s.name = "quotes";
  s.kind = "AST";
  s.loader = [](const table::BrandedId&) -> LoadResult { return Loaded{"px=100.00", {}}; };
  return s;
}

void expect_refused(const TableSpec& s, const std::string& needle) {
  try {
    validate(s);
    ADD_FAILURE() << "accepted a spec that should name " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TableSpec, DefaultsAreValid) {
  EXPECT_NO_THROW(validate(good()));
  const TableSpec s = good();
  EXPECT_EQ(s.ttl_ms, 5000);
  EXPECT_DOUBLE_EQ(s.jitter, 0.1);
  EXPECT_EQ(s.max_size, 100000u);
  EXPECT_EQ(s.max_bytes, 0u);
  EXPECT_EQ(s.eviction, Eviction::kS3Fifo);
  EXPECT_EQ(s.sweep_ms, 1000);
  EXPECT_EQ(s.l1_clock, L1Clock::kWriter);
  EXPECT_EQ(s.clock_tick_ms, 4);
  EXPECT_EQ(s.ring_capacity, 4096u);
  EXPECT_EQ(s.coherence, CoherenceMode::kNone);
  EXPECT_EQ(s.full_policy, ring::FullPolicy::kFlush);
  EXPECT_EQ(s.disconnect, DisconnectPolicy::kFlush);
}

TEST(TableSpec, EachBadKnobIsNamed) {
  auto s = good();
  s.jitter = 0.7;
  expect_refused(s, "jitter must lie in 0.0..0.5");
  s = good();
  s.jitter = -0.1;
  expect_refused(s, "jitter");
  s = good();
  s.ttl_ms = 0;
  expect_refused(s, "ttl_ms must lie in 1..");
  s = good();
  s.max_size = 0;
  expect_refused(s, "max_size");
  s = good();
  s.max_size = (std::size_t{1} << 26) + 1;  // the index would be 1 GiB before the first row
  expect_refused(s, "max_size");
  s = good();
  s.max_bytes = 4095;
  expect_refused(s, "max_bytes must lie in 4096..");
  s = good();
  s.max_bytes = (std::size_t{1} << 44) + 1;
  expect_refused(s, "max_bytes");
  s = good();
  s.eviction = static_cast<Eviction>(7);
  expect_refused(s, "eviction must be s3fifo, lru, clock or skip");
  s = good();
  s.sweep_ms = 0;
  expect_refused(s, "sweep_ms");
  s = good();
  s.l1_clock = static_cast<L1Clock>(4);
  expect_refused(s, "l1_clock must be writer, coarse, exact or sweep");
  s = good();
  s.clock_tick_ms = 0;
  expect_refused(s, "clock_tick_ms");
  s = good();
  s.clock_tick_ms = 1001;
  expect_refused(s, "clock_tick_ms");
  s = good();
  s.ring_capacity = 1000;
  expect_refused(s, "ring_capacity must be a power of two");
  s = good();
  s.max_batch = 0;
  expect_refused(s, "max_batch");
  s = good();
  s.max_batch = 8192;
  expect_refused(s, "max_batch");
  s = good();
  s.kind = "ast";
  expect_refused(s, "kind must be exactly 3 bytes A-Z");
  s = good();
  s.kind = "ASTX";
  expect_refused(s, "kind");
  s = good();
  s.loader = nullptr;
  EXPECT_NO_THROW(validate(s)) << "the loader is optional (what L2 lacks is absent)";
  s = good();
  s.kind.clear();
  expect_refused(s, "a table of branded ids names the kind its ids carry");
  s = good();
  s.disconnect = DisconnectPolicy::kServeStale;
  expect_refused(s, "serve_stale_max_ms");
  s.serve_stale_max_ms = 250;
  EXPECT_NO_THROW(validate(s));
  s = good();
  s.writer_cpu = 4096;
  expect_refused(s, "writer_cpu");
}

TEST(TableSpec, LoaderThreadsAndLoaderTimeoutAreCheckedAndNamed) {
  const TableSpec d = good();
  EXPECT_EQ(d.loader_threads, 1);
  EXPECT_EQ(d.loader_timeout.count(), 0);  // the engine's get_timeout
  auto s = good();
  s.loader_threads = 64;
  s.loader_timeout = std::chrono::milliseconds(3'600'000);
  EXPECT_NO_THROW(validate(s));
  s.loader_threads = 0;
  expect_refused(s, "table 'quotes': loader_threads must lie in 1..64, got 0");
  s.loader_threads = 65;
  expect_refused(s, "loader_threads must lie in 1..64, got 65");
  s = good();
  s.loader_timeout = std::chrono::milliseconds(-1);
  expect_refused(s,
                 "loader_timeout must be 0 (the engine's get_timeout) or lie in 1..3,600,000 ms");
  s.loader_timeout = std::chrono::milliseconds(3'600'001);
  expect_refused(s, "loader_timeout");
}

TEST(TableSpec, TableNameThatWouldBreakAKeyIsRefused) {
  for (const char* bad : {"", "a{b", "two words", "tab\t"}) {
    auto s = good();
    s.name = bad;
    expect_refused(s, "is refused");
  }
}

TEST(TableSpec, TableNameThatIsNotUtf8IsRefused) {
  // Its stats snapshot (JSON) could not hold it: the publisher thread would throw.
  for (const char* bad : {"quotes\xFF", "q\xC3", "\x80"}) {
    auto s = good();
    s.name = bad;
    expect_refused(s, "(not_utf8)");
  }
}

TEST(TableSpec, ModeAndPolicyNamesAreStable) {
  EXPECT_EQ(to_string(CoherenceMode::kBroadcast), "broadcast");
  EXPECT_EQ(to_string(CoherenceMode::kJob), "job");
  EXPECT_EQ(to_string(CoherenceMode::kNone), "none");
  EXPECT_EQ(to_string(DisconnectPolicy::kServeStale), "serve_stale");
}

}  // namespace
}  // namespace echo::engine
