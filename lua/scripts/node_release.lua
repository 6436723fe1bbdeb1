-- SPDX-License-Identifier: MIT
-- node_release: gives a node lease back at a clean stop, only while the token holds it.
-- KEYS[1]  the lease key     {ecc}:node:<n>
-- ARGV[1]  token
-- returns  1 released, 0 not held by the token (lapsed, or another's).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
