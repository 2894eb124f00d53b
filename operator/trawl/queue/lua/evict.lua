-- evict: a worker process starting in a pod drops every earlier incarnation of that pod at once (the kubelet
-- restarted the container after a crash or OOM kill): their tasks go back to their jobs with one more
-- stall instead of waiting for a lease that nobody will renew. Incarnations are "<pod>@<random>"; a bare
-- "<pod>" (workers before incarnation ids) counts too.
-- KEYS: 1 worker deadlines, 2 worker info, 3 pool stats, 4 events
-- ARGV: 1 prefix, 2 now, 3 max stalls, 4 events maxlen, 5 pod, 6 this incarnation's worker id
-- Returns {incarnations dropped, tasks returned or dead-lettered}
local pod, me = ARGV[5], ARGV[6]
local mine = pod .. '@'
local found, order = {}, {}
local function consider(w)
  if w ~= me and not found[w] and (w == pod or string.sub(w, 1, #mine) == mine) then
    found[w] = true
    order[#order + 1] = w
  end
end
for _, w in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do consider(w) end
for _, w in ipairs(redis.call('HKEYS', KEYS[2])) do consider(w) end
local tasks = 0
for _, w in ipairs(order) do
  tasks = tasks + drop_worker(ARGV[1], w, KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[2], tonumber(ARGV[3]))
end
return { #order, tasks }
