-- SPDX-License-Identifier: MIT
-- reap: return jobs whose lease ran out to their lane (with a ring insert and wake) or to the flat
-- queue (docs/wire.md, "Scripts"), at most 100 per call.
-- KEYS[1]  active           emq:{q}:active
-- KEYS[2]  pending          emq:{q}:pending
-- ARGV[1]  base             emq:{q}: (job, lane, ring, paused, glimit, gactive and wake keys are
--                           built from it; all share the queue's hash tag)
-- returns  the number of jobs returned; error EMQARG when base is not the prefix of KEYS[1]
--          (checked first: nothing written).
-- Expired means lease deadline <= the server's now. attempts is untouched, so the next claim
-- hands token + 1 and the lost holder's token goes stale, except that complete still accepts it
-- until that re-claim (the work was done; see complete.lua).
-- An id whose row is gone is only taken off active (as in promote.lua): a row of one field would
-- otherwise be made and put in the flat queue.
-- #include base_of
-- #include ring_enter
local base = ARGV[1]
if not base_of(base, KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the active key')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, 100)
local gactive = base .. 'gactive'
local returned = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local job = base .. 'job:' .. id
  local row = redis.call('HMGET', job, 'state', 'group')  -- absent fields read false
  if row[1] then
    local g = row[2]
    if g then
      -- The lost holder's in-flight slot is given back first, so the ring insert below sees the
      -- group under its ceiling again.
      local act = redis.call('HINCRBY', gactive, g, -1)
      if act <= 0 then
        redis.call('HDEL', gactive, g)
      end
      redis.call('ZADD', base .. 'g:' .. g .. ':pending', 0, id)
      ring_enter(base, g, act)
    else
      redis.call('ZADD', KEYS[2], 0, id)
    end
    redis.call('HSET', job, 'state', 'pending')
    returned = returned + 1
  end
end
return returned
