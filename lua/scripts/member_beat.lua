-- SPDX-License-Identifier: MIT
-- member_beat: register or renew one node as a member of a job-lane table. The writer admits every
-- coherence job into every member's own queue (member_enqueue.lua), so each node gets its own copy
-- of every message.
-- KEYS[1]  members          emq:{ecc.coh.<t>}:members (zset: member m, score = expiry ms, server
--                           time of this shard)
-- KEYS[2]  epoch            emq:{ecc.coh.<t>}:mepoch (string: an integer, INCRed whenever a member
--                           enters the set here or leaves it in member_reap; a new key starts
--                           at the server's time in microseconds)
-- ARGV[1]  m, the member: a node id 0..1023 in decimal, or any non-empty token without '{', '}',
--          ':', '|' or whitespace (it becomes part of the member queue's name ecc.coh.<t>|<m>)
-- ARGV[2]  ttl_ms > 0: the member is listed until now_ms + ttl_ms (member_reap removes it after)
-- returns  {now_ms, entered}: the server time of this beat, and 1 when m was not in the set (it
--          joined, or member_reap had removed it: the epoch was INCRed), else 0;
--          error EMQMEMBER when m is not such a token, error EMQARG when ttl_ms is not a positive
--          integer (nothing written).
--
-- The node's side of the contract (job_consumer.cc beat()). Each beat first sets its member
-- queue's live key (SET <mbase>live <lease_ms> PX <ttl_ms> GET, on the member queue's own slot)
-- and only after that reply runs this script. A member is fed only while its live key exists and
-- only by writers that know it, which they learn through the epoch; so a node must drop its L1
-- rows of the table before it serves from them when it joins, and again whenever a beat shows it
-- may have been skipped: the SET found no live key (it expired: admissions answered -1), or this
-- script answers entered = 1 (member_reap removed it: writers stopped sending). Because the live
-- key is set before the epoch moves, a writer that sees the new epoch finds the member live.
-- A lapsed member whose queue was not yet reclaimed keeps its old jobs; they are older than what
-- it reads from L2 after the drop, so applying them answers stale (newer wins).
-- #include epoch_move
local m = ARGV[1]
if m == '' or string.find(m, '[{}:|%s]') then
  return redis.error_reply(
    'EMQMEMBER member must be a non-empty token without braces, colons, bars or spaces')
end
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 or ttl ~= math.floor(ttl) then
  return redis.error_reply('EMQARG ttl_ms must be a positive integer')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entered = redis.call('ZADD', KEYS[1], now_ms + ttl, m)
if entered == 1 then
  epoch_move(KEYS[2], t)
end
return {now_ms, entered}
