-- SPDX-License-Identifier: MIT
-- member_park: set a member's hand-off credit (issue 6 items 1 and 5). fanout_enqueue hands a job
-- straight to a member, claimed, only while the member's 'parked' flag holds a count above 0, and
-- DECRs it per hand-off; this script sets the count from the consumer's own free credits, so the
-- server never lists much more for a member than it can take. One call per credit refresh (the
-- consumer's beat, and acks that returned half its credits), never one per job.
-- KEYS[1]  parked           <mbase>parked (string: the count, with PX)
-- KEYS[2]  deliver          <mbase>deliver (list of hand-offs not yet taken by the consumer)
-- ARGV[1]  free >= 0: the consumer's credits not held by a job it took (claimed or handed off
--          and not yet acked), as counted when it sent this call
-- ARGV[2]  px_ms > 0: how long the flag outlives the consumer's silence (its beat refreshes it)
-- returns  the count set, free - LLEN deliver; when that is <= 0 the flag is deleted instead
--          (jobs then go to the lane with a wake) and the value is returned all the same;
--          error EMQARG when free or px_ms is not a non-negative / positive integer (nothing
--          written).
-- Failure modes: a consumer that dies leaves the flag until px_ms runs out; hand-offs made to it
-- meanwhile are leased claims, reaped back to the lane like any other (fanout_enqueue.lua). A
-- hand-off the consumer's BLPOP took after it counted `free` and before this ran is counted on
-- neither side, so the count may exceed what it can take by what one BLPOP takes; the consumer
-- takes only within its credits and the rest waits on the list.
local free, px = tonumber(ARGV[1]), tonumber(ARGV[2])
if not free or free < 0 or free ~= math.floor(free) or not px or px <= 0 or px ~= math.floor(px) then
  return redis.error_reply('EMQARG free must be an integer >= 0 and px_ms a positive integer')
end
local n = free - redis.call('LLEN', KEYS[2])
if n > 0 then
  redis.call('SET', KEYS[1], n, 'PX', px)
else
  redis.call('DEL', KEYS[1])
end
return n
