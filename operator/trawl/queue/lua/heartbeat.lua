-- heartbeat: extend the worker's leases (they share its deadline) and record its activity.
-- With reconcile = 1 the worker lists every task it really holds (processing, or waiting for its ack or
-- release to be retried): a leased task it does not list is an orphan (a claim whose reply never arrived,
-- a release lost in a Redis outage) and goes back to its job's ready list at once, without a stall, so
-- the deadline is only ever extended for tasks a live process will finish.
-- The reply also says whether the worker's pod is cordoned (the autoscaler wants it to empty: it claims
-- nothing new until uncordoned or the operator's cordon set expires).
-- KEYS: 1 worker hash, 2 worker deadlines, 3 worker info, 4 cordoned pods (set)
-- ARGV: 1 now, 2 worker id, 3 lease seconds, 4 reported in flight, 5 draining (0/1), 6 prefix, 7 reconcile (0/1),
--       8.. held fields "<job>|<task>"
-- Returns {leases extended, orphans returned, cordoned (0/1)}
local wk = KEYS[1]
local orphans = 0
if ARGV[7] == '1' then
  local held = {}
  for i = 8, #ARGV do held[ARGV[i]] = true end
  local all = redis.call('HGETALL', wk)
  local gone = {}
  for i = 1, #all, 2 do
    local field = all[i]
    if not held[field] then
      gone[#gone + 1] = field
      local job_id = string.sub(field, 1, string.find(field, '|', 1, true) - 1)
      return_lease(ARGV[6], job_id, all[i + 1], false, ARGV[2], nil, nil, nil, ARGV[1], math.huge)
      orphans = orphans + 1
    end
  end
  if #gone > 0 then push_many('HDEL', wk, gone) end
end
local n = redis.call('HLEN', wk)
if n > 0 then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[3]), ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4] .. '|' .. ARGV[1] .. '|' .. ARGV[5])
local pod = string.match(ARGV[2], '^[^@]*')
return { n, orphans, redis.call('SISMEMBER', KEYS[4], pod) }
