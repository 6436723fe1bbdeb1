// SPDX-License-Identifier: MIT
// Engine::publish_async: publish's wire, without the caller's wait. The caller builds the call
// (the key gate, the version, the framed value) and hands it to io thread 0, which issues it on
// the command connection and, on its reply, hands the L1 row to the table's writer; `done` runs
// once that row is in. The job lane's publish (two ordered round trips) runs whole on the job-send
// thread instead, in call order, as enqueue_async's admissions do.
#include <echo/engine/l2_frame.h>

#include <atomic>
#include <utility>

#include "engine_impl.h"

namespace echo::engine {

using table::BrandedId;

namespace {

// A broadcast publish_async counted in Impl::async_publishes until its call is gone (answered
// and its row in, or failed): a blocking publish meanwhile goes through io thread 0 behind it
// rather than overtake it on its caller's own link.
class Unanswered {
 public:
  explicit Unanswered(std::atomic<int>* n) : n_(n) {
    if (n_ != nullptr) n_->fetch_add(1, std::memory_order_acq_rel);
  }
  Unanswered(Unanswered&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
  Unanswered& operator=(Unanswered&&) = delete;
  Unanswered(const Unanswered&) = delete;
  Unanswered& operator=(const Unanswered&) = delete;
  ~Unanswered() {
    if (n_ != nullptr) n_->fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<int>* n_;
};

// One asynchronous publish between the caller and its `done`: shared by the io thread's reply
// and the writer's put.
struct AsyncPublish {
  Engine::TableRef* slot;
  std::string name, value;
  BrandedId version;
  std::uint64_t guard;
  Engine::PublishDone done;
  Unanswered counted;
  void fail(const Error& error) const {
    if (done) done(table::Unexpected{error});
  }
};

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
  std::vector<std::string> keys, args;
  if (broadcast) {
    WordList built;
    if (Error e = d.publish_args(built, *slot, *name, *minted, value)) {
      return table::Unexpected{e};
    }
    keys = {d.key_of(*slot, *name), d.removal_key_of(*slot, *name)};
    args = std::move(built.words);
  } else {
    args = {"SET", d.key_of(*slot, *name),
            slot->spec.l2_format == L2Format::kRaw ? value : frame_l2_value(*minted, value), "PX",
            std::to_string(slot->spec.ttl_ms)};
  }
  // Tracking: the guard is read before the SET leaves (as put's).
  const std::uint64_t guard = tracking ? slot->writer->forget_token(*name) : TableWriter::kNoGuard;

  const Impl::Inflight entered(d.inflight);
  if (!d.running.load(std::memory_order_seq_cst)) {
    return table::Unexpected{make_error_code(Errc::kStopped)};
  }
  auto call = std::make_shared<AsyncPublish>(
      AsyncPublish{slot, std::string(*name), std::move(value), *minted, guard, std::move(done),
                   Unanswered(broadcast ? &d.async_publishes : nullptr)});
  d.io->loop().post([&d, call, broadcast, keys = std::move(keys), args = std::move(args)] {
    if (d.io_closing) return call->fail(make_error_code(Errc::kStopped));
    auto fired = std::make_shared<bool>(false);
    auto answer = [call, broadcast, fired](std::error_code e, const io::Resp3Value& reply) {
      *fired = true;
      if (e == io::IoErrc::kServerError) return call->fail(Error(e, std::string(reply.str())));
      if (e) {
        // Lost or overdue, not refused: the SET may still land. Without a message (put's lanes)
        // this node drops its older row itself, as put does.
        if (!broadcast) call->slot->writer->apply(call->name, call->version, [](const auto&) {});
        return call->fail(e);
      }
      const bool ok = broadcast ? reply.type() == io::Resp3Type::integer : reply.str() == "OK";
      if (!ok) return call->fail(unexpected_reply());
      call->slot->writer->put(
          call->name, std::move(call->value), call->version,
          [call] {
            if (call->done) call->done(call->version);
          },
          call->guard);
    };
    std::vector<std::string_view> k(keys.begin(), keys.end()), a(args.begin(), args.end());
    const std::error_code ec = broadcast ? d.issue_script(d.publish_l2, k, a, std::move(answer))
                                         : d.issue(a, std::move(answer));
    if (ec && !*fired) call->fail(ec);
  });
  return *minted;
}

}  // namespace echo::engine
