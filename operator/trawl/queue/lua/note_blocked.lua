-- note_blocked: a response to the job was blocked by its site (the job's session.block rules).
-- KEYS: 1 job hash, 2 the job's blocked-by-domain hash
-- ARGV: 1 domain, 2 most domains the hash keeps
-- Counts the job's blocks (field blk of the job hash) and its domain's, the latter for at most ARGV[2]
-- domains (a block of another domain is still counted in blk). Returns the job's count, or 0 when the job
-- is gone (the notes follow the job hash's expiry).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HLEN', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return redis.call('HINCRBY', KEYS[1], 'blk', 1)
