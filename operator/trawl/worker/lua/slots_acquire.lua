-- slots_acquire: lease up to `want` of a domain's concurrency slots, expired leases dropped first; with a
-- second key, also take the request token of the slot's request (rate_take's GCRA, one token, reserved when
-- due within `reserve`): one round trip for both.
-- KEYS: 1 slot zset (member -> lease deadline in ms), 2 (optional) rate key
-- ARGV: 1 max, 2 want, 3 lease_ms, 4 member prefix, 5 first index;
--   with KEYS[2]: 6 interval in microseconds, 7 burst, 8 reserve: the longest wait in microseconds
-- Returns {granted, tokens, wait}: how many members were granted (prefix .. first, prefix .. first + 1, ...);
-- with KEYS[2] and a member granted, tokens 1 when a token was taken, due `wait` microseconds from now (0:
-- now; tokens 0: none, its wait longer than `reserve`).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local room = tonumber(ARGV[1]) - held
if room <= 0 then return {0, 0, 0} end
local granted = math.min(room, tonumber(ARGV[2]))
local first = tonumber(ARGV[5])
for i = 0, granted - 1 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4] .. (first + i))
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
if #KEYS < 2 then return {granted, 0, 0} end
-- The token, as rate_take takes one (keep the two in step).
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])
local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
if tat < now_us then tat = now_us end
local wait = 0
if math.floor((now_us - tat + burst * interval) / interval) < 1 then
  wait = tat + interval - burst * interval - now_us
  if wait > tonumber(ARGV[8]) then return {granted, 0, wait} end
end
tat = tat + interval
redis.call('SET', KEYS[2], string.format('%.0f', tat), 'PX', math.floor((tat - now_us) / 1000) + 1000)
return {granted, 1, wait}
