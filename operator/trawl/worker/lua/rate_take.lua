-- rate_take: take up to `want` request tokens of a domain's rate (GCRA on Redis's own clock).
-- KEYS: 1 rate key
-- ARGV: 1 interval in microseconds, 2 burst, 3 want, 4 (optional) reserve: the longest wait in microseconds
--   the caller takes a reserved token for (absent or negative: none), 5 (optional) margin in microseconds: how
--   late the caller's request may leave after its token is due (the next token is due that much later)
-- Returns {granted, wait in microseconds, now}: granted > 0 and wait 0, tokens usable now; granted 1 and wait
-- > 0, one token reserved for `wait` from now (the caller sends no earlier: its next rate_take call is saved);
-- granted 0, none, the next one due in `wait`. `now`: Redis's clock in microseconds (the caller's RedisClock:
-- a granted token is due at now + wait, which rate_late checks a late request against).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local reserve = tonumber(ARGV[4] or '-1')
local margin = tonumber(ARGV[5] or '0')
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local room = math.floor((now - tat + burst * interval) / interval)
local granted = math.min(room, want)
local wait = 0
if room < 1 then
  wait = tat + interval - burst * interval - now
  if wait > reserve then return {0, wait, now} end
  granted = 1  -- the token at `now + wait`: what the caller would have taken by asking again then
end
tat = tat + granted * interval + margin
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return {granted, wait, now}
