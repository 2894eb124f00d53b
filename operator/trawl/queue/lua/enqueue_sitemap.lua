-- enqueue_sitemap: what a sitemap named (or, from the operator, the job's own sitemaps). A sitemap task is
-- one whose depth is negative: -1 for a sitemap the job lists or a robots.txt it reads for Sitemap: lines,
-- -2 and -3 for sitemaps an index at the level above named. Only this script (through Queue.enqueue_sitemap:
-- the operator, and a worker handling a sitemap task) writes a negative depth; links a page yields go
-- through enqueue_discovered at depth + 1 >= 1, so no page can make a sitemap task.
-- ARGV[4] depth 0: page URLs, counted in 'smu' (the job's URLs from sitemaps); -1..-3: sitemaps, deduplicated
-- in their own namespace. Always deduplicated within the job, never beyond the job's task cap (maxp).
-- Returns {number added, number left at the end for the task cap} (see add_urls), -1 when the job does not
-- exist.
-- KEYS: 1 job hash, 2 ready list, 3 seen set, 4 cross-job dedupe zset, 5 events, 6..15 rings 0..9 (declared: every ring key is built from the prefix),
--   16 pool stats
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 depth (0, -1, -2 or -3), 5.. URLs
local jk = KEYS[1]
local m = redis.call('HMGET', jk, 'seq', 'tot', 'crawl', 'maxp', 'xd', 'xdw', 'sus', 'maxd', 'prio', 'dg', 'tn', 'bf')
if not m[1] then return -1 end
local depth = tonumber(ARGV[4])
if depth > 0 or depth < -3 then
  return redis.error_reply('ERR trawl enqueue_sitemap: depth must be 0..-3, got ' .. ARGV[4])
end
local ns = nil
if depth < 0 then ns = 'sitemap ' end
local n, left = add_urls(jk, ARGV[3], KEYS[2], KEYS[3], KEYS[4], KEYS[16], m, m[9], ARGV[1], depth, 5, #ARGV, true, ns)
if depth == 0 and n > 0 then redis.call('HINCRBY', jk, 'smu', n) end
return { n, left }
