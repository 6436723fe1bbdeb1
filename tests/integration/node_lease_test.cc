// SPDX-License-Identifier: MIT
// Fleet-unique node ids (docs/wire.md, "Node leases"): node_id auto leases the first free node in
// 0..1023 under {ecc}:node:<n>; an explicit node_id is checked against the leases; a process whose
// lease lapsed (cut off from the server past it, or taken) mints nothing until it holds it again.
// Two processes: this test binary re-run as a child (--lease-child) holding an engine.
#include <hiredis/hiredis.h>

#include <string>

#include "engine_nodes.h"
#include "support/child_process.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::EngineOptions;
using engine::Errc;

std::vector<engine::TableSpec> tables() {
  return {table_spec("limits", "LIM", CoherenceMode::kBroadcast, answering("max=10"))};
}

EngineOptions auto_options(const testing::LocalServer& server) {
  EngineOptions o = node_options(server, 0);
  o.node_id = EngineOptions::kAutoNode;
  return o;
}

// The child: one engine (node_id auto, or the one given), "node <n>" on stdout, then it waits
// for a line on stdin (or its SIGKILL).
int child_main(int argc, char** argv) {
  if (argc != 4) return 64;
  EngineOptions o = node_options("127.0.0.1", std::atoi(argv[2]), 0);
  const int wanted = std::atoi(argv[3]);
  o.node_id = wanted < 0 ? EngineOptions::kAutoNode : static_cast<unsigned>(wanted);
  Engine e(o, tables());
  if (auto ec = e.start()) {
    write_line(1, "error " + ec.message());
    return 2;
  }
  write_line(1, "node " + std::to_string(e.node_id()));
  (void)read_line(0, std::chrono::hours(1));
  return 0;
}

std::unique_ptr<ChildProcess> child(int port, int wanted, int& node) {
  auto c = ChildProcess::spawn({"--lease-child", std::to_string(port), std::to_string(wanted)});
  if (!c) return nullptr;
  auto line = c->receive(std::chrono::seconds(20));
  if (!line || !line->starts_with("node ")) {
    ADD_FAILURE() << "the child did not start: " << line.value_or("(nothing)");
    return nullptr;
  }
  node = std::atoi(line->c_str() + 5);
  return c;
}

class NodeLease : public SingleServerTest {};

TEST_F(NodeLease, AutoNodesInTwoProcessesDifferAndAnExplicitOneIsCheckedAgainstTheLeases) {
  int theirs = -1;
  auto other = child(server().port(), -1, theirs);
  ASSERT_TRUE(other);
  ASSERT_GE(theirs, 0);
  auto mine = start_node(auto_options(server()), tables());
  ASSERT_TRUE(mine);
  EXPECT_GE(mine->node_id(), 0);
  EXPECT_NE(mine->node_id(), theirs) << "two live processes under one node";
  EXPECT_EQ(mine->stats().node_id, mine->node_id());
  EXPECT_TRUE(mine->mint("LIM"));

  // An explicit node the other process holds: refused (after waiting out start's timeout).
  {
    EngineOptions o = node_options(server(), static_cast<unsigned>(theirs));
    Engine twin(o, tables());
    EXPECT_EQ(twin.start(std::chrono::milliseconds(1500)), make_error_code(Errc::kNodeTaken));
  }
  // The other process dies without a word: its lease lapses, and a start under its node (the
  // crashed process's successor) waits for that and then runs.
  ASSERT_TRUE(other->kill_now());
  auto successor = start_node(node_options(server(), static_cast<unsigned>(theirs)), tables());
  ASSERT_TRUE(successor) << "the successor never took its predecessor's node";
  EXPECT_EQ(successor->node_id(), theirs);

  // A clean stop gives the lease back at once.
  const std::string key = "{ecc}:node:" + std::to_string(mine->node_id());
  EXPECT_NE(l2_raw(client(), key), "(nil)");
  mine->stop();
  EXPECT_EQ(l2_raw(client(), key), "(nil)");
}

TEST_F(NodeLease, EveryNodeLeasedRefusesAnAutoStart) {
  for (int n = 0; n < 1024; ++n) {
    ASSERT_TRUE(command(client(), "SET {ecc}:node:%d elsewhere:1:%d PX 60000", n, n));
  }
  Engine e(auto_options(server()), tables());
  EXPECT_EQ(e.start(std::chrono::seconds(5)), make_error_code(Errc::kNoFreeNode));
  EXPECT_EQ(engine::to_string(Errc::kNoFreeNode), "no_free_node");
  ASSERT_TRUE(command(client(), "DEL {ecc}:node:517"));
  auto one = start_node(auto_options(server()), tables());
  ASSERT_TRUE(one);
  EXPECT_EQ(one->node_id(), 517) << "the one free node";
}

// Cut off from the server past its lease (CLIENT PAUSE holds every client's commands, the
// renewals' too): the engine stops minting on its own clock, and starts again once a renewal
// lands. A lease another process took stops it at the next renewal.
TEST_F(NodeLease, ALapsedLeaseStopsMintingUntilItIsHeldAgain) {
  auto e = start_node(auto_options(server()), tables());  // node_lease 3 s: renewed every second
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->mint("LIM"));
  const auto lapses = e->stats().node_lapses;
  ASSERT_TRUE(command(client(), "CLIENT PAUSE 5000 ALL"));
  ASSERT_TRUE(eventually([&] { return !e->mint("LIM"); }, 10s)) << "minted past its lease";
  auto refused = e->mint("LIM");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), Errc::kNoNodeLease);
  auto put = e->put("limits", fresh_id("LIM").view(), "max=1");  // no version given: none minted
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), Errc::kNoNodeLease);
  ASSERT_TRUE(eventually([&] { return static_cast<bool>(e->mint("LIM")); }, 15s))
      << "minting never resumed after the pause";
  EXPECT_GT(e->stats().node_lapses, lapses);

  const std::string key = "{ecc}:node:" + std::to_string(e->node_id());
  ASSERT_TRUE(command(client(), "SET %s elsewhere:2:0 PX 60000", key.c_str()));
  ASSERT_TRUE(eventually([&] { return !e->mint("LIM"); }, 5s))
      << "minted under a node another holds";
  EXPECT_GE(e->stats().node_taken, 1u);
  ASSERT_TRUE(command(client(), "DEL %s", key.c_str()));
  ASSERT_TRUE(eventually([&] { return static_cast<bool>(e->mint("LIM")); }, 5s))
      << "the freed node was not taken again";
}

}  // namespace
}  // namespace echo::test

int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--lease-child", echo::test::child_main);
}
