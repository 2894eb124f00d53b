-- breaker_check: may a request to the domain go now? A half-open breaker whose probe holder went silent
-- for 60 s lets another worker probe.
-- KEYS: 1 breaker hash
-- ARGV: 1 now, 2 worker
-- Returns {state, until, reason, fails}: state 'closed', 'open' (wait until), or 'probe' (the caller's
-- request is the probe).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local st = redis.call('HGET', KEYS[1], 'state')
if not st or st == 'closed' then return {'closed', '0', '', redis.call('HGET', KEYS[1], 'fails') or '0'} end
local now = tonumber(ARGV[1])
local untl = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
local reason = redis.call('HGET', KEYS[1], 'reason') or ''
if st == 'open' and now < untl then return {'open', tostring(untl), reason, '1'} end
if st == 'half' then
  local probe_at = tonumber(redis.call('HGET', KEYS[1], 'probe_at') or '0')
  if now - probe_at < 60 then return {'open', tostring(now + 1), reason, '1'} end
end
redis.call('HSET', KEYS[1], 'state', 'half', 'probe_at', ARGV[1], 'prober', ARGV[2])
return {'probe', '0', reason, '1'}
