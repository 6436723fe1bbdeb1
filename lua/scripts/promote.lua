-- SPDX-License-Identifier: MIT
-- promote: move due scheduled jobs to their lane (with a ring insert and wake) or to the flat
-- queue (WIRE §5.3).
-- KEYS[1]  schedule         emq:{q}:schedule
-- KEYS[2]  pending          emq:{q}:pending
-- ARGV[1]  base             emq:{q}: (job, lane, ring, paused, glimit, gactive and wake keys are
--                           built from it; all share the queue's hash tag)
-- ARGV[2]  batch, the most jobs moved per call
-- returns  the number of jobs moved.
-- Due means run-at <= the server's now. attempts is untouched: the next claim hands token + 1.
-- #include ring_enter
local base = ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local job = base .. 'job:' .. id
  local g = redis.call('HGET', job, 'group')
  if g then
    redis.call('ZADD', base .. 'g:' .. g .. ':pending', 0, id)
    ring_enter(base, g, nil)  -- against the group's current in-flight count
  else
    redis.call('ZADD', KEYS[2], 0, id)
  end
  redis.call('HSET', job, 'state', 'pending')
end
return #due
