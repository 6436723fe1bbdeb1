// SPDX-License-Identifier: MIT
// A VFS shim over SQLite's unix VFSes that writes a WAL transaction's frames with one
// write() instead of two per frame (a 24-byte frame header, then its page). A record's commit
// appends three frames (its row, the job_id index, sqlite_sequence: six writes); with the shim
// it makes one, and a plain commit takes ~0.85x as long (journal_bench's
// BM_Sqlite_JournalVfsVsDefault, alternating). Nothing else changes: same files, same format.
//
// Two of them: "echostore-wal" over "unix" (SQLite's default: same locks), and the journal's
// default, "echostore-wal-excl" over "unix-excl": the process takes the database file's lock at
// the first read and holds it to the last close (the contract's one owner per file, enforced:
// another process is refused with SQLITE_BUSY; this process's connections share it), and the
// wal-index lives in the process's heap, not in a -shm file. A transaction then makes no
// fcntl() call where "unix" makes six (the read mark's lock taken and moved, the write lock):
// ~1.5 us of a ~5 us commit here.
//
// The rule that keeps it durable: bytes are held only while SQLite appends frames at the end of
// the buffered run, and they reach the file before the commit can return or become visible:
//   - the page of a commit frame (its header's "db size after commit" is non-zero) writes the
//     whole run, inside that xWrite, so a failed write fails the commit as it would without us;
//   - any other call on the WAL handle (read, sync, size, truncate, lock, file control, close)
//     and any write that does not extend the run write the run first;
//   - a frame header SQLite rewrites in place (walRewriteChecksums: it reads the frame, then
//     writes its header, no page follows) is written through, never held;
//   - as a last net, the database handle's xShmBarrier (which SQLite calls before it publishes a
//     commit in the wal-index) and its xUnlock write whatever the WAL handle still holds.
// Used only by the journal's own connections, in WAL mode with a wal-index (a -shm file or
// unix-excl's heap; not locking_mode=EXCLUSIVE, where SQLite calls no barrier).
//
// A File wraps the base VFS's file in the same allocation and forwards every method; a WAL
// file's appended frames wait in `run` until their commit frame's page arrives.
#include <echo/engine/journal.h>

#include <sqlite3.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

namespace echo::engine {
namespace {

constexpr int kFrameHeader = 24;  // a WAL frame's header (SQLite's WAL file format)
// A run is written before an append would take it past this: the unix VFSes write at most
// 128 KiB - 1 bytes per call (os_unix.c masks a larger size and reports the rest as a full
// disk), and a page is at most 64 KiB, so a run (one page at least) always fits.
constexpr std::size_t kMaxRun = 64u << 10;
static_assert(kMaxRun < 0x1ffff, "the unix VFSes' largest single write");

// Ours over SQLite's "unix" VFS (its default) and over "unix-excl" (the process holds the
// database file's lock from the first read to the last close, and the wal-index lives in the
// process's heap: no fcntl() per transaction). Each one's pAppData is its base VFS.
sqlite3_vfs g_vfs, g_vfs_excl;
sqlite3_io_methods g_methods;

struct File {
  sqlite3_file base;    // pMethods: &g_methods once open
  sqlite3_file* real;   // the base VFS's file, in the same allocation after this struct
  File* db = nullptr;   // a WAL file: its database's File (sqlite3_database_file_object)
  File* wal = nullptr;  // a database file: its WAL's File while that is open
  bool is_wal = false;
  // The held run: bytes for offsets [run_at, run_at + run.size()).
  std::string run;
  sqlite3_int64 run_at = 0;
  bool commit_header = false;    // the run ends with a commit frame's header: its page is next
  sqlite3_int64 last_read = -1;  // the offset of the last xRead with no write since
  int error = SQLITE_OK;         // a run the barrier could not write: every later call fails

