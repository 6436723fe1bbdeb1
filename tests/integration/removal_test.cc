// SPDX-License-Identifier: MIT
// A removal no slow loader can undo, against a real redis-server. Node A's loader reads its source
// before node B's remove() and writes what it read after it: L2 keeps the removal's version (the
// tombstone ecc:rm:{t}:<key>, one TTL), so the newer-only write of the older version is refused
// and A reads again; no node, nor one started after, reads the removed value back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>

#include "support/poll.h"
#include "support/redis_fixture.h"

namespace echo::test {
namespace {

using namespace std::chrono_literals;
using engine::Errc;

struct Quote {
  double bid, ask;
};

// The source the loaders read: a quote until it is removed. The first read marked `slow` waits
// for release() after it has read, so its answer lands after a removal made meanwhile.
struct Source {
  std::atomic<bool> removed{false};
  std::atomic<bool> slow{false};
  std::promise<void> entered, go;
  std::shared_future<void> released = go.get_future().share();
  void release() { go.set_value(); }
};

engine::TableSpec quotes(std::shared_ptr<Source> src) {
  engine::TableSpec s = engine::text_table("quotes");
  s.kind = "QTE";
  s.ttl_ms = 60000;
  s.loader = engine::loader_of<Quote>([src](const engine::Key&) -> std::optional<Quote> {
    const bool was_removed = src->removed.load();  // the read of the source
    if (src->slow.exchange(false)) {
      src->entered.set_value();
      src->released.wait();
    }
    if (was_removed) return std::nullopt;
    return Quote{7, 8};
  });
  return engine::typed<Quote>(s);
}

class Removal : public SingleServerTest {};

TEST_F(Removal, ASlowLoaderCannotUndoARemovalOnAnyNode) {
  auto src = std::make_shared<Source>();
  auto a = node(1, {quotes(src)});
  auto b = node(2, {quotes(src)});
  auto c = node(3, {quotes(src)});
  ASSERT_TRUE(a && b && c);
  auto ta = a->table<Quote>("quotes");
  auto tb = b->table<Quote>("quotes");
  auto tc = c->table<Quote>("quotes");

  src->slow = true;
  auto entered = src->entered.get_future();
  auto read_a = std::async(std::launch::async, [&] { return ta.get("IBM"); });
  ASSERT_EQ(entered.wait_for(10s), std::future_status::ready) << "A's loader never ran";
  // A's loader has read the quote; the source removes it and B announces the removal.
  src->removed = true;
  auto removed = tb.remove("IBM");
  ASSERT_TRUE(removed) << removed.error().message();
  src->release();  // A's loader answers the quote it read before the removal

  auto got_a = read_a.get();
  EXPECT_FALSE(got_a && got_a->bid == 7) << "A answered the removed quote";
  EXPECT_EQ(command_argv(client(), {"EXISTS", "ecc:{quotes}:IBM"})->integer, 0)
      << "the slow loader's write brought the removed row back into L2";
  EXPECT_EQ(command_argv(client(), {"EXISTS", "ecc:rm:{quotes}:IBM"})->integer, 1);
  auto d = node(4, {quotes(src)});  // a node started after the removal
  ASSERT_TRUE(d);
  auto td = d->table<Quote>("quotes");
  for (auto* t : {&tb, &tc, &td}) {
    auto got = t->get("IBM");
    ASSERT_FALSE(got) << "a node read the removed quote back";
    EXPECT_EQ(got.error(), make_error_code(Errc::kAbsent));
  }
}

}  // namespace
}  // namespace echo::test
