-- SPDX-License-Identifier: MIT
-- whole(v, least): v as a number when it is a plain decimal integer (digits, an optional leading
-- '-') of at least `least` and below 2^53, else nil. The scripts check every numeric argument
-- with it before their first write and answer a bad one with the class EMQARG (docs/wire.md,
-- "Scripts": an error reply leads with its class, never a generic ERR): Redis keeps what a script
-- wrote before it fails, so a lease or delay found bad half-way left a job popped but never leased,
-- or scheduled but never due, stuck or lost. tonumber alone would also take "0x10", "1e3", "nan"
-- and " 5".
local function whole(v, least)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(v)
  if n < least or n >= 9007199254740992 then
    return nil
  end
  return n
end
