-- stream_write: append result records to a job's stream, each (job, URL) key once.
-- A job whose hash is gone was cancelled: its late results are dropped, so a cancelled job's stream is not
-- re-created after cancel deleted it.
-- KEYS: 1 stream, 2 dedupe set of written record keys, 3 the job's hash (optional)
-- ARGV: 1 maxlen, 2 ttl of the dedupe set when the stream has none, then (key, url, json) triples
-- Returns how many records were written.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local written = 0
for i = 3, #ARGV, 3 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'key', ARGV[i], 'url', ARGV[i + 1], 'data', ARGV[i + 2])
    written = written + 1
  end
end
if written > 0 then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  else
    redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
  end
end
return written
