-- claim: lease up to N tasks to a worker. In one script: reap what expired (return the tasks of workers whose
-- lease deadline passed: stalled detection), promote what is due (delayed tasks back to ready), then lease:
-- pop across priority levels (highest first) and, within a level, round-robin over the jobs in that level's
-- ring (each job in the ring gets an equal share of what is left), so a small job is served in the next
-- claim however big the others are.
-- A worker's leases share one deadline (its own): claiming and heartbeats push it to now + lease.
-- A retried claim with the same nonce replays the previous reply instead of leasing more tasks.
-- A worker whose pod the autoscaler cordoned leases nothing: it learns so from this claim, not from its
-- next heartbeat (which also says when the cordon lifts).
-- KEYS: 1 worker hash, 2 worker claim-replay hash, 3 worker deadlines, 4 worker info, 5 delayed-jobs index,
--       6 pool stats, 7 events, 8..17 rings 0..9, 18 cordoned pods (set)
-- ARGV: 1 prefix, 2 now, 3 worker id, 4 count, 5 lease seconds, 6 max stalls, 7 nonce, 8 events maxlen
-- Returns {deadline, cordoned (0/1), job id, payload, job id, payload, ...}
local prefix, now, worker = ARGV[1], ARGV[2], ARGV[3]
local wk, ck = KEYS[1], KEYS[2]
local nonce = ARGV[7]

-- The reply of this worker's previous claim if it had this nonce (the claim is a retry after a lost reply),
-- else nil. The tasks it leased are those stamped with that claim's time.
local function replay()
  local prev = redis.call('HMGET', ck, 'n', 't', 'd')
  if prev[1] ~= nonce then return nil end
  local out = { prev[3], 0 }
  local stamp = prev[2] .. '|'
  local all = redis.call('HGETALL', wk)
  for i = 1, #all, 2 do
    local v = all[i + 1]
    if string.sub(v, 1, #stamp) == stamp then
      out[#out + 1] = string.sub(all[i], 1, string.find(all[i], '|', 1, true) - 1)
      out[#out + 1] = string.sub(v, #stamp + 1)
    end
  end
  return out
end

-- Pop up to `need` ready tasks, highest priority first and round-robin over each ring's jobs (a job that is
-- gone, or whose ready list ran empty, leaves its ring). Each task is appended to `out` (job id, payload) and
-- its lease to `fields` (worker hash field, value).
local function lease(need, out, fields)
  for r = 17, 8, -1 do
    if need <= 0 then break end
    local ring = KEYS[r]
    while need > 0 do
      local len = redis.call('LLEN', ring)
      if len == 0 then break end
      local job_id = redis.call('LINDEX', ring, 0)
      local jk = prefix .. ':j:' .. job_id
      local rk = jk .. ':r'
      local items = false
      if redis.call('EXISTS', jk) == 1 then
        items = redis.call('LPOP', rk, math.ceil(need / len))
      else
        redis.call('DEL', rk)
      end
      if not items then
        redis.call('LPOP', ring)
      else
        local k = #items
        for i = 1, k do
          local p = items[i]
          fields[#fields + 1] = job_id .. '|' .. task_id_of(p)
          fields[#fields + 1] = now .. '|' .. p
          out[#out + 1] = job_id
          out[#out + 1] = p
        end
        count_ready_to_inflight(jk, k)
        if redis.call('HSETNX', jk, 'fc', now) == 1 then
          event(KEYS[7], ARGV[8], 'type', 'started', 'job', job_id, 't', now)
        end
        need = need - k
        if redis.call('EXISTS', rk) == 0 then
          redis.call('LPOP', ring)
        else
          redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
        end
      end
    end
  end
end

if nonce ~= '' then
  local out = replay()
  if out then return out end
end
reap_expired(prefix, KEYS[3], KEYS[4], KEYS[6], KEYS[7], ARGV[8], now, tonumber(ARGV[6]), 16)
promote_due(prefix, KEYS[5], now, 16, 1000)
local deadline = tostring(tonumber(now) + tonumber(ARGV[5]))
local cordoned = redis.call('SISMEMBER', KEYS[18], string.match(worker, '^[^@]*'))
local out, fields = { deadline, cordoned }, {}
lease(cordoned == 1 and 0 or tonumber(ARGV[4]), out, fields)
if #fields > 0 then
  push_many('HSET', wk, fields)
end
if #fields > 0 or redis.call('EXISTS', wk) == 1 then
  redis.call('ZADD', KEYS[3], deadline, worker)
end
if nonce ~= '' and #fields > 0 then
  redis.call('HSET', ck, 'n', nonce, 't', now, 'd', deadline)
end
return out
