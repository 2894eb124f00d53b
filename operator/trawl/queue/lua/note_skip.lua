-- note_skip: record a crawl link robots.txt disallows (acked without a fetch) beside its job, once per task.
-- KEYS: 1 job hash, 2 the job's skip hash
-- ARGV: 1 task id, 2 JSON {url, reason, time}
-- Returns 1 if newly recorded, 0 if recorded before or the job is gone (the note follows the job hash's expiry).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local added = redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return added
