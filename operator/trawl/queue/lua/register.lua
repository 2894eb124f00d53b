-- register: create a job (counters at zero) or update its mutable configuration. Priority and tenant are fixed
-- at creation (the job's tasks sit in that tenant's ring at that priority).
-- KEYS: 1 job hash, 2 job spec, 3 events, 4 tenants (set)
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 spec JSON, 5 priority, 6 max pages ('' = none), 7 max depth,
--       8 dedupe within the job (0/1: crawl jobs, and jobs whose seeds may repeat), 9 dedupe across jobs
--       (0/1), 10 dedupe window seconds, 11 retry policy JSON, 12 dead-letter records kept ('' = all),
--       13 tenant ('' = none), 14 Bloom filter "<bits>|<hashes>" ('' = exact dedupe; fixed at creation: a
--       filter changed mid-crawl would forget what it had seen)
local jk = KEYS[1]
redis.call('SET', KEYS[2], ARGV[4])
local created = 0
if redis.call('EXISTS', jk) == 0 then
  redis.call('HSET', jk, 'prio', ARGV[5], 'tot', 0, 'pen', 0, 'inf', 0, 'ret', 0, 'suc', 0, 'dead', 0,
    'cur', 0, 'seq', 0, 'ed', 0, 'sus', 0, 'reg', ARGV[1], 'dg', 1, 'tn', ARGV[13] or '')
  redis.call('SADD', KEYS[4], ARGV[13] or '')
  if ARGV[14] and ARGV[14] ~= '' then redis.call('HSET', jk, 'bf', ARGV[14]) end
  event(KEYS[3], ARGV[2], 'type', 'registered', 'job', ARGV[3], 't', ARGV[1])
  created = 1
end
redis.call('HSET', jk, 'maxd', ARGV[7], 'crawl', ARGV[8], 'xd', ARGV[9], 'xdw', ARGV[10], 'retry', ARGV[11])
if ARGV[6] == '' then
  redis.call('HDEL', jk, 'maxp')
else
  redis.call('HSET', jk, 'maxp', ARGV[6])
end
if ARGV[12] == nil or ARGV[12] == '' then
  redis.call('HDEL', jk, 'dlmax')
else
  redis.call('HSET', jk, 'dlmax', ARGV[12])
end
return created
