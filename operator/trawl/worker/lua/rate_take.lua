-- rate_take: take up to `want` request tokens of a domain's rate (GCRA on Redis's own clock).
-- KEYS: 1 rate key
-- ARGV: 1 interval in microseconds, 2 burst, 3 want
-- Returns {granted, wait in microseconds until the next token}.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local room = math.floor((now - tat + burst * interval) / interval)
if room < 1 then
  return {0, tat + interval - burst * interval - now}
end
local granted = math.min(room, want)
tat = tat + granted * interval
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return {granted, 0}
