-- signals: a snapshot for the autoscaler, O(active jobs + workers), never a keyspace scan; it writes only to
-- adopt the rings of jobs queued before tenants (once).
-- KEYS: 1 delayed-jobs index, 2 worker deadlines, 3 worker info, 4 pool stats, 5..14 rings 0..9 of the tenant ''
-- ARGV: 1 prefix, 2 now, 3 due-soon horizon seconds
-- Returns {ready, delayed, delayed due soon, in flight, worker info (flat), pool stats (flat), worker deadlines,
--          held (ready tasks of tenants a quota holds back), leases per worker (flat: id, count)}
-- A worker's load is the larger of what its last heartbeat reported and the leases it holds now: a claim
-- made since that heartbeat counts at once, so the autoscaler never takes a worker that just claimed for
-- an idle one (and removes it with a task in hand).
local prefix = ARGV[1]
-- Jobs queued before tenants existed sit in the rings of tenant "" without a tenant queue: once per data set
-- (P:tv) the first snapshot enters such rings into their tenant queue (the operator takes one every pool poll,
-- so claims see them within one poll of an upgrade).
if redis.call('SET', prefix .. ':tv', '1', 'NX') then
  for p = 0, 9 do
    if redis.call('LLEN', KEYS[5 + p]) > 0 and not redis.call('ZSCORE', prefix .. ':tq:' .. p, '') then
      tenant_activate(prefix, p, '', ARGV[2])
    end
  end
end
-- Ready work, by tenant: a tenant a quota holds back (P:tn:<t> hold) counts as held, not ready, so the
-- autoscaler never adds workers for work that may not run now.
local ready, held = 0, 0
local is_held = {}
for p = 0, 9 do
  for _, t in ipairs(redis.call('ZRANGE', prefix .. ':tq:' .. p, 0, -1)) do
    local n = 0
    local ring = (t == '') and KEYS[5 + p] or (prefix .. ':ring:' .. p .. ':' .. t)
    for _, job_id in ipairs(redis.call('LRANGE', ring, 0, -1)) do
      n = n + redis.call('LLEN', prefix .. ':j:' .. job_id .. ':r')
    end
    if is_held[t] == nil then is_held[t] = redis.call('HEXISTS', prefix .. ':tn:' .. t, 'hold') == 1 end
    if is_held[t] then held = held + n else ready = ready + n end
  end
end
local delayed, soon = 0, 0
local horizon = tonumber(ARGV[2]) + tonumber(ARGV[3])
for _, job_id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local zk = prefix .. ':j:' .. job_id .. ':z'
  delayed = delayed + redis.call('ZCARD', zk)
  soon = soon + redis.call('ZCOUNT', zk, '-inf', horizon)
end
local inflight, leases = 0, {}
local wd = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #wd, 2 do
  local n = redis.call('HLEN', prefix .. ':w:' .. wd[i])
  inflight = inflight + n
  leases[#leases + 1] = wd[i]
  leases[#leases + 1] = n
end
return { ready, delayed, soon, inflight, redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4]), wd, held,
         leases }
