-- SPDX-License-Identifier: MIT
-- finish(base, id, job, active, token): complete (docs/wire.md, "Scripts") for complete and
-- complete_claim. Retires job `id` (row key `job`, active zset `active`) if `token` is the row's
-- attempts, as a string ("1" is not "01"; only a claim moves attempts, so a match proves no one
-- claimed the job after this holder): release, then the row is deleted and metrics:completed
-- counted. Returns 1 done, 0 the row is gone, -1 the token is stale (nothing written).
-- #include release
local function finish(base, id, job, active, token)
  local row = redis.call('HMGET', job, 'attempts', 'group')  -- absent fields read false
  local attempts, g = row[1], row[2]
  if not attempts then
    return 0
  end
  if attempts ~= token then
    return -1
  end
  release(base, id, g or nil, redis.call('ZREM', active, id))
  redis.call('DEL', job)
  redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
  return 1
end
