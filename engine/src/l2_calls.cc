// SPDX-License-Identifier: MIT
// The engine's calls to L2: one blocking call, a pipelined batch, a script. Application threads
// post to io thread 0 and wait; the loop thread issues on the command connection (or the cluster
// router, by slot).
#include "engine_impl.h"

namespace echo::engine {

// The count's increment and the caller's read of `running`, like stop()'s store to `running` and
// its read of the count, are seq_cst: each side stores, then loads what the other stores, and
// weaker orders let both loads see the old values (on x86 stop()'s release store may pass its
// load), so stop() would tear the loop down under a caller that goes on to post to it.
Engine::Impl::Inflight::Inflight(std::atomic<int>& count) : n(count) {
  n.fetch_add(1, std::memory_order_seq_cst);
}

Result<io::Resp3Value> Engine::Impl::run(LentCall& call) {
  const Inflight entered(inflight);
  if (!running.load(std::memory_order_seq_cst)) {
    return table::Unexpected{make_error_code(Errc::kStopped)};
  }
  call.arm();
  // Two pointers: the closure fits std::function's own storage (no allocation).
  io->loop().post([this, c = &call] {
    c->issue_on_io([this, c]() -> std::error_code {
      if (io_closing) return make_error_code(Errc::kStopped);
      if (c->script() == nullptr) return issue(c->command(), c->answer());
      if (!cluster) return cmd->evalsha_lent(c->eval());
      cluster->evalsha(*c->script(), c->keys(), c->argv(), c->answer());
      return {};
    });
  });
  if (!call.wait(Clock::now() + options.call_timeout + std::chrono::seconds(1))) {
    return table::Unexpected{make_error_code(io::IoErrc::kTimeout)};
  }
  if (call.ec == io::IoErrc::kServerError) {
    // The server's words ("NOPERM this user has no permissions to run the 'evalsha' command").
    return table::Unexpected{Error(call.ec, std::string(call.reply.view().str()))};
  }
  if (call.ec) return table::Unexpected{call.ec};
  return call.reply.view();
}

Result<io::Resp3Owned> Engine::Impl::command(const std::vector<std::string>& args) {
  LentCall& c = LentCall::mine();
  for (const auto& a : args) c.word(a);
  auto r = run(c);
  if (!r) return table::Unexpected{r.error()};
  return io::Resp3Owned(*r);
}

Result<io::Resp3Owned> Engine::Impl::script(const io::Script& s,
                                            const std::vector<std::string>& keys,
                                            const std::vector<std::string>& argv) {
  LentCall& c = LentCall::mine();
  c.script(s, keys.size());
  for (const auto& k : keys) c.word(k);
  for (const auto& a : argv) c.word(a);
  auto r = run(c);
  if (!r) return table::Unexpected{r.error()};
  return io::Resp3Owned(*r);
}

std::error_code Engine::Impl::issue(std::span<const std::string_view> args, io::ReplyFn done) {
  if (!cluster) return cmd->call(args, std::move(done));
  cluster->call(args, std::move(done));
  return {};
}

std::error_code Engine::Impl::issue_script(const io::Script& s,
                                           std::span<const std::string_view> keys,
                                           std::span<const std::string_view> argv,
                                           io::ReplyFn done) {
  if (!cluster) return cmd->evalsha(s, keys, argv, std::move(done));
  cluster->evalsha(s, keys, argv, std::move(done));
  return {};
}

struct Engine::Impl::CallsState {
  std::vector<Call> batch;
  std::vector<io::OwnedResult> out;
  std::size_t left = 0;
  std::size_t leads = 0, leads_left = 0;  // the leading prefix; those not yet answered
  std::promise<void> done;
  void settle(std::size_t i, io::OwnedResult r) {
    out[i] = std::move(r);
    if (--left == 0) done.set_value();
  }
};

// Loop thread: issues calls [from, to) of a batch. The last leading call's answer issues the
// rest (after its own settle: the rest may settle the whole batch).
void Engine::Impl::issue_calls(const std::shared_ptr<CallsState>& st, std::size_t from,
                               std::size_t to) {
  for (std::size_t i = from; i < to; ++i) {
    const bool leading = i < st->leads;
    auto after = [this, st, leading] {
      if (leading && --st->leads_left == 0) issue_calls(st, st->leads, st->batch.size());
    };
    if (io_closing) {
      st->settle(i, io::OwnedResult{make_error_code(Errc::kStopped), {}});
      after();
      continue;
    }
    const Call& c = st->batch[i];
    std::vector<std::string_view> k(c.keys.begin(), c.keys.end()), a(c.args.begin(), c.args.end());
    auto fired = std::make_shared<bool>(false);
    io::ReplyFn done = [st, i, fired, after](std::error_code e, const io::Resp3Value& reply) {
      *fired = true;
      st->settle(i, io::OwnedResult{e, io::Resp3Owned(reply)});
      after();
    };
    const std::error_code ec = c.script != nullptr ? issue_script(*c.script, k, a, std::move(done))
                                                   : issue(a, std::move(done));
    if (ec && !*fired) {
      st->settle(i, io::OwnedResult{ec, {}});
      after();
    }
  }
}

Result<std::vector<io::OwnedResult>> Engine::Impl::calls(std::vector<Call> batch) {
  const Inflight entered(inflight);
  if (!running.load(std::memory_order_seq_cst)) {
    return table::Unexpected{make_error_code(Errc::kStopped)};
  }
  auto st = std::make_shared<CallsState>();
  st->out.resize(batch.size());
  st->left = batch.size();
  st->batch = std::move(batch);
  while (st->leads < st->batch.size() && st->batch[st->leads].lead) ++st->leads;
  st->leads_left = st->leads;
  auto future = st->done.get_future();
  if (st->batch.empty()) return std::vector<io::OwnedResult>{};
  io->loop().post(
      [this, st]() { issue_calls(st, 0, st->leads != 0 ? st->leads : st->batch.size()); });
  if (future.wait_for(options.call_timeout + std::chrono::seconds(1)) !=
      std::future_status::ready) {
    return table::Unexpected{make_error_code(io::IoErrc::kTimeout)};
  }
  return std::move(st->out);
}

Error Engine::Impl::reply_error(const io::OwnedResult& r) {
  if (r.ec == io::IoErrc::kServerError) return Error(r.ec, std::string(r.reply.view().str()));
  return Error(r.ec);
}

Error Engine::Impl::row_failed(const io::OwnedResult& r) {
  if (r.ec) return reply_error(r);
  const io::Resp3Value v = r.reply.view();
  if (v.type() != io::Resp3Type::integer || (v.integer() != 0 && v.integer() != 1)) {
    return unexpected_reply();
  }
  return {};
}

Result<table::BrandedId> Engine::Impl::put_l1(Slot& slot, std::string_view name,
                                              std::string_view value,
                                              const table::BrandedId& version,
                                              std::uint64_t guard) {
  // The writer idle: the row goes in here, under its token (no round trip to the writer: ~8 us
  // of a publish's ~60, publish_vs_hiredis_eval).
  if (slot.writer->put_here(name, value, version, guard)) return version;
  const Error waited = await_writer([&](auto done) {
    slot.writer->put(name, std::string(value), version, std::move(done), guard);
  });
  if (waited) return table::Unexpected{waited};
  return version;
}

}  // namespace echo::engine
