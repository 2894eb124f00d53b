-- claim: lease up to N tasks to a worker. In one script: reap what expired (return the tasks of workers whose
-- lease deadline passed: stalled detection), promote what is due (delayed tasks back to ready), then lease:
-- pop across priority levels (highest first, but a level that waited longer than the aging bound first);
-- within a level, share among the tenants with work there by weight, each within its quotas (weighted fair
-- queueing over their passes: claims taken / weight), and within a tenant round-robin over the jobs in its
-- ring (each job gets an equal share of what is left), so a small job is served in the next claim however
-- big the others are, and a tenant coming back gets its share from the next claim.
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

-- Tenants. Each has a row in P:tcfg ("weight|in flight|requests per second|pages per day|URLs queued|browser
-- seconds per day", "*": the default) and its usage in P:tn:<t>. Rows are read once per claim; the last two
-- fields are not enforced here (enqueue.lua: URLs queued; the operator: browser seconds).
local tcfg = prefix .. ':tcfg'
local nowf = tonumber(now)
local day = tostring(math.floor(nowf / 86400))
local limits_of = {}
local function limits(t)
  local l = limits_of[t]
  if l then return l end
  local rows = redis.call('HMGET', tcfg, t, '*')
  local w, inf, rps, ppd = string.match(rows[1] or rows[2] or '1|||', '^([^|]*)|([^|]*)|([^|]*)|([^|]*)')
  l = { w = tonumber(w) or 1, inf = tonumber(inf), rps = tonumber(rps), ppd = tonumber(ppd) }
  l.limited = (l.inf or l.rps or l.ppd) and true or false
  limits_of[t] = l
  return l
end

-- How many tasks tenant t may claim now (at most `want`), the quota that binds below `want` (nil: none)
-- and its figure. The rate quota is a token bucket holding one second of requests (at least 1).
local function headroom(t, l, want)
  if not l.limited then return want, nil, nil end
  local u = redis.call('HMGET', prefix .. ':tn:' .. t, 'clm', 'tk', 'tt', 'day', 'pd', 'hold', 'out')
  l.held = u[6] and true or false
  local cap, why, msg = want, nil, nil
  if l.inf then
    local inf = tonumber(u[1] or '0') - tonumber(u[7] or '0')
    if l.inf - inf < cap then cap, why, msg = l.inf - inf, 'inFlight', inf .. '/' .. l.inf .. ' in flight' end
  end
  if l.rps then
    local burst = math.max(1, l.rps)
    local tokens = burst
    if u[3] then tokens = math.min(burst, tonumber(u[2]) + (nowf - tonumber(u[3])) * l.rps) end
    local c = math.floor(tokens)
    if c < cap then cap, why, msg = c, 'requestsPerSecond', l.rps .. ' requests/s' end
  end
  if l.ppd then
    local pd = u[4] == day and tonumber(u[5]) or 0
    if l.ppd - pd < cap then cap, why, msg = l.ppd - pd, 'pagesPerDay', pd .. '/' .. l.ppd .. ' pages today' end
  end
  return math.max(0, cap), why, msg
end

-- Count k claimed tasks against tenant t (in flight, total, today's pages, rate tokens) and note whether a
-- quota bound it (hold: since when, kept while it binds; cleared when a claim took what it wanted).
local function count_tenant(t, l, k, why, msg)
  local tk = prefix .. ':tn:' .. t
  if k > 0 then
    redis.call('HINCRBY', tk, 'clm', k)
    if l.ppd then
      if redis.call('HGET', tk, 'day') ~= day then redis.call('HSET', tk, 'day', day, 'pd', 0) end
      redis.call('HINCRBY', tk, 'pd', k)
    end
    if l.rps then
      local u = redis.call('HMGET', tk, 'tk', 'tt')
      local burst = math.max(1, l.rps)
      local tokens = burst
      if u[2] then tokens = math.min(burst, tonumber(u[1]) + (nowf - tonumber(u[2])) * l.rps) end
      redis.call('HSET', tk, 'tk', tokens - k, 'tt', now)
    end
  end
  if why then
    redis.call('HSET', tk, 'hold', why, 'hm', msg)
    redis.call('HSETNX', tk, 'hs', now)
  elseif k > 0 and l.held then  -- only a limited tenant is ever held (headroom read whether it was)
    redis.call('HDEL', tk, 'hold', 'hm', 'hs')
  end
end

-- Pop up to `need` ready tasks from tenant t's ring at prio, round-robin over its jobs (each job in the ring
-- gets an equal share of what is left; a job that is gone, or whose ready list ran empty, leaves the ring).
-- Each task is appended to `out` (job id, payload) and its lease to `fields`. Returns the number taken and
-- whether the ring ran empty.
local function take_from_ring(ring, need, out, fields)
  local taken = 0
  local len = redis.call('LLEN', ring)
  while need > 0 do
    if len == 0 then return taken, true end
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
      len = len - 1
    else
      local k = #items
      for i = 1, k do
        local p = items[i]
        fields[#fields + 1] = job_id .. '|' .. task_id_of(p)
        fields[#fields + 1] = now .. '|' .. p
        out[#out + 1] = job_id
        out[#out + 1] = p
      end
      local left = count_ready_to_inflight(jk, k)
      if redis.call('HSETNX', jk, 'fc', now) == 1 then
        event(KEYS[7], ARGV[8], 'type', 'started', 'job', job_id, 't', now)
      end
      need = need - k
      taken = taken + k
      if left <= 0 then
        redis.call('LPOP', ring)
        len = len - 1
      else
        redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
      end
    end
  end
  return taken, len == 0
end

-- Share `need` among candidates c = {pass, w (weight), cap}, sorted by pass, by weighted fair queueing: the
-- water level L at which sum((L - pass) * w) over the candidates below it reaches need gives each
-- floor((L - pass) * w); a candidate whose share would pass its cap gets its cap and the level is found
-- again for the rest; the units the floors leave go one each in pass order. Sets c.give; O(candidates) per
-- capped candidate (most claims: one pass).
local function allocate(cands, need)
  for _, c in ipairs(cands) do c.give, c.fixed = 0, false end
  local left = need
  for _ = 1, #cands do
    local free, W, S, L = {}, 0, 0, nil
    for _, c in ipairs(cands) do if not c.fixed then free[#free + 1] = c end end
    if #free == 0 or left <= 0 then break end
    local n = #free
    for k, c in ipairs(free) do
      W, S = W + c.w, S + c.pass * c.w
      L = (left + S) / W
      if not free[k + 1] or L <= free[k + 1].pass then n = k; break end
    end
    local capped = false
    for k = 1, n do
      local c = free[k]
      if (L - c.pass) * c.w >= c.cap then c.give, c.fixed, capped = c.cap, true, true; left = left - c.cap end
    end
    if not capped then
      for k = 1, n do
        local c = free[k]
        c.give = math.floor((L - c.pass) * c.w)
        left = left - c.give
      end
      for k = 1, n do
        if left <= 0 then break end
        local c = free[k]
        if c.give < c.cap then c.give, left = c.give + 1, left - 1 end
      end
      break
    end
  end
end

-- Tenants one round of a claim serves at most: the lowest passes. Serving a tenant costs a handful of calls
-- whatever it takes, so a claim over many tenants gives a few of them several tasks each rather than many of
-- them one each; the passes make it even over the next claims (a tenant served now waits until the others
-- caught up), so shares over any window of a few claims per tenant follow the weights all the same.
local TENANTS_PER_CLAIM = 8
-- ... and for smaller claims, at least this many tasks per tenant served (a claim of 16 serves 4 tenants).
local TASKS_PER_TENANT = 4

-- Serve priority prio: the tenants with work there, by weight (allocate), each within its quotas; a tenant
-- that took fewer than it was given (its ring ran empty) leaves its share to the others in the next round
-- (work-conserving, at most 8 rounds). A round reads the TENANTS_PER_CLAIM lowest passes not held by a quota
-- (O(those + the held ones before them) of the tenant queue, never all tenants). Returns what is still
-- needed.
local function serve(prio, need, out, fields, alone)
  local tq = prefix .. ':tq:' .. prio
  local served, left_queue = false, false
  for _ = 1, 8 do
    if need <= 0 then break end
    local cands, start, others = {}, 0, true
    local want = math.min(math.ceil(need / TASKS_PER_TENANT), TENANTS_PER_CLAIM)
    while #cands < want do
      -- One entry more than a page: whether the queue goes on (and, on the first page, whether this
      -- tenant is alone in it).
      local page = redis.call('ZRANGE', tq, start, start + want, 'WITHSCORES')
      if start == 0 then others = #page > 2 end
      for i = 1, math.min(#page, 2 * want), 2 do
        local t = page[i]
        local l = limits(t)
        local cap, why, msg = headroom(t, l, need)
        if cap > 0 then
          cands[#cands + 1] = { t = t, l = l, pass = tonumber(page[i + 1]), w = l.w, cap = cap, why = why, msg = msg }
        else
          count_tenant(t, l, 0, why, msg)
        end
      end
      start = start + want
      if #page <= 2 * want then break end
    end
    if #cands == 0 then break end
    allocate(cands, need)
    local took = 0
    for _, c in ipairs(cands) do
      if c.give > 0 then
        local k, empty = take_from_ring(ring_key(prefix, prio, c.t), c.give, out, fields)
        took, need = took + k, need - k
        count_tenant(c.t, c.l, k, c.give >= c.cap and c.why or nil, c.msg)
        if empty then
          tenant_leave(prefix, prio, c.t)
          left_queue = true
        elseif k > 0 and others then  -- a tenant alone in the queue has no one to be fair to
          redis.call('ZINCRBY', tq, k / c.w, c.t)
        end
      end
    end
    if took == 0 then break end
    served = true
  end
  -- When this priority was last served, for aging: only needed beside other priorities (tenant_activate
  -- sets it for a priority that is alone when another one arrives).
  if served and not alone and not (left_queue and redis.call('EXISTS', tq) == 0) then
    redis.call('HSET', prefix .. ':lsv', prio, now)
  end
  return need
end

-- Lease: every priority with work, highest first; a priority whose work waited longer than the aging bound
-- (P:tcfg "aging", seconds) goes first, oldest first, so the lowest class is never starved for longer.
local function lease(need, out, fields)
  if need <= 0 then return end
  local levels = redis.call('HGETALL', prefix .. ':lsv')
  if #levels == 0 then return end
  if #levels == 2 then  -- one priority with work (the usual case): nothing to order
    serve(tonumber(levels[1]), need, out, fields, true)
    return
  end
  local aging = tonumber(redis.call('HGET', tcfg, 'aging') or '300')
  local aged, waiting = {}, {}
  for i = 1, #levels, 2 do
    local p, since = tonumber(levels[i]), tonumber(levels[i + 1])
    if nowf - since >= aging then aged[#aged + 1] = { p, since } else waiting[#waiting + 1] = p end
  end
  table.sort(aged, function(a, b) return a[2] < b[2] end)
  table.sort(waiting, function(a, b) return a > b end)
  for _, a in ipairs(aged) do
    need = serve(a[1], need, out, fields, false)
    if need <= 0 then return end
  end
  for _, p in ipairs(waiting) do
    need = serve(p, need, out, fields, false)
    if need <= 0 then return end
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
