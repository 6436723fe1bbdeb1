-- SPDX-License-Identifier: MIT
-- member_beat: register or renew one node as a member of a job-lane table's queue (issue 6 item
-- 3, per-node delivery). The writer's fanout_enqueue feeds every member whose beat is still live,
-- so each node gets its own copy of every coherence job, in its own member queue
-- emq:{q}:m:<m>: (same hash tag as the shared queue emq:{q}:, so every script stays single-slot).
-- KEYS[1]  members          emq:{q}:members (zset: member m, score = expiry ms, server time)
-- ARGV[1]  m, the member: a node id 0..1023 in decimal, or any non-empty token without '{', '}',
--          ':' or whitespace (it becomes a key segment)
-- ARGV[2]  ttl_ms > 0: the member is live until now_ms + ttl_ms (inclusive)
-- KEYS[2]  (optional, with ARGV[3]) the member queue's meta hash emq:{q}:m:<m>:meta
-- ARGV[3]  (optional) lease_ms > 0, the member's declared lease: stored as meta field lease_ms,
--          where fanout_enqueue reads the lease of a job it hands off to this member
-- returns  now_ms, the server time of this beat (an integer);
--          error EMQMEMBER when m is not such a token, error EMQARG when ttl_ms or lease_ms is
--          not a positive integer (nothing written).
-- Live means score >= now_ms on the server's clock, the clock fanout_enqueue and member_reap
-- compare against, so host clock skew cannot make a member look live or dead.
--
-- Joining and lapsing (the node's side of the contract). A member is fed only from the moment its
-- first beat lands: jobs enqueued before it reached the set went to the other members, not to it.
-- So a node that joins must drop its L1 rows of the table before it serves from them, and it
-- must do the same after a lapse: its previous beat's score was prev_now + ttl_ms, so if this
-- beat's now_ms > prev_now + ttl_ms, fanouts in between may have skipped it (and member_reap may
-- have deleted its queue, with any job it held: its completions then answer gone, harmlessly).
-- Both are decided from the values this script returns, with no extra round trip. A lapsed member
-- whose queue was not yet reclaimed keeps its old jobs; they are older than what it will read from
-- L2 after the drop, so applying them answers stale (newer wins).
local m = ARGV[1]
if m == '' or string.find(m, '[{}:%s]') then
  return redis.error_reply(
    'EMQMEMBER member must be a non-empty token without braces, colons or spaces')
end
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 or ttl ~= math.floor(ttl) then
  return redis.error_reply('EMQARG ttl_ms must be a positive integer')
end
local lease = ARGV[3]
if lease and (not tonumber(lease) or tonumber(lease) <= 0 or tonumber(lease) ~= math.floor(tonumber(lease))
    or not KEYS[2]) then
  return redis.error_reply('EMQARG lease_ms must be a positive integer (with the meta key)')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + ttl, m)
if lease then
  redis.call('HSET', KEYS[2], 'lease_ms', lease)
end
return now_ms
