-- slots_refresh: extend the leases of a worker's slots that are still present.
-- KEYS: 1 slot zset
-- ARGV: 1 lease_ms, 2.. members
-- Returns how many were extended.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
    n = n + 1
  end
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return n
