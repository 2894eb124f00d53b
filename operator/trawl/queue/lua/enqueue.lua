-- enqueue: add seed URLs (depth 0) ARGV[6..] whose seed indexes start at ARGV[4]. The job's cursor
-- ('cur': seeds processed so far) makes it idempotent: indexes below the cursor are skipped, so an
-- enqueuer that restarts from index 0 after a crash adds nothing twice. A gap (start beyond the cursor)
-- is an error. An empty start index appends at the cursor (callers adding URLs one call at a time). Returns
-- {number added, cursor after, number left for the task cap}, or -1 when the job does not exist (never
-- registered or cancelled). With a start index, the tenant's URLs-queued quota may stop the cursor short of
-- the batch's end (Queue.enqueue reads it). Seeds the job's task cap (maxp) refuses are skipped with the rest
-- (the cursor passes them: a crawl at its cap takes no more), unless ARGV[5] is '1': a sharded pool's shard
-- (trawl.queue.sharded), whose cap is its part of the job's, stops the cursor at the first seed the cap
-- refused, so that once quota moves to the shard the same seeds go in at the same indexes.
-- KEYS: 1 job hash, 2 ready list, 3 seen set, 4 cross-job dedupe zset, 5 events, 6..15 rings 0..9 (declared: every ring key is built from the prefix),
--   16 pool stats
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4 start index ('' = the cursor), 5 '1' to stop the cursor at the
--   cap, 6.. URLs
local jk = KEYS[1]
local m = redis.call('HMGET', jk, 'seq', 'tot', 'crawl', 'maxp', 'xd', 'xdw', 'sus', 'cur', 'prio', 'dg', 'tn', 'bf')
if not m[1] then return -1 end
local cur = tonumber(m[8])
local start = ARGV[4] == '' and cur or tonumber(ARGV[4])
if start > cur then
  return redis.error_reply('ERR trawl enqueue gap: next seed index is ' .. cur .. ', got ' .. start)
end
local first = 6 + (cur - start)
if first > #ARGV then return { 0, cur, 0 } end
local last = #ARGV
-- The tenant's URLs-queued quota (the 5th field of its P:tcfg row) bounds the seeds taken from a seed
-- stream (a start index given): the cursor stops where the quota is reached, the caller sees it and comes
-- back later, and the tenant is noted (qhold, qhm, qhs) until a pass takes its whole batch.
local capped, q, uq, tk = false, 0, nil, nil
if ARGV[4] ~= '' then
  local prefix = string.sub(jk, 1, #jk - #ARGV[3] - 3)
  local tn = m[11] or ''
  local tcfg = prefix .. ':tcfg'
  local row = redis.call('HGET', tcfg, tn) or redis.call('HGET', tcfg, '*') or ''
  uq = tonumber(string.match(row, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)') or '')
  tk = prefix .. ':tn:' .. tn
  if uq then
    local c = redis.call('HMGET', tk, 'qin', 'clm')
    q = math.max(0, tonumber(c[1] or '0') - tonumber(c[2] or '0'))
    local room = math.max(0, uq - q)
    if last - first + 1 > room then
      last, capped = first + room - 1, true
    else
      redis.call('HDEL', tk, 'qhold', 'qhm', 'qhs')
    end
  end
end
local n, left = 0, 0
if last >= first then
  n, left = add_urls(jk, ARGV[3], KEYS[2], KEYS[3], KEYS[4], KEYS[16], m, m[9], ARGV[1], 0, first, last, false)
end
if capped then  -- the figure after this batch: what the tenant holds now
  redis.call('HSET', tk, 'qhold', 'urlsQueued', 'qhm', (q + n) .. '/' .. uq .. ' URLs queued')
  redis.call('HSETNX', tk, 'qhs', ARGV[1])
end
if ARGV[5] ~= '1' then left = 0 end
local after = start + last - 5 - left
redis.call('HSET', jk, 'cur', after)
return { n, after, left }
