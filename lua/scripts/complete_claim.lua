-- SPDX-License-Identifier: MIT
-- complete_claim: retire the job its holder finished and lease the next one, in one round trip on
-- one queue (the job lane's latency is its hop count). It runs complete's lib/finish.lua then
-- gclaim's lib/claim_next.lua (the same functions, embedded into each script at build time); it
-- works on the shared queue and on a member queue alike.
-- KEYS[1]  active           <base>active (zset, score = lease deadline ms, server time)
-- KEYS[2]  the job hash     <base>job:<id> of the job to complete
-- KEYS[3]  ring             <base>ring
-- ARGV[1]  id of the job to complete
-- ARGV[2]  token, the attempts value the holder's claim returned, in decimal
-- ARGV[3]  base             emq:{q}: or a member queue's emq:{q|<m>}: (lane, pending, job,
--                           paused, glimit, gactive, wake, meta and metrics keys are built from it;
--                           all share the queue's hash tag)
-- ARGV[4]  lease_ms of the next claim
-- returns  {verdict, id, payload, attempts, g} when a job was claimed, else {verdict}; verdict is
--          the completion's: 1 ok, 0 gone (row missing), -1 stale (token is not the row's
--          attempts: nothing completed). attempts is an integer, the next job's fencing token.
-- error EMQARG when base is not the prefix of KEYS[1] or lease_ms is not a positive integer (both
-- checked first: nothing completed, nothing claimed).
-- Unlike complete, a stale token is not an error reply: the claim still runs, so a holder whose
-- lease was overtaken keeps its consumer fed. A gone or stale completion writes nothing.
-- The claim half is gclaim's, plus the host's check that precedes it: while the queue is paused
-- (meta paused) nothing is claimed and the answer is {verdict}. Like gclaim, it answers {verdict}
-- when the rotated group's lane was empty even if other lanes hold work (the consumer then runs
-- gclaim or parks, as after an empty gclaim).
-- #include base_of
-- #include whole
-- #include finish
-- #include claim_next
local base = ARGV[3]
local lease = whole(ARGV[4], 1)
if not lease then
  return redis.error_reply('EMQARG lease_ms must be a positive integer')
end
if not base_of(base, KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the active key')
end
local verdict = finish(base, ARGV[1], KEYS[2], KEYS[1], ARGV[2])
if redis.call('HGET', base .. 'meta', 'paused') then
  return {verdict}
end
local claimed = claim_next(base, KEYS[3], KEYS[1], lease)
if not claimed then
  return {verdict}
end
return {verdict, claimed[1], claimed[2], claimed[3], claimed[4]}
