-- SPDX-License-Identifier: MIT
-- receipt_count: a node counts itself in a receipt (docs/wire.md, "Receipts"): the INCR and the
-- key's TTL in one step, so no receipt key is ever left without one (two commands could be cut
-- between them by a lost connection).
-- KEYS[1]  the receipt key  ecc:rcpt:{t}:<receipt>
-- ARGV[1]  the key's ttl in ms (PX), a positive decimal
-- returns  the count after this node's
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
