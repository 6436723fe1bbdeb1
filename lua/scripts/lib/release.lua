-- SPDX-License-Identifier: MIT
-- release(base, id, g, was): the bookkeeping when the holder of job `id` lets go of it (complete,
-- retry, complete_claim), after its ZREM from active answered `was`; `g` is the row's group or
-- nil (a flat-queue job). Every key is built from base, the queue's prefix, so the including
-- script stays single-slot.
-- #include ring_enter
local function release(base, id, g, was)
  if not g then
    -- The flat queue: a job reaped back into pending and not re-claimed is retired from there.
    if was == 0 then
      redis.call('ZREM', base .. 'pending', id)
    end
    return
  end
  local lane = base .. 'g:' .. g .. ':pending'
  if was == 1 then
    -- The holder's slot frees up. The group may have left the ring at its ceiling, so put it
    -- back (with a wake) if it has work; the ring insert re-checks pause and limit against the
    -- decremented count. gactive never keeps a zero or negative field.
    local act = redis.call('HINCRBY', base .. 'gactive', g, -1)
    if act <= 0 then
      redis.call('HDEL', base .. 'gactive', g)
    end
    if redis.call('ZCARD', lane) > 0 then
      ring_enter(base, g, act)
    end
  else
    -- Not active, yet the token matched: the lease ran out and reap put the job back in its lane
    -- (reap already gave back the gactive slot), and nobody has claimed it since. Retire it from
    -- the lane, or the next claim would run it again; a lane left empty leaves the ring, so no
    -- consumer rotates onto it for an empty claim.
    redis.call('ZREM', lane, id)
    if redis.call('ZCARD', lane) == 0 then
      redis.call('LREM', base .. 'ring', 0, g)
    end
  end
end
