-- enqueue_sweep: a refresh job's sweep, the task that reports the lineage's pages this run never reached as
-- gone (trawl.worker.sweep). Its depth is SWEEP_DEPTH (-9, see trawl.queue.model) and its URL names the page
-- state's scan cursor: the operator adds the first (cursor 0) once the job's own work is done, at most once
-- per job (the job hash's 'sw'); the worker handling a sweep adds the next cursor's before its ack, so the job
-- stays unfinished until the whole lineage is swept. Not added (and 'sw' says why) when the run did not cover
-- its whole scope: its task cap was reached (pages past it were never tried), or cross-job dedupe skipped
-- pages (a page another job fetched is not gone).
-- KEYS: as enqueue_sitemap (1 job hash, 2 ready list, 3 seen set, 4 cross-job dedupe zset, 5 events,
--   6..15 rings 0..9, 16 pool stats)
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 depth (the sweep's), 5 the URL ("trawl-sweep:<cursor>"),
--   6 first ('1' from the operator: once per job; '0' a continuation)
-- Returns 1 added, 0 not (already added, or a continuation's duplicate), -1 the job does not exist,
--   -2 the task cap was reached, -3 cross-job dedupe.
local jk = KEYS[1]
local m = redis.call('HMGET', jk, 'seq', 'tot', 'crawl', 'maxp', 'xd', 'xdw', 'sus', 'maxd', 'prio', 'dg', 'tn', 'bf')
if not m[1] then return -1 end
if ARGV[6] == '1' then
  if redis.call('HSETNX', jk, 'sw', '1') == 0 then return 0 end
  if m[4] and tonumber(m[2]) >= tonumber(m[4]) then
    redis.call('HSET', jk, 'sw', 'cap')
    return -2
  end
  if m[5] == '1' then
    redis.call('HSET', jk, 'sw', 'xd')
    return -3
  end
elseif redis.call('HGET', jk, 'sw') ~= '1' then
  return 0
end
m[4] = false -- the sweep is not a page: never refused by the task cap
m[5] = '0'
return (add_urls(jk, ARGV[3], KEYS[2], KEYS[3], KEYS[4], KEYS[16], m, m[9], ARGV[1], tonumber(ARGV[4]), 5, 5, true,
  'sweep '))
