-- add_browser_seconds: browser page time the workers measured, counted against each job and its tenant's day.
-- KEYS: 1..n the job hashes (P:j:<job>)
-- ARGV: 1 now (unix seconds), 2..n+1 the milliseconds each job's tasks held a browser page (in KEYS order)
-- Returns how many jobs counted their time (a job that is gone, cancelled or expired, is skipped: its hash is
-- never re-created, and its tenant is no longer known).
--
-- Each job hash keeps its total ('bms'); its tenant's P:tn:<t> keeps the day's sum: 'bday' (UTC day number)
-- and 'bms' (milliseconds that day), reset when the day changes as claim.lua rolls 'day'/'pd' over; fields of
-- their own, since claim.lua rolls 'day' over only for tenants with a pages-per-day quota. The operator reads the
-- sum (Queue.tenant_usage) and holds the tenant's browser jobs once it reaches browserSecondsPerDay. The
-- tenant's key is built from the job key (prefix_of): same pool prefix, so the same hash tag and slot.
local day = tostring(math.floor(tonumber(ARGV[1]) / 86400))
local counted = 0
for i, jk in ipairs(KEYS) do
  local ms = math.floor(tonumber(ARGV[i + 1]) or 0)
  if ms > 0 and redis.call('EXISTS', jk) == 1 then
    redis.call('HINCRBY', jk, 'bms', ms)
    local tk = prefix_of(jk) .. ':tn:' .. tenant_of(jk)
    if redis.call('HGET', tk, 'bday') ~= day then redis.call('HSET', tk, 'bday', day, 'bms', 0) end
    redis.call('HINCRBY', tk, 'bms', ms)
    counted = counted + 1
  end
end
return counted
