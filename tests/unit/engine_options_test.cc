// SPDX-License-Identifier: MIT
// EngineOptions are checked when the Engine is constructed (ConfigError naming the knob and its
// range), so start() never throws for a knob the constructor let through: the host is resolved
// there and a host that does not resolve is an error code. No server is needed: nothing here
// reaches one.
#include <echo/engine/engine.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

namespace echo::engine {
namespace {

using std::chrono::milliseconds;

EngineOptions good() {
  EngineOptions o;
  o.port = 7000;
  return o;
}

void expect_refused(const EngineOptions& o, const std::string& needle) {
  try {
    Engine e(o, {});
    ADD_FAILURE() << "accepted options that should name " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(EngineOptions, DefaultsAreValid) { EXPECT_NO_THROW(Engine(good(), {})); }

TEST(EngineOptions, TimeoutsOutOfRangeAreRefusedAtConstruction) {
  const std::function<void(EngineOptions&)> bad[] = {
      [](EngineOptions& o) { o.call_timeout = milliseconds(0); },
      [](EngineOptions& o) { o.call_timeout = milliseconds(-5); },
      [](EngineOptions& o) { o.call_timeout = milliseconds::max(); },
      [](EngineOptions& o) { o.call_timeout = milliseconds(3'600'001); },
  };
  for (const auto& set : bad) {
    auto o = good();
    set(o);
    expect_refused(o, "call_timeout must lie in 1..3,600,000 ms");
  }
  auto o = good();
  o.heartbeat = milliseconds(-1);
  expect_refused(o, "heartbeat must lie in 0..3,600,000 ms");
  o = good();
  o.heartbeat = milliseconds::max();
  expect_refused(o, "heartbeat must lie in 0..3,600,000 ms");
  o = good();
  o.heartbeat = milliseconds(0);  // off
  EXPECT_NO_THROW(Engine(o, {}));
}

TEST(EngineOptions, GetTimeoutHasAnUpperBound) {
  // milliseconds::max() overflowed the future's wait (a chrono conversion to nanoseconds).
  for (const auto v : {milliseconds(0), milliseconds::max(), milliseconds(3'600'001)}) {
    auto o = good();
    o.get_timeout = v;
    expect_refused(o, "get_timeout must lie in 1..3,600,000 ms");
  }
  auto o = good();
  o.get_timeout = milliseconds(3'600'000);
  EXPECT_NO_THROW(Engine(o, {}));
}

TEST(EngineOptions, CallerLinksHaveAnUpperBound) {
  auto o = good();
  o.caller_links = 1025;
  expect_refused(o, "caller_links must lie in 0..1024, got 1025");
  for (const std::size_t ok : {std::size_t{0}, std::size_t{1024}}) {
    o.caller_links = ok;
    EXPECT_NO_THROW(Engine(o, {}));
  }
}

TEST(EngineOptions, HousekeepingCpusOutOfRangeAreRefusedAtConstruction) {
  for (const int cpu : {-1, 1024, 1 << 20}) {
    auto o = good();
    o.housekeeping_cpus = {0, cpu};
    expect_refused(o,
                   "housekeeping_cpus: each CPU must lie in 0..1023, got " + std::to_string(cpu));
  }
  auto o = good();
  o.housekeeping_cpus = {0, 1023};  // in range; a CPU the process may not use is counted later
  EXPECT_NO_THROW(Engine(o, {}));
}

TEST(EngineOptions, HostVersionAndIoAreCheckedAtConstruction) {
  for (const char* host : {"", "two words", "tab\there", "nl\n"}) {
    auto o = good();
    o.host = host;
    expect_refused(o, "host must be");
  }
  auto o = good();
  o.host = std::string(256, 'h');
  expect_refused(o, "host must be");
  o = good();
  o.version_value = "";
  expect_refused(o, "version_value");
  o = good();
  o.io.entries = 4;
  expect_refused(o, "io.entries must lie in 8..32768");
  o = good();
  o.io.cpu = -2;
  expect_refused(o, "io.cpu");
}

TEST(EngineOptions, AHostThatDoesNotResolveIsAnErrorCodeFromStart) {
  auto o = good();
  o.host = "no-such-host.invalid";  // RFC 2606: never resolves
  Engine e(o, {});
  std::error_code ec;
  ASSERT_NO_THROW(ec = e.start(std::chrono::seconds(5)));
  EXPECT_EQ(ec, make_error_code(Errc::kHostUnresolved)) << ec.message();
  EXPECT_FALSE(e.running());
  EXPECT_EQ(e.start(), make_error_code(Errc::kStopped));  // an Engine runs once
}

EngineOptions sentinel_mode() {
  EngineOptions o;  // host and port unset: sentinel mode does not use them
  o.mode = ServerMode::kSentinel;
  o.sentinels = "127.0.0.1:26379,127.0.0.1:26380";
  o.sentinel_master = "mymaster";
  return o;
}

TEST(EngineOptions, SentinelKnobsAreCheckedAtConstruction) {
  EXPECT_NO_THROW(Engine(sentinel_mode(), {}));
  auto o = sentinel_mode();
  o.sentinels.clear();
  expect_refused(o, "sentinels must list 1 or more");
  o.sentinels = "127.0.0.1:0";
  expect_refused(o, "sentinels: ");  // port outside 1..65535
  o.sentinels = "127.0.0.1:26379,";
  expect_refused(o, "sentinels: ");  // an empty entry
  o = sentinel_mode();
  o.sentinel_master.clear();
  expect_refused(o, "sentinel_master");
  o.sentinel_master = "two words";
  expect_refused(o, "sentinel_master");
  o.sentinel_master = std::string(256, 'm');
  expect_refused(o, "sentinel_master");
  o = sentinel_mode();
  o.cluster_seeds = "127.0.0.1:7000";
  expect_refused(o, "cluster_seeds is set but mode is not cluster");
  // The sentinel knobs in another mode are a mistake, not ignored.
  auto single = good();
  single.sentinels = "127.0.0.1:26379";
  expect_refused(single, "mode is not sentinel");
  single = good();
  single.sentinel_master = "mymaster";
  expect_refused(single, "mode is not sentinel");
}

TEST(EngineOptions, ASentinelHostThatDoesNotResolveIsAnErrorCodeFromStart) {
  auto o = sentinel_mode();
  o.sentinels = "no-such-host.invalid:26379";
  Engine e(o, {});
  std::error_code ec;
  ASSERT_NO_THROW(ec = e.start(std::chrono::seconds(5)));
  EXPECT_EQ(ec, make_error_code(Errc::kHostUnresolved)) << ec.message();
  EXPECT_FALSE(e.running());
}

}  // namespace
}  // namespace echo::engine
