-- cancel: delete every key of the job: O(size of the job). Its leased tasks stay in their workers' hashes
-- only until the worker acks, fails or releases them (discarded, reported as lost) or its lease is reaped.
-- KEYS: 1..9 the job's keys (job hash first; see Keys.job_keys), 10 delayed-jobs index, 11 pool stats,
--       12 events, 13..22 rings 0..9 (declared: every ring key is built from the prefix)
-- ARGV: 1 now, 2 events maxlen, 3 job id
-- Its tasks stop counting for its tenant now: those in flight (their late acks find no job and count
-- nothing) and those ready or delayed.
local m = redis.call('HMGET', KEYS[1], 'prio', 'dead', 'exp', 'tn', 'inf', 'pen', 'ret')
if m[1] then
  ring_leave(KEYS[1], ARGV[3], m[1], m[4])
  tenant_count(KEYS[1], -tonumber(m[5] or '0'), -(tonumber(m[6] or '0') + tonumber(m[7] or '0')))
  if m[3] ~= '1' then count_dead_forgotten(KEYS[11], tonumber(m[2] or '0')) end
end
redis.call('ZREM', KEYS[10], ARGV[3])
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[7] .. ':bf')
event(KEYS[12], ARGV[2], 'type', 'cancelled', 'job', ARGV[3], 't', ARGV[1])
if m[1] then return 1 end
return 0
