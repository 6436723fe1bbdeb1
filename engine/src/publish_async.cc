// SPDX-License-Identifier: MIT
// Engine::publish_async: publish's wire, without the caller's wait. The caller builds the call
// (the key gate, the version, the framed value) and hands it to io thread 0, which issues it on
// the command connection and, on its reply, hands the L1 row to the table's writer; `done` runs
// once that row is in. The job lane's publish (two ordered round trips) runs whole on the job-send
// thread instead, in call order, as enqueue_async's admissions do.
#include <echo/engine/l2_frame.h>

#include <atomic>
#include <charconv>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine_impl.h"

namespace echo::engine {

using table::BrandedId;

namespace {

// The words of one call, kept from one use of their AsyncPublish to the next (LentCall's word()
// interface, so publish_args writes them): a warm call's strings keep their capacity.
struct KeptWords {
  std::vector<std::string> words;
  std::size_t used = 0;
  std::vector<std::string_view> views;
  std::string& word() {
    if (used == words.size()) words.emplace_back();
    std::string& w = words[used++];
    w.clear();
    return w;
  }
  void word(std::string_view w) { word().assign(w); }
  void word(std::uint64_t n) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, n);
    word(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  std::span<const std::string_view> view() {
    views.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(used));
    return views;
  }
};

// One asynchronous publish between the caller and its `done`, reused: a call that has ended goes
// back to the pool below, with its storage. Every closure handed on (to io thread 0, to the
// connection for the reply, to the writer for the row) holds this pointer alone, which
// std::function keeps inline, so a warm publish_async allocates nothing of its own. `D` is the
// engine's Impl (named only inside Engine's members).
template <class D>
struct AsyncPublish {
  D* d = nullptr;
  Engine::TableRef* slot = nullptr;
  std::string name, value;
  std::optional<BrandedId> version;  // set for every use (BrandedId has no public default)
  std::uint64_t guard = 0;
  bool broadcast = false;
  bool fired = false;  // the reply's function ran (an immediate error runs it inside the issue)
  // Counted in Impl::async_publishes until the call ends (broadcast lane): a blocking publish
  // meanwhile goes through io thread 0 behind it rather than overtake it on its caller's link.
  std::atomic<int>* unanswered = nullptr;
  Engine::PublishDone done;
  KeptWords words;
  io::LentEval eval;  // broadcast, single server: the EVALSHA the connection borrows (its words)
};

// The calls not in use. The process's, not an engine's: a call ends on io thread 0 or on a
// writer, and one engine's pool would have to outlive them. Never destroyed (calls may end while
// static destructors run); what it holds stays reachable.
template <class D>
class Pool {
 public:
  AsyncPublish<D>* take() {
    {
      const std::lock_guard lock(mu_);
      if (!free_.empty()) {
        AsyncPublish<D>* c = free_.back();
        free_.pop_back();
        return c;
      }
    }
    return new AsyncPublish<D>();
  }
  // The call has ended: its `done` has run, or never will.
  void give(AsyncPublish<D>* c) noexcept {
    if (c->unanswered != nullptr) c->unanswered->fetch_sub(1, std::memory_order_acq_rel);
    c->unanswered = nullptr;
    c->done = nullptr;
    try {
      const std::lock_guard lock(mu_);
      free_.push_back(c);
    } catch (...) {  // no memory to keep it: it goes
      delete c;
    }
  }

 private:
  std::mutex mu_;
  std::vector<AsyncPublish<D>*> free_;
};

template <class D>
Pool<D>& pool() {
  static Pool<D>* const p = new Pool<D>();  // NOLINT(cppcoreguidelines-owning-memory): kept
  return *p;
}

template <class D>
void fail(AsyncPublish<D>* call, const Error& error) {
  if (call->done) call->done(table::Unexpected{error});
  pool<D>().give(call);
}

// io thread 0, with the call's reply: the row into L1 (the writer answers `done`), or the error.
template <class D>
void answered(AsyncPublish<D>* call, std::error_code e, const io::Resp3Value& reply) {
  call->fired = true;
  if (e == io::IoErrc::kServerError) return fail(call, Error(e, std::string(reply.str())));
  if (e) {
    // Lost or overdue, not refused: the SET may still land. Without a message (put's lanes)
    // this node drops its older row itself, as put does.
    if (!call->broadcast) call->slot->writer->apply(call->name, *call->version, [](const auto&) {});
    return fail(call, e);
  }
  const bool ok = call->broadcast ? reply.type() == io::Resp3Type::integer : reply.str() == "OK";
  if (!ok) return fail(call, unexpected_reply());
  // The writer reads the value from the call until done() runs (put_lent).
  call->slot->writer->put_lent(
      call->name, call->value, *call->version,
      [call] {
        if (call->done) call->done(*call->version);
        pool<D>().give(call);
      },
      call->guard);
}

// io thread 0: the call leaves on the command connection, pipelined with every other call.
template <class D>
void issue(AsyncPublish<D>* call) {
  D& d = *call->d;
  if (d.io_closing) return fail(call, make_error_code(Errc::kStopped));
  call->fired = false;
  auto reply = [call](std::error_code e, const io::Resp3Value& r) { answered(call, e, r); };
  const std::span<const std::string_view> words = call->words.view();
  std::error_code ec;
  if (!call->broadcast) {
    ec = d.issue(words, std::move(reply));
  } else if (d.cluster) {  // the router copies the words (EVALSHA, sha, 2, then the keys)
    d.cluster->evalsha(d.publish_l2, words.subspan(3, 2), words.subspan(5), std::move(reply));
  } else {  // the connection borrows them from the call until the reply (LentEval)
    call->eval.script = &d.publish_l2;
    call->eval.command = words;
    call->eval.done = std::move(reply);
    call->eval.asking = false;
    ec = d.cmd->evalsha_lent(call->eval);
  }
  if (ec && !call->fired) fail(call, ec);
}

}  // namespace

