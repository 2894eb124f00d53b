-- signals: a read-only snapshot for the autoscaler, O(active jobs + workers), never a keyspace scan.
-- KEYS: 1 delayed-jobs index, 2 worker deadlines, 3 worker info, 4 pool stats, 5..14 rings 0..9
-- ARGV: 1 prefix, 2 now, 3 due-soon horizon seconds
-- Returns {ready, delayed, delayed due soon, in flight, worker info (flat), pool stats (flat), worker deadlines}
local prefix = ARGV[1]
local ready = 0
for r = 5, 14 do
  for _, job_id in ipairs(redis.call('LRANGE', KEYS[r], 0, -1)) do
    ready = ready + redis.call('LLEN', prefix .. ':j:' .. job_id .. ':r')
  end
end
local delayed, soon = 0, 0
local horizon = tonumber(ARGV[2]) + tonumber(ARGV[3])
for _, job_id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local zk = prefix .. ':j:' .. job_id .. ':z'
  delayed = delayed + redis.call('ZCARD', zk)
  soon = soon + redis.call('ZCOUNT', zk, '-inf', horizon)
end
local inflight = 0
local wd = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #wd, 2 do
  inflight = inflight + redis.call('HLEN', prefix .. ':w:' .. wd[i])
end
return { ready, delayed, soon, inflight, redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4]), wd }
