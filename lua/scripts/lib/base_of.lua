-- SPDX-License-Identifier: MIT
-- base_of(base, key): true when `base`, the queue's prefix emq:{q}: an argument carries, is a
-- non-empty prefix of `key`, a declared key of the queue. The scripts build their other keys
-- from base, so this keeps them in the declared key's hash slot, and it is checked before the
-- first write: a missing base failed only when a key was built from it, after writes (EMQARG).
local function base_of(base, key)
  return type(base) == 'string' and #base > 0 and string.sub(key, 1, #base) == base
end
