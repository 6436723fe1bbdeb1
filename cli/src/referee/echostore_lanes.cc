// SPDX-License-Identifier: MIT
// EchoStore's three lanes as referee contestants. Each node is its own Engine (its own node id,
// io thread, connections and writer) declaring one table of REF rows under the lane's coherence,
// with the injected fill hold (TableSpec::fill_hold) and a MessageProbe (TableSpec::on_message)
// that tells the oracle when a message reached the node. Reads go through the typed handle
// (an L1 hit, or a miss filled through the engine's guarded single flight).
// Writes come from one more Engine, the writer:
// - broadcast: Engine::publish (SET and PUBLISH in one script), or put and a late broadcast;
// - job: the job-lane publish (SET, then the job fanned out to every member node), or put and
//   a late enqueue;
// - tracking: Engine::put (the SET is the announcement: the server invalidates every node).
// The broadcast and job lanes run twice: as drops (the row goes, the next read fills it), and with
// carried values (TableSpec::carry update: the message carries the value and replaces the row in
// place, newer wins), where the late messages stay version-only and mix with the carried ones.
#include <echo/engine/engine.h>
#include <echo/engine/internal/access.h>
#include <echo/harness/stage.h>
#include <echo/table/names.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "referee/referee.h"

namespace echo::cli::referee {
namespace {

using engine::CoherenceMode;
using engine::Engine;
using engine::TableSpec;
using table::BrandedId;

constexpr std::string_view kKind = "REF";
constexpr unsigned kWriterNode = 960, kFirstNode = 961;
constexpr std::int64_t kRowTtlMs = 600000;  // no row expires during a run

enum class Lane { kBroadcast, kJob, kTracking };

class EchoStoreLane final : public Contestant {
 public:
  EchoStoreLane(Lane lane, bool carried) : lane_(lane), carried_(carried) {}
  ~EchoStoreLane() override { stop(); }

  std::string_view name() const override {
    switch (lane_) {
      case Lane::kBroadcast:
        return carried_ ? "echostore_broadcast_carried" : "echostore_broadcast";
      case Lane::kJob:
        return carried_ ? "echostore_job_carried" : "echostore_job";
      case Lane::kTracking:
        return "echostore_tracking";
    }
    return "echostore";
  }
  bool mails_late() const override { return lane_ != Lane::kTracking; }

  void start(Stage& stage) override {
    stage_ = &stage;
    static constexpr std::string_view kShort[] = {"bc", "job", "trk"};
    table_ = "referee_" + std::string(kShort[static_cast<int>(lane_)]) + (carried_ ? "v_" : "_") +
             stage.run_id;
    const DrillTarget& t = stage.target;
    // The writer needs the broadcast lane declared for publish's script; on the other lanes it
    // is no member and no subscriber (coherence none: publish(group) and put still write).
    writer_ = std::make_unique<Engine>(
        harness::node_options(t.host, t.port, kWriterNode),
        std::vector<TableSpec>{
            spec(lane_ == Lane::kBroadcast ? CoherenceMode::kBroadcast : CoherenceMode::kNone)});
    if (auto ec = writer_->start()) {
      throw std::runtime_error("the writer did not start: " + ec.message());
    }
    if (lane_ == Lane::kJob) group_ = writer_->mint("PRT").value();
    for (std::size_t i = 0; i < stage.names.size(); ++i) {
      const BrandedId v = writer_->mint(kKind).value();
      const table::IdBytes bytes = table::id_bytes(v);
      stage.oracle.begin_write(i, 0, lane_ == Lane::kTracking ? nullptr : &bytes, false);
      if (auto put = writer_->put(table_, stage.names[i], "0", v); !put) {
        throw std::runtime_error("seeding failed: " + put.error().message());
      }
      stage.oracle.acked(i, 0);
    }
    const CoherenceMode mode = lane_ == Lane::kBroadcast ? CoherenceMode::kBroadcast
                               : lane_ == Lane::kJob     ? CoherenceMode::kJob
                                                         : CoherenceMode::kTracking;
    for (int n = 0; n < stage.config.nodes; ++n) {
      TableSpec s = spec(mode);
      s.fill_hold = stage.config.fill_hold;
      s.on_message = [this, n](const engine::Heard& heard) { heard_at(n, heard); };
      nodes_.push_back(std::make_unique<Engine>(
          harness::node_options(t.host, t.port, kFirstNode + static_cast<unsigned>(n)),
          std::vector<TableSpec>{std::move(s)}));
      if (auto ec = nodes_.back()->start()) {
        throw std::runtime_error("node " + std::to_string(n) + " did not start: " + ec.message());
      }
    }
  }

  std::unique_ptr<NodeReader> reader(int node) override {
    return std::make_unique<Reader>(
        nodes_[static_cast<std::size_t>(node)]->table<std::string>(table_), stage_->names);
  }
  std::unique_ptr<Writer> writer() override { return std::make_unique<LaneWriter>(*this); }

