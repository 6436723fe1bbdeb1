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

#include "thread_owned.h"

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

void Engine::Impl::add_row(LentCall& c, const RowWrite& row, bool lead) const {
  c.script(put_l2, 2, lead);
  c.word(row.key);
  c.word(row.removal);
  c.word(row.framed);
  c.word(row.ttl_ms);
}

void Engine::Impl::add_lead(LentCall& c, const JobLaneKeys& keys, std::string_view payload) const {
  c.begin(nullptr, 0, /*lead=*/true);
  c.word(publish_verb());
  c.word(keys.lead);
  c.word(payload);
}

void Engine::Impl::note_lead(const LentCall::Part& p) {
  base::shared_add(fan_leads);
  const io::Resp3Value v = p.reply.view();
  if (!p.ec && v.type() == io::Resp3Type::integer && v.integer() > 0) {
    base::shared_add(fan_lead_receivers, static_cast<std::uint64_t>(v.integer()));
  }
}

Result<std::shared_ptr<const Engine::Impl::Membership>> Engine::Impl::read_membership(
    std::string_view table, const JobLaneKeys& keys, const std::string* lead, const RowWrite* row) {
  LentCall& c = LentCall::mine();
  const std::size_t at = row != nullptr ? 1 : 0;  // the epoch's reply
  if (row != nullptr) add_row(c, *row, false);
  c.begin();
  c.word("GET");
  c.word(keys.epoch);
  c.begin();
  c.word("ZRANGE");
  c.word(keys.members);
  c.word("0");
  c.word("-1");
  if (lead != nullptr) add_lead(c, keys, *lead);  // last: not a leading prefix
  if (Error e = lend(c)) return table::Unexpected{e};
  if (lead != nullptr) note_lead(c.part(c.size() - 1));
  if (row != nullptr) {
    if (Error e = row_failed(c.part(0).ec, c.part(0).reply.view())) return table::Unexpected{e};
  }
  for (std::size_t i = at; i < at + 2; ++i) {
    if (c.part(i).ec) return table::Unexpected{reply_error(c.part(i).ec, c.part(i).reply.view())};
  }
  base::shared_add(fan_membership_reads);
  const io::Resp3Value epoch = c.part(at).reply.view(), list = c.part(at + 1).reply.view();
  if ((!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string) ||
      list.type() != io::Resp3Type::array) {
    return table::Unexpected{unexpected_reply()};
  }
  // Built once per read, with every key its fan-outs name: a fan-out that finds it allocates
  // none of them.
  auto m = std::make_shared<Membership>();
  m->keys = keys;
  m->epoch = epoch.is_null() ? std::string() : std::string(epoch.str());
  for (const auto& member : list) {
    Membership::Member& to = m->members.emplace_back();
    to.name = member.str();
    to.base = keys.member_base(to.name);
    to.live = to.base + "live";
  }
  const std::string& q = keys.qbase;
  m->shared_keys = {q + "ring", q + "paused", q + "glimit", q + "gactive", q + "wake"};
  std::lock_guard lock(members_mu);
  // A cache, so it is bounded: enqueue takes any valid table name, and a writer that sends to
  // many would otherwise keep every list for good. An evicted table's next enqueue reads again.
  if (membership.size() >= kMembershipsKept && membership.count(std::string(table)) == 0) {
    membership.erase(membership.begin());
  }
  membership[std::string(table)] = m;
  return std::shared_ptr<const Membership>(std::move(m));
}

