-- slots_return: give back slot leases, of one domain or several (all the pool's keys share its hash tag).
-- KEYS: 1..n slot zsets
-- ARGV: 1..n members: ARGV[i] is leased in KEYS[i]
-- Returns how many were still leased.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local n = 0
for i = 1, #KEYS do
  n = n + redis.call('ZREM', KEYS[i], ARGV[i])
end
return n
