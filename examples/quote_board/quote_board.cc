// SPDX-License-Identifier: MIT
// Two engines in one process stand for two services: node 1 owns the writer thread, node 2 the
// reader threads. Node 2 publishes its stats snapshot into L2 (echostore stats --table quotes).
// The check: once node 2 has applied the writer's last broadcast (seen as every instrument
// reading its final price), each reader's last read of each instrument must be that price. The
// fill guard is what makes that hold: a refill that read an older L2 row cannot land after a newer
// drop.
#include "quote_board.h"

#include <echo/engine/engine.h>
#include <echo/engine/local_server.h>
#include <echo/io/cluster_map.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace echo::examples {
namespace {

using Clock = std::chrono::steady_clock;

engine::TableSpec quotes_spec() {
  engine::TableSpec s;
  s.name = "quotes";
  s.kind = "AST";
  s.coherence = engine::CoherenceMode::kBroadcast;
  s.ttl_ms = 60000;
  s.loader = [](const table::BrandedId&) -> engine::LoadResult {
    return engine::LoadError{"unpriced instrument"};  // every instrument is priced before reads
  };
  return s;
}

engine::TableSpec limits_spec() {
  engine::TableSpec s = quotes_spec();
  s.name = "limits";
  s.coherence = engine::CoherenceMode::kJob;
  return s;
}

std::string price_of(int k) { return "px=" + std::to_string(10000 + k); }
std::string limit_of(int k) { return "max=" + std::to_string(500 + k); }

template <class T>
T must(engine::Result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
  return std::move(*r);
}

// Polls `node` until `id` reads `want` (the node applied the last message and refilled).
bool await_value(engine::Engine& node, std::string_view table, const std::string& id,
                 const std::string& want, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    auto got = node.get(table, id);
    if (got && got->value == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Whole decimal digits within lo..hi, else nullopt ("4x", "-1", "", " 4" included).
std::optional<int> parse_int(std::string_view text, int lo, int hi) {
  int v = 0;
  const auto [at, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || at != text.data() + text.size() || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::optional<QuoteBoardOptions> parse_quote_board_args(int argc, const char* const* argv) {
  QuoteBoardOptions o;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return std::nullopt;  // every flag takes a value
    const std::string_view flag = argv[i], value = argv[++i];
    std::optional<int> n;
    if (flag == "--server") {
      if (!io::parse_address(value)) return std::nullopt;
      o.server = std::string(value);
      continue;
    } else if (flag == "--instruments") {
      n = parse_int(value, 1, 1000);
      if (n) o.instruments = *n;
    } else if (flag == "--readers") {
      n = parse_int(value, 1, 64);
      if (n) o.readers = *n;
    } else if (flag == "--reprices") {
      n = parse_int(value, 1, std::numeric_limits<int>::max());
      if (n) o.reprices = *n;
    }
    if (!n) return std::nullopt;
  }
  return o;
}

QuoteBoardSummary run_quote_board(const QuoteBoardOptions& o, std::ostream& out) {
  if (o.instruments < 1 || o.instruments > 1000)
    throw std::invalid_argument("instruments: 1..1000");
  if (o.readers < 1 || o.readers > 64) throw std::invalid_argument("readers: 1..64");
  if (o.reprices < 1) throw std::invalid_argument("reprices: at least 1");
  std::unique_ptr<engine::LocalServer> own;
  engine::EngineOptions base;
  if (o.server.empty()) {
    own = std::make_unique<engine::LocalServer>();
    base.host = own->host();
    base.port = own->port();
  } else {
    const auto address = io::parse_address(o.server);
    if (!address) throw std::invalid_argument("--server wants HOST:PORT, got '" + o.server + "'");
    base.host = address->host;
    base.port = address->port;
  }
  engine::EngineOptions wo = base, ro = base;
  wo.node_id = 1;
  ro.node_id = 2;
  ro.stats_publish = std::chrono::milliseconds(1000);
  engine::Engine writer_node(wo, {quotes_spec(), limits_spec()});
  engine::Engine reader_node(ro, {quotes_spec(), limits_spec()});
  if (auto ec = writer_node.start()) throw std::runtime_error("writer node: " + ec.message());
  if (auto ec = reader_node.start()) throw std::runtime_error("reader node: " + ec.message());

  std::vector<std::string> ids;
  for (int i = 0; i < o.instruments; ++i) {
    ids.emplace_back(must(writer_node.mint("AST"), "mint").view());
  }
  const table::BrandedId group = must(writer_node.mint("LIM"), "mint");
  for (int i = 0; i < o.instruments; ++i) {
    must(writer_node.put("quotes", ids[i], price_of(-1 - i)), "put quote");
    must(writer_node.put("limits", ids[i], limit_of(-1 - i)), "put limit");
  }

  QuoteBoardSummary sum;
  std::atomic<bool> stop{false};
  struct ReaderResult {
    std::uint64_t reads = 0, hits = 0;
    std::vector<std::string> last;
    std::vector<std::int64_t> hit_ns;
  };
  std::vector<ReaderResult> results(o.readers);
  std::vector<std::thread> readers;
  // However this scope is left (a lost server, a thread that cannot be made), the readers stop
  // and are joined before the engines they read go away.
  struct StopReaders {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~StopReaders() {
      stop.store(true, std::memory_order_release);
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } stop_readers{stop, readers};
  for (int r = 0; r < o.readers; ++r) {
    readers.emplace_back([&, r] {
      ReaderResult& res = results[r];
      for (std::size_t k = 0; !stop.load(std::memory_order_acquire); ++k) {
        const auto t0 = Clock::now();
        auto got = reader_node.get("quotes", ids[k % ids.size()]);
        const auto t1 = Clock::now();
        ++res.reads;
        if (got && got->source == engine::Source::kL1) {
          ++res.hits;
          if (res.hit_ns.size() < 100000) res.hit_ns.push_back((t1 - t0).count());
        }
      }
      // The last read of each instrument, after the last broadcast was applied.
      for (const auto& id : ids) {
        auto got = reader_node.get("quotes", id);
        res.last.push_back(got ? got->value : "error: " + got.error().message());
      }
    });
  }

  std::vector<int> final_price(o.instruments), final_limit(o.instruments);
  for (int i = 0; i < o.instruments; ++i) final_price[i] = final_limit[i] = -1 - i;
  auto write_prices = [&] {
    const auto t0 = Clock::now();
    for (int k = 0; k < o.reprices; ++k) {
      const int i = k % o.instruments;
      const auto v = must(writer_node.put("quotes", ids[i], price_of(k)), "put quote");
      must(writer_node.broadcast("quotes", ids[i], v), "broadcast");
      ++sum.broadcasts;
      final_price[i] = k;
      if (k % 4 == 0) {  // limits move more slowly than prices
        const auto lv = must(writer_node.put("limits", ids[i], limit_of(k)), "put limit");
        must(writer_node.enqueue("limits", group, ids[i], lv), "enqueue");
        ++sum.enqueues;
        final_limit[i] = k;
      }
    }
    sum.writer_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // A failed call (the server lost: put, broadcast or enqueue answers an error) ends the writer's
  // loop; the error leaves this function once the readers are joined, never the thread itself.
  std::exception_ptr writer_error;
  std::thread writer([&] {
    try {
      write_prices();
    } catch (...) {
      writer_error = std::current_exception();
    }
  });
  writer.join();
  if (writer_error) std::rethrow_exception(writer_error);

  // The reading node has applied the last broadcast (and job) of every instrument once it reads
  // each final value; the wait is bounded.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  bool settled = true;
  for (int i = 0; i < o.instruments; ++i) {
    settled &= await_value(reader_node, "quotes", ids[i], price_of(final_price[i]), deadline);
    settled &= await_value(reader_node, "limits", ids[i], limit_of(final_limit[i]), deadline);
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();  // stop_readers finds them joined

  std::vector<std::int64_t> all_ns;
  for (const auto& res : results) {
    sum.reads += res.reads;
    sum.l1_hits += res.hits;
    all_ns.insert(all_ns.end(), res.hit_ns.begin(), res.hit_ns.end());
    for (int i = 0; i < o.instruments; ++i) {
      if (res.last[i] != price_of(final_price[i])) ++sum.mismatches;
    }
  }
  if (!all_ns.empty()) {
    std::nth_element(all_ns.begin(), all_ns.begin() + all_ns.size() / 2, all_ns.end());
    sum.read_ns_p50 = static_cast<double>(all_ns[all_ns.size() / 2]);
  }
  sum.ok = settled && sum.mismatches == 0;
  reader_node.stop();
  writer_node.stop();

  out << "quote board: " << o.instruments << " instruments, " << o.readers << " readers, "
      << o.reprices << " reprices on " << base.host << ':' << base.port << '\n'
      << "  writer      " << sum.broadcasts << " put+broadcast, " << sum.enqueues
      << " put+enqueue (limits) in " << sum.writer_seconds << " s\n"
      << "  readers     " << sum.reads << " reads, " << sum.l1_hits << " L1 hits, p50 hit "
      << sum.read_ns_p50 << " ns\n"
      << "  check       " << (settled ? "settled" : "NOT settled within 20 s") << ", "
      << sum.mismatches << " of " << o.readers * o.instruments
      << " final reads wrong: " << (sum.ok ? "PASS" : "FAIL") << '\n';
  return sum;
}

}  // namespace echo::examples
