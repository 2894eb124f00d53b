-- slots_acquire: lease up to `want` of a domain's concurrency slots, expired leases dropped first.
-- KEYS: 1 slot zset (member -> lease deadline in ms)
-- ARGV: 1 max, 2 want, 3 lease_ms, 4 member prefix, 5 first index
-- Returns how many members were granted (prefix .. first, prefix .. first + 1, ...).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local room = tonumber(ARGV[1]) - held
if room <= 0 then return 0 end
local granted = math.min(room, tonumber(ARGV[2]))
local first = tonumber(ARGV[5])
for i = 0, granted - 1 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4] .. (first + i))
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
return granted
