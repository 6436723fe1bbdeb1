// SPDX-License-Identifier: MIT
// A push flood: two plain hiredis clients (this binary re-executed with
// --publisher, so their buffers and allocations are not this process's) pipeline PUBLISH at the
// most the server takes toward one node whose writer is slowed on purpose. The node's memory must
// stay bounded by its rings and the decoder's limits, and every message the server delivered must
// be accounted: published = applied + dropped (a full ring, then a flush) + lost at a subscriber
// the server killed (then a resubscribe flush).
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_nodes.h"
#include "server_faults.h"
#include "support/child_process.h"

namespace echo::test {
namespace {

using engine::CoherenceMode;
using table::BrandedId;

constexpr int kBatch = 4000;  // PUBLISH commands per pipeline (two pipelines in flight)

// The publisher process: argv = --publisher <port> <channel> <frame>...; waits for "go <ms>" on
// stdin, pipelines PUBLISH for that long, then writes "done <offered> <receivers> <us>" where
// receivers sums the integer replies (the subscribers each message reached).
int publisher_main(int argc, char** argv) {
  if (argc < 5) return 2;
  const int port = std::atoi(argv[2]);
  const std::string channel = argv[3];
  std::vector<std::string> commands;
  for (int i = 4; i < argc; ++i) {
    const std::string frame = argv[i];
    commands.push_back("*3\r\n$7\r\nPUBLISH\r\n$" + std::to_string(channel.size()) + "\r\n" +
                       channel + "\r\n$" + std::to_string(frame.size()) + "\r\n" + frame + "\r\n");
  }
  RedisClient c(redisConnect("127.0.0.1", port));
  if (!c || c->err) {
    write_line(1, "error connect");
    return 3;
  }
  write_line(1, "ready");
  const auto go = read_line(0, std::chrono::seconds(60));
  if (!go || go->rfind("go ", 0) != 0) return 4;
  const auto span = std::chrono::milliseconds(std::stoll(go->substr(3)));
  long long offered = 0, receivers = 0, answered = 0;
  auto append_batch = [&] {
    for (int i = 0; i < kBatch; ++i) {
      const std::string& cmd = commands[static_cast<std::size_t>(offered + i) % commands.size()];
      redisAppendFormattedCommand(c.get(), cmd.data(), cmd.size());
    }
    offered += kBatch;
  };
  const auto t0 = std::chrono::steady_clock::now();
  append_batch();
  while (std::chrono::steady_clock::now() - t0 < span) {
    append_batch();  // the next pipeline leaves with the read of this one's replies
    for (int i = 0; i < kBatch; ++i) {
      void* r = nullptr;
      if (redisGetReply(c.get(), &r) != REDIS_OK) {
        write_line(1, "error reply");
        return 5;
      }
      RedisReply reply(static_cast<redisReply*>(r));
      if (reply->type == REDIS_REPLY_INTEGER) receivers += reply->integer;
      ++answered;
    }
  }
  while (answered < offered) {
    void* r = nullptr;
    if (redisGetReply(c.get(), &r) != REDIS_OK) return 5;
    RedisReply reply(static_cast<redisReply*>(r));
    if (reply->type == REDIS_REPLY_INTEGER) receivers += reply->integer;
    ++answered;
  }
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  write_line(1, "done " + std::to_string(offered) + " " + std::to_string(receivers) + " " +
                    std::to_string(us));
  return 0;
}

// Resident set size of this process, from /proc/self/statm (pages). No heap allocation: the
// sampler's own garbage would otherwise sit in the sanitizer's quarantine and count as RSS.
std::size_t rss_bytes() {
  char buf[128] = {};
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

class PushFlood : public SingleServerTest {};

// Expected: the io thread never waits for the slowed writer (the broadcast lane's flush policy:
// a full ring refuses the push, counts it dropped and has the writer flush the table), so the
// node's memory stays bounded while the server delivers hundreds of thousands of messages a
// second: RSS stays under the baseline plus the ring (capacity x 64 bytes), the decoder (its
// 16 KiB receive chunk twice over, and a push is under 1 KiB) and an 8 MiB margin (a reconnect's
// allocations, the sanitizer's quarantine of the engine's own frees; measured growth: under
// 1 MiB); an unbounded queue would hold every message (millions x 64 bytes). And every message is
// accounted: the receivers the PUBLISH replies counted = the pushes the node routed + those lost in
// the server's output buffer when it killed the subscriber (each such loss followed by a
// resubscribe flush), and the pushes = applied + dropped, with a ring flush behind every drop.
TEST_F(PushFlood, TwoPipelinedPublishersAgainstASlowWriterKeepRssBoundedAndEveryMessageAccounted) {
  constexpr std::size_t kRing = 1024;
  constexpr auto kFlood = std::chrono::milliseconds(8000);
  const std::string table = "flood";
  const std::string channel = table::coherence_channel(table).value();
  std::vector<std::string> frames;
  for (int i = 0; i < 32; ++i) frames.push_back(frame_text(fresh_id("AST"), fresh_id("AST")));

  auto slow = std::make_shared<std::atomic<bool>>(true);
  const BrandedId marker = fresh_id("AST");
  auto marker_seen = std::make_shared<std::atomic<bool>>(false);
  auto spec = table_spec(table, "AST", CoherenceMode::kBroadcast, answering("loaded"));
  spec.ring_capacity = kRing;
  spec.max_batch = 64;
  spec.full_policy = ring::FullPolicy::kFlush;
  spec.on_message = [slow, marker_seen, marker = marker.str()](const engine::Heard& h) {
    if (h.key == marker) marker_seen->store(true);
    if (slow->load(std::memory_order_relaxed)) std::this_thread::sleep_for(20us);
  };
  auto a = node(1, {spec});
  ASSERT_TRUE(a);

  std::vector<std::unique_ptr<ChildProcess>> publishers;
  std::vector<std::string> args = {"--publisher", std::to_string(server().port()), channel};
  args.insert(args.end(), frames.begin(), frames.end());
  for (int i = 0; i < 2; ++i) {
    publishers.push_back(ChildProcess::spawn(args));
    ASSERT_TRUE(publishers.back());
    const auto ready = publishers.back()->receive(std::chrono::seconds(20));
    ASSERT_EQ(ready.value_or("(nothing)"), "ready");
  }

  const std::size_t baseline = rss_bytes();
  const std::size_t bound =
      baseline + kRing * sizeof(engine::CoherenceItem) + 2 * 16 * 1024 + 1024 + (8u << 20);
  std::atomic<bool> sampling{true};
  std::atomic<std::size_t> peak{baseline};
  std::atomic<int> samples{0};
  std::thread sampler([&] {
    while (sampling.load()) {
      const std::size_t now = rss_bytes();
      if (now > peak.load()) peak.store(now);
      samples.fetch_add(1);
      std::this_thread::sleep_for(5ms);
    }
  });

  for (auto& p : publishers) p->send("go " + std::to_string(kFlood.count()));
  long long offered = 0, published = 0;
  double seconds = 0;
  for (auto& p : publishers) {
    const auto done = p->receive(kFlood + std::chrono::seconds(40));
    ASSERT_TRUE(done && done->rfind("done ", 0) == 0) << done.value_or("(nothing)");
    std::istringstream in(done->substr(5));
    long long o = 0, r = 0, us = 0;
    in >> o >> r >> us;
    offered += o;
    published += r;
    seconds = std::max(seconds, static_cast<double>(us) / 1e6);
    EXPECT_EQ(p->wait_exit(), 0);
  }
  const std::size_t flood_peak = peak.load();

  // Quiesce: the writer at full speed, then a marker behind every flood message on the same
  // subscription (resent until one is applied: a full ring may refuse it too).
  slow->store(false);
  long long marker_receivers = 0;
  const std::string marker_frame = frame_text(marker, fresh_id("AST"));
  ASSERT_TRUE(eventually(
      [&] {
        RedisReply r = command(client(), "PUBLISH %b %b", channel.data(), channel.size(),
                               marker_frame.data(), marker_frame.size());
        if (r && r->type == REDIS_REPLY_INTEGER) marker_receivers += r->integer;
        return poll_until([&] { return marker_seen->load(); }, 100ms, 1ms);
      },
      20s))
      << "the marker never reached the writer";
  ASSERT_TRUE(eventually([&] {
    const auto rs = writer_of(*a, table).ring_stats();
    return rs[0].applied == rs[0].published;
  }));
  sampling = false;
  sampler.join();

  const auto s = a->stats();
  const auto& t = s.tables[0];
  const auto& ring = t.rings[0];
  const auto sub = conn_stats(*a, "sub");
  const long long all = published + marker_receivers;
  const long long lost = all - static_cast<long long>(t.pushes);
  EXPECT_EQ(t.garbage, 0u);
  EXPECT_EQ(s.unrouted_pushes, 0u);
  EXPECT_EQ(t.pushes, ring.published + ring.dropped) << "a push neither ringed nor dropped";
  EXPECT_EQ(ring.applied, ring.published);
  EXPECT_GE(lost, 0) << "the node routed more pushes than the server said it delivered";
  if (ring.dropped > 0) {
    EXPECT_GE(t.writer.ring_flushes, 1u) << "drops without a flush";
  }
  if (lost > 0) {
    // Lost in the server's output buffer when it killed the subscriber: at most its hard limit
    // (32 MiB, the default pubsub class) of ~60-byte pushes per kill, and each kill is a loss the
    // resubscribe flushed.
    EXPECT_GE(sub.reconnects, 1u) << lost << " messages vanished without a lost subscription";
    EXPECT_GE(t.writer.disconnect_flushes, sub.reconnects);
    EXPECT_LE(lost, static_cast<long long>(sub.reconnects) * ((32ll << 20) / 60));
  } else {
    EXPECT_EQ(t.writer.disconnect_flushes, 0u);
  }
  EXPECT_GT(ring.dropped, 0u) << "the writer was never slow enough to fill its ring";
  EXPECT_LE(flood_peak, bound) << "RSS grew past the rings and the decoder's limits";
  EXPECT_LE(peak.load(), bound);

  const double rate = static_cast<double>(offered) / seconds;
  std::printf(
      "[ flood ] offered %lld PUBLISH in %.2f s by 2 clients: %.0f msg/s (the server's pace on "
      "this machine; 1M/s asked)\n"
      "[ flood ] published %lld (+%lld marker) = applied %llu + dropped %llu + lost at %llu "
      "server kill(s) %lld; ring flushes %llu, disconnect flushes %llu\n"
      "[ flood ] RSS baseline %.1f MiB, peak %.1f MiB over %d samples, bound %.1f MiB\n",
      offered, seconds, rate, published, marker_receivers,
      static_cast<unsigned long long>(ring.applied), static_cast<unsigned long long>(ring.dropped),
      static_cast<unsigned long long>(sub.reconnects), lost,
      static_cast<unsigned long long>(t.writer.ring_flushes),
      static_cast<unsigned long long>(t.writer.disconnect_flushes),
      static_cast<double>(baseline) / (1 << 20), static_cast<double>(peak.load()) / (1 << 20),
      samples.load(), static_cast<double>(bound) / (1 << 20));
}

}  // namespace
}  // namespace echo::test

// A publisher process when re-executed with --publisher; otherwise the tests.
int main(int argc, char** argv) {
  return echo::test::child_or_tests_main(argc, argv, "--publisher", echo::test::publisher_main);
}
