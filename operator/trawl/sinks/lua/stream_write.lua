-- stream_write: append result records to a job's stream, each (job, URL) key once (dedupe_lib, put in
-- front of this script).
-- A job whose hash is gone was cancelled: its late results are dropped, so a cancelled job's stream is not
-- re-created after cancel deleted it.
-- KEYS: 1 stream, 2 digest hash of written records, 3 legacy set of written hex keys, 4 the job's hash
--       (optional)
-- ARGV: 1 maxlen, 2 ttl of the dedupe keys when the stream has none, 3 the records' 16-byte digests, packed,
--       then a (key, url, json) triple per record, in the same order
-- Returns how many records were written.
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 0 then return 0 end
local dd = dd_open(KEYS[2], KEYS[3], ARGV[3])
for i = 1, dd_size(ARGV[3]) do
  if dd_add(dd, dd_digest(ARGV[3], i)) then
    local at = 3 * i + 1
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'key', ARGV[at], 'url', ARGV[at + 1], 'data', ARGV[at + 2])
  end
end
local written = dd_flush(dd)
if written > 0 then
  local ttl = redis.call('PTTL', KEYS[1])
  for k = 2, 3 do
    if k == 2 or dd.has_legacy then
      if ttl > 0 then
        redis.call('PEXPIRE', KEYS[k], ttl)
      else
        redis.call('EXPIRE', KEYS[k], tonumber(ARGV[2]))
      end
    end
  end
end
return written
