-- SPDX-License-Identifier: MIT
-- epoch_move(epoch, t): the membership epoch moves (member_beat, member_reap). `t` is this
-- script's redis.call('TIME'). A new key (the server lost its data, or never had it) starts at
-- that time in microseconds, not at 1: writers compare epochs for equality, and a counter that
-- restarted from 1 could climb back to a value a writer still holds from before the loss, beside
-- another membership, which that writer would then never read (member_enqueue.lua, "Membership").
local function epoch_move(epoch, t)
  if redis.call('INCR', epoch) == 1 then
    redis.call('SET', epoch, t[1] .. string.rep('0', 6 - #t[2]) .. t[2])
  end
end
