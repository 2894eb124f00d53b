-- suspend: stop handing out the job's tasks (leave its ring); in-flight tasks finish normally.
-- KEYS: 1 job hash, 2 events, 3..12 rings 0..9 (declared: every ring key is built from the prefix)
-- ARGV: 1 now, 2 events maxlen, 3 job id
local meta = redis.call('HMGET', KEYS[1], 'prio', 'tn')
if not meta[1] then return 0 end
redis.call('HSET', KEYS[1], 'sus', 1)
ring_leave(KEYS[1], ARGV[3], meta[1], meta[2])
event(KEYS[2], ARGV[2], 'type', 'suspended', 'job', ARGV[3], 't', ARGV[1])
return 1
