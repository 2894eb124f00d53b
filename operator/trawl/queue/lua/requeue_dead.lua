-- requeue_dead: send dead letters (all, or the given task ids) back to the ready list with attempts,
-- stalls and history reset. Returns the number requeued.
-- A job whose retention had started (it had finished; expire_job set 'exp') is live again: its keys
-- lose their TTL, so the requeued tasks cannot vanish mid-run, and the pool's dead-letter count takes
-- back the job's remaining dead letters (expire_job had removed them all).
-- KEYS: 1 job hash, 2 dead-letter hash, 3 ready list, 4 pool stats, 5 events, 6..15 rings 0..9 (declared: every ring key is built from the prefix),
--       16 dead-letter time index, 17..25 every key of the job (Keys.job_keys)
-- ARGV: 1 now, 2 events maxlen, 3 job id, 4.. task ids (none = all)
local jk, dl = KEYS[1], KEYS[2]
local meta = redis.call('HMGET', jk, 'prio', 'sus', 'tn')
if not meta[1] then return 0 end
local ids = {}
if #ARGV >= 4 then
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('HKEYS', dl)
end
local items, gone = {}, {}
for _, tid in ipairs(ids) do
  local rec = redis.call('HGET', dl, tid)
  if rec then
    local r = cjson.decode(rec)
    items[#items + 1] = make_payload(tid, 0, 0, r.d, r.u)
    gone[#gone + 1] = tid
  end
end
local n = #items
if n == 0 then return 0 end
push_many('HDEL', dl, gone)
push_many('ZREM', KEYS[16], gone)
local was = push_many('RPUSH', KEYS[3], items)
local retained = redis.call('HGET', jk, 'exp') == '1'
count_dead_to_ready(jk, KEYS[4], n, retained)
if retained then
  for i = 17, 25 do redis.call('PERSIST', KEYS[i]) end
  redis.call('HDEL', jk, 'exp')
end
redis.call('HDEL', jk, 'fin')
ring_join(jk, ARGV[3], was, meta[1], meta[2], meta[3], ARGV[1])
event(KEYS[5], ARGV[2], 'type', 'requeued', 'job', ARGV[3], 'count', tostring(n), 't', ARGV[1])
return n
