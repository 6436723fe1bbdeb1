-- SPDX-License-Identifier: MIT
-- member_enqueue: admit one coherence job into ONE member's queue, so that every node applies every
-- message. Each node that holds L1 rows of a job-lane table owns a member queue: a full bus
-- queue (docs/wire.md, "The job bus") named ecc.coh.<t>|<m> (base emq:{ecc.coh.<t>|<m>}:), so every
-- member queue has its own hash tag and, on a cluster, its own slot: a table's member queues spread
-- over the shards. The writer reads the table's membership (emq:{ecc.coh.<t>}:members,
-- member_beat.lua) once, keeps it, and sends this script to every member it knows, pipelined per
-- shard, with a read of the membership epoch after them (see "Membership" below). A parked member
-- is handed the job already claimed, which cuts its wake and claim hops.
-- KEYS[1]  live             <mbase>live (string: the member's declared lease_ms, with PX = its
--                           beat ttl; absent means the member is not live)
-- ARGV[1]  mbase            emq:{ecc.coh.<t>|<m>}: (every key below is mbase .. suffix, so the
--                           script is single-slot)
-- ARGV[2]  id, a 14-byte branded id in namespace JOB (the same id in every member's queue)
-- ARGV[3]  payload (opaque bytes; for the job lane the 29-byte coherence message)
-- ARGV[4]  g, the group: a valid branded id (the host checks it)
-- ARGV[5]  lease_ms of a hand-off when the member declared none (a member that is not one of
--          ours); the writer passes its table's job_lease_ms
-- returns  0 duplicate (the queue already holds a row for id: nothing written),
--          2 handed off (claimed for the parked member and pushed to its deliver list),
--          1 enqueued (genqueue into the lane: lane, ring insert with wake),
--          -1 not live (no live key: nothing written; the member must rejoin, see member_beat);
--          error EMQKIND when the id is not JOB-namespaced, error EMQARG when ARGV[5] is not a
--          positive integer (both checked first: nothing written).
--
-- Hand-off. A consumer that blocks with BLMPOP on mbase..'deliver' and mbase..'wake' keeps
-- mbase..'parked', a list of credits with PX, at the number of jobs it can still take
-- (member_park.lua). A credit also vouches for everything a claim of this job would need to be
-- legal and in order: the member live, the queue and every group unpaused, no ceiling set, every
-- lane empty (member_park.lua says how each is kept). So the hand-off reads nothing but the row's
-- absence and one credit (LPOP), then creates and claims the job exactly as genqueue then gclaim
-- would (attempts 1, state active, lease in active, gactive[g] + 1) and RPUSHes one element to
-- deliver:
--            id .. "\n" .. att .. "\n" .. g .. "\n" .. payload
--   four fields separated by the first three "\n" bytes: the 14-byte id, the fencing token in
--   decimal, the group, then the payload verbatim to the end (it may itself contain "\n").
-- The lease of a hand-off is the member's own: the credit holds the value of its live key, or ""
-- when that is not a positive integer (then ARGV[5]). Seven server calls; every one of them delays
-- the consumer's wake, which the server sends only after the script (lanes_bench's
-- BM_JobLane_ServerHop measures the script's server time beside PUBLISH's). Without a credit the
-- job goes into the lane with a ring insert and wake, which wakes a parked consumer anyway.
--
-- Membership (the writer's side; engine.cc fan_out). member_beat INCRs emq:{ecc.coh.<t>}:mepoch
-- whenever a member enters the set and member_reap whenever one leaves it. The writer keeps the
-- members it read together with the epoch it read before them; after its L2 write it sends this
-- script to each of them and then reads the epoch again. Equal: no member entered between its
-- read and that final read, so a member that is not in its list entered after the L2 write and
-- reads the new value from L2 after its drop-on-join. Different: it re-reads the membership and
-- admits the job to the members it did not have, and stops there: a membership read after the L2
-- write needs no check (a member missing from it entered after the write). A joiner sets its live
-- key before it enters the set (member_beat), so a writer that sees its epoch finds it live. An
-- epoch is never seen twice beside different memberships, even across a loss of the server's data
-- (a restart without persistence, a failover to a replica that lagged): a new epoch key starts at
-- the server's time in microseconds (member_beat.lua), past any value the lost key could have
-- reached (each INCR took a script's microsecond), unless the new server's clock is behind the
-- old one's.
--
-- Failure modes.
-- * A hand-off lost because the consumer died after the RPUSH: the job is active with a lease, so
--   reap on the member queue returns it to its lane when the lease runs out, and the next claim
--   hands token att + 1; a late completion with the old token answers stale once it is
--   re-claimed. If the node never comes back, its live key expires, admissions answer -1, and
--   member_reap / member_drop delete its membership and its whole queue.
-- * The credits bound hand-offs by the consumer's own, not exactly (member_park.lua); the
--   consumer takes only within its credits and the rest waits on the list, leased.
-- * A duplicate is answered before liveness is read: a member that lapsed but still holds the
--   row answers 0, not -1 (both wrote nothing).
-- * A queue paused by a plain HSET (no script) still hands off on the credits listed before it,
--   until the consumer's next member_park, within one beat (member_park.lua).
-- * A deliver element left unread past its lease is reaped and re-claimed through the lane with
--   token att + 1; the consumer then sees the job twice. Applying a coherence message twice is
--   harmless (newer wins) and the completion with the old token answers stale.
-- * A member whose live key expired (its beat late) is skipped (-1) from then on; its next beat
--   finds the key absent and drops its L1 rows before it consumes again (member_beat.lua).
-- * Dedup is per queue: a replayed admission (writer retry, journal replay) is a duplicate in
--   every queue that still holds the row, and a new job in a queue that already completed it.
--   Re-applying an old version is harmless: newer wins, it answers stale.
-- #include ring_enter
local mbase, id, payload, g = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if string.sub(id, 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
local function positive(v)
  local n = tonumber(v)
  if n and n > 0 and n == math.floor(n) then
    return n
  end
  return nil
end
local default_lease = positive(ARGV[5])
if not default_lease then
  return redis.error_reply('EMQARG lease_ms must be a positive integer')
end
local job = mbase .. 'job:' .. id
if redis.call('EXISTS', job) == 1 then
  return 0
end

local credit = redis.call('LPOP', mbase .. 'parked')
if credit then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', job, 'state', 'active', 'attempts', '1', 'payload', payload, 'group', g)
  redis.call('ZADD', mbase .. 'active', now_ms + (positive(credit) or default_lease), id)
  redis.call('HINCRBY', mbase .. 'gactive', g, 1)
  redis.call('RPUSH', mbase .. 'deliver', id .. '\n1\n' .. g .. '\n' .. payload)
  return 2
end

if not redis.call('GET', KEYS[1]) then
  return -1
end
-- genqueue (docs/wire.md, "Scripts") with the row known to be absent: the row, the lane, and the
-- ring insert with wake (see genqueue.lua for why a wake only on entry). member_drop finds the
-- lanes through the groups set.
redis.call('SADD', mbase .. 'groups', g)
redis.call('HSET', job, 'state', 'pending', 'attempts', '0', 'payload', payload, 'group', g)
redis.call('ZADD', mbase .. 'g:' .. g .. ':pending', 0, id)
ring_enter(mbase, g, nil)
return 1
