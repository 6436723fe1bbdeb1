-- SPDX-License-Identifier: MIT
-- node_renew: extends a node lease (node_lease.lua) that the token holds, or takes it again when
-- it lapsed and nobody took it meanwhile (compare-and-extend by owner token).
-- KEYS[1]  the lease key     {ecc}:node:<n>
-- ARGV[1]  token
-- ARGV[2]  lease_ms          > 0
-- returns  1 extended, 2 taken again (it had lapsed: the process had stopped minting), 0 leased
--          to another token (this process may not mint under the node).
-- #include whole
local lease = whole(ARGV[2], 1)
if not lease or type(ARGV[1]) ~= 'string' or #ARGV[1] == 0 then
  return redis.error_reply('EMQARG a token and lease_ms > 0 are required')
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], lease)
  return 1
end
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', lease)
  return 2
end
return 0
