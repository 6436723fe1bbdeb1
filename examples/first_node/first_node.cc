// SPDX-License-Identifier: MIT
// first_node [HOST:PORT]: one node of a typed table, against the server named by its argument,
// else $ECHO_SERVER, else 127.0.0.1:6379. Publishes a quote, reads it back in place, prints what
// it saw and exits 0; a step that fails prints the error's message and exits 1. README.md beside
// this file gives the commands; the repository's README shows the lines between the marks
// (scripts/check-snippets.sh holds the two equal).
// [first-node]
#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/io/cluster_map.h>  // io::parse_address

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace echo;

struct Quote {  // a value: a plain struct (its fields' bytes in L2, the struct itself in L1)
  double bid, ask;
  std::int64_t size;
};

int fail(const std::string& why) {
  std::fprintf(stderr, "first_node: %s\n", why.c_str());
  return 1;
}

int main(int argc, char** argv) {
  const char* env = std::getenv("ECHO_SERVER");
  const std::string where = argc > 1 ? argv[1] : env ? env : "127.0.0.1:6379";
  const auto server = io::parse_address(where);
  if (!server) return fail("want HOST:PORT, got '" + where + "'");

  engine::TableSpec spec = engine::text_table("quotes");  // text keys, broadcast lane
  spec.ttl_ms = 60000;                                    // L1's TTL: any knob, in any order
  engine::EngineOptions options;  // every knob at its default: node_id unset, so one is leased
  options.host = server->host;
  options.port = server->port;
  engine::Engine node(options, {engine::typed<Quote>(spec)});
  if (auto e = node.start()) return fail("start: " + e.message());  // connects, subscribes
  engine::Table<Quote> quotes = node.table<Quote>("quotes");        // resolved once, any thread

  // The L2 row (ecc:{quotes}:AAPL) and its message in one atomic script: every other node drops
  // its older row, newer wins. Every verb answers a Result: the value or an error.
  auto v = quotes.publish("AAPL", Quote{189.10, 189.12, 300});
  if (!v) return fail("publish: " + v.error().message());
  double mid = 0;  // fn sees the row's own struct, in place: no copy, no lock; it must not block
  auto r = quotes.read("AAPL", [&](const Quote& q) { mid = (q.bid + q.ask) / 2; });
  if (!r) return fail("read: " + r.error().message());
  auto msft = quotes.get("MSFT");  // a copy; with no loader, a key L2 lacks answers absent
  if (!msft && msft.error() != engine::Errc::kAbsent) return fail("get: " + msft.error().message());

  std::printf("node %d on %s: AAPL published as %s, read from %s, mid %.2f; MSFT %s\n",
              node.node_id(), server->text().c_str(), v->str().c_str(),
              std::string(engine::to_string(*r)).c_str(), mid, msft ? "found" : "absent");
  return 0;
}
// [first-node]
