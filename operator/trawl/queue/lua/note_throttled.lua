-- note_throttled: a domain's circuit breaker held back the job's tasks until a time.
-- KEYS: 1 job hash, 2 the job's breaker note hash
-- ARGV: 1 domain, 2 JSON {reason, until}
-- Returns 1, or 0 when the job is gone (the note follows the job hash's expiry).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
