// SPDX-License-Identifier: MIT
// The job lane's sending side: the enqueue verbs and the job-lane publish, the membership view,
// and the fan-out of one job to every live member queue (and the shared queue the original's
// consumers read), with the lead push ahead of it (docs/wire.md, "The job lane's member queues").
#include "engine_impl.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_set>
#include <utility>

namespace echo::engine {

using table::BrandedId;

Result<std::string> Engine::Impl::message_of(const Slot* slot, std::string_view id,
                                             const BrandedId& version) {
  std::string out;
  if (Error e = append_message(out, slot, id, version)) return table::Unexpected{e};
  return out;
}

Error Engine::Impl::append_message(std::string& out, const Slot* slot, std::string_view id,
                                   const BrandedId& version) {
  if (slot != nullptr && slot->spec.keys == KeyKind::kText) {
    auto frame = table::make_text_frame(id, version);
    if (!frame) return make_error_code(Errc::kBadKey);
    out.append(table::view(*frame));
    return {};
  }
  auto name = BrandedId::parse(id);
  if (!name || (slot != nullptr && name->ns() != slot->spec.kind)) {
    return make_error_code(Errc::kKind);
  }
  out.append(table::view(table::make_frame(*name, version)));
  return {};
}

Result<Engine::Impl::Membership> Engine::Impl::read_membership(std::string_view table,
                                                               const JobLaneKeys& keys,
                                                               std::optional<Call> lead,
                                                               std::optional<Call> first) {
  const std::size_t at = first ? 1 : 0;  // the epoch's reply
  std::vector<Call> batch;
  if (first) batch.push_back(std::move(*first));
  batch.push_back(Call{nullptr, {}, {"GET", keys.epoch}});
  batch.push_back(Call{nullptr, {}, {"ZRANGE", keys.members, "0", "-1"}});
  if (lead) batch.push_back(std::move(*lead));
  auto replies = calls(std::move(batch));
  if (!replies) return table::Unexpected{replies.error()};
  if (lead) note_lead(replies->back());
  if (at == 1) {
    if (auto ec = row_failed(replies->front())) return table::Unexpected{ec};
  }
  for (std::size_t i = at; i < at + 2; ++i) {
    if ((*replies)[i].ec) return table::Unexpected{reply_error((*replies)[i])};
  }
  base::shared_add(fan_membership_reads);
  const io::Resp3Value epoch = (*replies)[at].reply.view(), list = (*replies)[at + 1].reply.view();
  if ((!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string) ||
      list.type() != io::Resp3Type::array) {
    return table::Unexpected{unexpected_reply()};
  }
  Membership m;
  m.epoch = epoch.is_null() ? std::string() : std::string(epoch.str());
  for (const auto& member : list) m.members.emplace_back(member.str());
  std::lock_guard lock(members_mu);
  // A cache, so it is bounded: enqueue takes any valid table name, and a writer that sends to
  // many would otherwise keep every list for good. An evicted table's next enqueue reads again.
  if (membership.size() >= kMembershipsKept && membership.count(std::string(table)) == 0) {
    membership.erase(membership.begin());
  }
  membership[std::string(table)] = m;
  return m;
}

Engine::Impl::Call Engine::Impl::lead_call(const JobLaneKeys& keys,
                                           const std::string& payload) const {
  const char* verb = publish_verb();
  return Call{nullptr, {}, {verb, keys.lead, payload}, true};
}

void Engine::Impl::note_lead(const io::OwnedResult& r) {
  base::shared_add(fan_leads);
  const io::Resp3Value v = r.reply.view();
  if (!r.ec && v.type() == io::Resp3Type::integer && v.integer() > 0) {
    base::shared_add(fan_lead_receivers, static_cast<std::uint64_t>(v.integer()));
  }
}

// One fan-out in progress: what every round sends, the membership it sends to, and who has the
// job already.
struct Engine::Impl::Round {
  std::string_view table;
  JobLaneKeys keys;
  std::string payload, job_id, group, lease;
  std::optional<Membership> known;
  std::optional<Call> row;               // publish's SET, until a pipeline carried it
  bool lead = false;                     // the lead push is still to send
  bool fresh = false;                    // `known` was read during this call
  bool shared = false;                   // the shared queue is still to feed
  std::unordered_set<std::string> sent;  // in the second round: who has the job already
};

// A list read during this call is read after the caller's L2 write: a member that is not in it
// entered after that write, so it reads the new value from L2 after its drop-on-join, and the
// list needs no check. A list kept from an earlier call may predate the write: its round reads
// the epoch after the admissions, and a moved epoch means one more round on a list read now.
// So at most two rounds and one membership read per call, however fast members come and go.
// The lead leaves before any admission and alone in its server turn: with the membership read
// when there is one, else as the first round's leading call. publish's SET (single server)
// leads the first pipeline on the one command connection, so the server runs it before the lead
// and every admission: no member hears of a row not yet written.
Result<std::vector<MemberAdmission>> Engine::Impl::fan_out(std::string_view table,
                                                           const BrandedId& group,
                                                           const BrandedId& job,
                                                           std::string_view id,
                                                           const BrandedId& version, FanOut how) {
  base::shared_add(fan_enqueues);
  if (!table::check_table_name(table))
    return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  const Slot* slot = find(table);
  auto payload = message_of(slot, id, version);
  if (!payload) return table::Unexpected{payload.error()};
  if (how.carried) {  // the key passed message_of's gate
    payload->clear();
    table::append_carried_frame(*payload, id, version, *how.carried);
  }
  const TableSpec defaults;
  const TableSpec& spec = slot != nullptr ? slot->spec : defaults;
  Round r;
  r.table = table;
  r.keys = JobLaneKeys::for_table(table);
  r.payload = std::move(*payload);
  r.job_id = job.str();
  r.group = group.str();
  r.lease = std::to_string(spec.job_lease_ms);
  {
    std::lock_guard lock(members_mu);
    if (auto it = membership.find(std::string(table)); it != membership.end()) r.known = it->second;
  }
  if (how.row) {
    r.row = Call{&put_l2,
                 {std::move(how.row->key)},
                 {std::move(how.row->framed), std::move(how.row->ttl_ms)}};
  }
  r.lead = spec.job_lead && !how.lead_sent;
  r.fresh = !r.known;
  r.shared = spec.job_shared_queue && how.to_shared;
  if (!r.known) {
    auto read = read_membership(table, r.keys,
                                r.lead ? std::optional(lead_call(r.keys, r.payload)) : std::nullopt,
                                std::exchange(r.row, std::nullopt));
    if (!read) return table::Unexpected{read.error()};
    r.known = std::move(*read);
    r.lead = false;
  }
  std::vector<MemberAdmission> out;
  for (;;) {
    auto finished = fan_out_round(r, out);
    if (!finished) return table::Unexpected{finished.error()};
    if (*finished) break;
  }
  // No queue at all: not a duplicate (nothing holds the job), and nothing will apply it.
  if (out.empty()) return table::Unexpected{make_error_code(Errc::kNoLiveMember)};
  return out;
}

// One round: the row and the lead when still to send, the job to every member not yet sent to,
// the epoch's read when the list is not fresh, the shared queue. True when the fan-out is
// complete; false when the epoch moved and the next round goes to a list read just now.
Result<bool> Engine::Impl::fan_out_round(Round& r, std::vector<MemberAdmission>& out) {
  std::vector<Call> batch;
  std::vector<std::string> targets;
  batch.reserve(r.known->members.size() + 4);
  // The row goes with the lead's leading prefix when there is a lead (the admissions wait for
  // both), else in the one pipeline ahead of everything.
  const bool row_here = r.row.has_value();
  if (row_here) {
    r.row->lead = r.lead;
    batch.push_back(*std::exchange(r.row, std::nullopt));
  }
  if (r.lead) batch.push_back(lead_call(r.keys, r.payload));
  const std::size_t at_lead = row_here ? 1 : 0;
  const std::size_t first = at_lead + (r.lead ? 1 : 0);  // the members' replies start here
  for (const auto& m : r.known->members) {
    if (r.sent.count(m) != 0) continue;
    std::string mbase = r.keys.member_base(m);
    std::string live = mbase + "live";
    batch.push_back({&member_enqueue,
                     {std::move(live)},
                     {std::move(mbase), r.job_id, r.payload, r.group, r.lease}});
    targets.push_back(m);
  }
  if (!r.fresh) batch.push_back({nullptr, {}, {"GET", r.keys.epoch}});
  if (r.shared) {
    const std::string& q = r.keys.qbase;
    batch.push_back({&genqueue,
                     {q + "job:" + r.job_id, q + "g:" + r.group + ":pending", q + "ring",
                      q + "paused", q + "glimit", q + "gactive", q + "wake"},
                     {r.job_id, r.payload, r.group}});
  }
  // A fresh list of no member, no shared queue to feed (the row went with the list's read: a
  // round that is not fresh always carries the epoch's read).
  if (batch.size() == first) return true;
  auto replies = calls(std::move(batch));
  if (!replies) return table::Unexpected{replies.error()};
  if (r.lead) note_lead((*replies)[at_lead]);
  r.lead = false;
  if (row_here) {
    if (auto ec = row_failed(replies->front())) return table::Unexpected{ec};
  }
  // The first error wins: the queues that took the job hold it under this job id, so a retry is
  // a duplicate there and an admission where it failed.
  for (std::size_t i = first; i < replies->size(); ++i) {
    if ((*replies)[i].ec) return table::Unexpected{reply_error((*replies)[i])};
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const io::Resp3Value v = (*replies)[first + i].reply.view();
    if (v.type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
    const std::int64_t verdict = v.integer();
    if (verdict < 0) {  // not live: it drops its L1 rows when it beats again
      base::shared_add(fan_not_live);
      continue;
    }
    base::shared_add(verdict == 0 ? fan_duplicates : fan_admitted);
    out.push_back({targets[i], verdict == 1   ? Admission::kEnqueued
                               : verdict == 2 ? Admission::kHandedOff
                                              : Admission::kDuplicate});
  }
  if (r.shared) {
    const io::Resp3Value v = replies->back().reply.view();
    if (v.type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
    out.push_back({"*", v.integer() == 1 ? Admission::kEnqueued : Admission::kDuplicate});
    base::shared_add(v.integer() == 1 ? fan_admitted : fan_duplicates);
    r.shared = false;
  }
  if (r.fresh) return true;
  const io::Resp3Value epoch = (*replies)[first + targets.size()].reply.view();
  if (!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string)
    return table::Unexpected{unexpected_reply()};
  if ((epoch.is_null() ? std::string_view() : epoch.str()) == r.known->epoch) return true;
  r.sent.insert(targets.begin(), targets.end());
  auto read = read_membership(r.table, r.keys);
  if (!read) return table::Unexpected{read.error()};
  r.known = std::move(*read);
  r.fresh = true;
  return false;
}

Result<std::vector<MemberAdmission>> Engine::enqueue(std::string_view table, const BrandedId& group,
                                                     std::string_view id,
                                                     const BrandedId& version) {
  auto job = impl_->mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  auto admitted = impl_->fan_out(table, group, *job, id, version);
  if (!admitted) base::shared_add(impl_->fan_errors);
  return admitted;
}

Result<BrandedId> Engine::enqueue_async(std::string_view table, const BrandedId& group,
                                        std::string_view id, const BrandedId& version,
                                        EnqueueDone done) {
  auto& d = *impl_;
  if (!running()) return table::Unexpected{make_error_code(Errc::kStopped)};
  if (!table::check_table_name(table))
    return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  const Impl::Slot* slot = d.find(table);
  // The lead's payload, checked as fan_out checks it (its refusals are this call's, not done's).
  auto payload = Impl::message_of(slot, id, version);
  if (!payload) return table::Unexpected{payload.error()};
  auto job = d.mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  const bool lead = slot != nullptr ? slot->spec.job_lead : TableSpec{}.job_lead;
  if (lead) {
    // The lead alone, answered before any admission leaves (enqueue's order on the wire). A lead
    // that failed costs only its speed (the job still comes), as in fan_out; kStopped is final.
    auto replies = d.calls({d.lead_call(JobLaneKeys::for_table(table), *payload)});
    if (!replies && replies.error() == make_error_code(Errc::kStopped)) {
      return table::Unexpected{replies.error()};
    }
    if (replies) d.note_lead(replies->front());
  }
  const bool queued = d.job_sends.push([&d, t = std::string(table), group, j = *job,
                                        n = std::string(id), version, done = std::move(done)] {
    auto admit = [&]() -> Result<std::vector<MemberAdmission>> {
      try {
        return d.fan_out(t, group, j, n, version, FanOut{.lead_sent = true});
      } catch (const std::bad_alloc&) {  // the thread must not end: its queue would stall
        return table::Unexpected{std::make_error_code(std::errc::not_enough_memory)};
      }
    };
    const Result<std::vector<MemberAdmission>> admitted = admit();
    if (!admitted) base::shared_add(d.fan_errors);
    if (done) done(admitted);
  });
  if (!queued) return table::Unexpected{make_error_code(Errc::kStopped)};
  return *job;
}

Result<bool> Engine::enqueue_job(std::string_view table, const BrandedId& group,
                                 const BrandedId& job, std::string_view id,
                                 const BrandedId& version) {
  auto admissions = impl_->fan_out(table, group, job, id, version);
  if (!admissions) {
    base::shared_add(impl_->fan_errors);
    return table::Unexpected{admissions.error()};
  }
  for (const auto& a : *admissions) {
    if (a.admission != Admission::kDuplicate) return true;
  }
  return false;
}

// The job lane's publish: the row into L2, then the job to every member; the L1 row here last.
Result<BrandedId> Engine::publish(std::string_view table, const BrandedId& group,
                                  std::string_view id, std::string_view value,
                                  std::optional<BrandedId> version) {
  Impl::Slot* slot = impl_->find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  auto published = impl_->publish_job(*slot, group, id, value, version);
  if (!published) return table::Unexpected{published.error()};
  return published->version;
}

Result<std::size_t> Engine::publish_and_wait(std::string_view table, std::string_view id,
                                             std::string_view value,
                                             std::chrono::milliseconds deadline,
                                             std::optional<BrandedId> version) {
  auto& d = *impl_;
  Impl::Slot* slot = d.find(table);
  if (slot == nullptr) return table::Unexpected{make_error_code(Errc::kNoSuchCache)};
  const auto until = std::chrono::steady_clock::now() + deadline;
  if (slot->spec.coherence == CoherenceMode::kBroadcast ||
      slot->spec.coherence == CoherenceMode::kTracking) {
    // Every node that subscribes the table answers the receipt ask once it applied the write
    // (tracking: once the server's invalidation of it dropped the row).
    auto name = Impl::gate(*slot, id);
    if (!name) return table::Unexpected{name.error()};
    auto receipt = d.mint("RCP");
    if (!receipt) return table::Unexpected{receipt.error()};
    auto published = publish(*slot, *name, value, version);
    if (!published) return table::Unexpected{published.error()};
    return d.await_receipts(*slot, *name, *published, *receipt, until);
  }
  if (slot->spec.coherence != CoherenceMode::kJob) {
    return table::Unexpected{Error(
        Errc::kNoReceipts, "table '" + slot->spec.name + "' is on the " +
                               std::string(to_string(slot->spec.coherence)) +
                               " lane, which acknowledges no apply: publish_and_wait needs the "
                               "job, broadcast or tracking lane")};
  }
  auto published = d.publish_job(*slot, *slot->publish_group, id, value, version);
  if (!published) return table::Unexpected{published.error()};
  // Each admitted member queue's job hash: the member's consumer completes (deletes) it once its
  // writer applied the message.
  const JobLaneKeys keys = JobLaneKeys::for_table(slot->spec.name);
  std::vector<std::string> waiting;
  for (const MemberAdmission& a : published->admitted) {
    waiting.push_back((a.member == "*" ? keys.qbase : keys.member_base(a.member)) +
                      "job:" + published->job.str());
  }
  const std::size_t members = waiting.size();
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    std::vector<Impl::Call> batch;
    batch.reserve(waiting.size());
    for (const std::string& k : waiting) batch.push_back({nullptr, {}, {"EXISTS", k}});
    if (!batch.empty()) {
      auto replies = d.calls(std::move(batch));
      if (!replies) return table::Unexpected{replies.error()};
      std::vector<std::string> still;
      for (std::size_t i = 0; i < waiting.size(); ++i) {
        const io::OwnedResult& r = (*replies)[i];
        if (r.ec) return table::Unexpected{r.ec};
        if (r.reply.view().type() != io::Resp3Type::integer) {
          return table::Unexpected{unexpected_reply()};
        }
        if (r.reply.view().integer() != 0) still.push_back(std::move(waiting[i]));
      }
      waiting = std::move(still);
    }
    if (waiting.empty()) return members;
    if (std::chrono::steady_clock::now() >= until) {
      return table::Unexpected{
          Error(Errc::kTimeout, std::to_string(members - waiting.size()) + " of " +
                                    std::to_string(members) +
                                    " members applied it by the deadline (the write stands)")};
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

Result<Engine::Impl::PublishedJob> Engine::Impl::publish_job(Slot& on, const BrandedId& group,
                                                             std::string_view id,
                                                             std::string_view value,
                                                             std::optional<BrandedId> version) {
  auto& d = *this;
  Slot* slot = &on;
  auto name = Impl::gate(*slot, id);  // a branded id of the table's kind, or a text key
  if (!name) return table::Unexpected{name.error()};
  auto v = d.version_for(*slot, version);
  if (!v) return table::Unexpected{v.error()};
  // Newer-only (put_l2), as the broadcast lane's publish_l2: of two publishes of one key in
  // flight at once, an older one the server runs last must not leave L2 behind the newer message.
  std::optional<RowWrite> row = RowWrite{d.key_of(*slot, *name), frame_l2_value(*v, value),
                                         std::to_string(slot->spec.ttl_ms)};
  if (d.options.mode == ServerMode::kCluster) {
    // The member queues hash to their own slots, on any shard: one pipeline cannot order the
    // write before them, so the fan-out leaves only once the write has answered.
    auto reply = d.script(d.put_l2, {row->key}, {row->framed, row->ttl_ms});
    if (!reply) return table::Unexpected{reply.error()};
    if (reply->view().type() != io::Resp3Type::integer) {
      return table::Unexpected{unexpected_reply()};
    }
    row.reset();
  }
  auto job = d.mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  auto admitted =
      d.fan_out(on.spec.name, group, *job, *name, *v,
                FanOut{.row = std::move(row), .carried = Impl::carried_of(*slot, value)});
  // No live member: the row is in L2 and no L1 holds it (a member not live drops its rows when it
  // beats again), so the write is complete.
  if (!admitted && admitted.error() != make_error_code(Errc::kNoLiveMember)) {
    base::shared_add(d.fan_errors);
    return table::Unexpected{admitted.error()};
  }
  auto put = d.put_l1(*slot, *name, value, *v);
  if (!put) return table::Unexpected{put.error()};
  return PublishedJob{*v, *job, admitted ? std::move(*admitted) : std::vector<MemberAdmission>{}};
}

}  // namespace echo::engine
