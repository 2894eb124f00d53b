-- heartbeat: extend every lease the worker holds (they share the worker's deadline) and record activity.
-- Leases that expired but were not reaped yet are extended too: nobody else holds those tasks.
-- KEYS: 1 worker hash, 2 worker deadlines, 3 worker info
-- ARGV: 1 now, 2 worker id, 3 lease seconds, 4 reported in flight, 5 draining (0/1)
local n = redis.call('HLEN', KEYS[1])
if n > 0 then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[3]), ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4] .. '|' .. ARGV[1] .. '|' .. ARGV[5])
return n
