-- SPDX-License-Identifier: MIT
-- glimit: set a group's in-flight ceiling (docs/wire.md, "Scripts", lane admin). At or above it the
-- group leaves the ring; below it, a paused-free group with work (re)enters the ring with a wake.
-- KEYS[1]  glimit           emq:{q}:glimit
-- KEYS[2]  gactive          emq:{q}:gactive
-- KEYS[3]  ring             emq:{q}:ring
-- KEYS[4]  paused           emq:{q}:paused
-- KEYS[5]  wake             emq:{q}:wake
-- ARGV[1]  base             emq:{q}: (the lane key is built from it; same hash tag)
-- ARGV[2]  g, the group
-- ARGV[3]  n > 0, the ceiling (a ceiling of 0 would hold the lane out of the ring for good)
-- returns  1; error EMQARG when n is not a positive integer, g is missing or base is not the
--          prefix of KEYS[1] (all checked first: nothing written; a stored "abc" made every later
--          ring insert of the group fail half-way).
-- In-flight jobs above a lowered ceiling run on; the group re-enters the ring only once
-- completions bring gactive below n.
-- #include base_of
-- #include whole
local g, n = ARGV[2], whole(ARGV[3], 1)
if not n then
  return redis.error_reply('EMQARG n must be a positive integer')
end
if type(g) ~= 'string' or #g == 0 then
  return redis.error_reply('EMQARG the group is missing')
end
if not base_of(ARGV[1], KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the glimit key')
end
redis.call('HSET', KEYS[1], g, ARGV[3])
-- On a member queue the hand-off credits go (member_park.lua: a credit vouches for no ceiling).
redis.call('DEL', ARGV[1] .. 'parked')
if tonumber(redis.call('HGET', KEYS[2], g) or '0') >= n then
  redis.call('LREM', KEYS[3], 0, g)
elseif redis.call('SISMEMBER', KEYS[4], g) == 0
    and redis.call('ZCARD', ARGV[1] .. 'g:' .. g .. ':pending') > 0
    and not redis.call('LPOS', KEYS[3], g) then
  redis.call('RPUSH', KEYS[3], g)
  redis.call('LPUSH', KEYS[5], '1')
  redis.call('LTRIM', KEYS[5], 0, 63)
end
return 1