  std::optional<std::uint32_t> peek(int node, std::size_t name) override {
    const table::L1Map& l1 =
        engine::internal::writer_of(*nodes_[static_cast<std::size_t>(node)], table_)->map();
    std::string value;
    if (!l1.get(stage_->names[name], value)) return std::nullopt;
    return parse_seq(value);
  }
  std::string l2_key(std::size_t name) const override {
    return table::l2_key(table_, stage_->names[name]).value();
  }
  bool framed() const override { return true; }
  std::string trouble() const override { return {}; }

  void stop() override {
    nodes_.clear();
    writer_.reset();
  }

 private:
  class Reader final : public NodeReader {
   public:
    Reader(engine::Table<std::string> table, const std::vector<std::string>& names)
        : table_(table), names_(names) {}
    std::optional<std::uint32_t> read(std::size_t name, std::string& error) override {
      std::optional<std::uint32_t> seq;
      const auto got = table_.read(names_[name], [&seq](std::string_view value, std::string_view) {
        seq = parse_seq(value);
      });
      if (!got) {
        error = got.error().message();
        return std::nullopt;
      }
      if (!seq) error = "a row that is no write's number";
      return seq;
    }

   private:
    engine::Table<std::string> table_;
    const std::vector<std::string>& names_;
  };

  class LaneWriter final : public Writer {
   public:
    explicit LaneWriter(EchoStoreLane& lane) : lane_(lane) {}
    std::optional<BrandedId> mint() override {
      if (lane_.lane_ == Lane::kTracking) return std::nullopt;
      auto v = lane_.writer_->mint(kKind);
      return v ? std::optional<BrandedId>(*v) : std::nullopt;
    }
    bool write(std::size_t name, std::uint32_t seq, const std::optional<BrandedId>& version,
               bool late, std::string& error) override {
      Engine& w = *lane_.writer_;
      const std::string& table = lane_.table_;
      const std::string& id = lane_.stage_->names[name];
      const std::string value = std::to_string(seq);
      if (lane_.lane_ == Lane::kTracking) return answered(w.put(table, id, value), error);
      if (!version) {
        error = "no version was minted";
        return false;
      }
      if (!late) {
        return lane_.lane_ == Lane::kBroadcast
                   ? answered(w.publish(table, id, value, *version), error)
                   : answered(w.publish(table, *lane_.group_, id, value, *version), error);
      }
      if (!answered(w.put(table, id, value, *version), error)) return false;
      // The late message: the contestant and the names outlive the mailer's drain (workload.cc).
      lane_.stage_->mailer.post([lane = &lane_, &id, v = *version](std::string& e) {
        Engine& sender = *lane->writer_;
        return lane->lane_ == Lane::kBroadcast
                   ? answered(sender.broadcast(lane->table_, id, v), e)
                   : answered(sender.enqueue(lane->table_, *lane->group_, id, v), e);
      });
      return true;
    }

   private:
    template <class R>
    static bool answered(const R& r, std::string& error) {
      if (!r) error = r.error().message();
      return static_cast<bool>(r);
    }
    EchoStoreLane& lane_;
  };

  TableSpec spec(CoherenceMode mode) const {
    TableSpec s;
    s.name = table_;
    s.kind = std::string(kKind);
    s.loader = [](const engine::Key&) -> engine::LoadResult {
      return engine::LoadError{"the referee seeded every name: L2 never misses"};
    };
    s.ttl_ms = kRowTtlMs;
    s.jitter = 0;
    s.coherence = mode;
    s.l2_format = engine::L2Format::kFramed;
    if (carried_) s.carry = engine::Carry::kUpdate;  // REF ids are branded: off unless asked
    return s;
  }

  // The node's writer thread, after it applied a message (TableSpec::on_message).
  void heard_at(int node, const engine::Heard& heard) {
    if (heard.all) {
      stage_->oracle.reached_all(node);
      return;
    }
    const auto it = stage_->by_hash.find(heard.key_hash);
    if (it == stage_->by_hash.end()) return;  // not one of the referee's names
    if (lane_ == Lane::kTracking) {
      stage_->oracle.reached_unversioned(node, it->second, 0, heard.dropped);
    } else {
      stage_->oracle.reached_version(node, it->second, heard.version, heard.dropped);
    }
  }

  Lane lane_;
  bool carried_;
  Stage* stage_ = nullptr;
  std::string table_;
  std::optional<BrandedId> group_;  // the job lane's writer lane
  std::unique_ptr<Engine> writer_;
  std::vector<std::unique_ptr<Engine>> nodes_;
};

}  // namespace

std::vector<std::unique_ptr<Contestant>> echostore_lanes() {
  std::vector<std::unique_ptr<Contestant>> lanes;
  for (Lane lane : {Lane::kBroadcast, Lane::kJob, Lane::kTracking}) {
    lanes.push_back(std::make_unique<EchoStoreLane>(lane, false));
  }
  for (Lane lane : {Lane::kBroadcast, Lane::kJob}) {
    lanes.push_back(std::make_unique<EchoStoreLane>(lane, true));
  }
  return lanes;
}

}  // namespace echo::cli::referee
