-- SPDX-License-Identifier: MIT
-- claim_next(base, ring, active, lease_ms): gclaim (docs/wire.md, "Scripts") for gclaim and
-- complete_claim; lease_ms a number the caller checked (lib/whole.lua) before its first write.
-- Rotates the ring (the group served now goes to the tail, so each group gets one job per turn
-- whatever its backlog), pops the rotated group's oldest job and leases it for lease_ms of server
-- time. Returns {id, payload, attempts, g} (attempts, an integer, is the fencing token), or nil
-- when the ring is empty or the rotated group's lane was empty.
local function claim_next(base, ring, active, lease_ms)
  local g = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
  if not g then
    return nil
  end
  local lane = base .. 'g:' .. g .. ':pending'
  local popped = redis.call('ZPOPMIN', lane)
  if #popped == 0 then
    -- A group leaves the ring when its lane empties, so this only heals a ring that still names
    -- an empty lane. The answer is empty even if other lanes hold work (docs/wire.md, "Scripts"):
    -- trying the next group would make one claim cost a scan of the ring. A consumer that gets it
    -- parks until the next wake or beat.
    redis.call('LREM', ring, 0, g)
    return nil
  end
  local id = popped[1]
  local job = base .. 'job:' .. id
  local att = redis.call('HINCRBY', job, 'attempts', 1)
  redis.call('HSET', job, 'state', 'active')
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', active, now_ms + lease_ms, id)
  local act = redis.call('HINCRBY', base .. 'gactive', g, 1)
  local limit = redis.call('HGET', base .. 'glimit', g)
  -- Leave the ring at the ceiling (whoever frees a slot re-inserts the group with a wake) or when
  -- the lane is drained (the next genqueue or promote into it re-inserts it).
  if (limit and act >= tonumber(limit)) or redis.call('ZCARD', lane) == 0 then
    redis.call('LREM', ring, 0, g)
  end
  return {id, redis.call('HGET', job, 'payload'), att, g}
end
