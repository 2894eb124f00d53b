-- slots_acquire: lease up to `want` of a domain's concurrency slots, expired leases dropped first; with the
-- domain's breaker hash, also read its circuit breaker's state for the caller; with the rate key, also take
-- the request token of the slot's request (rate_take's GCRA, one token, reserved when due within `reserve`):
-- one round trip for all.
-- KEYS: 1 slot zset (member -> lease deadline in ms), then the breaker hash when ARGV[6] is '1', then the
--   rate key when ARGV[7] is given
-- ARGV: 1 max, 2 want, 3 lease_ms, 4 member prefix, 5 first index, 6 breaker ('1' or '0');
--   with the rate key: 7 interval in microseconds, 8 burst, 9 reserve: the longest wait in microseconds, 10
--   margin in microseconds (rate_take's)
-- Returns {granted, tokens, wait, breaker, fails, now}: how many members were granted (prefix .. first, prefix ..
-- first + 1, ...); with the rate key and a member granted, tokens 1 when a token was taken, due `wait`
-- microseconds from now (0: now; tokens 0: none, its wait longer than `reserve`); with the breaker hash and
-- a member granted, its state as breaker_check reads it ('closed', or another state: the caller reads it
-- with breaker_check) and its failure count ('' without the breaker hash); with the rate key and a member
-- granted, `now`: Redis's clock in microseconds, as rate_take returns it (the token is due at now + wait).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local room = tonumber(ARGV[1]) - held
if room <= 0 then return {0, 0, 0, '', ''} end
local granted = math.min(room, tonumber(ARGV[2]))
local first = tonumber(ARGV[5])
for i = 0, granted - 1 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4] .. (first + i))
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
-- The breaker, as breaker_check reads a closed one (keep the two in step).
local st, fails = '', ''
local rk = 2
if ARGV[6] == '1' then
  st = redis.call('HGET', KEYS[2], 'state') or 'closed'
  fails = redis.call('HGET', KEYS[2], 'fails') or '0'
  rk = 3
end
if #ARGV < 7 then return {granted, 0, 0, st, fails} end
-- The token, as rate_take takes one (keep the two in step).
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[7])
local burst = tonumber(ARGV[8])
local tat = tonumber(redis.call('GET', KEYS[rk]) or '0')
if tat < now_us then tat = now_us end
local wait = 0
if math.floor((now_us - tat + burst * interval) / interval) < 1 then
  wait = tat + interval - burst * interval - now_us
  if wait > tonumber(ARGV[9]) then return {granted, 0, wait, st, fails, now_us} end
end
tat = tat + interval + tonumber(ARGV[10] or '0')
redis.call('SET', KEYS[rk], string.format('%.0f', tat), 'PX', math.floor((tat - now_us) / 1000) + 1000)
return {granted, 1, wait, st, fails, now_us}
