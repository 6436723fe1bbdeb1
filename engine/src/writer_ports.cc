// SPDX-License-Identifier: MIT
// What a table's writer asks of the engine (WriterPorts): an L2 read for a miss, a loader call
// and its conditional write into L2, the node, events. Called on the writer thread; none blocks:
// the answers come back through the writer's inbox.
#include "engine_impl.h"

namespace echo::engine {
namespace {

// How long a receipt key outlives its last acknowledgement (docs/wire.md, "Receipts").
constexpr std::string_view kReceiptTtlMs = "60000";

// Runs the table's loader on a loader thread; an exception is the loader's failure.
LoadResult call_loader(const TableSpec& spec, const std::string& name) {
  if (!spec.loader) return Absent{};  // a table without a loader: what L2 lacks is absent
  try {
    // A branded table's names passed its kind gate: they parse.
    return spec.keys == KeyKind::kText ? spec.loader(Key(std::string_view(name)))
                                       : spec.loader(Key(table::BrandedId::parse(name).value()));
  } catch (const std::exception& e) {
    return LoadError{e.what()};
  } catch (...) {
    return LoadError{"loader threw"};
  }
}

// The answer of the loaded value's write into L2: put_l2's integer (1: stored), or for a raw
// table SET NX's +OK (stored) or nil (another program wrote meanwhile: the flight reads it).
void settle_store(LoadOutcome& o, bool raw, std::error_code e, const io::Resp3Value& r) {
  if (e) {
    o.ec = e;
  } else if (raw) {
    if (r.is_null()) {
      o.stored = false;
    } else if (r.type() == io::Resp3Type::simple_string && r.str() == "OK") {
      o.stored = true;
    } else {
      o.ec = unexpected_reply();
    }
  } else if (r.type() != io::Resp3Type::integer) {
    o.ec = unexpected_reply();
  } else {
    o.stored = r.integer() == 1;
  }
}

}  // namespace

WriterPorts Engine::Impl::ports_for(Slot& slot) {
  WriterPorts p;
  p.node = [this] { return current_node(); };
  p.log = options.log;
  if (options.on_event) {
    p.on_suspend = [this, &slot](bool suspended) {
      options.on_event(
          Event{suspended ? EventKind::kSuspended : EventKind::kResumed, slot.spec.name, {}});
    };
  }
  p.fetch = [this, &slot](std::string_view name, std::function<void(L2Fetch)> done) {
    std::string key = key_of(slot, name);
    io->loop().post([this, key = std::move(key), done = std::move(done)]() mutable {
      if (io_closing) return done(L2Fetch{make_error_code(Errc::kStopped), std::nullopt});
      auto shared = std::make_shared<std::function<void(L2Fetch)>>(std::move(done));
      const auto ec = issue({"GET", key}, [shared](std::error_code e, const io::Resp3Value& r) {
        if (e) return (*shared)(L2Fetch{e, std::nullopt});
        if (r.is_null()) return (*shared)(L2Fetch{{}, std::nullopt});
        if (r.type() != io::Resp3Type::bulk_string)
          return (*shared)(L2Fetch{unexpected_reply(), std::nullopt});
        (*shared)(L2Fetch{{}, std::string(r.str())});
      });
      if (ec) (*shared)(L2Fetch{ec, std::nullopt});
    });
  };
  // INCR and PEXPIRE in one script (receipt_count.lua: no key left without its TTL) on the
  // command connection; no answer is awaited: a lost one is a receipt the publisher misses.
  p.acknowledge = [this, &slot](std::string_view receipt) {
    std::string key = table::receipt_key(slot.spec.name, receipt).value();
    io->loop().post([this, key = std::move(key)] {
      if (io_closing) return;
      const std::string_view keys[] = {key};
      const std::string_view argv[] = {kReceiptTtlMs};
      (void)issue_script(receipt_count, keys, argv, [](std::error_code, const io::Resp3Value&) {});
    });
  };
  p.load = [this, &slot](std::string_view asked, const table::BrandedId& minted, bool write_l2,
                         std::shared_ptr<LoadClaim> claim, std::function<void(LoadOutcome)> done) {
    slot.loaders->post([this, &slot, name = std::string(asked), minted, write_l2,
                        claim = std::move(claim), done = std::move(done)]() mutable {
      load_into_l2(slot, name, minted, write_l2, claim, std::move(done));
    });
  };
  return p;
}

// On a loader thread: the loader's value, then its write into L2 (on the io thread), then
// `done` with the outcome.
void Engine::Impl::load_into_l2(Slot& slot, const std::string& name, const table::BrandedId& minted,
                                bool write_l2, const std::shared_ptr<LoadClaim>& claim,
                                std::function<void(LoadOutcome)> done) {
  const std::int64_t t0 = base::steady_ns();
  LoadResult result = call_loader(slot.spec, name);
  slot.load.record(base::steady_ns() - t0);
  // Too late: the writer answered the flight loader_timeout. Nothing of this answer is kept, in
  // L2 either (the writer counts it loader_late).
  if (claim && !claim->claim_answer())
    return done(LoadOutcome{make_error_code(Errc::kLoaderTimeout)});
  if (auto* failed = std::get_if<LoadError>(&result)) {
    return done(LoadOutcome{Error{Errc::kLoaderFailed, failed->reason.empty()
                                                           ? "loader failed"
                                                           : "loader failed: " + failed->reason}});
  }
  if (std::holds_alternative<Absent>(result)) {
    return done(LoadOutcome{make_error_code(Errc::kAbsent)});  // nothing for L2
  }
  auto loaded = std::get<Loaded>(std::move(result));
  LoadOutcome out;
  out.version = loaded.version.value_or(minted);
  out.value = std::move(loaded.value);
  if (!write_l2) {
    // L2 holds another schema's row: it stays for the nodes that read it; this node keeps the
    // loader's value in L1 alone.
    out.stored = true;
    return done(std::move(out));
  }
  // Framed: put_l2 stores it unless L2 holds a newer version. Raw (no version to compare): SET
  // NX, so a value another program wrote meanwhile is never overwritten.
  const bool raw = slot.spec.l2_format == L2Format::kRaw;
  std::string framed = raw ? out.value : frame_l2_value(*out.version, out.value);
  std::string key = key_of(slot, name);
  std::string removal = removal_key_of(slot, name);
  std::string ttl = std::to_string(slot.spec.ttl_ms);
  io->loop().post([this, raw, key = std::move(key), removal = std::move(removal),
                   framed = std::move(framed), ttl = std::move(ttl), out = std::move(out),
                   done = std::move(done)]() mutable {
    if (io_closing) return done(LoadOutcome{make_error_code(Errc::kStopped)});
    auto state = std::make_shared<std::pair<LoadOutcome, std::function<void(LoadOutcome)>>>(
        std::move(out), std::move(done));
    auto answer = [state, raw](std::error_code e, const io::Resp3Value& r) {
      settle_store(state->first, raw, e, r);
      state->second(std::move(state->first));
    };
    const std::string_view keys[] = {key, removal};
    const std::string_view argv[] = {framed, ttl};
    const auto ec = raw ? issue({"SET", key, framed, "PX", ttl, "NX"}, std::move(answer))
                        : issue_script(put_l2, keys, argv, std::move(answer));
    if (ec) {
      state->first.ec = ec;
      state->second(std::move(state->first));
    }
  });
}

}  // namespace echo::engine
