// SPDX-License-Identifier: MIT
// The fault proxy for test authors: a loopback TCP proxy a node's connections pass through, with
// delay, stall, close, reset, half-open, trickle, a bandwidth cap and refusal on demand. The one
// implementation lives in harness/ (the CLI's chaos drill uses it too); this header brings it into
// the tests' namespace. Point a node at it with proxied_options().
#pragma once

#include <echo/engine/engine.h>
#include <echo/harness/fault_proxy.h>

namespace echo::test {

using harness::FaultProxy;
using harness::FaultProxyOptions;
using harness::FaultProxyStats;
using harness::Flow;

// `options` with every connection of the node dialling `proxy` instead of the server.
inline engine::EngineOptions proxied_options(engine::EngineOptions options,
                                             const FaultProxy& proxy) {
  options.host = "127.0.0.1";
  options.port = proxy.port();
  return options;
}

}  // namespace echo::test
