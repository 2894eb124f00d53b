-- note_sink_error: the job's sink is failing; the first failure of a run of failures keeps its time.
-- KEYS: 1 job hash
-- ARGV: 1 message, 2 since (unix seconds)
-- Returns 1, or 0 when the job is gone.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'se', ARGV[1])
redis.call('HSETNX', KEYS[1], 'ses', ARGV[2])
return 1
