-- give_quota: give page quota taken from another shard to this shard's part of a capped job.
-- KEYS: 1 job hash (this shard's)
-- ARGV: 1 amount
-- Returns the amount given (0 when the job is gone).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if not redis.call('HGET', KEYS[1], 'maxp') then return 0 end
redis.call('HINCRBY', KEYS[1], 'maxp', ARGV[1])
return tonumber(ARGV[1])
