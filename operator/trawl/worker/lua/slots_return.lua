-- slots_return: give back slot leases, of one domain or several (all the pool's keys share its hash tag).
-- A slot whose request was abandoned after it left (its task cancelled) is not removed: its lease is cut
-- to `linger` milliseconds from now, the time its host likely still spends answering it, so no request
-- takes its place at the host meanwhile (slots_acquire drops it once that has passed).
-- KEYS: 1..n slot zsets
-- ARGV: 1..n members: ARGV[i] is leased in KEYS[i]; then, optionally, n linger times in milliseconds:
--   ARGV[n + i] for ARGV[i] ('0' or absent: removed now)
-- Returns how many were still leased.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local n = 0
local now = nil
for i = 1, #KEYS do
  local linger = tonumber(ARGV[#KEYS + i] or '0')
  if linger > 0 then
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    -- XX: a lease that already expired (and may have been taken again) is left alone.
    n = n + redis.call('ZADD', KEYS[i], 'XX', 'CH', now + linger, ARGV[i])
  else
    n = n + redis.call('ZREM', KEYS[i], ARGV[i])
  end
end
return n
