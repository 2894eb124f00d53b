-- mark_enqueue_done: the seed enqueue finished; the job may now become finished.
-- KEYS: 1 job hash, 2 events
-- ARGV: 1 now, 2 events maxlen, 3 job id
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'ed') ~= '1' then
  redis.call('HSET', KEYS[1], 'ed', 1)
  event(KEYS[2], ARGV[2], 'type', 'enqueued', 'job', ARGV[3], 't', ARGV[1])
end
check_finished(KEYS[1], ARGV[3], ARGV[1], KEYS[2], ARGV[2])
return 1
