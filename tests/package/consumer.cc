// SPDX-License-Identifier: MIT
// Proves the installed package as a service would use it: only the installed headers (engine.h
// among them, which must reach no third-party header), the libraries linked through
// find_package(echostore) or pkg-config, and echostore::testing's LocalServer for a real
// redis-server on a free loopback port. Two nodes of one typed table: a put read back through L1,
// a publish that drops the other node's older row, the versions of the headers and the library.
#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/lua/scripts.h>
#include <echo/table/coherence_frame.h>
#include <echo/testing/local_server.h>
#include <echo/version.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using namespace echo;

namespace {

struct Quote {
  double bid, ask;
  std::int64_t size;
};

engine::TableSpec quotes_table() {
  return engine::typed<Quote>({
      .name = "quotes",
      .kind = "QTE",
      .loader = engine::loader_of<Quote>(
          [](const engine::Key& s) { return engine::LoadError{"unpriced " + s.str()}; }),
      .keys = engine::KeyKind::kText,
      .coherence = engine::CoherenceMode::kBroadcast,
  });
}

int fail(const char* what, const std::string& why = "") {
  std::fprintf(stderr, "consumer: %s %s\n", what, why.c_str());
  return 1;
}

}  // namespace

int main() {
  if (!headers_match_library()) return fail("headers and library differ:", library_version());
  testing::LocalServer server;
  engine::Engine a({.host = server.host(), .port = server.port(), .node_id = 1}, {quotes_table()});
  engine::Engine b({.host = server.host(), .port = server.port(), .node_id = 2}, {quotes_table()});
  if (auto e = a.start()) return fail("node a did not start:", e.message());
  if (auto e = b.start()) return fail("node b did not start:", e.message());
  engine::Table<Quote> qa = a.table<Quote>("quotes"), qb = b.table<Quote>("quotes");

  if (auto put = qa.put("AAPL", Quote{189.10, 189.12, 300}); !put) {
    return fail("put:", put.error().message());
  }
  auto got = qb.get("AAPL");  // b's miss reads L2 and caches the row
  if (!got || got->size != 300) return fail("get:", got ? "wrong value" : got.error().message());
  auto published = qa.publish("AAPL", Quote{189.20, 189.22, 500});
  if (!published) return fail("publish:", published.error().message());
  // b's older row is dropped by the message; its next read is the newer value.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    auto now = qb.get("AAPL");
    if (now && now->size == 500) break;
    if (std::chrono::steady_clock::now() > deadline) return fail("publish never reached node b");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (table::coherence_channel("quotes").value() != "ecc:{quotes}:coh") return fail("channel");
  std::printf("consumer ok: echostore %s (headers %s), %zu scripts, put/get/publish on %s:%d\n",
              library_version(), kVersion, lua::all_scripts().size(), server.host().c_str(),
              server.port());
  return 0;
}
