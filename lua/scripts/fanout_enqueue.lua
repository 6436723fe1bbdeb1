-- SPDX-License-Identifier: MIT
-- fanout_enqueue: the writer's enqueue of one coherence job into every live member's queue, in one
-- atomic call (issue 6 items 3 and 5). A single shared queue would let only one node drop its L1
-- row; with a member queue per node every node applies every message. A parked member is handed
-- the job already claimed, which cuts its wake and claim hops.
-- KEYS[1]  members          emq:{q}:members (zset: member m, score = expiry ms, see member_beat)
-- ARGV[1]  qbase            emq:{q}: ; member m's queue is mbase = qbase .. 'm:' .. m .. ':', a
--                           full WIRE §5 queue (same hash tag, so the script is single-slot)
-- ARGV[2]  id, a 14-byte branded id in namespace JOB (the same id in every queue)
-- ARGV[3]  payload (opaque bytes; for the job lane the 29-byte coherence message)
-- ARGV[4]  g, the group: a valid branded id (the host checks it)
-- ARGV[5]  shared: "1" also genqueues into the shared queue qbase itself (for the original's
--          consumers); "0" does not
-- ARGV[6]  lease_ms of a hand-off (server time) when the member declared none (see below)
-- returns  a flat array {m1, r1, m2, r2, ...} over the live members in ascending expiry order,
--          then {"*", r} for the shared queue when ARGV[5] is "1"; each r an integer:
--            1 enqueued (genqueue into the member's lane: lane, ring insert with wake),
--            2 handed off (claimed for the parked member and pushed to its deliver list),
--            0 duplicate (that queue already holds a row for id: nothing written there);
--          an empty array when no member is live and shared is "0";
--          error EMQKIND when the id is not JOB-namespaced, error EMQARG when lease_ms is not a
--          positive integer (both checked first: nothing written anywhere).
--
-- Hand-off. A consumer keeps mbase..'parked' (a string holding an integer, with PX) at the number
-- of jobs it can still take: member_park.lua sets it to its free credits less what its deliver
-- list already holds. It blocks with BLPOP on mbase..'deliver' and mbase..'wake' whenever it has
-- a credit, and re-blocks at once after each hand-off, so the flag stays up while it runs. While
-- 'parked' is above 0 the job is created and claimed here exactly as genqueue then gclaim would
-- (attempts 1, state active, lease in active, gactive[g] + 1), the flag is DECRed (its PX kept)
-- and one element is RPUSHed to deliver:
--            id .. "\n" .. att .. "\n" .. g .. "\n" .. payload
--   four fields separated by the first three "\n" bytes: the 14-byte id, the fencing token in
--   decimal, the group, then the payload verbatim to the end (it may itself contain "\n").
--   The job's token is att, so the consumer completes it (or complete_claim's it) with att.
-- The lease of a hand-off is the member's own: member_beat stores it as mbase..'meta' field
-- 'lease_ms'; a member that stored none (the original's consumers) gets ARGV[6].
-- A hand-off is made only when a claim of this job would be legal and in order: the member queue
-- is not paused (meta paused), g is not paused, g is under its glimit, and g's lane in that queue
-- is empty (a handed-off job must not overtake older jobs of its lane). Otherwise the job goes
-- into the lane with a ring insert and wake, which wakes the parked consumer anyway.
--
-- Failure modes.
-- * A hand-off lost because the consumer died after the RPUSH (or 'parked' outlived it until its
--   PX ran out): the job is active with a lease, so reap on the member queue returns it to its
--   lane when the lease runs out, and the next claim hands token att + 1; a late completion with
--   the old token answers stale once it is re-claimed. If the node never comes back, its beat
--   stops, fanouts skip it, and member_reap deletes its whole queue, hand-off included.
-- * The flag bounds hand-offs by the consumer's credits, not exactly: it was computed from the
--   consumer's count when it sent member_park, and a hand-off its BLPOP took meanwhile is counted
--   on neither side, so the server may list one more than the consumer can take; the consumer
--   takes only within its credits, and the rest waits on the list, leased, as below.
-- * A deliver element left unread past its lease (the consumer was slow, not dead) is reaped and
--   re-claimed through the lane with token att + 1; the consumer then sees the job twice. Applying
--   a coherence message twice is harmless (the second answers stale), and the completion with the
--   old token answers stale (or retires the job, if no one re-claimed it yet: complete.lua).
-- * A member that expires mid-flight (its beat late) is skipped from then on (score < now_ms);
--   whatever its queue holds is reclaimed by member_reap. A node that beats again after such a
--   lapse must drop its L1 rows before it consumes (see member_beat.lua).
-- * A joiner is fed only from the fanout after its first beat landed; earlier jobs are not
--   replayed to it, so it drops its L1 rows of the table before it consumes.
-- * Dedup is per queue: a replayed fanout (writer retry, journal replay) is a duplicate in every
--   queue that still holds the row, and a new job (result 1 or 2) in a queue that already
--   completed it. Re-applying an old version is harmless: newer wins, it answers stale.
-- * The script costs O(live members); the membership set of one table is the cluster's nodes.
local qbase, id, payload, g, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[6])
if string.sub(id, 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
-- Checked up front even though only a hand-off reads it: a script is not rolled back, so failing
-- at the first hand-off would leave the earlier members enqueued and the later ones not.
if not lease or lease <= 0 or lease ~= math.floor(lease) then
  return redis.error_reply('EMQARG lease_ms must be a positive integer')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- genqueue (WIRE §5.3) into the queue at base, with the job row known to be absent: the row, the
-- lane, and the ring insert with wake (see genqueue.lua for why a wake only on entry).
local function lane_insert(base, job, lane)
  redis.call('HSET', job, 'state', 'pending', 'attempts', '0', 'payload', payload, 'group', g)
  redis.call('ZADD', lane, 0, id)
  if redis.call('SISMEMBER', base .. 'paused', g) == 1 then
    return
  end
  local limit = redis.call('HGET', base .. 'glimit', g)
  if limit and tonumber(redis.call('HGET', base .. 'gactive', g) or '0') >= tonumber(limit) then
    return
  end
  local ring = base .. 'ring'
  if not redis.call('LPOS', ring, g) then
    redis.call('RPUSH', ring, g)
    local wake = base .. 'wake'
    redis.call('LPUSH', wake, '1')
    redis.call('LTRIM', wake, 0, 63)
  end
end

-- The hand-off's lease when it is legal (only where gclaim could have served this job next, see
-- the header), else nil. Cheapest test first: most members are either parked or not.
local function hand_off_lease(mbase, lane)
  local credits = redis.call('GET', mbase .. 'parked')
  if not credits or (tonumber(credits) or 0) <= 0 then
    return nil
  end
  local meta = redis.call('HMGET', mbase .. 'meta', 'paused', 'lease_ms')
  if meta[1] then
    return nil
  end
  if redis.call('ZCARD', lane) > 0 or redis.call('SISMEMBER', mbase .. 'paused', g) == 1 then
    return nil
  end
  local limit = redis.call('HGET', mbase .. 'glimit', g)
  if limit and tonumber(redis.call('HGET', mbase .. 'gactive', g) or '0') >= tonumber(limit) then
    return nil
  end
  return tonumber(meta[2]) or lease
