-- SPDX-License-Identifier: MIT
-- member_reap: reclaim the queues of members whose beat expired (issue 6 item 3). fanout_enqueue
-- already skips them; this deletes every key of their member queue and their membership, so a
-- node that died for good leaves nothing behind. Any node (or the writer) may run it.
-- KEYS[1]  members          emq:{q}:members (zset: member m, score = expiry ms, server time)
-- ARGV[1]  qbase            emq:{q}: ; member m's queue is mbase = qbase .. 'm:' .. m .. ':'
-- ARGV[2]  batch, the most members reclaimed per call
-- returns  the number of members reclaimed.
-- Expired means score < now_ms (a member whose score equals now_ms is still live, as in
-- fanout_enqueue). For each, it deletes: every job row (and its HEAD-era :logs and :lock keys)
-- whose id is in mbase pending, active, schedule, dead or a lane mbase g:<g>:pending for g in
-- mbase groups; those zsets and lanes; ring, paused, glimit, gactive, wake, deliver, parked,
-- meta, groups, metrics:completed and metrics:failed; then ZREM members m.
-- Failure modes: a member reclaimed while its node still runs (its beat came late) loses its jobs,
-- in flight included; its completions answer gone and its next beat re-registers it with an empty
-- queue, after which it must drop its L1 rows before consuming (see member_beat.lua), since jobs
-- fanned out during the lapse never reached it. Between this script and that beat it gets
-- nothing. The cost is O(jobs in the reclaimed queues): a member's backlog is bounded by what was
-- fanned out to it while its consumer was down and its beat still live (one ttl), plus its dead.
local qbase = ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now_ms, 'LIMIT', 0,
  tonumber(ARGV[2]))

-- Deletes the rows of every id in the zset, then the zset.
local function drop_jobs(mbase, zset)
  local ids = redis.call('ZRANGE', zset, 0, -1)
  for _, id in ipairs(ids) do
    local job = mbase .. 'job:' .. id
    redis.call('DEL', job, job .. ':logs', job .. ':lock')
  end
  redis.call('DEL', zset)
end

for _, m in ipairs(expired) do
  local mbase = qbase .. 'm:' .. m .. ':'
  for _, s in ipairs({'pending', 'active', 'schedule', 'dead'}) do
    drop_jobs(mbase, mbase .. s)
  end
  for _, g in ipairs(redis.call('SMEMBERS', mbase .. 'groups')) do
    drop_jobs(mbase, mbase .. 'g:' .. g .. ':pending')
  end
  redis.call('DEL', mbase .. 'ring', mbase .. 'paused', mbase .. 'glimit', mbase .. 'gactive',
    mbase .. 'wake', mbase .. 'deliver', mbase .. 'parked', mbase .. 'meta', mbase .. 'groups',
    mbase .. 'metrics:completed', mbase .. 'metrics:failed')
  redis.call('ZREM', KEYS[1], m)
end
return #expired
