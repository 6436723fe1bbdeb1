-- SPDX-License-Identifier: MIT
-- complete: retire a job its holder finished (WIRE §5.3). Completion deletes the row.
-- KEYS[1]  active           emq:{q}:active
-- KEYS[2]  the job hash     emq:{q}:job:<id>
-- ARGV[1]  id
-- ARGV[2]  token, the attempts value the holder's claim returned, in decimal
-- ARGV[3]  base             emq:{q}: (lane, pending, ring, paused, glimit, gactive, wake and
--                           metrics keys are built from it; all share the queue's hash tag)
-- returns  1 ok; 0 when the row is gone (host: error gone);
--          error EMQSTALE when the token is not the row's attempts (host: error stale).
-- The token is compared as a string with the row's attempts ("1" is not "01"). Only a claim moves
-- attempts, so a match proves no one claimed the job after this holder.
local id, base = ARGV[1], ARGV[3]
local attempts = redis.call('HGET', KEYS[2], 'attempts')
if not attempts then
  return 0
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
local g = redis.call('HGET', KEYS[2], 'group')
local was = redis.call('ZREM', KEYS[1], id)
if g then
  local lane = base .. 'g:' .. g .. ':pending'
  local ring = base .. 'ring'
  if was == 1 then
    -- The holder's slot frees up. The group may have left the ring at its ceiling, so put it
    -- back (with a wake) if it has work; the ring insert re-checks pause and limit against the
    -- decremented count. gactive never keeps a zero or negative field.
    local act = redis.call('HINCRBY', base .. 'gactive', g, -1)
    if act <= 0 then
      redis.call('HDEL', base .. 'gactive', g)
    end
    local paused = base .. 'paused'
    if redis.call('SISMEMBER', paused, g) == 0 and redis.call('ZCARD', lane) > 0 then
      local limit = redis.call('HGET', base .. 'glimit', g)
      if (not limit or act < tonumber(limit)) and not redis.call('LPOS', ring, g) then
        redis.call('RPUSH', ring, g)
        local wake = base .. 'wake'
        redis.call('LPUSH', wake, '1')
        redis.call('LTRIM', wake, 0, 63)
      end
    end
  else
    -- Not active, yet the token matches: the lease ran out and reap put the job back in its lane
    -- (reap already gave back the gactive slot), and nobody has claimed it since. The work is
    -- done, so retire it everywhere; otherwise the next claim would run it a second time. A lane
    -- left empty leaves the ring, so no consumer rotates onto it for an empty claim.
    redis.call('ZREM', lane, id)
    if redis.call('ZCARD', lane) == 0 then
      redis.call('LREM', ring, 0, g)
    end
  end
elseif was == 0 then
  -- The flat queue's version of the same case: reaped back into pending, not re-claimed.
  redis.call('ZREM', base .. 'pending', id)
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
return 1
