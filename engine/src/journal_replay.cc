// SPDX-License-Identifier: MIT
// The journal's calls that read it (docs/wire.md, "The journal"): each runs on the connection
// once everything queued before it is in the file (Journal::Impl::call). Replay re-sends the
// intents no applied row covers, flush waits for the queued marks and upserts, stats counts.
#include <echo/engine/journal.h>

#include <sqlite3.h>

#include <string>
#include <utility>
#include <vector>

#include "journal_impl.h"

namespace echo::engine {
namespace {

using table::BrandedId;
using namespace journal_detail;  // each_row, column_text, intent_name

}  // namespace

// A failed commit of the queued marks and upserts (counted; they stay queued for the next
// transaction) answers its error: flush does not wait for that next one.
Result<bool> Journal::flush() {
  return impl_->call([](const Error& commit_error) -> Result<bool> {
    if (commit_error) return table::Unexpected{commit_error};
    return true;
  });
}

Result<ReplayResult> Journal::replay(const EnqueueFn& enqueue) {
  auto& d = *impl_;
  struct Row {
    BrandedId job;
    std::string name;  // a branded id or a text key
    BrandedId version;
  };
  ReplayResult result;
  // The uncovered intents, read once the applied rows queued before this call are in the file
  // (else an intent they cover would go out again): a commit that failed to put them there, or a
  // read SQLite refused, answers its error and nothing is sent.
  auto rows = d.call([&d, &result](const Error& commit_error) -> Result<std::vector<Row>> {
    if (commit_error) return table::Unexpected{commit_error};
    std::vector<Row> out;
    Error error = each_row(d.db.get(), d.uncovered.get(), "replay: read the uncovered intents",
                           [&](sqlite3_stmt* row) {
                             auto job = BrandedId::parse(column_text(row, 0)),
                                  version = BrandedId::parse(column_text(row, 2));
                             const std::string_view name = column_text(row, 1);
                             if (job && version && intent_name(name)) {
                               out.push_back(Row{*job, std::string(name), *version});
                             } else {
                               ++result.malformed;
                             }
                           });
    if (error) return table::Unexpected{std::move(error)};
    return out;
  });
  if (!rows) return table::Unexpected{rows.error()};
  for (const Row& row : *rows) {
    auto admitted = enqueue(row.job, row.name, row.version);
    if (!admitted) return table::Unexpected{admitted.error()};
    if (*admitted) {
      mark_enqueued(row.job);
      ++result.replayed;
    } else {
      ++result.deduplicated;
    }
  }
  return result;
}

// A count SQLite could not read reads 0 (stats() answers what it has: its counters are the
// journal's own, and `failed` counts the refusals).
std::uint64_t Journal::Impl::count(sqlite3_stmt* s) {
  std::uint64_t n = 0;
  const Error error = each_row(db.get(), s, "count", [&n](sqlite3_stmt* row) {
    n = static_cast<std::uint64_t>(sqlite3_column_int64(row, 0));
  });
  return error ? 0 : n;
}

JournalStats Journal::stats() const {
  auto& d = *impl_;
  JournalStats s = d.call([&d](const Error&) {
    JournalStats out;
    out.intents = d.count(d.count_intents.get());
    out.pending_enqueue = d.count(d.count_pending.get());
    out.remembered = d.count(d.count_applied.get());
    out.transactions = d.transactions;
    out.grouped = d.grouped;
    out.failed = d.failed;
    out.checkpoints = d.checkpoints.load(std::memory_order_relaxed);
    out.inline_checkpoints = d.inline_checkpoints;
    out.flusher_pin_failures = d.housekeeping.pin_failures();
    return out;
  });
  s.path = d.path;
  return s;
}

}  // namespace echo::engine
