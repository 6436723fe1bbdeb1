-- SPDX-License-Identifier: MIT
-- member_reap: take members whose beat expired out of a job-lane table's membership. Writers stop
-- admitting jobs to them once they see the epoch move; their queues live on other slots (on a
-- cluster, other shards), so the caller then runs member_drop.lua on each returned member's queue.
-- Any node (or the writer) may run it.
-- KEYS[1]  members          emq:{ecc.coh.<t>}:members (zset: member m, score = expiry ms)
-- KEYS[2]  epoch            emq:{ecc.coh.<t>}:mepoch (INCRed once when any member is removed; a
--                           new key starts at the server's time in microseconds)
-- ARGV[1]  batch > 0, the most members removed per call
-- returns  the members removed (an array of member tokens, possibly empty);
--          error EMQARG when batch is not a positive integer (nothing written).
-- Expired means score < now_ms (a member whose score equals now_ms is still listed).
-- Failure modes: a member removed while its node still runs (its beat came late) is told so by
-- its next beat (member_beat answers entered = 1) and drops its L1 rows before consuming again.
-- A caller that dies between this script and member_drop leaves the queue behind; the queue's
-- keys are harmless and a later rejoin reuses them (its old jobs answer stale when applied).
-- #include epoch_move
local batch = tonumber(ARGV[1])
if not batch or batch <= 0 or batch ~= math.floor(batch) then
  return redis.error_reply('EMQARG batch must be a positive integer')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now_ms, 'LIMIT', 0, batch)
if #expired > 0 then
  redis.call('ZREM', KEYS[1], unpack(expired))
  epoch_move(KEYS[2], t)
end
return expired
