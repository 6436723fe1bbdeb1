// SPDX-License-Identifier: MIT
// The bus scripts' refusals: every error reply leads with its class, a bad argument is refused
// before any write, and promote and reap drop an id whose row is gone.

#include "bus_scripts_fixture.h"

namespace echo::test {
namespace {

// ---- error classes, embedding, slots --------------------------------------------------------

TEST_F(BusScripts, EveryErrorReplyLeadsWithItsClassNeverErr) {
  const std::string id = job_id();
  std::vector<RedisReply> errors;
  errors.push_back(bus().enqueue(minter_.mint("ORD").value().str(), "p"));
  errors.push_back(bus().retry(id, "1", 0, 3, "e"));
  ASSERT_TRUE(is_integer(bus().enqueue(id, "p"), 1));
  ASSERT_TRUE(bus().claim(30000));
  errors.push_back(bus().complete(id, "2"));
  errors.push_back(bus().retry(id, "2", 0, 3, "e"));
  const std::vector<std::string> expected{"EMQKIND job id must be JOB-namespaced",
                                          "EMQSTALE job gone", "EMQSTALE complete token mismatch",
                                          "EMQSTALE retry token mismatch"};
  for (std::size_t i = 0; i < errors.size(); ++i) {
    EXPECT_TRUE(is_error(errors[i], expected[i]));
    const std::string t = text(errors[i].get());
    const std::string cls = t.substr(0, t.find(' '));
    EXPECT_TRUE(cls == "EMQKIND" || cls == "EMQSTALE") << t;
  }
}

// Every key of the database with its DUMP (type, contents), sorted: equal before and after a call
// means the call wrote nothing.
std::vector<std::pair<std::string, std::string>> snapshot(redisContext* c) {
  std::vector<std::pair<std::string, std::string>> out;
  RedisReply keys = command(c, "KEYS *");
  if (!keys || keys->type != REDIS_REPLY_ARRAY) {
    ADD_FAILURE() << "KEYS: " << text(keys.get());
    return out;
  }
  for (std::size_t i = 0; i < keys->elements; ++i) {
    const std::string k = text(keys->element[i]);
    RedisReply dump = command(c, "DUMP %b", k.data(), k.size());
    out.emplace_back(k, dump && dump->type == REDIS_REPLY_STRING ? std::string(dump->str, dump->len)
                                                                 : text(dump.get()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Redis keeps what a script wrote before it fails, so every argument is checked before the first
// write: a lease, delay or ceiling found bad half-way once left a job popped but never leased
// (lost), scheduled but never due, or a group whose stored ceiling broke every later ring insert.
// Each bad call below is refused with EMQARG (a class, never a generic ERR) and changes nothing.
TEST_F(BusScripts, ABadArgumentIsRefusedWithEmqargBeforeAnyWriteByEveryScript) {
  const std::string g = group_id(), a = job_id(), b = job_id(), f = job_id(), held = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(held, "p", g), 1));
  ASSERT_EQ(claimed(bus().gclaim(30000)).id, held);  // one job active, with a token of 1
  ASSERT_TRUE(is_integer(bus().genqueue(a, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().genqueue(b, "p", g), 1));
  ASSERT_TRUE(is_integer(bus().enqueue(f, "p"), 1));
  const std::string base = bus().base();
  const auto k = [&](const char* suffix) { return bus().key(suffix); };
  const Args gkeys{k("glimit"), k("gactive"), k("ring"), k("paused"), k("wake")};
  struct Bad {
    const char* why;
    const char* script;
    Args keys, argv;
  };
  const std::vector<Bad> bad{
      {"non-numeric lease", "gclaim", {k("ring"), k("active")}, {base, "abc"}},
      {"NaN lease", "gclaim", {k("ring"), k("active")}, {base, "nan"}},
      {"hex lease", "gclaim", {k("ring"), k("active")}, {base, "0x10"}},
      {"exponent lease", "gclaim", {k("ring"), k("active")}, {base, "1e3"}},
      {"zero lease", "gclaim", {k("ring"), k("active")}, {base, "0"}},
      {"negative lease", "gclaim", {k("ring"), k("active")}, {base, "-5"}},
      {"missing lease", "gclaim", {k("ring"), k("active")}, {base}},
      {"empty base", "gclaim", {k("ring"), k("active")}, {"", "30000"}},
      {"flat claim, empty lease", "claim", {k("pending"), k("active")}, {base + "job:", ""}},
      {"flat claim, no prefix", "claim", {k("pending"), k("active")}, {"", "30000"}},
      {"complete without base", "complete", {k("active"), bus().job(held)}, {held, "1"}},
      {"complete_claim, bad lease",
       "complete_claim",
       {k("active"), bus().job(held), k("ring")},
       {held, "1", base, "soon"}},
      {"retry, non-numeric delay",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "soon", "3", "boom", base}},
      {"retry, empty max",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "1000", "", "boom", base}},
      {"retry, max 0",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "1000", "0", "boom", base}},
      {"retry, no base",
       "retry",
       {k("active"), k("schedule"), k("dead"), bus().job(held)},
       {held, "1", "0", "3", "boom"}},
      {"schedule at a non-number",
       "schedule",
       {bus().job(job_id()), k("schedule")},
       {job_id(), "pay", "at", "soon"}},
      {"schedule in an unknown mode",
       "schedule",
       {bus().job(job_id()), k("schedule")},
       {job_id(), "pay", "In", "5000"}},
      {"glimit abc", "glimit", gkeys, {base, g, "abc"}},
      {"glimit 0", "glimit", gkeys, {base, g, "0"}},
      {"glimit -1", "glimit", gkeys, {base, g, "-1"}},
      {"glimit without group", "glimit", gkeys, {base, "", "2"}},
      {"gresume, empty base",
       "gresume",
       {k("paused"), k("ring"), k("glimit"), k("gactive"), k("wake")},
       {"", g}},
      {"promote, bad batch", "promote", {k("schedule"), k("pending")}, {base, "many"}},
      {"promote, no base", "promote", {k("schedule"), k("pending")}, {}},
      {"reap, no base", "reap", {k("active"), k("pending")}, {}},
      {"enqueue without payload", "enqueue", {bus().job(job_id()), k("pending")}, {job_id()}},
      {"genqueue without group",
       "genqueue",
       {bus().job(job_id()), bus().lane(g), k("ring"), k("paused"), k("glimit"), k("gactive"),
        k("wake")},
       {job_id(), "p"}},
  };
  for (const Bad& call : bad) {
    const auto before = snapshot(client());
    RedisReply r = bus().run(call.script, call.keys, call.argv);
    ASSERT_TRUE(r) << call.why;
    EXPECT_EQ(r->type, REDIS_REPLY_ERROR) << call.why << ": " << text(r.get());
    EXPECT_TRUE(text(r.get()).starts_with("EMQARG ")) << call.why << ": " << text(r.get());
    EXPECT_TRUE(snapshot(client()) == before) << call.why << ": the refused call wrote";
  }
  // Nothing was lost: the queue still serves a and b in turn, and the held job completes.
  EXPECT_EQ(claimed(bus().gclaim(30000)).id, a);
  EXPECT_EQ(claimed(bus().gclaim(30000)).id, b);
  EXPECT_TRUE(is_integer(bus().complete(held, "1"), 1));
}

// complete compares the token, not the state: a holder that retried a job and then
// completed it with the same token deletes the row while its id waits in schedule. promote (and
// reap, for an id left in active) once wrote "state pending" to the missing row, making a row of
// one field that a flat claim then handed out without a payload. They now only drop the id.
TEST_F(BusScripts, PromoteAndReapDropAnIdWhoseRowIsGoneAndMakeNoRow) {
  const std::string g = group_id(), id = job_id();
  ASSERT_TRUE(is_integer(bus().genqueue(id, "p", g), 1));
  ASSERT_TRUE(bus().gclaim(30000));
  ASSERT_TRUE(is_bulk(bus().retry(id, "1", 0, 3, "boom"), "scheduled"));
  ASSERT_TRUE(is_integer(bus().complete(id, "1"), 1));  // the same token: the row is deleted
  ASSERT_FALSE(bus().exists(bus().job(id)));
  EXPECT_TRUE(is_integer(bus().promote(100), 0));
  EXPECT_FALSE(bus().exists(bus().job(id)));
  EXPECT_EQ(bus().zcard(bus().key("schedule")), 0);
  EXPECT_EQ(bus().zcard(bus().lane(g)), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);

  const std::string flat = job_id();
  ASSERT_TRUE(is_integer(bus().enqueue(flat, "p"), 1));
  ASSERT_TRUE(bus().claim(1));                                                // leased for 1 ms
  RedisReply deleted = command(client(), "DEL %s", bus().job(flat).c_str());  // an admin's DEL
  ASSERT_TRUE(is_integer(deleted, 1));
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(is_integer(bus().reap(), 0));
  EXPECT_FALSE(bus().exists(bus().job(flat)));
  EXPECT_EQ(bus().zcard(bus().key("active")), 0);
  EXPECT_EQ(bus().zcard(bus().key("pending")), 0);
  EXPECT_FALSE(bus().claim(30000));
}

}  // namespace
}  // namespace echo::test
