-- seed_mark: record how far the operator enqueued a job's seed stream over a sharded pool: its position
-- in the stream and each shard's seed cursor at that position (ShardedQueue.enqueue_seeds reads it back
-- to continue there). Nothing happens for a job that is gone, so a cancelled job's hash is never remade.
-- KEYS: 1 job hash (the home shard's)
-- ARGV: 1 the mark, "<position>,<cursor of shard 0>,<cursor of shard 1>,..."
-- Returns 1 when recorded, 0 when the job is gone.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'sm', ARGV[1])
return 1
