-- SPDX-License-Identifier: MIT
-- gclaim: lease the oldest job of the next group in the ring (WIRE §5.3), round robin over groups.
-- The host first sends `HGET emq:{q}:meta paused` and answers empty without calling this while
-- the queue is paused.
-- KEYS[1]  ring             emq:{q}:ring
-- KEYS[2]  active           emq:{q}:active (zset, score = lease deadline ms, server time)
-- ARGV[1]  base             emq:{q}: (lane, job, gactive and glimit keys are built from it; all
--                           share the queue's hash tag, so the script stays single-slot)
-- ARGV[2]  lease_ms
-- returns  {id, payload, attempts, g} (attempts an integer: the fencing token), or {} when the
--          ring is empty or the rotated group's lane was empty.
local base = ARGV[1]
-- Rotate first: the group served now goes to the tail, so each group gets one job per turn
-- whatever its backlog (a quiet lane's jobs are not queued behind a busy lane's).
local g = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
if not g then
  return {}
end
local lane = base .. 'g:' .. g .. ':pending'
local popped = redis.call('ZPOPMIN', lane)
if #popped == 0 then
  -- A group leaves the ring when its lane empties, so this only heals a ring that still names an
  -- empty lane. The answer is empty even if other lanes hold work (WIRE §5.3): trying the next
  -- group would make one claim cost a scan of the ring. A consumer that gets it parks until the
  -- next wake or beat.
  redis.call('LREM', KEYS[1], 0, g)
  return {}
end
local id = popped[1]
local job = base .. 'job:' .. id
local att = redis.call('HINCRBY', job, 'attempts', 1)
redis.call('HSET', job, 'state', 'active')
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), id)
local act = redis.call('HINCRBY', base .. 'gactive', g, 1)
local limit = redis.call('HGET', base .. 'glimit', g)
-- Leave the ring at the ceiling (whoever frees a slot re-inserts the group with a wake) or when
-- the lane is drained (the next genqueue or promote into it re-inserts it).
if (limit and act >= tonumber(limit)) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[1], 0, g)
end
return {id, redis.call('HGET', job, 'payload'), att, g}
