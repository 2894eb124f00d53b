-- breaker_record: the outcome of a request to the domain; opens the breaker at the threshold.
-- KEYS: 1 breaker hash
-- ARGV: 1 now, 2 ok (1/0), 3 reason, 4 threshold, 5 open seconds, 6 max open seconds, 7 ttl
-- Returns the new state.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local now = tonumber(ARGV[1])
local st = redis.call('HGET', KEYS[1], 'state') or 'closed'
if ARGV[2] == '1' then
  if st == 'open' then return st end
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) end
  return 'closed'
end
local fails = redis.call('HINCRBY', KEYS[1], 'fails', 1)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
local open_for = tonumber(ARGV[5])
if st == 'half' then
  open_for = math.min(tonumber(ARGV[6]), 2 * tonumber(redis.call('HGET', KEYS[1], 'open_for') or ARGV[5]))
elseif st == 'open' or fails < tonumber(ARGV[4]) then
  return st
end
redis.call('HSET', KEYS[1], 'state', 'open', 'until', tostring(now + open_for), 'open_for', tostring(open_for),
  'reason', ARGV[3], 'opened_at', ARGV[1])
return 'open'
