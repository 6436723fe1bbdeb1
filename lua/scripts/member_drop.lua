-- SPDX-License-Identifier: MIT
-- member_drop: delete a member queue whose member is gone: run by whoever ran member_reap.lua, once
-- per member it removed, on that member queue's own slot.
-- KEYS[1]  live             <mbase>live (the member's live key, see member_enqueue.lua)
-- ARGV[1]  mbase            emq:{ecc.coh.<t>|<m>}:
-- returns  1 when the queue was deleted, 0 when the live key exists (the member came back
--          between member_reap and this script: its queue is in use, nothing deleted).
-- Deletes every job row (and its HEAD-era :logs and :lock keys) whose id is in mbase pending,
-- active, schedule, dead or a lane mbase g:<g>:pending; those zsets and lanes; ring, paused,
-- glimit, gactive, wake, deliver, parked, owner, meta, groups, metrics:completed and
-- metrics:failed.
-- The lanes are found by their groups: every group member_enqueue put in a lane (the groups set),
-- and every group whose lane may hold work without that: a lane with work is in the ring unless
-- its group is paused or at its ceiling (docs/wire.md, "Scripts"), which covers a handed-off job
-- (never in groups) that reap put back in its lane.
-- Failure modes: a member whose node still runs but whose live key had expired loses its jobs,
-- in flight included; its completions answer gone, and its next beat finds the live key absent
-- and drops its L1 rows (member_beat.lua). The cost is O(jobs in the queue): a member's backlog
-- is bounded by what was admitted while its consumer was down and its live key still set (one
-- ttl), plus its dead.
local mbase = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end

-- Deletes the rows of every id in the zset, then the zset.
local function drop_jobs(zset)
  for _, id in ipairs(redis.call('ZRANGE', zset, 0, -1)) do
    local job = mbase .. 'job:' .. id
    redis.call('DEL', job, job .. ':logs', job .. ':lock')
  end
  redis.call('DEL', zset)
end

for _, s in ipairs({'pending', 'active', 'schedule', 'dead'}) do
  drop_jobs(mbase .. s)
end
local lanes = {}
for _, g in ipairs(redis.call('SMEMBERS', mbase .. 'groups')) do lanes[g] = true end
for _, g in ipairs(redis.call('LRANGE', mbase .. 'ring', 0, -1)) do lanes[g] = true end
for _, g in ipairs(redis.call('SMEMBERS', mbase .. 'paused')) do lanes[g] = true end
for _, g in ipairs(redis.call('HKEYS', mbase .. 'glimit')) do lanes[g] = true end
for g in pairs(lanes) do
  drop_jobs(mbase .. 'g:' .. g .. ':pending')
end
redis.call('DEL', mbase .. 'ring', mbase .. 'paused', mbase .. 'glimit', mbase .. 'gactive',
  mbase .. 'wake', mbase .. 'deliver', mbase .. 'parked', mbase .. 'owner', mbase .. 'meta',
  mbase .. 'groups',
  mbase .. 'metrics:completed', mbase .. 'metrics:failed')
return 1
