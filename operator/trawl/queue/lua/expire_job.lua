-- expire_job: retention. Every key of the job expires after ARGV[1] seconds; ring and delayed-index
-- entries left behind are dropped by the next claim. The pool's dead-letter count forgets the job's now.
-- KEYS: 1..9 the job's keys (job hash first; see Keys.job_keys), 10 pool stats
-- ARGV: 1 ttl seconds
local dead = redis.call('HGET', KEYS[1], 'dead')
if dead and redis.call('HGET', KEYS[1], 'exp') ~= '1' then
  count_dead_forgotten(KEYS[10], tonumber(dead))
  redis.call('HSET', KEYS[1], 'exp', 1)
end
local n = 0
for i = 1, 9 do n = n + redis.call('EXPIRE', KEYS[i], ARGV[1]) end
-- A crawl's Bloom filter (Keys.bloom: the seen set's name + ':bf', in its slot) goes with them.
n = n + redis.call('EXPIRE', KEYS[7] .. ':bf', ARGV[1])
return n
