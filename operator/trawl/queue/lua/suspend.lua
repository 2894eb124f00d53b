-- suspend: stop handing out the job's tasks (leave its ring); in-flight tasks finish normally.
-- KEYS: 1 job hash, 2 events, 3..12 rings 0..9
-- ARGV: 1 now, 2 events maxlen, 3 job id
local prio = redis.call('HGET', KEYS[1], 'prio')
if not prio then return 0 end
redis.call('HSET', KEYS[1], 'sus', 1)
redis.call('LREM', KEYS[3 + tonumber(prio)], 0, ARGV[3])
event(KEYS[2], ARGV[2], 'type', 'suspended', 'job', ARGV[3], 't', ARGV[1])
return 1
