-- SPDX-License-Identifier: MIT
-- ring_enter(base, g, act): the ring insert with wake (docs/wire.md, "Keys of a queue"; see
-- genqueue.lua for why a token only on entry). Group g enters the ring, and one wake token is
-- pushed (the list trimmed to 64), unless g is paused, at its glimit, or already in the ring. act
-- is g's in-flight count when the caller knows it (it just moved gactive), else nil and gactive is
-- read. A lane that enters the ring holds work, so a member queue's hand-off credits go
-- (member_park.lua: a hand-off must not overtake it); on any other queue that key does not exist.
local function ring_enter(base, g, act)
  if redis.call('SISMEMBER', base .. 'paused', g) == 1 then
    return
  end
  local limit = redis.call('HGET', base .. 'glimit', g)
  if limit and (act or tonumber(redis.call('HGET', base .. 'gactive', g) or '0')) >= tonumber(limit) then
    return
  end
  local ring = base .. 'ring'
  if not redis.call('LPOS', ring, g) then
    redis.call('RPUSH', ring, g)
    redis.call('DEL', base .. 'parked')
    local wake = base .. 'wake'
    redis.call('LPUSH', wake, '1')
    redis.call('LTRIM', wake, 0, 63)
  end
end
