-- ack: success of one or many tasks held by one worker. A task whose lease the worker no longer holds
-- (expired and reaped, or released) or whose job is gone (cancelled, expired) is not counted: 0 for it.
-- KEYS: 1 worker hash, 2 pool stats, 3 events, then per job i (1..J): job hash, job history hash
-- ARGV: 1 now, 2 events maxlen, 3 J, 4..3+J job ids, then pairs (job index, task id)
-- Returns one 1/0 per task.
local wk = KEYS[1]
local now = ARGV[1]
local nowf = tonumber(now)
local nj = tonumber(ARGV[3])
local base = 3 + nj
local n = (#ARGV - base) / 2
local fields = {}
for i = 1, n do
  fields[i] = ARGV[3 + tonumber(ARGV[base + 2 * i - 1])] .. '|' .. ARGV[base + 2 * i]
end
local vals = redis.call('HMGET', wk, unpack(fields))
local alive, cnt, tenant = {}, {}, {}
local res, held = {}, {}
local svc, done = 0, 0
for i = 1, n do
  local v = vals[i]
  res[i] = 0
  if v then
    held[#held + 1] = fields[i]
    local ji = tonumber(ARGV[base + 2 * i - 1])
    if alive[ji] == nil then
      local m = redis.call('HMGET', KEYS[2 + 2 * ji], 'prio', 'tn')  -- the job exists: it has a priority
      alive[ji], tenant[ji] = m[1] ~= false, m[2] or ''
      cnt[ji] = 0
    end
    if alive[ji] then
      res[i] = 1
      cnt[ji] = cnt[ji] + 1
      done = done + 1
      svc = svc + (nowf - tonumber(string.sub(v, 1, string.find(v, '|', 1, true) - 1)))
      -- Only fail.lua writes a task's history, as it retries the task with one more failed attempt: a task
      -- on its first attempt ("<claimed_at>|<task>|0|...") has none, and its ack skips the HDEL.
      if string.match(v, '^[^|]*|[^|]*|(%d+)|') ~= '0' then redis.call('HDEL', KEYS[3 + 2 * ji], ARGV[base + 2 * i]) end
    end
  end
end
if #held > 0 then push_many('HDEL', wk, held) end
for ji = 1, nj do
  local c = cnt[ji]
  if c and c > 0 then
    local jk = KEYS[2 + 2 * ji]
    -- A job with tasks still in flight cannot be finished: the last of them checks (one read less per ack).
    if count_inflight_to_done(jk, c, tenant[ji]) <= 0 then
      check_finished(jk, ARGV[3 + ji], now, KEYS[3], ARGV[2])
    end
  end
end
if done > 0 then count_attempts_ended(KEYS[2], 'completed', done, svc) end
return res
