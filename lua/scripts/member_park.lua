-- SPDX-License-Identifier: MIT
-- member_park: issue a member's hand-off credits (so a job reaches a parked consumer already
-- claimed, with no claim round trip, and never beyond its free ring slots). member_enqueue hands a
-- job straight to a member, claimed, only by taking one credit (LPOP) from the member's `parked`
-- list; this script refills that list from the consumer's own free credits, so the server never
-- lists much more for a member than it can take. One call per credit refresh (the consumer's beat,
-- and acks that returned half its credits), never one per job.
-- KEYS[1]  parked           <mbase>parked (list: one element per credit, each the member's lease
--                           in ms or "" when its live key holds none; with PX)
-- KEYS[2]  deliver          <mbase>deliver (list of hand-offs not yet taken by the consumer)
-- ARGV[1]  free >= 0: the consumer's credits not held by a job it took (claimed or handed off
--          and not yet acked), as counted when it sent this call
-- ARGV[2]  px_ms > 0: how long the credits outlive the consumer's silence (its beat refreshes
--          them)
-- ARGV[3]  mbase            emq:{ecc.coh.<t>|<m>}: (live, meta, paused, glimit and ring are mbase
--                           .. suffix: the script stays single-slot)
-- returns  n > 0, the credits now listed (free - LLEN deliver, at most the room under the lowest
--          ceiling); 0 when free - LLEN deliver is not positive; -1 when the member's state bars a
--          hand-off now (not live, the queue or a group paused, a group at its ceiling, a lane
--          holds work: the consumer asks again when its claims find the lanes dry, or on its beat). In both latter cases the list is deleted: jobs go to the lane with
--          a wake. Error EMQARG when free or px_ms is not a non-negative / positive integer
--          (nothing written).
--
-- What a credit promises. member_enqueue pays for a hand-off with one LPOP instead of reading
-- what makes it legal (every call in that script delays the consumer's wake, which the server
-- sends only after the script). So a credit exists only while all of these hold, and whatever
-- breaks one takes the whole list down:
--   the member is live          credits never outlive the live key (PX = min(px_ms, its PTTL));
--   the queue is not paused     checked here (meta paused);
--   no group is paused          checked here (SCARD paused); gpause deletes the list;
--   no ceiling can be passed    the list is never longer than the room left under the lowest
--                               ceiling (glimit[g] - gactive[g] over the groups that have one):
--                               each hand-off takes one slot of some group, so none passes its
--                               ceiling; a group at its ceiling lists none (-1); glimit deletes
--                               the list;
--   every lane is empty         checked here (LLEN ring: with no group paused and none at its
--                               ceiling, a lane that holds work is in the ring); every ring entry
--                               deletes the list (ring_enter, genqueue, gresume, glimit), so a
--                               handed-off job never overtakes an older job of its lane.
-- Failure modes: a consumer that dies leaves its credits until their PX runs out; hand-offs made
-- to it meanwhile are leased claims, reaped back to the lane like any other (member_enqueue.lua).
-- A hand-off the consumer's BLMPOP took after it counted `free` and before this ran is counted on
-- neither side, so the list may exceed what it can take by what one BLMPOP takes; the consumer
-- takes only within its credits and the rest waits on the list, leased. A queue pause made by a
-- plain `HSET meta paused 1` (the bus has no script for it) stops hand-offs at the consumer's
-- next call here, within one beat; the pause scripts (gpause, glimit) stop them at once. Keys
-- changed by plain commands outside the bus's verbs (an HDEL on glimit, an SADD on paused) can
-- break the ring's own invariant (a servable group left out of the ring), and then this check too.
local free, px, mbase = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if not free or free < 0 or free ~= math.floor(free) or not px or px <= 0 or px ~= math.floor(px) then
  return redis.error_reply('EMQARG free must be an integer >= 0 and px_ms a positive integer')
end
redis.call('DEL', KEYS[1])
local n = free - redis.call('LLEN', KEYS[2])
if n <= 0 then
  return 0
end
local live = mbase .. 'live'
local ttl = redis.call('PTTL', live)
if ttl == -2 or redis.call('HEXISTS', mbase .. 'meta', 'paused') == 1
    or redis.call('SCARD', mbase .. 'paused') > 0 or redis.call('LLEN', mbase .. 'ring') > 0 then
  return -1
end
local limits = redis.call('HGETALL', mbase .. 'glimit')
if #limits > 0 then
  local active, flat = {}, redis.call('HGETALL', mbase .. 'gactive')
  for i = 1, #flat, 2 do
    active[flat[i]] = tonumber(flat[i + 1])
  end
  for i = 1, #limits, 2 do
    local room = (tonumber(limits[i + 1]) or 0) - (active[limits[i]] or 0)
    if room < n then
      n = room
    end
  end
  if n <= 0 then
    return -1
  end
end
if ttl > 0 and ttl < px then
  px = ttl
end
local lease = redis.call('GET', live)
if not (tonumber(lease) and tonumber(lease) > 0) then
  lease = ''
end
local chunk = {}  -- RPUSH in chunks: unpack's arguments live on Lua's C stack
for i = 1, math.min(n, 512) do
  chunk[i] = lease
end
for left = n, 1, -512 do
  redis.call('RPUSH', KEYS[1], unpack(chunk, 1, math.min(left, 512)))
end
redis.call('PEXPIRE', KEYS[1], px)
return n
