-- release: give a leased task back without spending an attempt: to the front of the ready list, or to
-- the delayed set until now + delay (rate-limit deferral, Retry-After without an attempt).
-- KEYS: 1 worker hash, 2 job hash, 3 ready list, 4 delayed zset, 5 delayed-jobs index, 6..15 rings 0..9 (declared: every ring key is built from the prefix)
-- ARGV: 1 now, 2 job id, 3 task id, 4 delay seconds
local wk, jk = KEYS[1], KEYS[2]
local field = ARGV[2] .. '|' .. ARGV[3]
local v = redis.call('HGET', wk, field)
if not v then return 0 end
redis.call('HDEL', wk, field)
local meta = redis.call('HMGET', jk, 'prio', 'sus', 'tn')
if not meta[1] then return 0 end
local p = string.sub(v, string.find(v, '|', 1, true) + 1)
local delay = tonumber(ARGV[4])
if delay > 0 then
  local at = tonumber(ARGV[1]) + delay
  redis.call('ZADD', KEYS[4], at, p)
  redis.call('ZADD', KEYS[5], 'LT', at, ARGV[2])
  count_inflight_to_delayed(jk, 1)
else
  local len = redis.call('LPUSH', KEYS[3], p)
  count_inflight_to_ready(jk, 1)
  ring_join(jk, ARGV[2], len - 1, meta[1], meta[2], meta[3], ARGV[1])
end
return 1
