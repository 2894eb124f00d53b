-- page_state_save: save the page state of a refresh job's pages and count each page's label once per job.
-- A value this job wrote before (it begins with the job's tag prefix) was counted when it was first saved:
-- a task redelivered after its save is not counted twice.
-- KEYS: 1 job hash, 2 the lineage's page-state hash
-- ARGV: 1 retain seconds, 2 the job's tag prefix, then per page: field, value, counter field of the job hash
-- Returns the pages saved (0 when the job is gone: its state is not written either).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local prefix = ARGV[2]
local n = 0
for i = 3, #ARGV, 3 do
  local old = redis.call('HGET', KEYS[2], ARGV[i])
  if not old or string.sub(old, 1, #prefix) ~= prefix then
    redis.call('HINCRBY', KEYS[1], ARGV[i + 2], 1)
  end
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  n = n + 1
end
redis.call('EXPIRE', KEYS[2], ARGV[1])
return n
