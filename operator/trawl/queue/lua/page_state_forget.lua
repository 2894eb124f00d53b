-- page_state_forget: drop the states of pages an earlier run reported gone and this run's sweep did not find
-- again, each only if it still holds the value the sweep read (a job of the same lineage running meanwhile
-- may have saved the page again).
-- KEYS: 1 the lineage's page-state hash
-- ARGV: field, value read, field, value read, ...
-- Returns how many were dropped.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
