-- SPDX-License-Identifier: MIT
-- member_drop: delete a member queue whose member is gone (issue 6 item 3, issue 9 item 3): run
-- by whoever ran member_reap.lua, once per member it removed, on that member queue's own slot.
-- KEYS[1]  live             <mbase>live (the member's live key, see member_enqueue.lua)
-- ARGV[1]  mbase            emq:{ecc.coh.<t>|<m>}:
-- returns  1 when the queue was deleted, 0 when the live key exists (the member came back
--          between member_reap and this script: its queue is in use, nothing deleted).
-- Deletes every job row (and its HEAD-era :logs and :lock keys) whose id is in mbase pending,
-- active, schedule, dead or a lane mbase g:<g>:pending for g in mbase groups; those zsets and
-- lanes; ring, paused, glimit, gactive, wake, deliver, parked, meta, groups, metrics:completed
-- and metrics:failed.
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
for _, g in ipairs(redis.call('SMEMBERS', mbase .. 'groups')) do
  drop_jobs(mbase .. 'g:' .. g .. ':pending')
end
redis.call('DEL', mbase .. 'ring', mbase .. 'paused', mbase .. 'glimit', mbase .. 'gactive',
  mbase .. 'wake', mbase .. 'deliver', mbase .. 'parked', mbase .. 'meta', mbase .. 'groups',
  mbase .. 'metrics:completed', mbase .. 'metrics:failed')
return 1
