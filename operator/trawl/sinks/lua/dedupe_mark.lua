-- dedupe_mark: record records as written (see dedupe_lib); both keys expire after ARGV[1] seconds, as
-- the set did on every mark.
-- KEYS: 1 the digest hash, 2 the legacy set of hex keys
-- ARGV: 1 ttl seconds, 2 the records' 16-byte digests, packed
-- Returns how many were new.
local dd = dd_open(KEYS[1], KEYS[2], ARGV[2])
for i = 1, dd_size(ARGV[2]) do
  dd_add(dd, dd_digest(ARGV[2], i))
end
local added = dd_flush(dd)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
if dd.has_legacy then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1])) end
return added
