-- resume: hand out the job's tasks again (rejoin its ring if it has ready tasks).
-- KEYS: 1 job hash, 2 ready list, 3 events, 4..13 rings 0..9 (declared: every ring key is built from the prefix)
-- ARGV: 1 now, 2 events maxlen, 3 job id
local meta = redis.call('HMGET', KEYS[1], 'prio', 'tn')
if not meta[1] then return 0 end
redis.call('HSET', KEYS[1], 'sus', 0)
ring_leave(KEYS[1], ARGV[3], meta[1], meta[2])
ring_join(KEYS[1], ARGV[3], redis.call('LLEN', KEYS[2]) > 0 and 0 or 1, meta[1], '0', meta[2], ARGV[1])
event(KEYS[3], ARGV[2], 'type', 'resumed', 'job', ARGV[3], 't', ARGV[1])
return 1