// One fan-out in progress: what every round sends, the membership it sends to, and who has the
// job already.
struct Engine::Impl::Round {
  std::string_view table;
  JobLaneKeys own_keys;  // until a membership is known (which carries them)
  std::string payload, job_id, group, lease;
  std::shared_ptr<const Membership> known;
  const RowWrite* row = nullptr;         // publish's L2 write, until a pipeline carried it
  bool lead = false;                     // the lead push is still to send
  bool fresh = false;                    // `known` was read during this call
  bool shared = false;                   // the shared queue is still to feed
  std::unordered_set<std::string> sent;  // in the second round: who has the job already
  std::vector<MemberAdmission> out;      // the queues that answered, in order
  const JobLaneKeys& keys() const { return known ? known->keys : own_keys; }
  // Ready for the next fan-out on this thread; the strings and vectors keep their storage.
  void reset(std::string_view t) {
    table = t;
    payload.clear();
    known.reset();
    row = nullptr;
    lead = fresh = shared = false;
    sent.clear();
    out.clear();
  }
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
  // The thread's own round, kept for its next fan-out: a warm one allocates nothing here. It
  // outlives the thread's thread_local destructors (thread_owned.h).
  Round& r = ThreadOwned<Round>::get();
  r.reset(table);
  if (how.carried) {  // the key passed the gate
    table::append_carried_frame(r.payload, id, version, *how.carried);
  } else if (Error e = append_message(r.payload, slot, id, version)) {
    return table::Unexpected{e};
  }
  const TableSpec defaults;
  const TableSpec& spec = slot != nullptr ? slot->spec : defaults;
  r.job_id = job.str();
  r.group = group.str();
  r.lease = std::to_string(spec.job_lease_ms);
  {
    std::lock_guard lock(members_mu);
    if (auto it = membership.find(std::string(table)); it != membership.end()) r.known = it->second;
  }
  r.row = how.row;
  r.lead = spec.job_lead && !how.lead_sent;
  r.fresh = !r.known;
  r.shared = spec.job_shared_queue && how.to_shared;
  if (!r.known) {
    r.own_keys = JobLaneKeys::for_table(table);
    auto read = read_membership(table, r.own_keys, r.lead ? &r.payload : nullptr,
                                std::exchange(r.row, nullptr));
    if (!read) return table::Unexpected{read.error()};
    r.known = std::move(*read);
    r.lead = false;
  }
  for (;;) {
    auto finished = fan_out_round(r, r.out);
    if (!finished) return table::Unexpected{finished.error()};
    if (*finished) break;
  }
  // No queue at all: not a duplicate (nothing holds the job), and nothing will apply it.
  if (r.out.empty()) return table::Unexpected{make_error_code(Errc::kNoLiveMember)};
  return how.admissions ? r.out : std::vector<MemberAdmission>{};
}

// The round's calls, in one lent batch: the row and the lead when still to send (leading when
// there is a lead), the job to every member not yet sent to, the epoch's read when the list is
// not fresh, the shared queue. Answers where the members' replies start.
std::size_t Engine::Impl::round_calls(LentCall& c, const Round& r) const {
  const JobLaneKeys& keys = r.keys();
  // The row goes with the lead's leading prefix when there is a lead (the admissions wait for
  // both), else in the one pipeline ahead of everything.
  if (r.row != nullptr) add_row(c, *r.row, r.lead);
  if (r.lead) add_lead(c, keys, r.payload);
  const std::size_t first = c.size();
  for (const Membership::Member& m : r.known->members) {
    if (r.sent.count(m.name) != 0) continue;
    c.script(member_enqueue, 1);
    c.word(m.live);
    c.word(m.base);
    c.word(r.job_id);
    c.word(r.payload);
    c.word(r.group);
    c.word(r.lease);
  }
  if (!r.fresh) {
    c.begin();
    c.word("GET");
    c.word(keys.epoch);
  }
  if (r.shared) {
    const std::string& q = keys.qbase;
    c.script(genqueue, 7);
    std::string& job_key = c.word();
    job_key.append(q).append("job:").append(r.job_id);
    std::string& pending = c.word();
    pending.append(q).append("g:").append(r.group).append(":pending");
    for (const std::string& k : r.known->shared_keys) c.word(k);
    c.word(r.job_id);
    c.word(r.payload);
    c.word(r.group);
  }
  return first;
}

