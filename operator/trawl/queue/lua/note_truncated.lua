-- note_truncated: count a record of the job with an output format cut to its bounds (extract.formats).
-- KEYS: 1 job hash
-- ARGV: none
-- Returns the count, or 0 if the job is gone (the count lives in the job hash and expires with it).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'ftr', 1)
