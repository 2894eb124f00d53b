-- take_quota: take unused page quota of a capped job from this shard (what its cap leaves beyond the
-- tasks it holds), for a shard whose quota is spent.
-- KEYS: 1 job hash (this shard's)
-- ARGV: 1 most to take
-- Returns the amount taken.
-- Run as written: no shebang, no lib.lua (see trawl.redisconn.scripts).
local m = redis.call('HMGET', KEYS[1], 'maxp', 'tot')
if not m[1] then return 0 end
local k = math.min(tonumber(m[1]) - tonumber(m[2]), tonumber(ARGV[1]))
if k <= 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'maxp', -k)
return k