// One round (round_calls). True when the fan-out is complete; false when the epoch moved and the
// next round goes to a list read just now.
Result<bool> Engine::Impl::fan_out_round(Round& r, std::vector<MemberAdmission>& out) {
  LentCall& c = LentCall::mine();
  const bool row_here = r.row != nullptr;
  const std::size_t first = round_calls(c, r);
  const std::size_t at_lead = row_here ? 1 : 0;
  // A fresh list of no member, no shared queue to feed (the row went with the list's read: a
  // round that is not fresh always carries the epoch's read).
  if (c.size() == first) return true;
  if (Error e = lend(c)) return table::Unexpected{e};
  if (r.lead) note_lead(c.part(at_lead));
  r.lead = false;
  r.row = nullptr;
  if (row_here) {
    if (Error e = row_failed(c.part(0).ec, c.part(0).reply.view())) return table::Unexpected{e};
  }
  // The first error wins: the queues that took the job hold it under this job id, so a retry is
  // a duplicate there and an admission where it failed.
  for (std::size_t i = first; i < c.size(); ++i) {
    if (c.part(i).ec) return table::Unexpected{reply_error(c.part(i).ec, c.part(i).reply.view())};
  }
  std::size_t at = first;
  for (const Membership::Member& m : r.known->members) {
    if (r.sent.count(m.name) != 0) continue;
    const io::Resp3Value v = c.part(at++).reply.view();
    if (v.type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
    const std::int64_t verdict = v.integer();
    if (verdict < 0) {  // not live: it drops its L1 rows when it beats again
      base::shared_add(fan_not_live);
      continue;
    }
    base::shared_add(verdict == 0 ? fan_duplicates : fan_admitted);
    out.push_back({m.name, verdict == 1   ? Admission::kEnqueued
                           : verdict == 2 ? Admission::kHandedOff
                                          : Admission::kDuplicate});
  }
  if (r.shared) {
    const io::Resp3Value v = c.part(c.size() - 1).reply.view();
    if (v.type() != io::Resp3Type::integer) return table::Unexpected{unexpected_reply()};
    out.push_back({"*", v.integer() == 1 ? Admission::kEnqueued : Admission::kDuplicate});
    base::shared_add(v.integer() == 1 ? fan_admitted : fan_duplicates);
    r.shared = false;
  }
  if (r.fresh) return true;
  const io::Resp3Value epoch = c.part(at).reply.view();
  if (!epoch.is_null() && epoch.type() != io::Resp3Type::bulk_string)
    return table::Unexpected{unexpected_reply()};
  if ((epoch.is_null() ? std::string_view() : epoch.str()) == r.known->epoch) return true;
  for (const Membership::Member& m : r.known->members) r.sent.insert(m.name);
  auto read = read_membership(r.table, r.keys());
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
    LentCall& c = LentCall::mine();
    d.add_lead(c, JobLaneKeys::for_table(table), *payload);
    const Error sent = d.lend(c);
    if (sent.code == make_error_code(Errc::kStopped)) return table::Unexpected{sent};
    if (!sent) d.note_lead(c.part(0));
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
  auto published = impl_->publish_job(*slot, group, id, value, version, /*admissions=*/false);
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
      auto replies = d.calls(batch);
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
                                                             std::optional<BrandedId> version,
                                                             bool admissions) {
  auto& d = *this;
  Slot* slot = &on;
  auto name = Impl::gate(*slot, id);  // a branded id of the table's kind, or a text key
  if (!name) return table::Unexpected{name.error()};
  auto v = d.version_for(*slot, version);
  if (!v) return table::Unexpected{v.error()};
  // Newer-only (put_l2), as the broadcast lane's publish_l2: of two publishes of one key in
  // flight at once, an older one the server runs last must not leave L2 behind the newer message.
  // The thread's own row, kept for its next publish (fan_out reads it before this returns).
  RowWrite& own_row = ThreadOwned<RowWrite>::get();  // as the round, above
  own_row.key.clear();
  table::append_l2_key(own_row.key, slot->spec.name, *name);
  own_row.removal.clear();
  table::append_removal_key(own_row.removal, slot->spec.name, *name);
  own_row.framed.clear();
  append_l2_value(own_row.framed, *v, value);
  own_row.ttl_ms = std::to_string(slot->spec.ttl_ms);
  const RowWrite* row = &own_row;
  if (d.options.mode == ServerMode::kCluster) {
    // The member queues hash to their own slots, on any shard: one pipeline cannot order the
    // write before them, so the fan-out leaves only once the write has answered.
    auto reply = d.script(d.put_l2, {row->key, row->removal}, {row->framed, row->ttl_ms});
    if (!reply) return table::Unexpected{reply.error()};
    if (reply->view().type() != io::Resp3Type::integer) {
      return table::Unexpected{unexpected_reply()};
    }
    row = nullptr;
  }
  auto job = d.mint("JOB");
  if (!job) return table::Unexpected{job.error()};
  auto admitted = d.fan_out(
      on.spec.name, group, *job, *name, *v,
      FanOut{.row = row, .admissions = admissions, .carried = Impl::carried_of(*slot, value)});
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