Result<BrandedId> Engine::publish_async(std::string_view table, std::string_view id,
                                        std::string value, PublishDone done,
                                        std::optional<BrandedId> version) {
  return impl_->on_table(table, [&](TableRef& ref) {
    return publish_async(ref, id, std::move(value), std::move(done), version);
  });
}

Result<BrandedId> Engine::publish_async(TableRef& ref, std::string_view key, std::string value,
                                        PublishDone done, std::optional<BrandedId> version) {
  auto& d = *impl_;
  if (!running()) return table::Unexpected{make_error_code(Errc::kStopped)};
  Impl::Slot* slot = &ref;
  auto name = Impl::gate(*slot, key);
  if (!name) return table::Unexpected{name.error()};
  auto minted = d.version_for(*slot, version);  // no_node_lease without a lease
  if (!minted) return table::Unexpected{minted.error()};

  if (slot->spec.coherence == CoherenceMode::kJob) {
    const bool queued = d.job_sends.push([this, slot, n = std::string(*name), v = std::move(value),
                                          at = *minted, done = std::move(done)] {
      Result<BrandedId> r = table::Unexpected{make_error_code(Errc::kStopped)};
      try {
        r = publish(*slot, n, v, at);
      } catch (const std::bad_alloc&) {  // the thread must not end: its queue would stall
        r = table::Unexpected{std::make_error_code(std::errc::not_enough_memory)};
      }
      if (done) done(r);
    });
    if (!queued) return table::Unexpected{make_error_code(Errc::kStopped)};
    return *minted;
  }

  // One call, as publish (broadcast: publish_l2.lua) or put (tracking, none: SET) sends it.
  const bool broadcast = slot->spec.coherence == CoherenceMode::kBroadcast;
  const bool tracking = slot->spec.coherence == CoherenceMode::kTracking;
  AsyncPublish<Impl>* call = pool<Impl>().take();
  KeptWords& w = call->words;
  w.used = 0;
  if (broadcast) {  // EVALSHA; KEYS: the row and its removal tombstone; then publish_l2's ARGV
    w.word("EVALSHA");
    w.word(d.publish_l2.sha);
    w.word(std::uint64_t{2});
    table::append_l2_key(w.word(), slot->spec.name, *name);
    table::append_removal_key(w.word(), slot->spec.name, *name);
    if (Error e = d.publish_args(w, *slot, *name, *minted, value)) {
      pool<Impl>().give(call);
      return table::Unexpected{e};
    }
  } else {
    w.word("SET");
    table::append_l2_key(w.word(), slot->spec.name, *name);
    if (slot->spec.l2_format == L2Format::kRaw) {
      w.word(value);
    } else {
      append_l2_value(w.word(), *minted, value);
    }
    w.word("PX");
    w.word(static_cast<std::uint64_t>(slot->spec.ttl_ms));
  }
  call->d = &d;
  call->slot = slot;
  call->name.assign(*name);
  call->value = std::move(value);
  call->version = *minted;
  // Tracking: the guard is read before the SET leaves (as put's).
  call->guard = tracking ? slot->writer->forget_token(*name) : TableWriter::kNoGuard;
  call->broadcast = broadcast;
  call->done = std::move(done);
  if (broadcast) {
    call->unanswered = &d.async_publishes;
    d.async_publishes.fetch_add(1, std::memory_order_acq_rel);
  }

  const Impl::Inflight entered(d.inflight);
  if (!d.running.load(std::memory_order_seq_cst)) {
    call->done = nullptr;  // refused: the caller hears it here, not through `done`
    pool<Impl>().give(call);
    return table::Unexpected{make_error_code(Errc::kStopped)};
  }
  d.io->loop().post([call] { issue(call); });
  return *minted;
}

}  // namespace echo::engine
