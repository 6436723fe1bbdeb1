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

TEST(EngineOptions, TimeoutsBelowTheirFloorAreRefusedAtConstruction) {
  const std::function<void(EngineOptions&)> bad[] = {
      [](EngineOptions& o) { o.call_timeout = milliseconds(0); },
      [](EngineOptions& o) { o.call_timeout = milliseconds(-5); },
  };
  for (const auto& set : bad) {
    auto o = good();
    set(o);
    expect_refused(o, "call_timeout must be at least 1 ms");
  }
  auto o = good();
  o.heartbeat = milliseconds(-1);
  expect_refused(o, "heartbeat must be at least 0 ms");
  o = good();
  o.heartbeat = milliseconds(0);  // off
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
