-- SPDX-License-Identifier: MIT
-- promote: move due scheduled jobs to their lane (with a ring insert and wake) or to the flat
-- queue (docs/wire.md, "Scripts").
-- KEYS[1]  schedule         emq:{q}:schedule
-- KEYS[2]  pending          emq:{q}:pending
-- ARGV[1]  base             emq:{q}: (job, lane, ring, paused, glimit, gactive and wake keys are
--                           built from it; all share the queue's hash tag)
-- ARGV[2]  batch, the most jobs moved per call
-- returns  the number of jobs moved; error EMQARG when base is not the prefix of KEYS[1] or batch
--          is not a positive integer (checked first: nothing written).
-- Due means run-at <= the server's now. attempts is untouched: the next claim hands token + 1.
-- An id whose row is gone is only taken off the schedule: a holder that retried a job and then
-- completed it with the same token (complete does not read the state) deleted the row, and
-- writing state pending would have made a row of one field, claimable with no payload.
-- #include base_of
-- #include whole
-- #include ring_enter
local base, batch = ARGV[1], whole(ARGV[2], 1)
if not batch then
  return redis.error_reply('EMQARG batch must be a positive integer')
end
if not base_of(base, KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the schedule key')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, batch)
local moved = 0
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local job = base .. 'job:' .. id
  local row = redis.call('HMGET', job, 'state', 'group')  -- absent fields read false
  if row[1] then
    local g = row[2]
    if g then
      redis.call('ZADD', base .. 'g:' .. g .. ':pending', 0, id)
      ring_enter(base, g, nil)  -- against the group's current in-flight count
    else
      redis.call('ZADD', KEYS[2], 0, id)
    end
    redis.call('HSET', job, 'state', 'pending')
    moved = moved + 1
  end
end
return moved
