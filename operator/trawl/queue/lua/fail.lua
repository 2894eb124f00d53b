-- fail: a failed attempt. The client decided (from the job's retry policy) between 'retry' at a time and
-- 'dead'; the script applies it if the worker still holds the lease and the job exists.
-- KEYS: 1 worker hash, 2 job hash, 3 delayed zset, 4 delayed-jobs index, 5 history hash, 6 pool stats, 7 events,
--       8 dead-letter hash, 9 dead-letter time index
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 task id, 5 'retry'|'dead', 6 retry at, 7 error class, 8 message,
--       9 history limit
-- Returns {held (0/1), dead-lettered (0/1)}
local wk, jk = KEYS[1], KEYS[2]
local now, job_id = ARGV[1], ARGV[3]
local field = job_id .. '|' .. ARGV[4]
local v = redis.call('HGET', wk, field)
if not v then return { 0, 0 } end
redis.call('HDEL', wk, field)
if redis.call('EXISTS', jk) == 0 then return { 0, 0 } end
local sep = string.find(v, '|', 1, true)
local claimed = tonumber(string.sub(v, 1, sep - 1))
local tid, a, s, d, url = split_payload(string.sub(v, sep + 1))
a = a + 1
local hist = decode_list(redis.call('HGET', KEYS[5], tid))
hist[#hist + 1] = { attempt = a, errorClass = ARGV[7], message = ARGV[8], time = tonumber(now) }
local limit = tonumber(ARGV[9])
while #hist > limit do table.remove(hist, 1) end
count_attempts_ended(KEYS[6], 'failed', 1, tonumber(now) - claimed)
if ARGV[5] == 'retry' then
  redis.call('ZADD', KEYS[3], ARGV[6], make_payload(tid, a, s, d, url))
  redis.call('ZADD', KEYS[4], 'LT', ARGV[6], job_id)
  redis.call('HSET', KEYS[5], tid, cjson.encode(hist))
  count_inflight_to_delayed(jk, 1)
  return { 1, 0 }
end
dead_letter(jk, KEYS[8], KEYS[9], KEYS[5], job_id, tid, a, s, d, url, ARGV[7], ARGV[8], now, hist, KEYS[6], KEYS[7],
  ARGV[2])
check_finished(jk, job_id, now, KEYS[7], ARGV[2])
return { 1, 1 }
