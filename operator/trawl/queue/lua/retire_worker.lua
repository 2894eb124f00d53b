-- retire_worker: forget a worker that holds no lease (graceful shutdown). Returns 0 if it still holds some.
-- KEYS: 1 worker hash, 2 claim-replay hash, 3 worker deadlines, 4 worker info
-- ARGV: 1 worker id
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
