-- rate_late: a request of a strictly spaced domain (a burst of 1) is about to leave later than its token was
-- due, by more than the caller's tolerance: send it now if no later token of the domain was granted, or if
-- every later one was granted to the caller's worker (it spaces its own requests from when each leaves, and
-- each of them late is checked here in turn), and move the timeline, so the next token is due an interval
-- after it; else take a fresh token at the end of the timeline (rate_take's GCRA at a burst of 1: keep the
-- two, and slots_acquire's token, in step).
-- KEYS: 1 rate key
-- ARGV: 1 interval in microseconds, 2 the token's due time plus its margin (Redis's clock, microseconds: the
--   `now + wait + margin` of the script that granted it, or this one's last `due`), 3 reserve: the longest
--   wait in microseconds the caller takes a fresh token for, 4 margin in microseconds: how late the caller
--   may read this reply, or wake for its fresh token (its loop is busy), and still send, 5 (optional) where
--   the caller's worker's latest grant of the domain left TAT (0: unknown): TAT no later means no other
--   worker was granted a token since
-- Returns {granted, wait in microseconds, now, due}: granted 1 and wait 0, send now: the request's due time is
-- now `due` (now + margin), the timeline moved to an interval after it; granted 1 and wait > 0, a fresh token
-- due `wait` from now, to leave by `due` (its due time + margin); granted 0, none (its wait longer than
-- reserve). `now`: Redis's clock in microseconds (the caller checks how late it sends against `due`).
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local due = tonumber(ARGV[2])
local reserve = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
local ours = tonumber(ARGV[5] or '0')
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local wait = 0
if tat <= due + interval or (ours > 0 and tat <= ours) then
  -- the caller's token is still the domain's last one, or the ones after it are its worker's: it leaves now
  -- (by now + margin), the next is due an interval after that
  due = now + margin
  if tat < due + interval then tat = due + interval end
else
  -- a later token was granted: a fresh one at the end of the timeline, the margin reserved after it too
  if tat > now then wait = tat - now end
  if wait > reserve then return {0, wait, now, 0} end
  due = now + wait + margin
  tat = due + interval
end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return {1, wait, now, due}
