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

}  // namespace
}  // namespace echo::engine
