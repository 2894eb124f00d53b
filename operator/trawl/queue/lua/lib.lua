-- lib: the helpers every transition shares. The loader prepends the helpers a queue script uses (after the
-- shebang; trawl.redisconn.luashake keeps each top-level `local function` the script names, directly or
-- through another helper, with the comment lines above it), so it has no KEYS or ARGV of its own: each helper takes the keys it touches as arguments, except
-- add_urls, which reads the calling script's URLs ARGV[first..last].
--
-- What it offers, in the order defined:
--   payloads      split_payload, task_id_of, make_payload
--   plumbing      event (XADD to the bounded event stream), push_many (a long list in bounded calls),
--                 decode_list (a JSON list, or {})
--   counters      the only writers of a job's counters (tot, pen, inf, ret, suc, dead in J; what each mirrors
--                 is in keys.py) and of the pool's (P:st): one helper per move between states, at most one
--                 HINCRBY per field it changes (shift: the job half of a move). A task is ready (pen), in
--                 flight (inf), delayed (ret: a retry or a delayed release), dead (dead) or done (suc); tot
--                 is their sum, every task the job ever took.
--                 (and, through tenant_count, the job's tenant's inf and q in P:tn:<t>)
--                   count_new_to_ready         enqueue: tot, pen; P:st enq
--                   count_ready_to_inflight    claim: pen, inf
--                   count_inflight_to_done     ack: inf, suc (returns the job's in flight left)
--                   count_inflight_to_ready    release now, a returned lease (stalled or orphan): inf, pen
--                   count_inflight_to_delayed  fail with a retry, release with a delay: inf, ret
--                   count_inflight_to_dead     fail for good, too many stalls: inf, dead; P:st dead
--                   count_delayed_to_ready     promotion: ret, pen
--                   count_dead_to_ready        requeue_dead: dead, pen; P:st dead
--                   count_dead_forgotten       cancel, retention: P:st dead leaves out the job's dead letters
--                   count_attempts_ended       ack, fail: P:st completed or failed, svc
--   tenants       prefix_of, tenant_of, tenant_count (a tenant's in-flight and queued counts, kept by the
--                 counters)
--   job state     ring_key, tenant_activate, tenant_leave, ring_join (a job with ready tasks is in its
--                 tenant's ring; a tenant with a non-empty ring in its priority's tenant queue), ring_leave,
--                 check_finished (the 'finished' event)
--   dead letters  dead_letter (an in-flight task to J:dl and J:dlt, with its history; the oldest records
--                 beyond the job's 'dlmax' dropped and counted in 'dld')
--   leases        return_lease (one leased task back to ready, or dead-lettered: reaping, evict, heartbeat's
--                 orphans), drop_worker (all of a gone worker's leases, and its records: reaping, evict)
--   reaping       reap_expired: the workers whose lease deadline passed are dropped (claim, reap)
--   promotion     promote_due: due delayed tasks back to the end of ready (claim)
--   adding        url_digest, add_urls (enqueue, enqueue_discovered)
--
-- A task is stored as one compact string, its payload: "<task>|<attempts>|<stalls>|<depth>|<url>"
-- (attempts = failed attempts so far; stalls = expired leases so far; depth < 0: a sitemap, see
-- enqueue_sitemap.lua). The URL is last so it may contain "|".
-- A leased task lives in its worker's hash P:w:<worker> under "<job>|<task>" as "<claimed_at>|<payload>".
--
-- Keys built inside scripts: claim, reap, evict, heartbeat and signals discover job and worker ids in the
-- rings, the delayed-jobs index, the worker-deadline index, worker info and a worker's hash, so they cannot
-- declare those keys in advance (reaping's dead letters included: dead_letter takes its keys as arguments,
-- declared ones elsewhere). They build them only from the pool prefix passed in ARGV (claim, reap, evict,
-- signals: ARGV[1]; heartbeat: ARGV[6]), which carries the pool's hash tag: every such key is in the same
-- cluster slot as the declared ones (tests/integration/test_queue_cluster.py runs every script on a
-- cluster-mode server, which rejects any cross-slot access).

local function split_payload(p)
  -- depth may be negative: a sitemap task (-1 listed or from robots.txt, -2 and -3 named by an index)
  local tid, a, s, d, url = string.match(p, '^([^|]*)|(%d+)|(%d+)|(-?%d+)|(.*)$')
  return tid, tonumber(a), tonumber(s), tonumber(d), url
end

local function task_id_of(p)
  return string.sub(p, 1, string.find(p, '|', 1, true) - 1)
end

local function make_payload(tid, a, s, d, url)
  return tid .. '|' .. a .. '|' .. s .. '|' .. d .. '|' .. url
end

local function event(ev, maxlen, ...)
  redis.call('XADD', ev, 'MAXLEN', '~', maxlen, '*', ...)
end

-- Push many values with a bounded number of arguments per call; returns the list length after the
-- first push and after the last (the first tells whether the list was empty before).
local function push_many(cmd, key, items)
  local first_len, len = nil, 0
  local n = #items
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    len = redis.call(cmd, key, unpack(items, i, j))
    if first_len == nil then first_len = len - (j - i + 1) end
    i = j + 1
  end
  return first_len or len, len
end

local function decode_list(s)
  if not s then return {} end
  local v = cjson.decode(s)
  if type(v) ~= 'table' then return {} end
  return v
end

-- The pool prefix of a job hash key ("<prefix>:j:<job id>"; job ids hold no ':').
local function prefix_of(jk)
  return string.match(jk, '^(.*):j:[^:]*$')
end

-- A job's tenant ("" for jobs registered without one, and for those registered before tenants).
local function tenant_of(jk)
  return redis.call('HGET', jk, 'tn') or ''
end

-- The job's tasks move: d_inf (never positive) into its tenant's in flight (bounded at claim time by the
-- in-flight quota), d_q into its tenant's queued tasks (ready or delayed, bounded at seed enqueue time by the
-- URLs-queued quota). Both are differences of monotonic counts in P:tn:<t>, so a claim writes one field:
-- clm counts claims (claim.lua), out the tasks that left flight (in flight = clm - out), qin the entries
-- into ready or delayed (queued = qin - clm; a cancelled job's tasks leave both). Never sends -0, which
-- HINCRBY refuses. ``tn``: the job's tenant when the caller read it already, else it is read here.
local function tenant_count(jk, d_inf, d_q, tn)
  if d_inf == 0 and d_q == 0 then return end
  local tk = prefix_of(jk) .. ':tn:' .. (tn or tenant_of(jk))
  if d_inf ~= 0 then redis.call('HINCRBY', tk, 'out', -d_inf) end
  if d_q ~= 0 then redis.call('HINCRBY', tk, 'qin', d_q) end
end

-- Counters. The operator's status and the autoscaler read the counters, not the structures they mirror, so
-- a script changes them only through these helpers, in the same script that changes the structures.

-- n tasks of the job in jk leave the state counted by `from` for the one counted by `to`; returns `from`'s
-- count afterwards.
local function shift(jk, from, to, n)
  local left = redis.call('HINCRBY', jk, from, -n)
  redis.call('HINCRBY', jk, to, n)
  return left
end

-- n new tasks pushed to the ready list. The pool's enqueue counter (st 'enq') counts them: the autoscaler
-- tells a burst from it between its polls (trawl.autoscale.schedule).
local function count_new_to_ready(jk, st, n)
  tenant_count(jk, 0, n)
  redis.call('HINCRBY', jk, 'tot', n)
  redis.call('HINCRBY', jk, 'pen', n)
  redis.call('HINCRBY', st, 'enq', n)
end

-- The job half of a claim (claim.lua counts the tenant's claims once per tenant it served). Returns the
-- job's ready tasks left: pen mirrors the ready list, so 0 says the list ran empty without reading it.
local function count_ready_to_inflight(jk, n)
  return shift(jk, 'pen', 'inf', n)
end

-- Returns the job's tasks still in flight (ack checks for the job's end only when none are).
local function count_inflight_to_done(jk, n, tn)
  tenant_count(jk, -n, 0, tn)
  return shift(jk, 'inf', 'suc', n)
end

local function count_inflight_to_ready(jk, n)
  tenant_count(jk, -n, n)
  shift(jk, 'inf', 'pen', n)
end

local function count_inflight_to_delayed(jk, n)
  tenant_count(jk, -n, n)
  shift(jk, 'inf', 'ret', n)
end

-- The pool's dead count (st 'dead') is the sum of its jobs' dead letters, less those of jobs whose retention
-- began (expire_job) or that were cancelled: the pool's status and metrics show it.
local function count_inflight_to_dead(jk, st, n)
  tenant_count(jk, -n, 0)
  shift(jk, 'inf', 'dead', n)
  redis.call('HINCRBY', st, 'dead', n)
end

local function count_delayed_to_ready(jk, n)
  shift(jk, 'ret', 'pen', n)
end

-- n dead letters requeued. A job whose retention had begun (``retained``: expire_job took all its dead
-- letters out of the pool's count) is live again, so the pool's count takes back those still dead.
local function count_dead_to_ready(jk, st, n, retained)
  tenant_count(jk, 0, n)
  local left = shift(jk, 'dead', 'pen', n)
  if not retained then
    redis.call('HINCRBY', st, 'dead', -n)
  elseif left ~= 0 then
    redis.call('HINCRBY', st, 'dead', left)
  end
end

-- A job's n dead letters stop counting in the pool's (cancel deletes the job, retention starts).
local function count_dead_forgotten(st, n)
  if n > 0 then redis.call('HINCRBY', st, 'dead', -n) end
end

-- n attempts ended as `outcome` ('completed': acked, 'failed': failed, retried or not) after `seconds` of
-- service in all (from their claims): the autoscaler's completion rate and service time.
local function count_attempts_ended(st, outcome, n, seconds)
  redis.call('HINCRBY', st, outcome, n)
  redis.call('HINCRBY', st, 'svc', math.floor(seconds * 1000000))
end

-- Rings. A job is in its tenant's ring at its priority exactly when its ready list is non-empty and it is
-- not suspended; a tenant is in its priority's tenant queue (P:tq:<p>, scored by its pass) exactly when
-- that ring is non-empty; a priority is in P:lsv exactly when its tenant queue is non-empty.
local function ring_key(prefix, prio, tenant)
  if tenant == nil or tenant == '' then return prefix .. ':ring:' .. prio end
  return prefix .. ':ring:' .. prio .. ':' .. tenant
end

-- A tenant with work again starts at the lowest pass of those active (start-time fair queueing): from the
-- next claim on it gets its weight's share, never a burst making up for the time it had no work. A
-- priority that had none starts waiting now (aging counts from here).
local function tenant_activate(prefix, prio, tenant, now)
  local tq = prefix .. ':tq:' .. prio
  local low = redis.call('ZRANGE', tq, 0, 0, 'WITHSCORES')
  if low[2] then
    redis.call('ZADD', tq, 'NX', low[2], tenant)
  else
    redis.call('ZADD', tq, 0, tenant)
    -- A priority that was alone was served by every claim, which does not write its time (claim.lua):
    -- it has waited since now, not since it was alone.
    local lsv = prefix .. ':lsv'
    local levels = redis.call('HKEYS', lsv)
    if #levels == 1 then redis.call('HSET', lsv, levels[1], now) end
    redis.call('HSET', lsv, prio, now)
  end
end

-- The tenant's ring at prio ran empty: it leaves the tenant queue, and is no longer held back by a quota
-- (it has no work to hold); a priority without tenants leaves P:lsv.
local function tenant_leave(prefix, prio, tenant)
  local tq = prefix .. ':tq:' .. prio
  redis.call('ZREM', tq, tenant)
  redis.call('HDEL', prefix .. ':tn:' .. tenant, 'hold', 'hm', 'hs')
  if redis.call('ZCARD', tq) == 0 then redis.call('HDEL', prefix .. ':lsv', prio) end
end

local function ring_join(jk, job_id, was_len, prio, suspended, tenant, now)
  if was_len == 0 and suspended ~= '1' then
    local prefix = prefix_of(jk)
    if redis.call('RPUSH', ring_key(prefix, prio, tenant), job_id) == 1 then
      tenant_activate(prefix, prio, tenant or '', now)
    end
  end
end

-- A job leaves its ring (suspended, cancelled): its tenant leaves the queue with the ring's last job.
local function ring_leave(jk, job_id, prio, tenant)
  local prefix = prefix_of(jk)
  local ring = ring_key(prefix, prio, tenant)
  if redis.call('LREM', ring, 0, job_id) > 0 and redis.call('LLEN', ring) == 0 then
    tenant_leave(prefix, prio, tenant or '')
  end
end

-- A job is finished (once: 'fin' and the 'finished' event) when its seeds are all enqueued and no task of it
-- is ready, in flight or delayed.
local function check_finished(jk, job_id, now, ev, maxlen)
  local c = redis.call('HMGET', jk, 'pen', 'inf', 'ret', 'ed', 'fin')
  if c[1] == '0' and c[2] == '0' and c[3] == '0' and c[4] == '1' and not c[5] then
    redis.call('HSET', jk, 'fin', now)
    event(ev, maxlen, 'type', 'finished', 'job', job_id, 't', now)
  end
end

-- Move a task that was in flight (its lease already taken out of its worker's hash) to the job's dead
-- letters (dl: record with its history, dlt: time index for "latest first") and drop its retry history (h).
-- A job that keeps at most 'dlmax' records (its pool's jobLimits) drops the oldest beyond them and counts
-- them in 'dld': the task stays counted as dead, only its record is gone.
local function dead_letter(jk, dl, dlt, h, job_id, tid, a, s, d, url, err, msg, now, hist, st, ev, maxlen)
  redis.call('HSET', dl, tid, cjson.encode({
    u = url, a = a, s = s, d = d, e = err, m = msg, t = tonumber(now), h = hist }))
  redis.call('ZADD', dlt, now, tid)
  redis.call('HDEL', h, tid)
  local keep = redis.call('HGET', jk, 'dlmax')
  if keep then
    local over = redis.call('ZCARD', dlt) - tonumber(keep)
    if over > 0 then
      local oldest = redis.call('ZPOPMIN', dlt, over)
      for i = 1, #oldest, 2 do redis.call('HDEL', dl, oldest[i]) end
      redis.call('HINCRBY', jk, 'dld', over)
    end
  end
  count_inflight_to_dead(jk, st, 1)
  event(ev, maxlen, 'type', 'deadletter', 'job', job_id, 'task', tid, 'error', err, 't', now)
end

-- Give one leased task (``v``: its value in a worker hash, "<claimed_at>|<payload>") back to the front of
-- its job's ready list. ``stalled``: the lease was lost with its worker (one more stall; beyond max_stalls
-- the task is dead-lettered as Stalled). Nothing happens for a job that is gone (cancelled, expired).
local function return_lease(prefix, job_id, v, stalled, who, st, ev, maxlen, now, max_stalls)
  local jk = prefix .. ':j:' .. job_id
  local meta = redis.call('HMGET', jk, 'prio', 'sus', 'tn')
  if not meta[1] then return 0 end
  local tid, a, s, d, url = split_payload(string.sub(v, string.find(v, '|', 1, true) + 1))
  if stalled then s = s + 1 end
  if s > max_stalls then
    local hist = decode_list(redis.call('HGET', jk .. ':h', tid))
    hist[#hist + 1] = { attempt = a + 1, errorClass = 'Stalled',
      message = 'lease expired (worker ' .. who .. ')', time = tonumber(now) }
    dead_letter(jk, jk .. ':dl', jk .. ':dlt', jk .. ':h', job_id, tid, a + 1, s, d, url, 'Stalled',
      'lease expired ' .. s .. ' times', now, hist, st, ev, maxlen)
    check_finished(jk, job_id, now, ev, maxlen)
  else
    local len = redis.call('LPUSH', jk .. ':r', make_payload(tid, a, s, d, url))
    count_inflight_to_ready(jk, 1)
    ring_join(jk, job_id, len - 1, meta[1], meta[2], meta[3], now)
  end
  return 1
end

-- Forget a worker whose process is gone (lease expired, or a newer incarnation of its pod started): each
-- of its tasks is returned with one more stall, and its claim replay, deadline and activity are removed.
local function drop_worker(prefix, w, wd, wi, st, ev, maxlen, now, max_stalls)
  local wk = prefix .. ':w:' .. w
  local all = redis.call('HGETALL', wk)
  local n = 0
  for i = 1, #all, 2 do
    local field = all[i]
    local job_id = string.sub(field, 1, string.find(field, '|', 1, true) - 1)
    n = n + return_lease(prefix, job_id, all[i + 1], true, w, st, ev, maxlen, now, max_stalls)
  end
  redis.call('DEL', wk, prefix .. ':wc:' .. w)
  redis.call('ZREM', wd, w)
  redis.call('HDEL', wi, w)
  event(ev, maxlen, 'type', 'workerlost', 'worker', w, 'tasks', tostring(#all / 2), 't', now)
  return n
end

-- Reaping: drop the workers (at most worker_limit) whose lease deadline passed; each of their tasks goes back
-- to the front of its job's ready list with one more stall, or to the dead letters as Stalled once it
-- stalled more than max_stalls times (drop_worker, return_lease). claim runs it before leasing; reap.lua
-- runs it alone for callers that do not claim. Returns the number of tasks returned or dead-lettered.
local function reap_expired(prefix, wd, wi, st, ev, maxlen, now, max_stalls, worker_limit)
  local expired = redis.call('ZRANGEBYSCORE', wd, '-inf', '(' .. now, 'LIMIT', 0, worker_limit)
  local n = 0
  for _, w in ipairs(expired) do
    n = n + drop_worker(prefix, w, wd, wi, st, ev, maxlen, now, max_stalls)
  end
  return n
end

-- Promotion: move due delayed tasks (up to task_limit per job, of at most job_limit jobs from the delayed-jobs
-- index dj) to the end of their job's ready list, put the job in its ring, and index the job again by its
-- next due task (or drop it from dj). A job that is gone loses its delayed tasks. claim runs it before leasing.
local function promote_due(prefix, dj, now, job_limit, task_limit)
  local jobs = redis.call('ZRANGEBYSCORE', dj, '-inf', now, 'LIMIT', 0, job_limit)
  for _, job_id in ipairs(jobs) do
    local jk = prefix .. ':j:' .. job_id
    local zk = jk .. ':z'
    local items = redis.call('ZRANGEBYSCORE', zk, '-inf', now, 'LIMIT', 0, task_limit)
    if #items > 0 then
      local meta = redis.call('HMGET', jk, 'prio', 'sus', 'tn')
      if meta[1] then
        redis.call('ZREMRANGEBYRANK', zk, 0, #items - 1)
        local was = push_many('RPUSH', jk .. ':r', items)
        count_delayed_to_ready(jk, #items)
        ring_join(jk, job_id, was, meta[1], meta[2], meta[3], now)
      else
        redis.call('DEL', zk)
      end
    end
    local first = redis.call('ZRANGE', zk, 0, 0, 'WITHSCORES')
    if first[1] then
      redis.call('ZADD', dj, first[2], job_id)
    else
      redis.call('ZREM', dj, job_id)
    end
  end
end

-- The dedupe member of a URL: the first 12 bytes of its SHA-1. The URL itself (70-100 bytes) lives in
-- its task until the task is done; the dedupe entry stays until retention, so it is kept small and of
-- fixed size (a 96-bit digest: for a billion URLs the chance of any collision is about 1e-11, and a
-- collision would skip one URL as already seen, never add one twice).
local function url_digest(url)
  return (string.gsub(string.sub(redis.sha1hex(url), 1, 24), '..', function(x)
    return string.char(tonumber(x, 16))
  end))
end

-- A crawl's Bloom filter (spec.crawl.bloomFilter, trawl.queue.bloom): set the item's bits (k by double
-- hashing of its SHA-1) in the string key bk of the given size; true when one was clear (the item is new).
-- One BITFIELD of k SET u1 operations, not k SETBITs: a redis.call costs more than the bits it sets
-- (bench/frontier.py measured 2.4x the exact set's Redis CPU per URL with SETBITs).
local function bloom_add(bk, item, bits, k)
  local h = redis.sha1hex(item)
  local h1 = tonumber(string.sub(h, 1, 8), 16)
  local h2 = tonumber(string.sub(h, 9, 16), 16)
  h2 = h2 + 1 - h2 % 2 -- odd: the k positions differ
  local ops = {}
  for i = 0, k - 1 do
    local at = 4 * i
    ops[at + 1], ops[at + 2], ops[at + 3], ops[at + 4] = 'SET', 'u1', (h1 + i * h2) % bits, 1
  end
  for _, old in ipairs(redis.call('BITFIELD', bk, unpack(ops))) do
    if old == 0 then return true end
  end
  return false
end

-- Add URLs ARGV[first..last] to a job at the given depth, honouring the job's max_pages cap, its
-- within-job dedupe set (crawl jobs) and the pool's cross-job dedupe window. m is the job hash's
-- HMGET of: seq, tot, crawl, maxp, xd, xdw, sus, (cur or maxd), prio, dg, tn, bf. Jobs registered since the
-- digests came ('dg' set at creation) dedupe by url_digest; older ones by the full URL, as they began.
-- A job with a Bloom filter ('bf' = "<bits>|<hashes>") dedupes in it instead (key: the seen set's name +
-- ':bf'), and adds each check's false-positive chance at the filter's fill to 'bfp' (pages possibly skipped).
-- ns (optional) prefixes the within-job dedupe member: sitemap tasks have a namespace of their own, so a
-- page that links the sitemap's URL never stops the sitemap being read (nor the other way round); they
-- skip the cross-job window, which is about pages. Returns the number added and the number left at the end
-- of ARGV[first..last] because the cap was reached: those were not examined (not marked seen), so a sharded
-- pool's shard that gets more quota may offer exactly them again (trawl.queue.sharded); every URL before them
-- was added or refused as a duplicate.
local function add_urls(jk, job_id, rk, uk, xk, st, m, prio, now, depth, first, last, force_dedupe, ns)
  local nowf = tonumber(now)
  local dg = m[10] == '1'
  local seq, tot = tonumber(m[1]), tonumber(m[2])
  local crawl = force_dedupe or m[3] == '1'
  local maxp = m[4] and tonumber(m[4])
  local xd = m[5] == '1'
  local xdw = tonumber(m[6] or '0')
  if xd then redis.call('ZREMRANGEBYSCORE', xk, '-inf', nowf) end
  local bits, nh, fp = nil, nil, 0
  if m[12] then
    local sep = string.find(m[12], '|', 1, true)
    bits, nh = tonumber(string.sub(m[12], 1, sep - 1)), tonumber(string.sub(m[12], sep + 1))
  end
  local items = {}
  local left = 0
  for i = first, last do
    if maxp and tot + #items >= maxp then
      left = last - i + 1
      break
    end
    local url = ARGV[i]
    local member = (ns or '') .. url
    local ok = true
    if crawl and bits then
      fp = fp + (1 - math.exp(-nh * (seq + #items) / bits)) ^ nh
      ok = bloom_add(uk .. ':bf', member, bits, nh)
    end
    -- the digest only where it is kept: the exact set, the cross-job window (a filter hashes the URL itself)
    if dg and ((crawl and not bits) or xd) then member = url_digest(member) end
    if crawl and not bits then ok = redis.call('SADD', uk, member) == 1 end
    if ok and xd and not ns then
      local sc = redis.call('ZSCORE', xk, member)
      if sc and tonumber(sc) > nowf then
        ok = false
      else
        redis.call('ZADD', xk, nowf + xdw, member)
      end
    end
    if ok then
      seq = seq + 1
      items[#items + 1] = seq .. '|0|0|' .. depth .. '|' .. url
    end
  end
  local n = #items
  if fp > 0 then redis.call('HINCRBYFLOAT', jk, 'bfp', fp) end
  if n > 0 then
    local was = push_many('RPUSH', rk, items)
    redis.call('HSET', jk, 'seq', seq)
    count_new_to_ready(jk, st, n)
    redis.call('HDEL', jk, 'fin')
    ring_join(jk, job_id, was, prio, m[7], m[11], now)
  end
  return n, left
end

