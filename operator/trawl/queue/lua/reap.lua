-- reap: return the tasks of workers whose lease expired (the same step claim runs first), for callers
-- that do not claim (the operator's status sync). Returns the number of tasks returned or dead-lettered.
-- KEYS: 1 worker deadlines, 2 worker info, 3 pool stats, 4 events
-- ARGV: 1 prefix, 2 now, 3 max stalls, 4 events maxlen
return reap_expired(ARGV[1], KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[2], tonumber(ARGV[3]), 1000)
