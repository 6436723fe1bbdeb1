// SPDX-License-Identifier: MIT
// The journal's owner thread, SQLite statements and applied-memory mirror (WIRE §8).
//
// Group commit: requests queue under a mutex; the owner takes everything queued (up to
// max_group), runs it in one BEGIN IMMEDIATE ... COMMIT, and only then answers the waiters, so a
// recorded intent is durable before its caller may enqueue it. mark and remember need no answer:
// they ride the next commit (a lost mark costs a deduplicated replay; a lost remember, a re-apply
// that newer-wins absorbs).
#include <echo/engine/journal.h>

#include <sqlite3.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <variant>

#include <echo/engine/table_spec.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

using table::BrandedId;

struct DbCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

[[noreturn]] void fail(sqlite3* db, const std::string& what) {
  throw std::runtime_error("journal: " + what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(std::string("journal: ") + sql + ": " + msg);
  }
}

Stmt prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
    fail(db, std::string("prepare ") + sql);
  }
  return Stmt(s);
}

void bind(sqlite3_stmt* s, int i, std::string_view text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// Steps a statement that returns no rows (or ignores them) and resets it.
void run(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE) fail(db, what);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS intents(seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL "
    "UNIQUE, name_id TEXT NOT NULL, version TEXT NOT NULL, enqueued INTEGER NOT NULL DEFAULT 0, "
    "recorded_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS applied(name_id TEXT PRIMARY KEY, version TEXT NOT NULL, seq "
    "INTEGER NOT NULL);";

// Coverage: an applied row for the name at least as new as the intent (payload bytes 4..14).
constexpr const char* kUncovered =
    "SELECT i.job_id, i.name_id, i.version FROM intents i WHERE NOT EXISTS (SELECT 1 FROM applied a "
    "WHERE a.name_id = i.name_id AND substr(a.version, 4) >= substr(i.version, 4)) ORDER BY i.seq";
constexpr const char* kCompact =
    "DELETE FROM intents WHERE EXISTS (SELECT 1 FROM applied a WHERE a.name_id = intents.name_id "
    "AND substr(a.version, 4) >= substr(intents.version, 4))";

}  // namespace

struct Journal::Impl {
  struct Record {
    std::vector<std::pair<BrandedId, BrandedId>> rows;
    std::vector<BrandedId> jobs;
    std::promise<void> done;
  };
  struct Mark {
    BrandedId job;
  };
  struct Upsert {
    BrandedId name, version;
  };
  struct Call {  // anything else the owner must run (replay's query, compact, stats, flush)
    std::function<void()> fn;
  };
  using Request = std::variant<Record*, Mark, Upsert, Call>;

  JournalOptions options;
  BrandedId group;
  std::filesystem::path path;
  Db db;
  Stmt insert, mark, upsert, uncovered, compact, count_intents, count_pending, count_applied;
  Stmt begin, commit, rollback;  // the group commit's own statements, parsed once too

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Request> queue;
  bool stopping = false;
  std::thread owner;
  std::uint64_t transactions = 0, grouped = 0;  // owner thread; read under mu via a Call

  mutable std::shared_mutex memory_mu;
  std::unordered_map<std::string, BrandedId> memory;

  Impl(JournalOptions o, BrandedId g)
      : options(std::move(o)), group(g) {}

  void submit(Request r) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(r));
    }
    cv.notify_one();
  }

  // Runs `fn` on the owner thread (inside its next transaction) and waits for it.
  template <class Fn>
  auto call(Fn fn) {
    using R = decltype(fn());
    auto p = std::make_shared<std::promise<R>>();
    auto f = p->get_future();
    submit(Call{[p, fn = std::move(fn)]() mutable {
      try {
        if constexpr (std::is_void_v<R>) {
          fn();
          p->set_value();
        } else {
          p->set_value(fn());
        }
      } catch (...) {
        p->set_exception(std::current_exception());
      }
    }});
    return f.get();
  }

  void loop() {
    std::vector<Request> batch;
    while (true) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return stopping || !queue.empty(); });
        if (queue.empty() && stopping) return;
        const std::size_t n = std::min(queue.size(), options.max_group);
        batch.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.begin() + n));
        queue.erase(queue.begin(), queue.begin() + n);
      }
      std::exception_ptr error;
      try {
        run(db.get(), begin.get(), "begin");
        for (auto& r : batch) apply(r);
        run(db.get(), commit.get(), "commit");
        ++transactions;
        grouped += batch.size();
      } catch (...) {
        error = std::current_exception();
        if (!sqlite3_get_autocommit(db.get())) {
          sqlite3_step(rollback.get());
          sqlite3_reset(rollback.get());
        }
      }
      for (auto& r : batch) {
        if (auto* rec = std::get_if<Record*>(&r)) {
          if (error) {
            (*rec)->done.set_exception(error);
          } else {
            (*rec)->done.set_value();
          }
        } else if (auto* c = std::get_if<Call>(&r)) {
          c->fn();  // after the commit, in autocommit: a flush sees everything before it durable
        }
      }
      batch.clear();
    }
  }

  void apply(Request& r) {
    std::visit(
        [this](auto& req) {
          using T = std::decay_t<decltype(req)>;
          if constexpr (std::is_same_v<T, Record*>) {
            const std::int64_t at = wall_ms();  // one shared timestamp per record_many
            for (const auto& [name, version] : req->rows) {
              const BrandedId job = table::process_minter().mint("JOB", options.node_id).value();
              bind(insert.get(), 1, job.view());
              bind(insert.get(), 2, name.view());
              bind(insert.get(), 3, version.view());
              sqlite3_bind_int64(insert.get(), 4, at);
              run(db.get(), insert.get(), "record");
              req->jobs.push_back(job);
            }
          } else if constexpr (std::is_same_v<T, Mark>) {
            bind(mark.get(), 1, req.job.view());
            run(db.get(), mark.get(), "mark");
          } else if constexpr (std::is_same_v<T, Upsert>) {
            bind(upsert.get(), 1, req.name.view());
            bind(upsert.get(), 2, req.version.view());
            run(db.get(), upsert.get(), "upsert");
          }  // Calls run after the commit (see loop())
        },
        r);
  }

  std::uint64_t count(sqlite3_stmt* s) {
    std::uint64_t n = 0;
    if (sqlite3_step(s) == SQLITE_ROW) n = static_cast<std::uint64_t>(sqlite3_column_int64(s, 0));
    sqlite3_reset(s);
    return n;
  }
};