  const sqlite3_io_methods* m() const { return real->pMethods; }
};

constexpr std::size_t kFileSize = (sizeof(File) + alignof(std::max_align_t) - 1) /
                                  alignof(std::max_align_t) * alignof(std::max_align_t);

File* F(sqlite3_file* f) { return reinterpret_cast<File*>(f); }

// Writes the held run (if any) through. Returns the write's result.
int write_run(File* f) {
  if (f->run.empty()) return SQLITE_OK;
  const int rc = f->m()->xWrite(f->real, f->run.data(), static_cast<int>(f->run.size()), f->run_at);
  f->run.clear();
  f->commit_header = false;
  return rc;
}

// Before any call on `f` other than an appending write: nothing held may be overtaken.
int settle(File* f) {
  if (f->error != SQLITE_OK) return f->error;
  return write_run(f);
}

int x_close(sqlite3_file* pf) {
  File* f = F(pf);
  const int held = write_run(f);
  if (f->db != nullptr && f->db->wal == f) f->db->wal = nullptr;
  if (f->wal != nullptr && f->wal->db == f) f->wal->db = nullptr;
  const int rc = f->m()->xClose(f->real);
  f->~File();
  return held != SQLITE_OK ? held : rc;
}

int x_read(sqlite3_file* pf, void* p, int n, sqlite3_int64 at) {
  File* f = F(pf);
  if (const int rc = settle(f); rc != SQLITE_OK) return rc;
  f->last_read = at;
  return f->m()->xRead(f->real, p, n, at);
}

int x_write(sqlite3_file* pf, const void* p, int n, sqlite3_int64 at) {
  File* f = F(pf);
  if (!f->is_wal) return f->m()->xWrite(f->real, p, n, at);
  if (f->error != SQLITE_OK) return f->error;
  const bool rewrite = at == f->last_read;  // a header rewritten in place: nothing follows it
  f->last_read = -1;
  const bool extends =
      !f->run.empty() && at == f->run_at + static_cast<sqlite3_int64>(f->run.size());
  const bool page_of_commit = f->commit_header && extends;
  // Written first: a run this write does not extend or would take past kMaxRun, and any run
  // before a rewritten header (which then goes through alone).
  if (!f->run.empty() &&
      (rewrite || !extends || f->run.size() + static_cast<std::size_t>(n) > kMaxRun)) {
    if (const int rc = write_run(f); rc != SQLITE_OK) return rc;
  }
  if (rewrite) return f->m()->xWrite(f->real, p, n, at);
  if (f->run.empty()) f->run_at = at;
  f->run.append(static_cast<const char*>(p), static_cast<std::size_t>(n));
  if (n == kFrameHeader) {
    // Bytes 4..7: the database's size in pages after a commit frame, 0 in any other frame.
    const auto* h = static_cast<const unsigned char*>(p);
    f->commit_header = (h[4] | h[5] | h[6] | h[7]) != 0;
    return SQLITE_OK;
  }
  f->commit_header = false;
  return page_of_commit ? write_run(f) : SQLITE_OK;
}

// The base VFS's method `M` on `f`'s own file: as_is, or settled (the held run written first).
template <auto M>
struct Forward;
template <class R, class... A, R (*sqlite3_io_methods::*M)(sqlite3_file*, A...)>
struct Forward<M> {
  static R as_is(sqlite3_file* pf, A... a) { return (F(pf)->m()->*M)(F(pf)->real, a...); }
  static int settled(sqlite3_file* pf, A... a) {
    File* f = F(pf);
    if (const int rc = settle(f); rc != SQLITE_OK) return rc;
    return (f->m()->*M)(f->real, a...);
  }
};

// The database's unlock ends a transaction: its WAL holds nothing past it.
int x_unlock(sqlite3_file* pf, int level) {
  File* f = F(pf);
  int rc = settle(f);
  if (rc == SQLITE_OK && f->wal != nullptr) rc = settle(f->wal);
  const int unlocked = f->m()->xUnlock(f->real, level);
  return rc != SQLITE_OK ? rc : unlocked;
}
// A database's WAL run, written before its shared-memory locks move and at the barrier: a
// failed write there is not the lock's failure (and the barrier cannot fail), so it poisons the
// WAL handle instead: every later call on it answers the error.
void write_wal_of(File* db) {
  if (db->wal != nullptr && db->wal->error == SQLITE_OK) {
    if (const int rc = write_run(db->wal); rc != SQLITE_OK) db->wal->error = rc;
  }
}
int x_shm_lock(sqlite3_file* pf, int offset, int n, int flags) {
  write_wal_of(F(pf));
  return F(pf)->m()->xShmLock(F(pf)->real, offset, n, flags);
}
// SQLite calls this on the database's handle between its two writes of the wal-index header, so
// a commit is published only after it: the last net for a run the rules above did not write.
void x_shm_barrier(sqlite3_file* pf) {
  write_wal_of(F(pf));
  F(pf)->m()->xShmBarrier(F(pf)->real);
}

int x_open(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* pf, int flags, int* out_flags) {
  auto* base = static_cast<sqlite3_vfs*>(vfs->pAppData);
  auto* f = new (pf) File{};
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(pf) + kFileSize);
  std::memset(f->real, 0, static_cast<std::size_t>(base->szOsFile));
  const int rc = base->xOpen(base, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || f->real->pMethods == nullptr) {
    if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
    f->~File();
    pf->pMethods = nullptr;
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  f->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  if (f->is_wal && name != nullptr) {
    // Our VFS opened the database too, so its sqlite3_file is one of ours.
    if (sqlite3_file* db = sqlite3_database_file_object(name);
        db != nullptr && db->pMethods == &g_methods) {
      f->db = F(db);
      F(db)->wal = f;
    }
  }
  pf->pMethods = &g_methods;
  return SQLITE_OK;
}

// `vfs` becomes `base` with our xOpen, under `name`.
void derive(sqlite3_vfs& vfs, sqlite3_vfs* base, const char* name) {
  vfs = *base;  // every VFS method (delete, access, randomness, time...) is the base's
  vfs.pNext = nullptr;
  vfs.zName = name;
  vfs.pAppData = base;
  vfs.szOsFile = static_cast<int>(kFileSize) + base->szOsFile;
  vfs.xOpen = x_open;
}

void register_vfs() {
  sqlite3_vfs* unix_vfs = sqlite3_vfs_find("unix");
  sqlite3_vfs* unix_excl = sqlite3_vfs_find("unix-excl");
  if (unix_vfs == nullptr || unix_excl == nullptr) {
    throw std::runtime_error("journal: this SQLite has no \"unix\" and \"unix-excl\" VFS");
  }
  derive(g_vfs, unix_vfs, "echostore-wal");
  derive(g_vfs_excl, unix_excl, "echostore-wal-excl");
  using M = sqlite3_io_methods;
  g_methods = M{3,
                x_close,
                x_read,
                x_write,
                Forward<&M::xTruncate>::settled,
                Forward<&M::xSync>::settled,
                Forward<&M::xFileSize>::settled,
                Forward<&M::xLock>::settled,
                x_unlock,
                Forward<&M::xCheckReservedLock>::as_is,
                Forward<&M::xFileControl>::settled,
                Forward<&M::xSectorSize>::as_is,
                Forward<&M::xDeviceCharacteristics>::as_is,
                Forward<&M::xShmMap>::as_is,
                x_shm_lock,
                x_shm_barrier,
                Forward<&M::xShmUnmap>::as_is,
                Forward<&M::xFetch>::settled,
                Forward<&M::xUnfetch>::as_is};
  if (sqlite3_vfs_register(&g_vfs, 0) != SQLITE_OK ||
      sqlite3_vfs_register(&g_vfs_excl, 0) != SQLITE_OK) {
    throw std::runtime_error("journal: cannot register the WAL VFS");
  }
}

}  // namespace

const char* journal_vfs(bool exclusive) {
  static std::once_flag once;
  std::call_once(once, register_vfs);
  return exclusive ? g_vfs_excl.zName : g_vfs.zName;
}

}  // namespace echo::engine
