-- SPDX-License-Identifier: MIT
-- gresume: serve a paused group again (docs/wire.md, "Scripts", lane admin): when its lane holds
-- work, a ring insert with wake (a parked consumer learns at once that the group is servable
-- again).
-- KEYS[1]  paused           emq:{q}:paused
-- KEYS[2]  ring             emq:{q}:ring
-- KEYS[3]  glimit           emq:{q}:glimit
-- KEYS[4]  gactive          emq:{q}:gactive
-- KEYS[5]  wake             emq:{q}:wake
-- ARGV[1]  base             emq:{q}: (the lane key is built from it; same hash tag)
-- ARGV[2]  g, the group
-- returns  1; error EMQARG when g is missing or base is not the prefix of KEYS[1] (nothing
--          written).
-- #include base_of
local g = ARGV[2]
if type(g) ~= 'string' or #g == 0 then
  return redis.error_reply('EMQARG the group is missing')
end
if not base_of(ARGV[1], KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the paused key')
end
redis.call('SREM', KEYS[1], g)
if redis.call('ZCARD', ARGV[1] .. 'g:' .. g .. ':pending') > 0 then
  -- The ring insert still honours the ceiling: a group resumed while at its limit re-enters when
  -- a holder completes.
  local limit = redis.call('HGET', KEYS[3], g)
  if (not limit or tonumber(redis.call('HGET', KEYS[4], g) or '0') < tonumber(limit))
      and not redis.call('LPOS', KEYS[2], g) then
    redis.call('RPUSH', KEYS[2], g)
    redis.call('DEL', ARGV[1] .. 'parked')  -- a lane with work entered the ring (member_park.lua)
    redis.call('LPUSH', KEYS[5], '1')
    redis.call('LTRIM', KEYS[5], 0, 63)
  end
end
return 1