end

local out = {}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now_ms, '+inf')
for _, m in ipairs(live) do
  local mbase = qbase .. 'm:' .. m .. ':'
  local job = mbase .. 'job:' .. id
  local lane = mbase .. 'g:' .. g .. ':pending'
  local r
  if redis.call('EXISTS', job) == 1 then
    r = 0
  else
    -- member_reap finds the member's lanes through this set.
    redis.call('SADD', mbase .. 'groups', g)
    local held = hand_off_lease(mbase, lane)
    if held then
      -- genqueue's row and gclaim's claim of this very job in one write (attempts 1, the token),
      -- then the lease; its lane is empty, so gclaim would also take g out of the ring.
      redis.call('HSET', job, 'state', 'active', 'attempts', '1', 'payload', payload, 'group', g)
      redis.call('ZADD', mbase .. 'active', now_ms + held, id)
      redis.call('HINCRBY', mbase .. 'gactive', g, 1)
      redis.call('LREM', mbase .. 'ring', 0, g)
      redis.call('DECR', mbase .. 'parked')
      redis.call('RPUSH', mbase .. 'deliver', id .. '\n1\n' .. g .. '\n' .. payload)
      r = 2
    else
      lane_insert(mbase, job, lane)
      r = 1
    end
  end
  out[#out + 1] = m
  out[#out + 1] = r
end

if ARGV[5] == '1' then
  local job = qbase .. 'job:' .. id
  local r = 0
  if redis.call('EXISTS', job) == 0 then
    lane_insert(qbase, job, qbase .. 'g:' .. g .. ':pending')
    r = 1
  end
  out[#out + 1] = '*'
  out[#out + 1] = r
end
return out
