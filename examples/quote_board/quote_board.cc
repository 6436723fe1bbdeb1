// SPDX-License-Identifier: MIT
// Two engines in one process stand for two services: node 1 owns the writer thread, node 2 the
// reader threads. Quotes are structs keyed by symbols, read in place through a table handle with
// try_read, which never waits: the board's messages carry each new quote (text keys carry values
// by default), so node 2 applies it in place and its readers keep hitting L1; a read that misses
// (before the first fill) answers at once and starts one refill. Node 2
// publishes its stats snapshot into L2 (echostore stats --table quotes). The check: once node 2 has
// applied the writer's last broadcast (seen as every instrument reading its final price), each
// reader's last read of each instrument must be that price. The fill guard is what makes that hold:
// a refill that read an older L2 row cannot land after a newer drop.
#include "quote_board.h"

#include <echo/engine/codec.h>
#include <echo/engine/engine.h>
#include <echo/io/cluster_map.h>
#include <echo/testing/local_server.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace echo::examples {
namespace {

using Clock = std::chrono::steady_clock;

// ---- The embedding: the value and its table (examples/first_node: a whole program). ----
struct Quote {  // a value is a plain struct: L2 holds its bytes (with its schema), L1 the struct
  double bid, ask;
  std::int64_t size;
};

engine::TableSpec quotes_table() {  // keyed by symbols ("AAPL"), announced on the broadcast lane
  engine::TableSpec quotes = engine::text_table("quotes");  // no kind, no loader needed:
  quotes.ttl_ms = 60000;                                    // an unpriced symbol reads as absent
  return engine::typed<Quote>(quotes);
}
// A node:   engine::Engine node(options, {quotes_table()});  node.start();
//           engine::Table<Quote> quotes = node.table<Quote>("quotes");
// A write:  quotes.publish("AAPL", Quote{189.10, 189.12, 300});  // L2 + every node's L1
// A read:   quotes.try_read("AAPL", [](const Quote& q) { ... });
//           (never waits; quotes.read() would wait for L2 on a miss)
// Errors:   every verb answers a Result: if (!r) r.error().message().
// ---- end of the embedding ----

// Instrument i's symbol: a real ticker for the first few, then "SYM<i>".
std::string symbol_of(int i) {
  static const char* const kTickers[] = {"AAPL", "MSFT", "GOOG",    "AMZN",  "NVDA",
                                         "META", "TSLA", "EUR:USD", "BRK.B", "JPM"};
  if (i < static_cast<int>(std::size(kTickers))) return kTickers[i];
  return "SYM" + std::to_string(i);
}
// Repricing k of an instrument: bid 100.00 + k/100, a 2-cent spread.
Quote quote_of(int k) { return Quote{100.0 + k / 100.0, 100.02 + k / 100.0, 100 + k}; }

template <class T>
T must(engine::Result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
  return std::move(*r);
}

// Polls until `symbol` reads repricing `k` on `quotes` (the node applied its last message and
// refilled).
bool await_quote(const engine::Table<Quote>& quotes, const std::string& symbol, int k,
                 Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    auto got = quotes.get(symbol);
    if (got && got->size == quote_of(k).size) return true;
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

namespace {

void check_options(const QuoteBoardOptions& o) {
  if (o.instruments < 1 || o.instruments > 1000)
    throw std::invalid_argument("instruments: 1..1000");
  if (o.readers < 1 || o.readers > 64) throw std::invalid_argument("readers: 1..64");
  if (o.reprices < 1) throw std::invalid_argument("reprices: at least 1");
}

// The server both nodes use: --server, or a redis-server this process starts (kept in `own`).
engine::EngineOptions server_options(const QuoteBoardOptions& o,
                                     std::unique_ptr<testing::LocalServer>& own) {
  engine::EngineOptions base;
  if (o.server.empty()) {
    own = std::make_unique<testing::LocalServer>();
    base.host = own->host();
    base.port = own->port();
    return base;
  }
  const auto address = io::parse_address(o.server);
  if (!address) throw std::invalid_argument("--server wants HOST:PORT, got '" + o.server + "'");
  base.host = address->host;
  base.port = address->port;
  return base;
}

// What one reader thread saw.
struct ReaderResult {
  std::uint64_t reads = 0, hits = 0;  // a read that is not a hit answered a miss at once
  std::vector<std::int64_t> last;     // the size field of each instrument's last read
  std::vector<std::int64_t> hit_ns;
};

// A reader thread: try_read round robin until `stop`, using each quote in place; then the last
// read of each instrument, after the last message was applied.
void read_flat_out(const engine::Table<Quote>& quotes, const std::vector<std::string>& symbols,
                   const std::atomic<bool>& stop, ReaderResult& res) {
  double spread = 0;  // uses the quote, in place
  for (std::size_t k = 0; !stop.load(std::memory_order_acquire); ++k) {
    const auto t0 = Clock::now();
    const bool hit = quotes.try_read(symbols[k % symbols.size()],
                                     [&spread](const Quote& q) { spread += q.ask - q.bid; });
    const auto t1 = Clock::now();
    ++res.reads;
    if (hit) {
      ++res.hits;
      if (res.hit_ns.size() < 100000) res.hit_ns.push_back((t1 - t0).count());
    }
  }
  for (const auto& symbol : symbols) {
    auto got = quotes.get(symbol);
    res.last.push_back(got ? got->size : -1);
  }
}

// However the run's scope is left (a lost server, a thread that cannot be made), the readers
// stop and are joined before the engines they read go away.
struct StopReaders {
  std::atomic<bool>& stop;
  std::vector<std::thread>& threads;
  ~StopReaders() {
    stop.store(true, std::memory_order_release);
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

// The writer thread: o.reprices publishes round robin; answers each instrument's last repricing
// (-1 - i: never repriced, its seed). A failed call (the server lost) ends the loop; the error
// leaves here once the thread is joined, never the thread itself.
std::vector<int> write_prices(const engine::Table<Quote>& quotes,
                              const std::vector<std::string>& symbols, const QuoteBoardOptions& o,
                              QuoteBoardSummary& sum) {
  std::vector<int> final_k(o.instruments);
  for (int i = 0; i < o.instruments; ++i) final_k[i] = -1 - i;
  std::exception_ptr writer_error;
  std::thread writer([&] {
    try {
      const auto t0 = Clock::now();
      for (int k = 0; k < o.reprices; ++k) {
        const int i = k % o.instruments;
        must(quotes.publish(symbols[i], quote_of(k)), "publish");
        ++sum.publishes;
        final_k[i] = k;
      }
      sum.writer_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    } catch (...) {
      writer_error = std::current_exception();
    }
  });
  writer.join();
  if (writer_error) std::rethrow_exception(writer_error);
  return final_k;
}

// The readers' counts into `sum`, each last read checked against its instrument's final quote.
void tally(const std::vector<ReaderResult>& results, const std::vector<int>& final_k,
           QuoteBoardSummary& sum) {
  std::vector<std::int64_t> all_ns;
  for (const auto& res : results) {
    sum.reads += res.reads;
    sum.l1_hits += res.hits;
    sum.misses += res.reads - res.hits;
    all_ns.insert(all_ns.end(), res.hit_ns.begin(), res.hit_ns.end());
    for (std::size_t i = 0; i < final_k.size(); ++i) {
      if (res.last[i] != quote_of(final_k[i]).size) ++sum.mismatches;
    }
  }
  if (!all_ns.empty()) {
    std::nth_element(all_ns.begin(), all_ns.begin() + all_ns.size() / 2, all_ns.end());
    sum.read_ns_p50 = static_cast<double>(all_ns[all_ns.size() / 2]);
  }
}

void print_summary(std::ostream& out, const QuoteBoardOptions& o, const engine::EngineOptions& base,
                   const QuoteBoardSummary& sum, bool settled) {
  out << "quote board: " << o.instruments << " instruments, " << o.readers << " readers, "
      << o.reprices << " reprices on " << base.host << ':' << base.port << '\n'
      << "  writer      " << sum.publishes << " publishes in " << sum.writer_seconds << " s\n"
      << "  readers     " << sum.reads << " reads, " << sum.l1_hits << " L1 hits in place, p50 hit "
      << sum.read_ns_p50 << " ns, " << sum.misses << " misses answered at once (none waited)\n"
      << "  check       " << (settled ? "settled" : "NOT settled within 20 s") << ", "
      << sum.mismatches << " of " << o.readers * o.instruments
      << " final reads wrong: " << (sum.ok ? "PASS" : "FAIL") << '\n';
}

}  // namespace

QuoteBoardSummary run_quote_board(const QuoteBoardOptions& o, std::ostream& out) {
  check_options(o);
  std::unique_ptr<testing::LocalServer> own;
  const engine::EngineOptions base = server_options(o, own);
  engine::EngineOptions wo = base, ro = base;
  wo.node_id = 1;
  ro.node_id = 2;
  ro.stats_publish = std::chrono::milliseconds(1000);
  engine::Engine writer_node(wo, {quotes_table()});
  engine::Engine reader_node(ro, {quotes_table()});
  if (auto ec = writer_node.start()) throw std::runtime_error("writer node: " + ec.message());
  if (auto ec = reader_node.start()) throw std::runtime_error("reader node: " + ec.message());
  const engine::Table<Quote> writer_quotes = writer_node.table<Quote>("quotes");
  const engine::Table<Quote> quotes = reader_node.table<Quote>("quotes");

  std::vector<std::string> symbols;
  for (int i = 0; i < o.instruments; ++i) symbols.push_back(symbol_of(i));
  for (int i = 0; i < o.instruments; ++i) {
    must(writer_quotes.put(symbols[i], quote_of(-1 - i)), "put quote");
  }

  QuoteBoardSummary sum;
  std::atomic<bool> stop{false};
  std::vector<ReaderResult> results(o.readers);
  std::vector<std::thread> readers;
  const StopReaders stop_readers{stop, readers};
  for (int r = 0; r < o.readers; ++r) {
    readers.emplace_back([&, r] { read_flat_out(quotes, symbols, stop, results[r]); });
  }
  const std::vector<int> final_k = write_prices(writer_quotes, symbols, o, sum);

  // The reading node has applied the last message of every instrument once it reads each final
  // quote; the wait is bounded.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  bool settled = true;
  for (int i = 0; i < o.instruments; ++i)
    settled &= await_quote(quotes, symbols[i], final_k[i], deadline);
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();  // stop_readers finds them joined

  tally(results, final_k, sum);
  sum.ok = settled && sum.mismatches == 0;
  reader_node.stop();
  writer_node.stop();
  print_summary(out, o, base, sum, settled);
  return sum;
}

}  // namespace echo::examples
