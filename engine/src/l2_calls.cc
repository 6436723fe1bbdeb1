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

Error Engine::Impl::lend(LentCall& call) {
  const Inflight entered(inflight);
  if (!running.load(std::memory_order_seq_cst)) return make_error_code(Errc::kStopped);
  if (call.size() == 0) return {};
  call.arm(&Impl::issue_part, this);
  // Two pointers: the closure fits std::function's own storage (no allocation).
  io->loop().post([this, c = &call] {
    if (io_closing) return c->fail_on_io(make_error_code(Errc::kStopped));
    c->issue_on_io();
  });
  if (!call.wait(Clock::now() + options.call_timeout + std::chrono::seconds(1))) {
    return make_error_code(io::IoErrc::kTimeout);
  }
  return {};
}

Result<io::Resp3Value> Engine::Impl::run(LentCall& call) {
  if (Error e = lend(call)) return table::Unexpected{e};
  const LentCall::Part& p = call.part(0);
  if (p.ec) return table::Unexpected{reply_error(p.ec, p.reply.view())};
  return p.reply.view();
}

Result<io::Resp3Value> Engine::Impl::run_mine(LentCall& call) {
  {
    const Inflight entered(inflight);
    if (!running.load(std::memory_order_seq_cst)) {
      return table::Unexpected{make_error_code(Errc::kStopped)};
    }
    const bool clear = async_publishes.load(std::memory_order_acquire) == 0;
    if (io::BlockingLink* link = clear && links ? links->mine() : nullptr) {
      call.view();
      LentCall::Part& p = call.part(0);
      bool sent = false;
      p.ec = link->call(p.command(), p.eval.script, Clock::now() + options.call_timeout, p.reply,
                        sent);
      // Through io thread 0 instead only when the server did not run the call: nothing of it
      // left (the socket refused it), or a demoted master (Sentinel) refused the write READONLY,
      // where the io thread's connection finds the new one. A link lost once the call left
      // answers as the io thread's connection does: the call may or may not have run.
      const bool readonly =
          p.ec == io::IoErrc::kServerError && p.reply.view().str().starts_with("READONLY");
      if (p.ec && !readonly && (sent || p.ec != io::IoErrc::kDisconnected)) {
        if (p.ec == io::IoErrc::kServerError) {
          links->answered();
          return table::Unexpected{reply_error(p.ec, p.reply.view())};
        }
        return table::Unexpected{Error(p.ec, link->detail())};
      }
      if (!p.ec) {
        links->answered();
        return p.reply.view();
      }
      links->failed(*link, readonly);
    }
  }
  return run(call);
}

io::LinkTarget Engine::Impl::link_target() const {
  io::LinkTarget t;
  if (sentinel) {
    io::DialTarget m = sentinel->master();
    t.host = std::move(m.host);
    t.port = m.port;
  } else {
    t.host = options.host;
    t.port = options.port;
  }
  t.username = options.username;
  t.password = options.password;
  t.client_name = "echostore-caller";
  return t;
}

std::error_code Engine::Impl::issue_part(void* owner, LentCall::Part& p) {
  Impl& d = *static_cast<Impl*>(owner);
  if (d.io_closing) return make_error_code(Errc::kStopped);
  if (p.eval.script == nullptr) return d.issue(p.command(), p.eval.done);
  if (!d.cluster) return d.cmd->evalsha_lent(p.eval);
  d.cluster->evalsha(*p.eval.script, p.keys_of(), p.argv(), p.eval.done);
  return {};
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

Result<std::vector<io::OwnedResult>> Engine::Impl::calls(const std::vector<Call>& batch) {
  LentCall& c = LentCall::mine();
  for (const Call& call : batch) {
    if (call.script != nullptr) {
      c.script(*call.script, call.keys.size(), call.lead);
      for (const auto& k : call.keys) c.word(k);
    } else {
      c.begin(nullptr, 0, call.lead);
    }
    for (const auto& a : call.args) c.word(a);
  }
  if (Error e = lend(c)) return table::Unexpected{e};
  std::vector<io::OwnedResult> out;
  out.reserve(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    out.push_back(io::OwnedResult{c.part(i).ec, c.part(i).reply});
  }
  return out;
}

Error Engine::Impl::reply_error(std::error_code ec, const io::Resp3Value& reply) {
  // The server's words ("NOPERM this user has no permissions to run the 'evalsha' command").
  if (ec == io::IoErrc::kServerError) return Error(ec, std::string(reply.str()));
  return Error(ec);
}

Error Engine::Impl::row_failed(std::error_code ec, const io::Resp3Value& v) {
  if (ec) return reply_error(ec, v);
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
  // The writer is busy: the put is posted with the value in this thread's kept storage, and the
  // wait is this thread's too (writer_wait.h): no allocation once warm, whatever the writer does.
  const Error waited = await_writer_lent([&](std::string& kept, auto done) {
    kept.assign(value);
    slot.writer->put_lent(name, kept, version, std::move(done), guard);
  });
  if (waited) return table::Unexpected{waited};
  return version;
}

}  // namespace echo::engine
