-- resume: hand out the job's tasks again (rejoin its ring if it has ready tasks).
-- KEYS: 1 job hash, 2 ready list, 3 events, 4..13 rings 0..9
-- ARGV: 1 now, 2 events maxlen, 3 job id
local prio = redis.call('HGET', KEYS[1], 'prio')
if not prio then return 0 end
redis.call('HSET', KEYS[1], 'sus', 0)
local ring = KEYS[4 + tonumber(prio)]
redis.call('LREM', ring, 0, ARGV[3])
if redis.call('LLEN', KEYS[2]) > 0 then redis.call('RPUSH', ring, ARGV[3]) end
event(KEYS[3], ARGV[2], 'type', 'resumed', 'job', ARGV[3], 't', ARGV[1])
return 1
