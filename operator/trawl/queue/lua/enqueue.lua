-- enqueue: add seed URLs (depth 0) ARGV[5..] whose seed indexes start at ARGV[4]. The job's cursor
-- ('cur': seeds processed so far) makes it idempotent: indexes below the cursor are skipped, so an
-- enqueuer that restarts from index 0 after a crash adds nothing twice. A gap (start beyond the cursor)
-- is an error. An empty start index appends at the cursor (callers adding URLs one call at a time). Returns the number added, or -1 when the job does not exist (never registered or cancelled).
-- KEYS: 1 job hash, 2 ready list, 3 seen set, 4 cross-job dedupe zset, 5 events, 6..15 rings 0..9 (declared: every ring key is built from the prefix),
--   16 pool stats
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 start index ('' = the cursor), 5.. URLs
local jk = KEYS[1]
local m = redis.call('HMGET', jk, 'seq', 'tot', 'crawl', 'maxp', 'xd', 'xdw', 'sus', 'cur', 'prio', 'dg', 'tn')
if not m[1] then return -1 end
local cur = tonumber(m[8])
local start = ARGV[4] == '' and cur or tonumber(ARGV[4])
if start > cur then
  return redis.error_reply('ERR trawl enqueue gap: next seed index is ' .. cur .. ', got ' .. start)
end
local first = 5 + (cur - start)
if first > #ARGV then return 0 end
local n = add_urls(jk, ARGV[3], KEYS[2], KEYS[3], KEYS[4], KEYS[16], m, m[9], ARGV[1], 0, first, #ARGV, false)
redis.call('HSET', jk, 'cur', start + #ARGV - 4)
return n
