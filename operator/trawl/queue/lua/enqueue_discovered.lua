-- enqueue_discovered: crawl mode, links found on a page at depth ARGV[4]; always deduplicated within the
-- job, never beyond max depth or max pages. Returns {number added, number left at the end for the cap}
-- (see add_urls: a duplicate or a link beyond max depth is refused, never left), -1 when the job does not exist.
-- KEYS: 1 job hash, 2 ready list, 3 seen set, 4 cross-job dedupe zset, 5 events, 6..15 rings 0..9 (declared: every ring key is built from the prefix),
--   16 pool stats
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 depth, 5.. URLs
local jk = KEYS[1]
local m = redis.call('HMGET', jk, 'seq', 'tot', 'crawl', 'maxp', 'xd', 'xdw', 'sus', 'maxd', 'prio', 'dg', 'tn', 'bf')
if not m[1] then return -1 end
local depth = tonumber(ARGV[4])
if depth > tonumber(m[8] or '0') then return { 0, 0 } end
local n, left = add_urls(jk, ARGV[3], KEYS[2], KEYS[3], KEYS[4], KEYS[16], m, m[9], ARGV[1], depth, 5, #ARGV, true)
return { n, left }