Journal::Journal(JournalOptions options) {
  auto group = BrandedId::parse(options.group);
  if (!group) {
    throw ConfigError("journal group must be a valid branded id, got '" + options.group + "' (gate " +
                      std::string(table::to_string(group.error())) + ")");
  }
  if (options.node_id > table::kMaxNode) {
    throw ConfigError("journal node_id must lie in 0..1023, got " + std::to_string(options.node_id));
  }
  if (options.max_group < 1 || options.max_group > 65536) {
    throw ConfigError("journal max_group must lie in 1..65536, got " + std::to_string(options.max_group));
  }
  impl_ = std::make_unique<Impl>(options, *group);
  auto& d = *impl_;
  std::filesystem::create_directories(options.dir);
  d.path = table::journal_file(options.dir, options.group).value();
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(d.path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  d.db.reset(raw);
  if (rc != SQLITE_OK) fail(raw, "open " + d.path.string());
  exec(raw, "PRAGMA journal_mode=WAL");
  exec(raw, options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  exec(raw, "PRAGMA busy_timeout=5000");
  exec(raw, kSchema);
  d.insert = prepare(raw,
                     "INSERT INTO intents(job_id, name_id, version, recorded_at) VALUES(?, ?, ?, ?) "
                     "RETURNING seq");
  d.mark = prepare(raw, "UPDATE intents SET enqueued = 1 WHERE job_id = ?");
  d.upsert = prepare(raw,
                     "INSERT INTO applied(name_id, version, seq) VALUES(?, ?, 0) ON CONFLICT(name_id) "
                     "DO UPDATE SET version = excluded.version WHERE substr(excluded.version, 4) > "
                     "substr(applied.version, 4)");
  d.uncovered = prepare(raw, kUncovered);
  d.compact = prepare(raw, kCompact);
  d.count_intents = prepare(raw, "SELECT count(*) FROM intents");
  d.count_pending = prepare(raw, "SELECT count(*) FROM intents WHERE enqueued = 0");
  d.count_applied = prepare(raw, "SELECT count(*) FROM applied");
  d.begin = prepare(raw, "BEGIN IMMEDIATE");
  d.commit = prepare(raw, "COMMIT");
  d.rollback = prepare(raw, "ROLLBACK");
  {
    // The applied memory's mirror: read once here, kept current by remember().
    Stmt all = prepare(raw, "SELECT name_id, version FROM applied");
    while (sqlite3_step(all.get()) == SQLITE_ROW) {
      const auto* n = reinterpret_cast<const char*>(sqlite3_column_text(all.get(), 0));
      const auto* v = reinterpret_cast<const char*>(sqlite3_column_text(all.get(), 1));
      auto name = BrandedId::parse(n ? n : ""), version = BrandedId::parse(v ? v : "");
      if (name && version) d.memory.insert_or_assign(name->str(), *version);
    }
  }
  d.owner = std::thread([&d] { d.loop(); });
}

Journal::~Journal() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->owner.join();
}

std::vector<BrandedId> Journal::record_many(const std::vector<std::pair<BrandedId, BrandedId>>& rows) {
  Impl::Record rec;
  rec.rows = rows;
  auto done = rec.done.get_future();
  impl_->submit(&rec);
  done.get();  // rethrows a failed commit
  return rec.jobs;
}

BrandedId Journal::record(const BrandedId& name, const BrandedId& version) {
  return record_many({{name, version}}).front();
}

void Journal::mark_enqueued(const BrandedId& job) { impl_->submit(Impl::Mark{job}); }

table::Expected<BrandedId, std::error_code> Journal::intend_and_enqueue(const BrandedId& name,
                                                                       const BrandedId& version,
                                                                       const EnqueueFn& enqueue) {
  const BrandedId job = record(name, version);  // durable before anything reaches the bus
  auto admitted = enqueue(job, name, version);    // seam A is before this line, seam B after
  if (!admitted) return table::Unexpected{admitted.error()};
  mark_enqueued(job);
  return job;
}

bool Journal::remembered_stale(const BrandedId& name, const BrandedId& version) const {
  std::shared_lock lock(impl_->memory_mu);
  auto it = impl_->memory.find(std::string(name.view()));
  return it != impl_->memory.end() && !table::newer(version, it->second);
}

void Journal::remember(const BrandedId& name, const BrandedId& version) {
  {
    std::unique_lock lock(impl_->memory_mu);
    auto [it, fresh] = impl_->memory.try_emplace(name.str(), version);
    if (!fresh) {
      if (!table::newer(version, it->second)) return;  // newer only: nothing to write
      it->second = version;
    }
  }
  impl_->submit(Impl::Upsert{name, version});
}

void Journal::flush() {
  impl_->call([] {});
}

std::optional<BrandedId> Journal::last_applied(const BrandedId& name) const {
  std::shared_lock lock(impl_->memory_mu);
  auto it = impl_->memory.find(std::string(name.view()));
  if (it == impl_->memory.end()) return std::nullopt;
  return it->second;
}

table::Expected<ReplayResult, std::error_code> Journal::replay(const EnqueueFn& enqueue) {
  auto& d = *impl_;
  struct Row {
    BrandedId job, name, version;
  };
  const std::vector<Row> rows = d.call([&d] {
    std::vector<Row> out;
    sqlite3_stmt* s = d.uncovered.get();
    while (sqlite3_step(s) == SQLITE_ROW) {
      auto text = [s](int i) {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
        return std::string_view(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
      };
      auto job = BrandedId::parse(text(0)), name = BrandedId::parse(text(1)),
           version = BrandedId::parse(text(2));
      if (job && name && version) out.push_back(Row{*job, *name, *version});
    }
    sqlite3_reset(s);
    return out;
  });
  ReplayResult result;
  for (const Row& row : rows) {
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

std::uint64_t Journal::compact() {
  auto& d = *impl_;
  return d.call([&d] {
    run(d.db.get(), d.compact.get(), "compact");
    return static_cast<std::uint64_t>(sqlite3_changes(d.db.get()));
  });
}

JournalStats Journal::stats() const {
  auto& d = *impl_;
  JournalStats s = d.call([&d] {
    JournalStats out;
    out.intents = d.count(d.count_intents.get());
    out.pending_enqueue = d.count(d.count_pending.get());
    out.remembered = d.count(d.count_applied.get());
    out.transactions = d.transactions;
    out.grouped = d.grouped;
    return out;
  });
  s.path = d.path;
  return s;
}

const std::filesystem::path& Journal::path() const noexcept { return impl_->path; }
const BrandedId& Journal::group() const noexcept { return impl_->group; }

}  // namespace echo::engine
